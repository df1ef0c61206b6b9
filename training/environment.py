"""The SageMaker training-container contract: paths, config files, failure reason.

Pure Python (no torch) so the entry point can validate everything before it
launches a single worker.

SageMaker lays out ``/opt/ml`` (``SAGEMAKER_BASE_DIR`` overrides the root, so
the same code runs locally on a directory laid out the same way)::

    <base>/input/config/hyperparameters.json   every value a string; older SDKs JSON-quote them
    <base>/input/config/resourceconfig.json    {"current_host": "algo-1", "hosts": ["algo-1", ...]}
    <base>/input/config/inputdataconfig.json   {"train": {"TrainingInputMode": "File", ...}, ...}
    <base>/input/data/<channel>/               channel contents (File mode)
    <base>/checkpoints/                        synced to CheckpointConfig.S3Uri by SageMaker
    <base>/model/                              tarred to OutputDataConfig.S3OutputPath/model.tar.gz
    <base>/output/failure                      first 1024 characters become the job's FailureReason
    <base>/output/data/                        tarred to .../output.tar.gz

Note: ``/opt/ml/checkpoints`` is SageMaker's default ``CheckpointConfig.LocalPath``;
the checkpoint folder is ``<base>/checkpoints`` here too.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.hyperparameters import HyperparameterError, from_environment, parse
from training.hyperparameters import Hyperparameters

DEFAULT_BASE_DIR = "/opt/ml"
TRAIN_CHANNEL = "train"
FAILURE_REASON_LIMIT = 1024
"""SageMaker keeps the first 1024 characters of ``/opt/ml/output/failure`` as FailureReason."""

CAPACITY_BLOCK_ENV = "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
"""Milliseconds since the epoch at which the training plan's capacity block ends."""

CAPACITY_BLOCK_RECLAIM_S = 30 * 60
"""Instances of a training plan are reclaimed from 30 minutes before the reservation ends."""


class ConfigError(ValueError):
    """A SageMaker config file or channel is missing or malformed (names the file or channel)."""


@dataclass(frozen=True)
class SageMakerPaths:
    """Every path of the container contract, under one base directory."""

    base_dir: Path

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> SageMakerPaths:
        """``SAGEMAKER_BASE_DIR`` (default ``/opt/ml``)."""
        env = os.environ if environ is None else environ
        return cls(Path(env.get("SAGEMAKER_BASE_DIR") or DEFAULT_BASE_DIR))

    @property
    def config_dir(self) -> Path:
        return self.base_dir / "input" / "config"

    @property
    def hyperparameters_file(self) -> Path:
        return self.config_dir / "hyperparameters.json"

    @property
    def resource_config_file(self) -> Path:
        return self.config_dir / "resourceconfig.json"

    @property
    def input_data_config_file(self) -> Path:
        return self.config_dir / "inputdataconfig.json"

    def channel_dir(self, channel: str) -> Path:
        return self.base_dir / "input" / "data" / channel

    @property
    def train_dir(self) -> Path:
        return self.channel_dir(TRAIN_CHANNEL)

    @property
    def checkpoint_dir(self) -> Path:
        return self.base_dir / "checkpoints"

    @property
    def model_dir(self) -> Path:
        return self.base_dir / "model"

    @property
    def output_dir(self) -> Path:
        return self.base_dir / "output"

    @property
    def output_data_dir(self) -> Path:
        return self.output_dir / "data"

    @property
    def failure_file(self) -> Path:
        return self.output_dir / "failure"

    @property
    def metrics_file(self) -> Path:
        """Full-precision metrics, one JSON object per logged step (rank 0; appended across restarts)."""
        return self.output_data_dir / "metrics.jsonl"


@dataclass(frozen=True)
class ResourceConfig:
    """``resourceconfig.json``: this host and every host of the job, in SageMaker's order."""

    current_host: str
    hosts: tuple[str, ...]

    @property
    def node_rank(self) -> int:
        return self.hosts.index(self.current_host)

    @property
    def num_nodes(self) -> int:
        return len(self.hosts)

    @property
    def master_addr(self) -> str:
        return self.hosts[0]


def _read_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None


