"""Sweeps: the guide's tuning grid as training jobs (or local runs), with state to resume from.

The guide's method is measurement: compare batch sizes, sequence lengths,
precisions and activation checkpointing on the real hardware, then check that
the low-precision formats converge like the baseline before production. A
sweep is that grid as one command::

    trainctl sweep --name b200-grid --grid precision=bf16,fp8,mxfp8 --grid batch_size=1,4,16 \\
        --grid activation_checkpointing=off,full [--base REQUEST.json] [--local | --function NAME]
    trainctl report b200-grid --out reports/b200-grid

What happens, in order:

1. **Expand** the grid over a base (a submitter request, or hyperparameters for
   ``--local``). Grid keys and values are checked with
   :mod:`platform_spec.hyperparameters` (a bad one raises
   :class:`~platform_spec.hyperparameters.HyperparameterError` naming the key and
   its allowed values); each configuration is validated as a whole (cross-field
   rules).
2. **Prune**. AWS: the planner (:mod:`planner`) skips configurations the
   instance's GPU cannot run (e.g. ``mxfp8`` on Hopper) and those predicted not
   to fit in GPU memory, each with its reason and the estimate (unless the base
   request sets ``auto_tune``: the submitter then applies the planner's change).
   Local: precisions the host cannot run (``fp8``/``mxfp8``/``nvfp4``/``fp16``
   need an NVIDIA GPU; the CPU path runs ``fp32`` and ``bf16``).
3. **Run**. AWS: each configuration goes through the job submitter (the same
   validation, capacity choice and idempotency as ``trainctl submit``), in
   process against ``AWS_ENDPOINT_URL`` of the environment (required: the
   in-process path never reaches real AWS, see :func:`check_submitter`), or
   through the deployed function (``--function``). Every job gets a deterministic
   ``job_name`` and ``client_token`` derived from the sweep name and the
   configuration, and the tags ``sweep`` (the sweep name) and ``sweep-config``
   (the grid values), so running the same sweep again returns the jobs it
   already created instead of creating more. Then the sweep polls
   ``DescribeTrainingJob`` until every job is terminal (or ``timeout``).
   Local: each configuration runs the container's entry point
   (:func:`training.local.run_local`) in ``<sweep dir>/runs/<config id>`` on
   CPython's documentation text (:func:`training.corpus.python_docs_corpus`),
   one after the other; a configuration that completed is not run again, one
   that was interrupted resumes from its checkpoint.
4. **State** lives in ``<sweeps dir>/<name>/sweep.json`` (configurations,
   statuses, reasons, job names or run folders, planner predictions), written
   after every change, so :mod:`trainctl.report` finds everything and an
   interrupted sweep resumes. A sweep's definition (mode, base, grid, target)
   is fixed once created: running it again with a different one raises
   :class:`SweepError` (choose another name).

Python API (used by ``trainctl sweep`` and the demo): :func:`run_local_sweep`,
:func:`run_aws_sweep`, :func:`plan_sweep`, :func:`load_sweep`,
:func:`wait_for_jobs`.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from platform_spec import hyperparameters as hpmod
from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE
from platform_spec.errors import FieldError
from platform_spec.precisions import get_precision

DEFAULT_SWEEPS_DIR = Path(".sweeps")
"""Where sweeps keep their state by default (relative to the working directory; git-ignored)."""

STATE_FILE = "sweep.json"
STATE_VERSION = 1
SWEEP_TAG = "sweep"
"""Job tag holding the sweep name (``platform:`` keys are the submitter's own)."""
CONFIG_TAG = "sweep-config"
"""Job tag holding the configuration's grid values, e.g. ``precision=bf16 batch_size=4``."""

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
NAME_EXPECTED = "1-40 letters, digits, '.', '_' or '-', starting with a letter or digit"

LOCAL_BASE_HYPERPARAMETERS: dict[str, str] = {
    "model": "gpt-tiny",
    "precision": "bf16",
    "batch_size": "4",
    "seq_length": "128",
    "max_steps": "60",
    "warmup_steps": "5",
    "learning_rate": "0.003",
    "min_learning_rate": "0.0003",
    "log_interval": "1",
    "checkpoint_interval": "1000",
    "keep_checkpoints": "1",
    "seed": "1234",
}
"""The default base of a local sweep: gpt-tiny (4 blocks, hidden 256, 3.4 M parameters)
on byte-level CPython documentation, 60 steps of ``batch_size`` x 128 tokens per
process, every step logged (for the loss curves). Measured on 2 shared cores with 2
CPU processes per run: 15-35 s per configuration at batch 1-4, 60-80 s at batch 16;
override with ``set_values`` / ``--set``."""

AWS_BASE_REQUEST: dict[str, Any] = {
    "instance_type": DEFAULT_INSTANCE_TYPE,
    "instance_count": 1,
    "capacity": "auto",
    "hyperparameters": {**hpmod.GUIDE_DEFAULT_REQUEST, "max_steps": "500", "log_interval": "10"},
    "inputs": {"train": "datasets/guide/train/"},
    "max_runtime_hours": 4,
}
"""The default base request of an AWS sweep: the guide's ``train.sh`` defaults
(gpt-1b with 10 layers, mxfp8, batch 8, sequence 2048) for 500 steps."""

# Configuration statuses beyond SageMaker's TrainingJobStatus values.
SKIPPED = "Skipped"
PENDING = "Pending"
REJECTED = "Rejected"
SUBMIT_ERROR = "SubmitError"
VALIDATED = "Validated"
RUNNING = "InProgress"
COMPLETED = "Completed"
FAILED = "Failed"
STOPPED = "Stopped"
TERMINAL_STATUSES = (COMPLETED, FAILED, STOPPED)
ACTIVE_STATUSES = ("InProgress", "Stopping")

_SHORT = {
    "batch_size": "bs",
    "seq_length": "seq",
    "activation_checkpointing": "ac-",
    "gradient_accumulation_steps": "ga",
    "num_layers": "L",
    "sharding_strategy": "shard-",
    "quantized_model_init": "qinit-",
    "reshard_after_forward": "reshard-",
    "fp8_scaling": "scaling-",
    "learning_rate": "lr",
}


class SweepError(ValueError):
    """A sweep cannot be created, resumed or run as asked (the message says what to change)."""


# --- grid ----------------------------------------------------------------------------------------


def parse_grid(grid: Mapping[str, Sequence[Any]] | Sequence[str]) -> dict[str, list[str]]:
    """Validate a grid: ``{"precision": ["bf16", "fp8"], ...}`` or ``["precision=bf16,fp8", ...]``.

    Keys are normalised (``batch-size`` -> ``batch_size``), values coerced with
    the trainer's rules and rendered as SageMaker strings (``"MXFP8"`` ->
    ``"mxfp8"``); duplicate values are dropped, order is kept.

    Returns:
        ``{key: [value strings]}`` in the order given.

    Raises:
        HyperparameterError: an unknown key (lists the known ones) or a value
            out of range (names the key and its allowed values).
        SweepError: malformed ``KEY=V1,V2`` text, a key given twice, no values.
    """
    items: list[tuple[str, list[Any]]] = []
    if isinstance(grid, Mapping):
        items = [(str(k), list(v) if isinstance(v, (list, tuple)) else [v]) for k, v in grid.items()]
    else:
        for spec in grid:
            key, sep, values = str(spec).partition("=")
            if not sep or not key.strip():
                raise SweepError(f"grid {spec!r}: expected KEY=V1,V2,... (e.g. precision=bf16,fp8)")
            items.append((key, [v for v in values.split(",")]))
    out: dict[str, list[str]] = {}
    for key, values in items:
        name = hpmod.normalise_name(key)
        if name not in hpmod.SPECS:
            raise hpmod.HyperparameterError(name, key, "a known hyperparameter: " + ", ".join(sorted(hpmod.SPECS)))
        if name in out:
            raise SweepError(f"grid key {name!r} given twice; give all its values once: {name}=V1,V2")
        rendered: list[str] = []
        for raw in values:
            if isinstance(raw, str) and not raw.strip():
                raise hpmod.HyperparameterError(name, raw, hpmod.SPECS[name].expected())
            text = hpmod.format_value(hpmod.coerce(name, raw))
            if text not in rendered:
                rendered.append(text)
        if not rendered:
            raise SweepError(f"grid key {name!r} has no values")
        out[name] = rendered
    if not out:
        raise SweepError("the grid is empty: give at least one --grid KEY=V1,V2")
    return out


def parse_assignments(values: Sequence[str] | Mapping[str, Any] | None) -> dict[str, str]:
    """``["max_steps=100", ...]`` (or a mapping) as validated hyperparameter strings.

    Raises:
        HyperparameterError: unknown key or bad value.
        SweepError: malformed ``KEY=VALUE``.
    """
    if not values:
        return {}
    pairs: list[tuple[str, Any]]
    if isinstance(values, Mapping):
        pairs = list(values.items())
    else:
        pairs = []
        for text in values:
            key, sep, value = str(text).partition("=")
            if not sep or not key.strip():
                raise SweepError(f"--set {text!r}: expected KEY=VALUE (e.g. max_steps=100)")
            pairs.append((key, value))
    out: dict[str, str] = {}
    for key, value in pairs:
        name = hpmod.normalise_name(key)
        out[name] = hpmod.format_value(hpmod.coerce(name, value))
    return out


# --- configurations ------------------------------------------------------------------------------


def _slug_part(key: str, value: str) -> str:
    if key in ("precision", "model"):
        return value
    prefix = _SHORT.get(key, key.replace("_", "-") + "-")
    return f"{prefix}{value}"


@dataclass
class SweepConfig:
    """One configuration of a sweep and what became of it.

    Attributes:
        index: 0-based position in the grid's expansion (stable for a sweep).
        overrides: the grid values of this configuration (``{key: value string}``).
        hyperparameters: base + overrides, every value a string (what the trainer gets).
        status: ``Pending``, ``Skipped``, ``Rejected`` (refused by the submitter),
            ``SubmitError`` (an AWS fault; retried on the next run), or the job's
            ``TrainingJobStatus`` (``InProgress``, ``Stopping``, ``Completed``,
            ``Failed``, ``Stopped``); local runs end ``Completed``, ``Failed`` or ``Stopped``.
        reason: why it was skipped / refused / failed (``FailureReason`` for jobs).
        prediction: the planner's figures (see :func:`prediction_of`), or None.
        job_name, job_arn, client_token: the training job (AWS sweeps).
        capacity: the submitter's capacity choice (AWS sweeps).
        run_dir: the run's folder relative to the sweep folder (local sweeps).
        updated: ISO 8601 time of the last change.
    """

    index: int
    overrides: dict[str, str]
    hyperparameters: dict[str, str]
    status: str = PENDING
    reason: str | None = None
    prediction: dict[str, Any] | None = None
    job_name: str | None = None
    job_arn: str | None = None
    client_token: str | None = None
    capacity: dict[str, Any] | None = None
    run_dir: str | None = None
    updated: str | None = None

    @property
    def id(self) -> str:
        """``01-bf16-bs4-ac-off``: index (1-based) and the grid values; a folder-safe name."""
        slug = "-".join(_slug_part(k, v) for k, v in self.overrides.items())
        slug = re.sub(r"[^A-Za-z0-9.-]+", "-", slug).strip("-")
        return f"{self.index + 1:02d}-{slug}"[:80]

    @property
    def label(self) -> str:
        """Short label for figures: ``bf16 bs4 ac-off``."""
        return " ".join(_slug_part(k, v) for k, v in self.overrides.items())

    @property
    def title(self) -> str:
        """The grid values as ``precision=bf16 batch_size=4`` (tables, the ``sweep-config`` tag)."""
        return " ".join(f"{k}={v}" for k, v in self.overrides.items())

    @property
    def precision(self) -> str:
        return self.hyperparameters.get("precision", hpmod.Hyperparameters().precision)

    def to_json(self) -> dict[str, Any]:
        out = {k: v for k, v in self.__dict__.items()}
        out["id"] = self.id
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepConfig:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in names})

    def mark(self, status: str, reason: str | None = None) -> None:
        self.status = status
        self.reason = reason
        self.updated = datetime.now(timezone.utc).isoformat(timespec="seconds")


