"""A sweep's state: its definition, every configuration and what became of it, kept in ``sweep.json``.

``<sweeps dir>/<name>/sweep.json`` holds the sweep's definition (mode, grid,
base, target) and one entry per configuration (status, reason, planner
prediction, job name or run folder), written atomically after every change,
so :mod:`trainctl.reports` finds everything and an interrupted sweep resumes.
A sweep's definition is fixed once created (:func:`trainctl.sweeps.planning.plan_sweep`
refuses a different one under the same name).

Statuses: SageMaker's ``TrainingJobStatus`` values plus :data:`SKIPPED`,
:data:`PENDING`, :data:`REJECTED`, :data:`SUBMIT_ERROR` and :data:`VALIDATED`.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from platform_spec import hyperparameters as hpmod
from platform_spec.files import atomic_write_text

DEFAULT_SWEEPS_DIR = Path(".sweeps")
"""Where sweeps keep their state by default (relative to the working directory; git-ignored)."""

STATE_FILE = "sweep.json"
STATE_VERSION = 1

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$")
NAME_EXPECTED = "1-40 letters, digits, '.', '_' or '-', starting with a letter or digit"

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

ACCEPT_MEMORY_RISK = "accept_memory_risk"
"""The request field that runs configurations the planner calls ``at-risk`` (the submitter's
:data:`platform_constructs.submitter.runtime.request.FIELDS` row): in an AWS sweep's base request, in a local sweep's target.
Not part of a sweep's definition (:meth:`Sweep.definition`), as it is not part of the submitter's request
fingerprint."""

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


def slug_part(key: str, value: str) -> str:
    """One grid value as it appears in ids and labels: ``bs4``, ``ac-off``; a precision or model as it is."""
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
        prediction: the planner's figures (see :func:`trainctl.sweeps.pruning.prediction_of`), or None.
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
        slug = "-".join(slug_part(k, v) for k, v in self.overrides.items())
        slug = re.sub(r"[^A-Za-z0-9.-]+", "-", slug).strip("-")
        return f"{self.index + 1:02d}-{slug}"[:80]

    @property
    def label(self) -> str:
        """Short label for figures: ``bf16 bs4 ac-off``."""
        return " ".join(slug_part(k, v) for k, v in self.overrides.items())

    @property
    def title(self) -> str:
        """The grid values as ``precision=bf16 batch_size=4`` (tables, the ``sweep-config`` tag)."""
        return " ".join(f"{k}={v}" for k, v in self.overrides.items())

    @property
    def precision(self) -> str:
        return self.hyperparameters.get("precision", hpmod.Hyperparameters().precision)

    def to_json(self) -> dict[str, Any]:
        out = dict(self.__dict__.items())
        out["id"] = self.id
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SweepConfig:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})

    def mark(self, status: str, reason: str | None = None) -> None:
        self.status = status
        self.reason = reason
        self.updated = datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class Sweep:
    """A sweep: its definition and the state of every configuration.

    Attributes:
        name: the sweep name (:data:`NAME_RE`).
        mode: ``"local"`` or ``"aws"``.
        grid: ``{key: [value strings]}``.
        base: local: the base hyperparameters (strings); AWS: the base request.
        target: local: ``{"nproc", "device", "data", "accept_memory_risk"}``; AWS: ``{"instance_type",
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

    @property
    def accepts_memory_risk(self) -> bool:
        """Whether configurations the planner calls ``at-risk`` run (:data:`ACCEPT_MEMORY_RISK`)."""
        source = self.base if self.mode == "aws" else self.target
        return source.get(ACCEPT_MEMORY_RISK) is True

    def definition(self) -> dict[str, Any]:
        """What fixes the sweep: mode, grid, base and the target (hardware / processes); not where it is
        submitted from, the local device's details or :data:`ACCEPT_MEMORY_RISK`."""
        target = {k: v for k, v in self.target.items() if k not in ("submitter", "device", ACCEPT_MEMORY_RISK)}
        base = {k: v for k, v in self.base.items() if not (self.mode == "aws" and k == ACCEPT_MEMORY_RISK)}
        return {"mode": self.mode, "grid": self.grid, "base": base, "target": target}

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
        atomic_write_text(self.state_file, json.dumps(self.to_json(), indent=2, default=str) + "\n")

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
            raise SweepError(
                f"{path}: sweep state version {data.get('version') if isinstance(data, dict) else None!r}, "
                f"this trainctl reads version {STATE_VERSION}"
            )
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


def sweep_directory(
    name_or_dir: str | os.PathLike[str], sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR
) -> Path:
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


__all__ = [
    "ACCEPT_MEMORY_RISK",
    "ACTIVE_STATUSES",
    "COMPLETED",
    "DEFAULT_SWEEPS_DIR",
    "FAILED",
    "NAME_RE",
    "PENDING",
    "REJECTED",
    "RUNNING",
    "SKIPPED",
    "STATE_FILE",
    "STOPPED",
    "SUBMIT_ERROR",
    "TERMINAL_STATUSES",
    "VALIDATED",
    "Sweep",
    "SweepConfig",
    "SweepError",
    "check_name",
    "load_sweep",
    "slug_part",
    "sweep_directory",
]
