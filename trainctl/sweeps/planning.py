"""Defining a sweep: its base (a submitter request, or hyperparameters for local runs), the grid expanded
over it and pruned, or the existing sweep of that name when its definition is the same.

What happens, in order (:func:`plan_sweep`): the base's hyperparameters are read (with the shape of its
``model_config``, a Hugging Face ``config.json``, when it has one), the grid is parsed and expanded over
them (:mod:`trainctl.sweeps.grid`), then pruned (:mod:`trainctl.sweeps.pruning`); AWS configurations get
their deterministic ``job_name`` and ``client_token``, local ones their run folder. A sweep's definition
(mode, base, grid, target) is fixed once created: running it again with a different one raises
:class:`~trainctl.sweeps.state.SweepError` (choose another name). ``accept_memory_risk`` is not part of the
definition (as it is not part of the submitter's request fingerprint): running a sweep again with it set
runs the configurations it skipped as ``at-risk``, and without it skips those not yet submitted or run.

``model_config`` is mapped as the submitter maps it
(:func:`platform_spec.hyperparameters.merge_model_config`): ``model`` becomes the family's custom shape
and the shape hyperparameters come from the file, so the sweep plans, prunes and runs the shape the base
names. The base's own ``hyperparameters`` may not set the shape too (the submitter's rule); the grid and
``--set`` may vary its shape hyperparameters (``num_kv_heads``, ``hidden_size``, ...), each configuration
checked by the family's shape rule (one that breaks it is skipped with the field named), but not ``model``
or ``model_family``. The AWS requests then carry the merged shape hyperparameters instead of
``model_config`` (the training job's hyperparameters are the same either way).
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from platform_spec import hyperparameters as hpmod
from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE
from platform_spec.errors import FieldError
from trainctl.sweeps.grid import client_token_for, expand, job_name_for, parse_assignments, parse_grid
from trainctl.sweeps.pruning import local_device, prune_for_instance, prune_for_local, trainable_instance
from trainctl.sweeps.state import (
    ACCEPT_MEMORY_RISK,
    DEFAULT_SWEEPS_DIR,
    PENDING,
    SKIPPED,
    STATE_FILE,
    Sweep,
    SweepConfig,
    SweepError,
    check_name,
)

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


LOCAL_BASE_REQUEST_FIELDS: tuple[str, ...] = ("model_config", ACCEPT_MEMORY_RISK, "auto_tune")
"""Request fields a local sweep's base may carry besides its hyperparameters (in either form): the model's
shape and the memory-risk choice; ``auto_tune`` is refused (a local run trains the configuration as given)."""


def _flag(data: Mapping[str, Any], key: str, where: str) -> bool:
    """A request's boolean field (absent or ``null``: false), as the submitter reads it.

    Raises:
        SweepError: not true or false (named).
    """
    value = data.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise SweepError(f"{where}{key} {value!r}: expected true or false")
    return value


def _with_model_config(
    values: Mapping[str, Any],
    model_config: Any,
    *,
    where: str,
    grid: Mapping[str, Any],
    overrides: Mapping[str, Any],
) -> dict[str, Any]:
    """``values`` (the base's hyperparameters) with the shape of ``model_config``
    (:func:`platform_spec.hyperparameters.merge_model_config`, the submitter's mapping).

    Raises:
        SweepError: a key of ``model_config`` refused (``model_config.<key>``), a base hyperparameter that
            sets the shape too, or ``model`` / ``model_family`` in the grid or ``--set``.
    """
    try:
        merged = hpmod.merge_model_config(values, model_config)
    except FieldError as exc:
        raise SweepError(f"{where}{exc}") from None
    for kind, keys in (("grid key", grid), ("--set", overrides)):
        for name in ("model", "model_family"):
            if name in keys:
                shape = ", ".join(n for n in hpmod.SHAPE_HYPERPARAMETERS if n in merged)
                raise SweepError(
                    f"{kind} {name!r}: {where.rstrip(': ')}'s model_config sets the model (model={merged['model']}); "
                    f"vary its shape hyperparameters ({shape}) instead, or remove model_config"
                )
    return merged


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
        grid: see :func:`~trainctl.sweeps.grid.parse_grid`; ``None`` resumes an existing sweep as defined.
        mode: ``"local"`` or ``"aws"``.
        base: AWS: a submit request (path or mapping; default :data:`AWS_BASE_REQUEST`);
            local: a request (its ``hyperparameters`` are used) or a hyperparameters
            object, over :data:`LOCAL_BASE_HYPERPARAMETERS`, with the request fields of
            :data:`LOCAL_BASE_REQUEST_FIELDS`. Either may carry ``model_config`` (a Hugging Face
            ``config.json`` object: the model's shape, module docstring) and ``accept_memory_risk``
            (run ``at-risk`` configurations, :mod:`trainctl.sweeps.pruning`).
        set_values: ``KEY=VALUE`` hyperparameters applied over the base (shape hyperparameters over a
            ``model_config``'s too).
        nproc: local: processes per run when there is no GPU.
        data_dir: local: token shards (default: CPython's docs, prepared once under ``sweeps_dir``).
        device: local: :func:`~trainctl.sweeps.pruning.local_device` (detected when None).
        env: AWS: the environment (``DEFAULT_INSTANCE_TYPE`` when the base names no instance).
        submitter: AWS: ``"in-process"`` or the function name (recorded only).

    Returns:
        The sweep (not yet saved when new).

    Raises:
        SweepError: bad name / mode / base (its ``model_config`` refused, naming the key; a base
            hyperparameter setting the shape it gives; ``auto_tune`` or ``accept_memory_risk`` not true or
            false), ``model`` / ``model_family`` in the grid or ``--set`` over a ``model_config``, no grid for
            a new sweep, every configuration of the grid invalid (the first's rule named), or an existing
            sweep of that name with a different definition.
        HyperparameterError: a bad grid, base or ``--set`` key or value.
    """
    check_name(name)
    if mode not in ("local", "aws"):
        raise SweepError(f"mode {mode!r}: expected 'local' or 'aws'")
    directory = Path(sweeps_dir) / name
    existing = Sweep.load(directory) if (directory / STATE_FILE).is_file() else None
    if grid is None:
        given = [flag for flag, value in (("--base", base is not None), ("--set", set_values)) if value]
        return _resumed(existing, name, mode, Path(sweeps_dir), given)
    parsed_grid = parse_grid(grid)
    overrides = parse_assignments(set_values)
    raw_base = _read_base(base)
    if mode == "local":
        sweep_base, target = _local_definition(raw_base, parsed_grid, overrides, nproc, data_dir, device)
        base_hp = sweep_base
    else:
        sweep_base, target = _aws_definition(raw_base, parsed_grid, overrides, env, submitter)
        base_hp = sweep_base["hyperparameters"]
    sweep = Sweep(
        name=name,
        mode=mode,
        grid=parsed_grid,
        base=sweep_base,
        target=target,
        directory=directory,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    if existing is not None:
        if existing.definition() != sweep.definition():
            differs = [
                k for k in ("mode", "grid", "base", "target") if existing.definition()[k] != sweep.definition()[k]
            ]
            raise SweepError(
                f"sweep {name!r} already exists in {directory} with a different {', '.join(differs)}; "
                f"run it again as defined (omit --grid to resume it) or choose another --name"
            )
        existing.target.update({k: v for k, v in target.items() if k in ("submitter", "device")})
        _set_memory_risk(existing, sweep.accepts_memory_risk)
        return existing
    sweep.configs = expand(parsed_grid, base_hp)
    invalid = [c for c in sweep.configs if c.status == SKIPPED]
    if invalid and len(invalid) == len(sweep.configs):
        raise SweepError(
            f"every configuration of the grid is invalid; the first, {invalid[0].title}: "
            + (invalid[0].reason or "").removeprefix("invalid combination: ")
        )
    _prune(sweep, sweep.configs)
    return sweep


def _resumed(existing: Sweep | None, name: str, mode: str, sweeps_dir: Path, flags: list[str]) -> Sweep:
    """The existing sweep ``name`` as defined (no ``--grid``); refused (:class:`SweepError`): no such sweep,
    another mode, or a ``--base`` or ``--set`` (``flags``) it would ignore."""
    if existing is None:
        raise SweepError(f"sweep {name!r} does not exist in {sweeps_dir}: give its grid (--grid KEY=V1,V2)")
    if existing.mode != mode:
        kind, flag = ("a local", "with --local") if existing.mode == "local" else ("an AWS", "without --local")
        raise SweepError(f"sweep {name!r} is {kind} sweep; run it {flag}")
    if flags:
        raise SweepError(
            f"{' and '.join(flags)}: sweep {name!r} exists in {sweeps_dir} and its grid and base are fixed by its "
            f"first run; resume it without {' and '.join(flags)} (and without --grid), or choose another --name "
            "for another grid or base"
        )
    return existing


def _local_definition(
    raw_base: dict[str, Any] | None,
    grid: Mapping[str, Any],
    overrides: Mapping[str, Any],
    nproc: int,
    data_dir: str | os.PathLike[str] | None,
    device: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A local sweep's base hyperparameters and target (:func:`plan_sweep`)."""
    if not isinstance(nproc, int) or isinstance(nproc, bool) or nproc < 1:
        raise SweepError(f"nproc {nproc!r}: expected an integer >= 1")
    where = "--base: "
    raw_base = raw_base or {}
    if "hyperparameters" in raw_base:  # a request: its hyperparameters
        given = raw_base["hyperparameters"]
    else:  # a hyperparameters object
        given = {k: v for k, v in raw_base.items() if k not in LOCAL_BASE_REQUEST_FIELDS}
    if not isinstance(given, Mapping):
        raise SweepError("--base: 'hyperparameters' must be a JSON object")
    accept = _flag(raw_base, ACCEPT_MEMORY_RISK, where)
    if _flag(raw_base, "auto_tune", where):
        raise SweepError(
            "--base: auto_tune true: a local sweep runs each configuration as given (auto_tune is the "
            "job submitter's); remove it"
        )
    defaults = dict(LOCAL_BASE_HYPERPARAMETERS)
    if raw_base.get("model_config") is not None:
        given = _with_model_config(given, raw_base["model_config"], where=where, grid=grid, overrides=overrides)
        del defaults["model"]
    target = {
        "nproc": nproc,
        "device": dict(device) if device is not None else local_device(),
        "data": str(data_dir) if data_dir else "python-docs",
        ACCEPT_MEMORY_RISK: accept,
    }
    return {**defaults, **_strings(given), **overrides}, target


def _aws_definition(
    raw_base: dict[str, Any] | None,
    grid: Mapping[str, Any],
    overrides: Mapping[str, Any],
    env: Mapping[str, str] | None,
    submitter: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """An AWS sweep's base request (its hyperparameters merged) and target (:func:`plan_sweep`)."""
    where = "base request: "
    request = raw_base if raw_base is not None else copy.deepcopy(AWS_BASE_REQUEST)
    for key in ("client_token", "job_name", "dry_run"):
        if key in request:
            raise SweepError(f"base request: remove {key!r}: the sweep sets it for each configuration")
    hp_raw = request.get("hyperparameters") or {}
    if not isinstance(hp_raw, Mapping):
        raise SweepError("base request: 'hyperparameters' must be a JSON object")
    _flag(request, "auto_tune", where)
    _flag(request, ACCEPT_MEMORY_RISK, where)
    model_config = request.pop("model_config", None)
    if model_config is not None:  # the requests carry its shape as hyperparameters (module docstring)
        hp_raw = _with_model_config(hp_raw, model_config, where=where, grid=grid, overrides=overrides)
    request["hyperparameters"] = {**_strings(hp_raw), **overrides}
    environ = os.environ if env is None else env
    instance_type = request.get("instance_type") or environ.get("DEFAULT_INSTANCE_TYPE") or DEFAULT_INSTANCE_TYPE
    request["instance_type"] = instance_type
    count = request.get("instance_count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise SweepError(f"base request: instance_count {count!r}: expected an integer >= 1")
    gpu = trainable_instance(instance_type, "base request: ").gpu_spec.name
    return request, {"instance_type": instance_type, "instance_count": count, "gpu": gpu, "submitter": submitter}


def _prune(sweep: Sweep, configs: Sequence[SweepConfig]) -> None:
    """Prune ``configs`` of ``sweep`` for its target, then name those that run (AWS: ``job_name`` and
    ``client_token``; local: the run folder)."""
    if sweep.mode == "local":
        prune_for_local(configs, sweep.target["device"], accept_memory_risk=sweep.accepts_memory_risk)
    else:
        prune_for_instance(
            configs,
            sweep.target["instance_type"],
            sweep.target["instance_count"],
            auto_tune=bool(sweep.base.get("auto_tune")),
            accept_memory_risk=sweep.accepts_memory_risk,
        )
    for config in configs:
        if config.status == SKIPPED:
            config.client_token = config.job_name = config.run_dir = None
        elif sweep.mode == "aws":
            config.client_token = client_token_for(sweep.name, config)
            config.job_name = job_name_for(sweep.name, config)
        else:
            config.run_dir = f"runs/{config.id}"


def _set_memory_risk(sweep: Sweep, accept: bool) -> None:
    """Record ``accept_memory_risk`` on an existing sweep; when it changed, prune again the configurations
    the planner calls ``at-risk`` that have not been submitted or run (``Pending``, or ``Skipped`` for that
    verdict): accepted, they run; no longer accepted, they are skipped."""
    if sweep.accepts_memory_risk == accept:
        return
    if sweep.mode == "aws":
        sweep.base[ACCEPT_MEMORY_RISK] = accept
    else:
        sweep.target[ACCEPT_MEMORY_RISK] = accept
    from planner.memory import AT_RISK

    again = [
        c
        for c in sweep.configs
        if c.status in (PENDING, SKIPPED)
        and (c.prediction or {}).get("status") == AT_RISK
        and not (c.prediction or {}).get("auto_tune")
    ]
    for config in again:
        config.mark(PENDING)
        config.prediction = None
    _prune(sweep, again)


__all__ = ["AWS_BASE_REQUEST", "LOCAL_BASE_HYPERPARAMETERS", "LOCAL_BASE_REQUEST_FIELDS", "plan_sweep"]