def expand(grid: Mapping[str, Sequence[str]], base_hyperparameters: Mapping[str, str]) -> list[SweepConfig]:
    """The cartesian product of ``grid`` (first key slowest) over ``base_hyperparameters``.

    A combination that breaks a cross-field rule (e.g. ``quantized_model_init``
    without an fp8-family precision) is ``Skipped`` with the rule as its reason.
    """
    keys = list(grid)
    configs: list[SweepConfig] = []
    for index, values in enumerate(itertools.product(*(grid[k] for k in keys))):
        overrides = dict(zip(keys, values))
        full = {**base_hyperparameters, **overrides}
        config = SweepConfig(index=index, overrides=overrides, hyperparameters=full)
        try:
            hpmod.parse(full)
        except hpmod.HyperparameterError as exc:
            config.mark(SKIPPED, f"invalid combination: {exc}")
        configs.append(config)
    return configs


def client_token_for(name: str, config: SweepConfig) -> str:
    """``sweep-<name>-<20 hex>``: SHA-256 of the sweep name and the configuration's grid values."""
    return f"sweep-{name}-{_config_digest(name, config)[:20]}"


def job_name_for(name: str, config: SweepConfig) -> str:
    """A readable, deterministic ``TrainingJobName`` (<= 63 characters): ``<name>-<grid values>-<8 hex>``."""
    stem = re.sub(r"[^A-Za-z0-9]+", "-", f"{name[:30]}-{config.label}").strip("-")[:53].strip("-")
    return f"{stem}-{_config_digest(name, config)[:8]}"