def read_resource_config(paths: SageMakerPaths) -> ResourceConfig:
    """This host and the job's hosts; a single local host ``algo-1`` when the file is absent.

    Raises:
        ConfigError: malformed file, or ``current_host`` not among ``hosts``.
    """
    path = paths.resource_config_file
    if not path.exists():
        return ResourceConfig("algo-1", ("algo-1",))
    data = _read_json(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object with current_host and hosts")
    hosts = data.get("hosts")
    current = data.get("current_host")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise ConfigError(f"{path}: 'hosts' must be a non-empty list of host names, got {hosts!r}")
    if not isinstance(current, str) or current not in hosts:
        raise ConfigError(f"{path}: 'current_host' {current!r} is not one of hosts {hosts}")
    return ResourceConfig(current, tuple(hosts))


def read_input_data_config(paths: SageMakerPaths) -> dict[str, dict[str, Any]]:
    """``inputdataconfig.json`` as ``{channel: settings}`` ({} when absent).

    Raises:
        ConfigError: malformed file.
    """
    path = paths.input_data_config_file
    if not path.exists():
        return {}
    data = _read_json(path)
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(f"{path}: expected a JSON object of channel name -> settings")
    return data


def raw_hyperparameters(paths: SageMakerPaths, environ: Mapping[str, str]) -> dict[str, Any]:
    """Raw values: ``hyperparameters.json`` overlaid with ``SM_HP_*`` variables.

    The ``SM_HP_*`` variables win where both name a hyperparameter: they are
    what the guide's ``train.sh`` interface and ``docker run -e`` set, while
    SageMaker itself only writes the file.

    Raises:
        ConfigError: the file is not a JSON object.
    """
    values: dict[str, Any] = {}
    path = paths.hyperparameters_file
    if path.exists():
        data = _read_json(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object of name -> value")
        values.update(data)
    values.update(from_environment(environ))
    return values


def load_hyperparameters(paths: SageMakerPaths, environ: Mapping[str, str]) -> Hyperparameters:
    """Parse and validate the job's hyperparameters (file + ``SM_HP_*``).

    Raises:
        HyperparameterError: the first invalid value (names the field and what is allowed).
        ConfigError: malformed file.
    """
    return parse(raw_hyperparameters(paths, environ))


def check_train_channel(paths: SageMakerPaths, hp: Hyperparameters) -> None:
    """The ``train`` channel must hold data unless ``synthetic_data`` is set.

    Raises:
        ConfigError: names the channel and the directory looked at.
    """
    if hp.synthetic_data:
        return
    train = paths.train_dir
    if not train.is_dir() or not any(train.rglob("*")):
        raise ConfigError(
            f"missing data channel 'train': {train} is empty or absent; attach a 'train' channel with "
            "token shards (trainctl prepare-data) or set synthetic_data=true"
        )


def one_line(message: str, limit: int = FAILURE_REASON_LIMIT) -> str:
    """Collapse whitespace to single spaces and cut to ``limit`` characters."""
    text = re.sub(r"\s+", " ", message).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def write_failure(paths: SageMakerPaths, message: str, *, overwrite: bool = False) -> bool:
    """Write the one-line failure reason; the first writer wins unless ``overwrite``.

    Returns:
        True when this call wrote the file.
    """
    path = paths.failure_file
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "w" if overwrite else "x"
    try:
        with open(path, mode, encoding="utf-8") as fh:
            fh.write(one_line(message) + "\n")
    except FileExistsError:
        return False
    return True


def capacity_block_deadline(environ: Mapping[str, str]) -> float | None:
    """Seconds since the epoch by which the job must have stopped, or None.

    ``SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP`` is in
    milliseconds; instances are reclaimed from 30 minutes before it, so the
    deadline is ``expiration - 30 min`` (the trainer subtracts its own margin
    for the checkpoint on top).

    Raises:
        ConfigError: the variable is set but not a number.
    """
    raw = environ.get(CAPACITY_BLOCK_ENV, "").strip()
    if not raw:
        return None
    try:
        expiration_ms = float(raw)
    except ValueError:
        raise ConfigError(f"{CAPACITY_BLOCK_ENV}={raw!r} is not a timestamp in milliseconds") from None
    return expiration_ms / 1000.0 - CAPACITY_BLOCK_RECLAIM_S


__all__ = [
    "CAPACITY_BLOCK_ENV",
    "CAPACITY_BLOCK_RECLAIM_S",
    "ConfigError",
    "HyperparameterError",
    "ResourceConfig",
    "SageMakerPaths",
    "capacity_block_deadline",
    "check_train_channel",
    "load_hyperparameters",
    "one_line",
    "raw_hyperparameters",
    "read_input_data_config",
    "read_resource_config",
    "write_failure",
]
