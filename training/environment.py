"""The SageMaker training-container contract: paths, config files, failure reason.

Pure Python (no torch) so the entry point can validate everything before it
launches a single worker.

SageMaker lays out ``/opt/ml`` (``SAGEMAKER_BASE_DIR`` overrides the root, so
the same code runs locally on a directory laid out the same way)::

    <base>/input/config/hyperparameters.json   every value a string; older SDKs JSON-quote them
    <base>/input/config/resourceconfig.json    {"current_host": "algo-1", "hosts": ["algo-1", ...],
                                               "network_interface_name": "eth0", ...}
    <base>/input/config/inputdataconfig.json   {"train": {"TrainingInputMode": "File", ...}, ...}
    <base>/input/data/<channel>/               channel contents (File mode)
    <base>/checkpoints/                        synced to CheckpointConfig.S3Uri by SageMaker
    <base>/model/                              tarred to OutputDataConfig.S3OutputPath/model.tar.gz
    <base>/output/failure                      first 1024 characters become the job's FailureReason
    <base>/output/data/                        tarred to .../output.tar.gz

Note: ``/opt/ml/checkpoints`` is SageMaker's default ``CheckpointConfig.LocalPath``;
the checkpoint folder is ``<base>/checkpoints`` here too.

The base directory is made absolute once, where :class:`SageMakerPaths` is
built: the entry point passes that absolute path to its workers (flag and
``SAGEMAKER_BASE_DIR``), so a relative ``SAGEMAKER_BASE_DIR`` names the same
folder for validation, workers and the failure file whatever their working
directory.

File fields and the container's files: "How Amazon SageMaker AI Provides
Training Information",
https://docs.aws.amazon.com/sagemaker/latest/dg/your-algorithms-training-algo-running-container.html
(``resourceconfig.json``: ``current_host``, ``current_instance_type``,
``current_group_name``, ``hosts``, ``instance_groups`` and
``network_interface_name``, "the name of the network interface that is exposed
to your container").
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platform_spec.capacity import (
    CAPACITY_BLOCK_ENDED_REASON,
    CAPACITY_BLOCK_ENV,
    CAPACITY_BLOCK_RECLAIM_S,
    STOP_MARGIN_S,
)
from platform_spec.catalogue import INSTANCES
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import (
    GUIDE_DEFAULT_REQUEST,
    INIT_CHANNEL,
    VALIDATION_CHANNEL,
    HyperparameterError,
    Hyperparameters,
    coerce,
    from_environment,
    model_shape,
    normalise_name,
    parse,
)
from platform_spec.models import shape_from_hf_config, shape_hyperparameters
from platform_spec.tracking import TENSORBOARD_CONFIG_FILE

DEFAULT_BASE_DIR = "/opt/ml"
TRAIN_CHANNEL = "train"
FAILURE_REASON_LIMIT = 1024
"""SageMaker keeps the first 1024 characters of ``/opt/ml/output/failure`` as FailureReason."""


GUIDE_VARIABLES: dict[str, str] = {name.upper(): name for name in GUIDE_DEFAULT_REQUEST}
"""The published guide's ``train.sh`` variables (``MODEL``, ``PRECISION``, ``NUM_LAYERS``,
``BATCH_SIZE``, ``SEQ_LENGTH``) -> the hyperparameter each sets."""

SOCKET_INTERFACE_VARIABLES: tuple[str, ...] = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")
"""The interface NCCL bootstraps over (its own default excludes only ``lo`` and ``docker*``)
and the one the gloo group of stop votes and checkpoints uses (gloo's default: the
interface of the host name's address). Both are set from ``network_interface_name``."""


class ConfigError(ValueError):
    """A SageMaker config file or channel is missing or malformed (names the file or channel)."""


class CapacityBlockEnded(ConfigError):
    """The training plan's capacity block leaves no time to train a step and save it."""


class GPUUnavailable(ConfigError):
    """The instance type has GPUs but this container cannot use them (it would train on the CPU)."""


@dataclass(frozen=True)
class SageMakerPaths:
    """Every path of the container contract, under one base directory."""

    base_dir: Path
    """Absolute (a relative path given is resolved against the working directory, once, here)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_dir", Path(self.base_dir).resolve())

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> SageMakerPaths:
        """``SAGEMAKER_BASE_DIR`` (default ``/opt/ml``), made absolute."""
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

    @property
    def tensorboard_config_file(self) -> Path:
        """Where SageMaker names a job's ``TensorBoardOutputConfig.LocalPath`` (:mod:`platform_spec.tracking`)."""
        return self.config_dir / TENSORBOARD_CONFIG_FILE

    def channel_dir(self, channel: str) -> Path:
        return self.base_dir / "input" / "data" / channel

    @property
    def train_dir(self) -> Path:
        return self.channel_dir(TRAIN_CHANNEL)

    @property
    def validation_dir(self) -> Path:
        return self.channel_dir(VALIDATION_CHANNEL)

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
    """``resourceconfig.json``: this host, every host of the job in SageMaker's order, the
    network interface SageMaker exposes to the container, and this host's instance type
    (``current_instance_type``, e.g. ``ml.p5.48xlarge``); None when the file names none."""

    current_host: str
    hosts: tuple[str, ...]
    network_interface_name: str | None = None
    current_instance_type: str | None = None

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
        ConfigError: malformed file, ``current_host`` not among ``hosts``, or a
            ``network_interface_name`` that is not a non-empty string.
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
    interface = data.get("network_interface_name")
    if interface is not None and (not isinstance(interface, str) or not interface.strip()):
        raise ConfigError(
            f"{path}: 'network_interface_name' must be an interface name such as 'eth0', got {interface!r}"
        )
    instance_type = data.get("current_instance_type")
    if instance_type is not None and (not isinstance(instance_type, str) or not instance_type.strip()):
        raise ConfigError(
            f"{path}: 'current_instance_type' must be an instance type such as 'ml.p5.48xlarge', got {instance_type!r}"
        )
    return ResourceConfig(
        current,
        tuple(hosts),
        interface.strip() if interface else None,
        instance_type.strip() if instance_type else None,
    )


def expected_gpus(resource: ResourceConfig) -> int | None:
    """GPUs of this host's instance type (``current_instance_type`` in :data:`platform_spec.catalogue.INSTANCES`),
    or None when the file names no type or the catalogue does not know it."""
    spec = INSTANCES.get((resource.current_instance_type or "").strip().lower())
    return None if spec is None else spec.gpus_per_instance


def gpus_missing_reason(instance_type: str, expected: int, seen: str, detail: str = "") -> str:
    """The failure reason of a GPU instance whose GPUs this process cannot use (it would train on the CPU)."""
    return (
        f"resourceconfig.json says this host is {instance_type} with {expected} NVIDIA GPU"
        f"{'s' if expected != 1 else ''}, but {seen}{f' ({detail})' if detail else ''}; refusing to train on the CPU. "
        "The image's NVIDIA start-up script (/opt/nvidia/nvidia_entrypoint.sh, which enables CUDA forward "
        "compatibility on older drivers) must run first: keep it in the image's ENTRYPOINT, and check the "
        "host's driver against the image's CUDA version"
    )


def check_gpus_visible(resource: ResourceConfig, gpus: int) -> None:
    """Refuse, before launching anything, a GPU instance type on which no GPU is visible.

    Args:
        gpus: GPUs this host shows (the entry point's ``nvidia-smi -L`` count).

    Raises:
        GPUUnavailable: ``current_instance_type`` has GPUs (:func:`expected_gpus`) and ``gpus`` is 0.
    """
    expected = expected_gpus(resource)
    if expected and gpus == 0:
        raise GPUUnavailable(
            gpus_missing_reason(resource.current_instance_type or "", expected, "nvidia-smi lists no GPU")
        )


def host_interfaces() -> list[str] | None:
    """Network interface names of this host (:func:`socket.if_nameindex`), or None where unknown."""
    try:
        return [name for _, name in socket.if_nameindex()]
    except (AttributeError, OSError):
        return None


def socket_interface_environment(
    resource: ResourceConfig, environ: Mapping[str, str], interfaces: list[str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME`` for the workers, and where each came from.

    Each variable the job's environment sets is kept (the job wins); the others are
    set to ``resourceconfig.json``'s ``network_interface_name`` (SageMaker's own
    training toolkit sets ``NCCL_SOCKET_IFNAME`` from it the same way), or left
    unset when the file names no interface.

    Args:
        interfaces: this host's interface names (default :func:`host_interfaces`).

    Returns:
        ``(variables to set, one note per variable saying which value applies and why)``.

    Raises:
        ConfigError: the declared interface, needed for a variable the job leaves
            unset, does not exist on this host (names it and the host's interfaces).
    """
    updates: dict[str, str] = {}
    notes: list[str] = []
    declared = resource.network_interface_name
    for name in SOCKET_INTERFACE_VARIABLES:
        value = environ.get(name, "").strip()
        if value:
            notes.append(f"{name}={value} (the job's environment)")
        elif declared:
            updates[name] = declared
            notes.append(f"{name}={declared} (resourceconfig.json network_interface_name)")
        else:
            notes.append(
                f"{name} unset (resourceconfig.json names no network_interface_name; the library picks an interface)"
            )
    if updates:
        known = host_interfaces() if interfaces is None else interfaces
        if known is not None and declared not in known:
            raise ConfigError(
                f"resourceconfig.json: network_interface_name {declared!r} is not an interface of this host "
                f"(it has {', '.join(known)}); set {' and '.join(updates)} in the job's environment to choose one"
            )
    return updates, notes


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


def _one_spelling_each(entries: list[tuple[str, str, Any]], where: str) -> dict[str, tuple[str, Any]]:
    """``{name: (key as written, value)}`` from ``(key as written, name as written, value)`` entries.

    Raises:
        ConfigError: two spellings of one hyperparameter with different values.
    """
    out: dict[str, tuple[str, Any]] = {}
    for key, written, value in entries:
        name = normalise_name(written)
        if name in out:
            first_key, first = out[name]
            try:
                same = coerce(name, first) == coerce(name, value)
            except HyperparameterError:
                same = first == value
            if not same:
                raise ConfigError(
                    f"{where}: {first_key!r} and {key!r} both set hyperparameter {name!r}, to {first!r} and {value!r}; "
                    "keep one of them"
                )
            continue
        out[name] = (key, value)
    return out


def raw_hyperparameters(
    paths: SageMakerPaths, environ: Mapping[str, str], *, guide_variables: bool = False
) -> dict[str, Any]:
    """Raw values by hyperparameter name: ``hyperparameters.json`` overlaid with ``SM_HP_*`` variables.

    Keys may use any spelling :func:`platform_spec.hyperparameters.normalise_name`
    accepts (``num_layers``, ``num-layers``, ``NUM_LAYERS``; ``SM_HP_NUM_LAYERS``,
    ``SM_HP_num_layers``); the result is keyed by the snake_case name. The
    ``SM_HP_*`` variables win where both name a hyperparameter: they are what
    the guide's ``train.sh`` interface and ``docker run -e`` set, while
    SageMaker itself only writes the file.

    Args:
        guide_variables: also apply the published guide's ``train.sh`` interface
            (``PRECISION``, ``NUM_LAYERS``, ``BATCH_SIZE``, ``SEQ_LENGTH``,
            ``MODEL``; :data:`GUIDE_VARIABLES`). Order, strongest first:
            ``SM_HP_*``, the guide's variables, the file, then the guide's
            defaults (:data:`platform_spec.hyperparameters.GUIDE_DEFAULT_REQUEST`:
            ``num_layers=10`` applies only when no spelling sets ``num_layers``).

    Raises:
        ConfigError: the file is not a JSON object, or two spellings of one
            hyperparameter (in the file, or among ``SM_HP_*``) disagree.
    """
    path = paths.hyperparameters_file
    from_file: dict[str, tuple[str, Any]] = {}
    if path.exists():
        data = _read_json(path)
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a JSON object of name -> value")
        from_file = _one_spelling_each([(k, k, v) for k, v in data.items()], str(path))
    env_entries = [
        (key, name, value) for key, raw in environ.items() for name, value in from_environment({key: raw}).items()
    ]
    from_env = _one_spelling_each(env_entries, "SM_HP_* environment variables")
    values = {name: value for name, (_, value) in from_file.items()}
    if guide_variables:
        for variable, name in GUIDE_VARIABLES.items():
            value = environ.get(variable, "").strip()
            if value:
                values[name] = value
        for name, default in GUIDE_DEFAULT_REQUEST.items():
            values.setdefault(name, default)
    values.update({name: value for name, (_, value) in from_env.items()})
    return values


def load_hyperparameters(
    paths: SageMakerPaths, environ: Mapping[str, str], *, guide_variables: bool = False
) -> Hyperparameters:
    """Parse and validate the job's hyperparameters (file + ``SM_HP_*``; see :func:`raw_hyperparameters`).

    Raises:
        HyperparameterError: the first invalid value (names the field and what is allowed).
        ConfigError: malformed file, or two spellings of one hyperparameter that disagree.
    """
    return parse(raw_hyperparameters(paths, environ, guide_variables=guide_variables))


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


def check_validation_channel(paths: SageMakerPaths, hp: Hyperparameters) -> None:
    """With ``eval_interval`` set, the ``validation`` channel must hold data unless ``synthetic_data`` is set
    (synthetic validation tokens then).

    Raises:
        ConfigError: names the channel, the directory looked at and the hyperparameter.
    """
    if hp.eval_interval == 0 or hp.synthetic_data:
        return
    folder = paths.validation_dir
    if not folder.is_dir() or not any(folder.rglob("*")):
        raise ConfigError(
            f"missing data channel {VALIDATION_CHANNEL!r}: {folder} is empty or absent, and eval_interval="
            f"{hp.eval_interval} evaluates on it; attach a {VALIDATION_CHANNEL!r} channel with token shards of the "
            "train channel's tokenizer (trainctl prepare-data) or set eval_interval=0"
        )


def init_config(paths: SageMakerPaths) -> Path | None:
    """The ``config.json`` of the Hugging Face model folder the run starts from (the ``init_from`` channel),
    or None when the channel is absent or empty."""
    folder = paths.channel_dir(INIT_CHANNEL)
    if not folder.is_dir() or not any(folder.iterdir()):
        return None
    return folder / "config.json"


def check_init_channel(paths: SageMakerPaths, hp: Hyperparameters) -> None:
    """The ``init_from`` channel's ``config.json``, when the channel is there, describes the run's model: each
    shape hyperparameter it gives (:func:`platform_spec.models.shape_hyperparameters`) equals the run's
    (:func:`platform_spec.hyperparameters.model_shape`). Its tensors are checked by the workers before any
    weight is read (:func:`training.hf_weights.check_folder`).

    Raises:
        ConfigError: no readable ``config.json``, a key the family refuses, or a shape that differs (names the
            file, the hyperparameter and both values).
    """
    config = init_config(paths)
    if config is None:
        return
    try:
        given = shape_hyperparameters(shape_from_hf_config(json.loads(config.read_text(encoding="utf-8"))))
    except RecursionError:
        raise ConfigError(
            f"channel {INIT_CHANNEL!r}: {config}: expected a Hugging Face config.json (nested too deeply to read)"
        ) from None
    except (OSError, ValueError) as exc:
        if isinstance(exc, FieldError):
            raise ConfigError(f"channel {INIT_CHANNEL!r}: {config}: {exc}") from None
        raise ConfigError(f"channel {INIT_CHANNEL!r}: {config}: expected a Hugging Face config.json ({exc})") from None
    run = shape_hyperparameters(model_shape(hp))
    for key, value in given.items():
        if run.get(key) != value:
            raise ConfigError(
                f"channel {INIT_CHANNEL!r}: {config} gives {key}={value!r}, the run's model has {key}="
                f"{run.get(key)!r}; the weights fit only their own config: take the shape from that file "
                "(trainctl train --init-from sets it; a request's model_config must agree with it)"
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


def _utc(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def capacity_block_ended_reason(deadline: float, now: float, margin_s: float) -> str:
    """The failure reason of a start that has less than ``margin_s`` seconds before ``deadline``."""
    left = deadline - now
    when = f"{-left:.0f} s ago" if left <= 0 else f"in {left:.0f} s"
    return (
        f"{CAPACITY_BLOCK_ENDED_REASON}: its instances are reclaimed from "
        f"{_utc(deadline)} ({CAPACITY_BLOCK_ENV} {_utc(deadline + CAPACITY_BLOCK_RECLAIM_S)} less "
        f"{CAPACITY_BLOCK_RECLAIM_S // 60} min), {when}, and a step plus its checkpoint needs at least "
        f"{margin_s:.0f} s; nothing was trained. Checkpoints are kept: a job on a later capacity block resumes from the newest"
    )


def check_capacity_block(
    environ: Mapping[str, str], *, now: float | None = None, margin_s: float = STOP_MARGIN_S
) -> None:
    """Refuse to start when the capacity block ends within ``margin_s`` seconds (default :data:`STOP_MARGIN_S`).

    Raises:
        CapacityBlockEnded: ``now + margin_s`` is at or past :func:`capacity_block_deadline`.
        ConfigError: the variable is set but not a number.
    """
    deadline = capacity_block_deadline(environ)
    now = time.time() if now is None else now
    if deadline is not None and now + margin_s >= deadline:
        raise CapacityBlockEnded(capacity_block_ended_reason(deadline, now, margin_s))


__all__ = [
    "CAPACITY_BLOCK_ENV",
    "CAPACITY_BLOCK_RECLAIM_S",
    "GUIDE_VARIABLES",
    "SOCKET_INTERFACE_VARIABLES",
    "STOP_MARGIN_S",
    "CapacityBlockEnded",
    "ConfigError",
    "GPUUnavailable",
    "HyperparameterError",
    "ResourceConfig",
    "SageMakerPaths",
    "capacity_block_deadline",
    "capacity_block_ended_reason",
    "check_capacity_block",
    "check_gpus_visible",
    "check_train_channel",
    "check_validation_channel",
    "expected_gpus",
    "gpus_missing_reason",
    "host_interfaces",
    "load_hyperparameters",
    "one_line",
    "raw_hyperparameters",
    "read_input_data_config",
    "read_resource_config",
    "socket_interface_environment",
    "write_failure",
]