def _config_digest(name: str, config: SweepConfig) -> str:
    blob = json.dumps({"sweep": name, "overrides": config.overrides}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


# --- the sweep and its state ----------------------------------------------------------------------


@dataclass
class Sweep:
    """A sweep: its definition and the state of every configuration.

    Attributes:
        name: the sweep name (:data:`NAME_RE`).
        mode: ``"local"`` or ``"aws"``.
        grid: ``{key: [value strings]}``.
        base: local: the base hyperparameters (strings); AWS: the base request.
        target: local: ``{"nproc", "device", "data"}``; AWS: ``{"instance_type",
            "instance_count", "gpu", "submitter"}``.
        directory: the sweep folder (``<sweeps dir>/<name>``).
        configs: every configuration, skipped ones included.
        created: ISO 8601.
    """

    name: str
    mode: str
    grid: dict[str, list[str]]
    base: dict[str, Any]
    target: dict[str, Any]
    directory: Path
    configs: list[SweepConfig] = field(default_factory=list)
    created: str = ""

    @property
    def state_file(self) -> Path:
        return self.directory / STATE_FILE

    def definition(self) -> dict[str, Any]:
        """What fixes the sweep: mode, grid, base and the target (hardware / processes)."""
        target = {k: v for k, v in self.target.items() if k not in ("submitter", "device")}
        return {"mode": self.mode, "grid": self.grid, "base": self.base, "target": target}

    def to_json(self) -> dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "name": self.name,
            "mode": self.mode,
            "created": self.created,
            "grid": self.grid,
            "base": self.base,
            "target": self.target,
            "configs": [c.to_json() for c in self.configs],
        }

    def save(self) -> None:
        """Write ``sweep.json`` atomically (a rename), so an interrupted sweep never leaves half a file."""
        self.directory.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=2, default=str) + "\n", encoding="utf-8")
        os.replace(tmp, self.state_file)

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> Sweep:
        """Read ``<directory>/sweep.json``.

        Raises:
            SweepError: no sweep there, or an unreadable / newer state file.
        """
        folder = Path(directory)
        path = folder / STATE_FILE
        if not path.is_file():
            raise SweepError(f"no sweep in {folder} ({STATE_FILE} not found)")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise SweepError(f"{path}: unreadable sweep state: {exc}") from None
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise SweepError(f"{path}: sweep state version {data.get('version') if isinstance(data, dict) else None!r}, "
                             f"this trainctl reads version {STATE_VERSION}")
        return cls(
            name=data["name"],
            mode=data["mode"],
            grid=data["grid"],
            base=data["base"],
            target=data.get("target") or {},
            directory=folder,
            configs=[SweepConfig.from_json(c) for c in data.get("configs", [])],
            created=data.get("created", ""),
        )

    def by_status(self, *statuses: str) -> list[SweepConfig]:
        return [c for c in self.configs if c.status in statuses]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for c in self.configs:
            out[c.status] = out.get(c.status, 0) + 1
        return out


def check_name(name: str) -> str:
    """Raises :class:`SweepError` unless ``name`` matches :data:`NAME_RE`."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SweepError(f"sweep name {name!r}: expected {NAME_EXPECTED}")
    return name


def sweep_directory(name_or_dir: str | os.PathLike[str], sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR) -> Path:
    """The folder of a sweep given by name (under ``sweeps_dir``) or by path."""
    path = Path(name_or_dir)
    if (path / STATE_FILE).is_file():
        return path
    return Path(sweeps_dir) / str(name_or_dir)


def load_sweep(name_or_dir: str | os.PathLike[str], sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR) -> Sweep:
    """The sweep called ``name_or_dir`` under ``sweeps_dir``, or the sweep folder at that path.

    Raises:
        SweepError: no such sweep.
    """
    return Sweep.load(sweep_directory(name_or_dir, sweeps_dir))


# --- planning (expand + prune) ---------------------------------------------------------------------


def prediction_of(plan: Any) -> dict[str, Any]:
    """The planner figures a sweep keeps for one configuration (per GPU unless stated).

    Keys: ``instance_type``, ``instance_count``, ``gpu``, ``world_size``, ``fits``,
    ``memory_gb_total`` (predicted peak allocated, GB), ``memory_gb_required``
    (with margins), ``memory_gb_usable``, ``tokens_per_second`` (job),
    ``tokens_per_second_per_gpu``, ``mfu`` (percent), ``step_time_s``, ``source``.
    """
    hardware = plan.resolved
    return {
        "instance_type": hardware.instance.instance_type,
        "instance_count": plan.input.instance_count,
        "gpu": hardware.gpu.name,
        "world_size": hardware.world_size,
        "fits": bool(plan.fits),
        "memory_gb_total": round(float(plan.memory_gb.total), 3),
        "memory_gb_required": round(float(plan.memory_gb.required), 3),
        "memory_gb_usable": round(float(plan.memory_gb.usable), 3),
        "tokens_per_second": round(float(plan.tokens_per_second), 1),
        "tokens_per_second_per_gpu": round(float(plan.tokens_per_second_per_gpu), 1),
        "mfu": round(float(plan.mfu), 2),
        "step_time_s": round(float(plan.step_time_s), 6),
        "source": "planner.estimate",
    }


def _trainable_instance(instance_type: str, where: str = "") -> Any:
    """The catalogue entry of an instance type the trainer image runs on; SweepError naming the types to use
    (and, for a known type it does not run on, why) otherwise: the planner's one rule."""
    from platform_spec import catalogue

    try:
        return catalogue.get_trainable_instance(instance_type)
    except FieldError as exc:
        detail = f" ({exc.detail})" if exc.detail else ""
        raise SweepError(f"{where}instance_type {instance_type!r}: expected {exc.expected}{detail}") from None


def prune_for_instance(configs: Sequence[SweepConfig], instance_type: str, instance_count: int, *, auto_tune: bool = False) -> None:
    """Mark configurations the hardware cannot run or that are predicted not to fit as ``Skipped``.

    Every configuration that the planner can estimate gets its ``prediction``.

    Raises:
        SweepError: the instance type is not in the planner's catalogue, or the trainer image does not
            run on it (:func:`platform_spec.catalogue.get_trainable_instance`).
    """
    import planner
    from platform_spec import catalogue

    instance = _trainable_instance(instance_type)
    gpu = instance.gpu_spec
    for config in configs:
        if config.status == SKIPPED:
            continue
        hp = hpmod.parse(config.hyperparameters)
        if not catalogue.supports_precision(gpu, hp.precision):
            supported = ", ".join(catalogue.supported_precisions(gpu))
            config.mark(
                SKIPPED,
                f"hardware: {hp.precision} does not run on {gpu.name} ({instance.instance_type}); "
                f"it supports {supported} ({hp.precision} needs {get_precision(hp.precision).hardware})",
            )
            continue
        plan_input = planner.PlanInput.from_hyperparameters(hp, instance_type=instance.instance_type, instance_count=instance_count)
        try:
            plan = planner.estimate(plan_input)
        except ValueError as exc:
            config.mark(SKIPPED, f"the planner cannot estimate it: {exc}")
            continue
        config.prediction = prediction_of(plan)
        if plan.fits or auto_tune:
            continue
        suggestion = ""
        tuned = planner.auto_tune(plan_input)
        if tuned is not None and tuned[1]:
            suggestion = "; the planner suggests: " + "; ".join(tuned[1])
        config.mark(
            SKIPPED,
            f"predicted out of memory: {plan.memory_gb.total:.1f} GB peak per GPU "
            f"({plan.memory_gb.required:.1f} GB with margins) of {plan.memory_gb.usable:.1f} GB usable "
            f"on {gpu.name} ({instance.instance_type}){suggestion}",
        )


def local_device(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The device a local run trains on: ``{"type": "cpu"}`` or ``{"type": "cuda", "gpus", "name", "gpu"}``.

    ``gpu`` is the planner catalogue's name for it (``None`` when unknown). Uses
    ``nvidia-smi`` (no torch import), as the entry point does.
    """
    from training.entrypoint import count_gpus

    gpus = count_gpus(environ)
    if gpus == 0:
        return {"type": "cpu"}
    name = ""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
        name = out.stdout.splitlines()[0].strip() if out.returncode == 0 and out.stdout.strip() else ""
    except (OSError, subprocess.TimeoutExpired, IndexError):
        pass
    from platform_spec import catalogue

    spec = catalogue.gpu_for_device_name(name) if name else None
    return {"type": "cuda", "gpus": gpus, "name": name, "gpu": spec.name if spec else None}


def prune_for_local(configs: Sequence[SweepConfig], device: Mapping[str, Any]) -> None:
    """Skip configurations the local host cannot run; on a known GPU, add the planner's prediction
    when the catalogue has an instance with that GPU count, and skip predicted OOM."""
    if device.get("type") != "cuda":
        for config in configs:
            if config.status != SKIPPED and config.precision not in hpmod.CPU_PRECISIONS:
                config.mark(
                    SKIPPED,
                    f"hardware: {config.precision} needs an NVIDIA GPU; this host has none and the CPU path "
                    f"runs {', '.join(hpmod.CPU_PRECISIONS)}",
                )
        return
    from platform_spec import catalogue

    gpu = device.get("gpu")
    if gpu is None:
        return
    instance = next(  # the planner plans only the types the trainer image runs on (a GB200 host: precision checks only)
        (i for i in (catalogue.INSTANCES[t] for t in catalogue.TRAINABLE_INSTANCE_TYPES)
         if i.gpu_spec.name == gpu and i.gpus_per_instance == device.get("gpus")), None
    )
    if instance is not None:
        prune_for_instance(configs, instance.instance_type, 1)
        return
    for config in configs:
        if config.status != SKIPPED and not catalogue.supports_precision(gpu, config.precision):
            config.mark(
                SKIPPED,
                f"hardware: {config.precision} does not run on {gpu}; it supports {', '.join(catalogue.supported_precisions(gpu))}",
            )


def _read_base(base: str | os.PathLike[str] | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if base is None:
        return None
    if isinstance(base, Mapping):
        return copy.deepcopy(dict(base))
    path = Path(base)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # ValueError: not UTF-8, not JSON
        raise SweepError(f"--base {path}: cannot read it: {exc}") from None
    if not isinstance(data, dict):
        raise SweepError(f"--base {path}: expected a JSON object (a submit request, or hyperparameters)")
    return data


def _strings(hyperparameters: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in hyperparameters.items():
        name = hpmod.normalise_name(key)
        if value is None:
            continue
        out[name] = hpmod.format_value(hpmod.coerce(name, value))
    return out


def plan_sweep(
    name: str,
    grid: Mapping[str, Sequence[Any]] | Sequence[str] | None,
    *,
    mode: str,
    base: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    set_values: Sequence[str] | Mapping[str, Any] | None = None,
    sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR,
    nproc: int = 2,
    data_dir: str | os.PathLike[str] | None = None,
    device: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    submitter: str = "in-process",
) -> Sweep:
    """Expand and prune a sweep, or load it when it exists with the same definition.

    Args:
        grid: see :func:`parse_grid`; ``None`` resumes an existing sweep as defined.
        mode: ``"local"`` or ``"aws"``.
        base: AWS: a submit request (path or mapping; default :data:`AWS_BASE_REQUEST`);
            local: a request (its ``hyperparameters`` are used) or a hyperparameters
            object, over :data:`LOCAL_BASE_HYPERPARAMETERS`.
        set_values: ``KEY=VALUE`` hyperparameters applied over the base.
        nproc: local: processes per run when there is no GPU.
        data_dir: local: token shards (default: CPython's docs, prepared once under ``sweeps_dir``).
        device: local: :func:`local_device` (detected when None).
        env: AWS: the environment (``DEFAULT_INSTANCE_TYPE`` when the base names no instance).
        submitter: AWS: ``"in-process"`` or the function name (recorded only).

    Returns:
        The sweep (not yet saved when new).

    Raises:
        SweepError: bad name / mode / base, no grid for a new sweep, or an existing
            sweep of that name with a different definition.
        HyperparameterError: a bad grid or ``--set`` key or value.
    """
    check_name(name)
    if mode not in ("local", "aws"):
        raise SweepError(f"mode {mode!r}: expected 'local' or 'aws'")
    directory = Path(sweeps_dir) / name
    existing = Sweep.load(directory) if (directory / STATE_FILE).is_file() else None
    if grid is None:
        if existing is None:
            raise SweepError(f"sweep {name!r} does not exist in {Path(sweeps_dir)}: give its grid (--grid KEY=V1,V2)")
        if existing.mode != mode:
            raise SweepError(f"sweep {name!r} is a {existing.mode} sweep; run it {'with --local' if existing.mode == 'local' else 'without --local'}")
        return existing
    parsed_grid = parse_grid(grid)
    overrides = parse_assignments(set_values)
    raw_base = _read_base(base)

    if mode == "local":
        if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
            raise SweepError(f"nproc {nproc!r}: expected an integer >= 1")
        given = {}
        if raw_base is not None:
            given = raw_base["hyperparameters"] if "hyperparameters" in raw_base else raw_base
            if not isinstance(given, Mapping):
                raise SweepError("--base: 'hyperparameters' must be a JSON object")
        base_hp = {**LOCAL_BASE_HYPERPARAMETERS, **_strings(given), **overrides}
        hpmod.parse(base_hp)
        dev = dict(device) if device is not None else local_device()
        target: dict[str, Any] = {"nproc": nproc, "device": dev, "data": str(data_dir) if data_dir else "python-docs"}
        sweep_base: dict[str, Any] = base_hp
    else:
        request = raw_base if raw_base is not None else copy.deepcopy(AWS_BASE_REQUEST)
        hp_raw = request.get("hyperparameters") or {}
        if not isinstance(hp_raw, Mapping):
            raise SweepError("base request: 'hyperparameters' must be a JSON object")
        base_hp = {**_strings(hp_raw), **overrides}
        hpmod.parse(base_hp)
        request["hyperparameters"] = base_hp
        for key in ("client_token", "job_name", "dry_run"):
            if key in request:
                raise SweepError(f"base request: remove {key!r}: the sweep sets it for each configuration")
        environ = os.environ if env is None else env
        instance_type = request.get("instance_type") or environ.get("DEFAULT_INSTANCE_TYPE") or DEFAULT_INSTANCE_TYPE
        request["instance_type"] = instance_type
        count = request.get("instance_count", 1)
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise SweepError(f"base request: instance_count {count!r}: expected an integer >= 1")
        gpu = _trainable_instance(instance_type, "base request: ").gpu_spec.name
        target = {"instance_type": instance_type, "instance_count": count, "gpu": gpu, "submitter": submitter}
        sweep_base = request

    sweep = Sweep(
        name=name, mode=mode, grid=parsed_grid, base=sweep_base, target=target, directory=directory,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    if existing is not None:
        if existing.definition() != sweep.definition():
            differs = [k for k in ("mode", "grid", "base", "target") if existing.definition()[k] != sweep.definition()[k]]
            raise SweepError(
                f"sweep {name!r} already exists in {directory} with a different {', '.join(differs)}; "
                f"run it again as defined (omit --grid to resume it) or choose another --name"
            )
        existing.target.update({k: v for k, v in target.items() if k in ("submitter", "device")})
        return existing

    sweep.configs = expand(parsed_grid, base_hp)
    if mode == "local":
        prune_for_local(sweep.configs, target["device"])
    else:
        prune_for_instance(sweep.configs, target["instance_type"], target["instance_count"], auto_tune=bool(sweep_base.get("auto_tune")))
    for config in sweep.configs:
        if config.status == SKIPPED:
            continue
        if mode == "aws":
            config.client_token = client_token_for(name, config)
            config.job_name = job_name_for(name, config)
        else:
            config.run_dir = f"runs/{config.id}"
    return sweep


# --- progress -------------------------------------------------------------------------------------


def make_progress(enabled: bool | None = None) -> Any:
    """A rich progress display on stderr (disabled when ``enabled`` is False, or None and stderr is no terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    disable = (not console.is_terminal) if enabled is None else not enabled
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=disable,
        transient=False,
    )


# --- AWS: submit and wait ---------------------------------------------------------------------------


def request_for(sweep: Sweep, config: SweepConfig, *, dry_run: bool = False) -> dict[str, Any]:
    """The submitter request of ``config``: the base request, its hyperparameters, deterministic
    ``job_name`` / ``client_token``, and the ``sweep`` / ``sweep-config`` tags."""
    request = copy.deepcopy(sweep.base)
    request["hyperparameters"] = dict(config.hyperparameters)
    request["job_name"] = config.job_name or job_name_for(sweep.name, config)
    request["client_token"] = config.client_token or client_token_for(sweep.name, config)
    tags = dict(request.get("tags") or {})
    tags[SWEEP_TAG] = sweep.name
    tags[CONFIG_TAG] = config.title[:256]
    request["tags"] = tags
    if dry_run:
        request["dry_run"] = True
    return request


@contextlib.contextmanager
def _submitter(
    env: Mapping[str, str] | None, function: str | None, region: str | None, log_file: Path | None = None
) -> Iterator[Callable[[dict[str, Any]], dict[str, Any]]]:
    """A function sending one request to the submitter: the deployed function, or the handler in process.

    In process, with ``log_file``, the handler's JSON logs and EMF metrics go to
    that file (they would break the progress display) for the duration.

    Raises:
        SubmitError: see :func:`check_submitter`.
    """
    from trainctl.submitter_client import invoke_function, lambda_client, submit_local

    if function:
        client = lambda_client(function, region=region, environ=None if env is None else env)
        yield lambda request: invoke_function(function, request, client=client)
        return
    environ = dict(os.environ if env is None else env)
    if log_file is None:
        yield lambda request: submit_local(request, environ)
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "a", encoding="utf-8") as log:

        def send(request: dict[str, Any]) -> dict[str, Any]:
            with contextlib.redirect_stderr(log):
                return submit_local(request, environ)

        yield send


def check_submitter(env: Mapping[str, str] | None = None, function: str | None = None, region: str | None = None) -> str | None:
    """Refuse, before anything is written or sent, a submitter the sweep cannot or must not use.

    In process (no ``function``): only against ``AWS_ENDPOINT_URL`` of ``env``
    (the emulator's), never against real AWS with whatever credentials the
    environment holds. ``function``: a region and credentials must resolve.

    Returns:
        The region jobs are polled in (``function``: the function's, see
        :func:`trainctl.submitter_client.function_region`; else ``region``).

    Raises:
        SweepError: one line naming what is missing.
    """
    from trainctl.submitter_client import SubmitError, function_region, lambda_client, require_local_endpoint

    try:
        if function:
            lambda_client(function, region=region, environ=env)
            return function_region(function, region, env)
        require_local_endpoint(os.environ if env is None else env)
    except SubmitError as exc:
        raise SweepError(str(exc)) from None
    return region


def submit_configs(
    sweep: Sweep,
    *,
    env: Mapping[str, str] | None = None,
    function: str | None = None,
    region: str | None = None,
    dry_run: bool = False,
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Submit every configuration not yet submitted (``Pending``, ``Rejected``, ``SubmitError``).

    Each answer is recorded on its configuration (and the state saved after
    each one) unless ``dry_run``, which asks the submitter to validate and
    choose capacity only, and records nothing.

    A submission that gets no answer is recorded as ``SubmitError`` with the
    reason; when that reason would answer every request (endpoint, credentials,
    permissions, function name), the remaining configurations are not sent and
    stay ``Pending``.

    Returns:
        ``[{"config": id, "status", "training_job_name"?, "replayed"?, "reason"?}]`` per submission.

    Raises:
        SweepError: the in-process submitter's environment is incomplete.
        SubmitError: the deployed function's region or credentials do not resolve.
    """
    from trainctl.submitter_client import SubmitError

    todo = [c for c in sweep.configs if c.status in (PENDING, REJECTED, SUBMIT_ERROR)]
    answers: list[dict[str, Any]] = []
    progress = progress or make_progress(False)
    log_file = None if dry_run else sweep.directory / "submitter.log"
    with progress, _submitter(env, function, region, log_file) as send:
        task = progress.add_task(f"{'validating' if dry_run else 'submitting'} {sweep.name}", total=len(todo))
        for config in todo:
            progress.update(task, description=f"{'validating' if dry_run else 'submitting'} {config.id}")
            answer: dict[str, Any] = {"config": config.id}
            try:
                response = send(request_for(sweep, config, dry_run=dry_run))
            except Exception as exc:  # noqa: BLE001 - recorded per configuration, retried on the next run
                if type(exc).__name__ == "ConfigurationError":
                    raise SweepError(
                        f"the submitter's environment is incomplete: {exc}; source the env file of "
                        "`trainctl local-aws --env-file FILE`, or use --function NAME"
                    ) from None
                reason = str(exc) if isinstance(exc, SubmitError) else f"{type(exc).__name__}: {exc}"
                answer.update(status=SUBMIT_ERROR, reason=reason)
                if not dry_run:
                    config.mark(SUBMIT_ERROR, reason)
                    sweep.save()
                answers.append(answer)
                progress.advance(task)
                if getattr(exc, "unavailable", False):
                    break  # the same answer awaits every other configuration: they stay Pending for the next run
                continue
            else:
                status = response.get("status")
                if status in ("submitted", "validated"):
                    answer.update(
                        status=VALIDATED if dry_run else response.get("training_job_status") or RUNNING,
                        training_job_name=response.get("training_job_name"),
                        replayed=bool(response.get("replayed")),
                        capacity=response.get("capacity"),
                    )
                    if not dry_run:
                        config.job_name = response.get("training_job_name") or config.job_name
                        config.job_arn = response.get("training_job_arn")
                        config.capacity = response.get("capacity")
                        tuning = response.get("auto_tune")
                        config.mark(answer["status"], f"auto_tune applied: {'; '.join(tuning['changes'])}" if tuning else None)
                else:
                    error = response.get("error") or {}
                    reason = f"{error.get('code', 'Rejected')}: {error.get('message', response)}"
                    answer.update(status=REJECTED, reason=reason)
                    if not dry_run:
                        config.mark(REJECTED, reason)
            if not dry_run:
                sweep.save()
            answers.append(answer)
            progress.advance(task)
    return answers


def _session(env: Mapping[str, str] | None, region: str | None) -> tuple[Any, str | None]:
    import boto3

    environ = os.environ if env is None else env
    session = boto3.session.Session(
        aws_access_key_id=environ.get("AWS_ACCESS_KEY_ID") if env is not None else None,
        aws_secret_access_key=environ.get("AWS_SECRET_ACCESS_KEY") if env is not None else None,
        aws_session_token=environ.get("AWS_SESSION_TOKEN") if env is not None else None,
        region_name=region or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION"),
    )
    return session, environ.get("AWS_ENDPOINT_URL") or None


def aws_client(service: str, env: Mapping[str, str] | None = None, region: str | None = None) -> Any:
    """A boto3 client for ``service`` from ``env`` (default: the process environment), honouring ``AWS_ENDPOINT_URL``."""
    session, endpoint = _session(env, region)
    return session.client(service, endpoint_url=endpoint)


def poll_jobs(sweep: Sweep, client: Any) -> list[SweepConfig]:
    """Describe every submitted, non-terminal job once; record status and ``FailureReason``.

    Returns:
        The configurations still active (``InProgress`` / ``Stopping``).
    """
    active = []
    for config in sweep.configs:
        if not config.job_name or config.status not in ACTIVE_STATUSES:
            continue
        try:
            description = client.describe_training_job(TrainingJobName=config.job_name)
        except Exception as exc:  # noqa: BLE001 - a describe fault leaves the status as it was
            config.reason = f"DescribeTrainingJob failed: {exc}"
            active.append(config)
            continue
        status = description.get("TrainingJobStatus", config.status)
        reason = description.get("FailureReason") if status == FAILED else config.reason
        if status != config.status or reason != config.reason:
            config.mark(status, reason)
        if status in ACTIVE_STATUSES:
            active.append(config)
    sweep.save()
    return active


def wait_for_jobs(
    sweep: Sweep,
    *,
    env: Mapping[str, str] | None = None,
    region: str | None = None,
    timeout: float = 3600.0,
    poll_interval: float = 30.0,
    progress: Any = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[SweepConfig]:
    """Poll ``DescribeTrainingJob`` until every submitted job is terminal or ``timeout`` seconds pass.

    Returns:
        The configurations still active when it returned (empty: all terminal).
    """
    client = aws_client("sagemaker", env, region)
    submitted = [c for c in sweep.configs if c.job_name and (c.status in ACTIVE_STATUSES or c.status in TERMINAL_STATUSES)]
    deadline = time.monotonic() + max(0.0, timeout)
    progress = progress or make_progress(False)
    with progress:
        task = progress.add_task(f"waiting for {sweep.name}", total=len(submitted))
        while True:
            active = poll_jobs(sweep, client)
            done = len(submitted) - len(active)
            counts = ", ".join(f"{n} {s}" for s, n in sorted(sweep.counts().items()) if s not in (SKIPPED,))
            progress.update(task, completed=done, description=f"waiting for {sweep.name}: {counts}")
            if not active or time.monotonic() >= deadline:
                return active
            sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))


# --- local runs ------------------------------------------------------------------------------------


def python_docs_shards(sweeps_dir: str | os.PathLike[str]) -> Path:
    """CPython's documentation topics as byte-level token shards, prepared once under ``<sweeps_dir>/_data``."""
    from training.corpus import python_docs_corpus
    from training.data import prepare_data

    root = Path(sweeps_dir) / "_data"
    shards = root / "python-docs"
    if not any(shards.glob("shard-*.bin")):
        corpus = python_docs_corpus(root / "python-docs.jsonl")
        prepare_data(shards, [corpus])
    return shards


_FINISHED_RE = re.compile(r"training finished at step (\d+)")


def run_local_configs(sweep: Sweep, *, data_dir: str | os.PathLike[str] | None = None, progress: Any = None) -> None:
    """Run every local configuration that has not completed, one after the other.

    Each run writes its output to ``<run dir>/train.log`` (appended on a
    resume). The state is saved after each run. Ctrl-C stops the current run
    as SageMaker would (SIGTERM: it checkpoints), marks it ``Stopped`` and
    re-raises.
    """
    from training.local import read_failure, start_local

    if data_dir is None:
        data = sweep.target.get("data")
        data_dir = python_docs_shards(sweep.directory.parent) if data in (None, "python-docs") else Path(data)
    todo = [c for c in sweep.configs if c.status not in (SKIPPED, COMPLETED)]
    progress = progress or make_progress(False)
    nproc = int(sweep.target.get("nproc", 2))
    with progress:
        overall = progress.add_task(f"sweep {sweep.name}", total=len(todo))
        for config in todo:
            max_steps = int(hpmod.parse(config.hyperparameters).max_steps)
            task = progress.add_task(f"  {config.id}", total=max_steps)
            run_dir = sweep.directory / (config.run_dir or f"runs/{config.id}")
            run_dir.mkdir(parents=True, exist_ok=True)
            config.mark(RUNNING)
            sweep.save()
            finished = False
            last_step = 0
            with open(run_dir / "train.log", "a", encoding="utf-8") as log:
                log.write(f"# trainctl sweep {sweep.name}: {config.title} ({datetime.now(timezone.utc).isoformat(timespec='seconds')})\n")
                proc = start_local(run_dir, config.hyperparameters, data_dir=data_dir, nproc=nproc)
                try:
                    assert proc.stdout is not None
                    for line in proc.stdout:
                        log.write(line)
                        if line.startswith("[metrics]"):
                            step = _step_of(line)
                            if step is not None:
                                last_step = step
                                progress.update(task, completed=step)
                        elif _FINISHED_RE.search(line):
                            finished = True
                    returncode = proc.wait()
                except KeyboardInterrupt:
                    _stop(proc)
                    config.mark(STOPPED, "interrupted (Ctrl-C); run the sweep again to resume from its checkpoint")
                    sweep.save()
                    raise
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            if returncode == 0 and finished:
                config.mark(COMPLETED)
            elif returncode == 0:
                config.mark(STOPPED, "the run stopped before max_steps (SIGTERM); run the sweep again to resume")
            else:
                failure = read_failure(run_dir)
                if finished:  # training completed, then a worker died on the way out (SageMaker: Failed too)
                    reason = (
                        f"exit status {returncode} after training finished at step {last_step}: "
                        f"{failure or 'a worker crashed at shutdown'}; run the sweep again to resume from the final checkpoint"
                    )
                else:
                    reason = failure or f"exit status {returncode}; see {run_dir / 'train.log'}"
                config.mark(FAILED, reason)
            sweep.save()
            progress.update(task, completed=max_steps if finished else last_step, visible=False)
            progress.advance(overall)


def _step_of(line: str) -> int | None:
    from platform_spec.metric_lines import parse_line

    values = parse_line(line)
    return int(values["step"]) if values and "step" in values else None


def _stop(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=150)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# --- the whole thing ------------------------------------------------------------------------------


@dataclass
class SweepResult:
    """What a sweep run left.

    Attributes:
        sweep: the sweep (its configurations carry statuses and reasons).
        directory: the sweep folder (``sweep.json``, ``runs/``).
        answers: AWS: one submitter answer per submission of this run.
        still_active: AWS: configurations whose jobs were still running when waiting stopped.
        timed_out: AWS: waiting ended at the timeout.
    """

    sweep: Sweep
    directory: Path
    answers: list[dict[str, Any]] = field(default_factory=list)
    still_active: list[SweepConfig] = field(default_factory=list)
    timed_out: bool = False

    @property
    def configs(self) -> list[SweepConfig]:
        return self.sweep.configs

    @property
    def skipped(self) -> list[SweepConfig]:
        return self.sweep.by_status(SKIPPED)

    @property
    def failed(self) -> list[SweepConfig]:
        return self.sweep.by_status(FAILED, REJECTED, SUBMIT_ERROR, STOPPED)

    @property
    def completed(self) -> list[SweepConfig]:
        return self.sweep.by_status(COMPLETED)

    def counts(self) -> dict[str, int]:
        return self.sweep.counts()


def run_local_sweep(
    name: str,
    grid: Mapping[str, Sequence[Any]] | Sequence[str] | None,
    base: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    *,
    sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR,
    set_values: Sequence[str] | Mapping[str, Any] | None = None,
    nproc: int = 2,
    data_dir: str | os.PathLike[str] | None = None,
    device: Mapping[str, Any] | None = None,
    progress: bool | None = None,
) -> SweepResult:
    """Run a sweep locally: every configuration through the container's entry point, one after another.

    Defaults: :data:`LOCAL_BASE_HYPERPARAMETERS` (gpt-tiny, 60 steps of 128-token
    sequences) on CPython's documentation text, ``nproc`` CPU processes per run
    (gloo) when there is no GPU. Running it again resumes: completed
    configurations are kept, the others run (from their checkpoints).

    Example::

        result = run_local_sweep("cpu-demo", {"precision": ["fp32", "bf16"], "batch_size": [2, 4]},
                                 set_values={"max_steps": 40}, sweeps_dir=".sweeps")
        paths = trainctl.report.write_report(result.directory, "reports/cpu-demo")

    Raises:
        SweepError, HyperparameterError: see :func:`plan_sweep`.
        KeyboardInterrupt: after stopping the current run (its state saved).
    """
    sweep = plan_sweep(
        name, grid, mode="local", base=base, set_values=set_values, sweeps_dir=sweeps_dir, nproc=nproc,
        data_dir=data_dir, device=device,
    )
    sweep.save()
    run_local_configs(sweep, data_dir=data_dir, progress=make_progress(progress))
    return SweepResult(sweep=sweep, directory=sweep.directory)


def run_aws_sweep(
    name: str,
    grid: Mapping[str, Sequence[Any]] | Sequence[str] | None,
    base: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    *,
    sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR,
    set_values: Sequence[str] | Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    function: str | None = None,
    region: str | None = None,
    wait: bool = True,
    timeout: float = 3600.0,
    poll_interval: float = 30.0,
    dry_run: bool = False,
    progress: bool | None = None,
) -> SweepResult:
    """Submit a sweep as SageMaker training jobs through the job submitter, then wait for them.

    Args:
        env: the environment of the in-process submitter and of the
            ``DescribeTrainingJob`` polling (default: the process environment;
            e.g. :attr:`trainctl.local_aws.LocalAws.env`).
        function: invoke this deployed submitter function instead of the in-process one.
        wait: poll until every job is terminal or ``timeout`` seconds pass.
        dry_run: validate and choose capacity for each configuration; create
            nothing and write no state (the answers are in ``SweepResult.answers``).

    Raises:
        SweepError, HyperparameterError: see :func:`plan_sweep`; in process without
            ``AWS_ENDPOINT_URL`` (never real AWS, see :func:`check_submitter`); an
            incomplete submitter environment; ``function``'s region or credentials missing.
    """
    sweep = plan_sweep(
        name, grid, mode="aws", base=base, set_values=set_values, sweeps_dir=sweeps_dir, env=env,
        submitter=function or "in-process",
    )
    region = check_submitter(env, function, region)  # before any state is written or request sent
    if dry_run:
        answers = submit_configs(sweep, env=env, function=function, region=region, dry_run=True, progress=make_progress(progress))
        return SweepResult(sweep=sweep, directory=sweep.directory, answers=answers)
    sweep.save()
    answers = submit_configs(sweep, env=env, function=function, region=region, progress=make_progress(progress))
    result = SweepResult(sweep=sweep, directory=sweep.directory, answers=answers)
    if wait and any(c.status in ACTIVE_STATUSES for c in sweep.configs):
        result.still_active = wait_for_jobs(
            sweep, env=env, region=region, timeout=timeout, poll_interval=poll_interval, progress=make_progress(progress)
        )
        result.timed_out = bool(result.still_active)
    return result


def iter_rows(sweep: Sweep) -> Iterator[tuple[str, str, str, str]]:
    """``(id, grid values, status, job name / run folder / reason)`` per configuration, for summaries."""
    for c in sweep.configs:
        where = c.job_name if sweep.mode == "aws" and c.status not in (SKIPPED,) else (c.run_dir if c.status != SKIPPED else "")
        yield c.id, c.title, c.status, (c.reason or where or "")


__all__ = [
    "AWS_BASE_REQUEST",
    "CONFIG_TAG",
    "DEFAULT_SWEEPS_DIR",
    "LOCAL_BASE_HYPERPARAMETERS",
    "SWEEP_TAG",
    "Sweep",
    "SweepConfig",
    "SweepError",
    "SweepResult",
    "aws_client",
    "check_submitter",
    "client_token_for",
    "expand",
    "job_name_for",
    "load_sweep",
    "local_device",
    "parse_grid",
    "plan_sweep",
    "poll_jobs",
    "prune_for_instance",
    "prune_for_local",
    "request_for",
    "run_aws_sweep",
    "run_local_configs",
    "run_local_sweep",
    "submit_configs",
    "sweep_directory",
    "wait_for_jobs",
]
