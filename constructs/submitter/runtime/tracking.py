"""The request's experiment-tracking fields, ``mlflow`` and ``tensorboard``, and their ``CreateTrainingJob`` form.

Facts shared with the trainer (paths, prefixes, variables) live in :mod:`platform_spec.tracking`. Limits and
patterns are botocore's (``MlflowConfig``, ``TensorBoardOutputConfig``: :mod:`.sagemaker_rules`); on top of them:

* ``mlflow.resource_arn`` names a SageMaker managed MLflow tracking server of the deployment's partition (the
  execution role's), region and account: the execution role may log to those only
  (:data:`platform_spec.tracking.MLFLOW_LOGGING_ACTIONS`), so a foreign ARN, or an ``mlflow-app`` (a resource type
  the shipped Service Authorization Reference does not know), is refused here rather than failing in the job.
* ``tensorboard.s3_output_path`` lies under ``s3://<output bucket>/tensorboard/``, the one place the execution
  role may write TensorBoard output (default ``s3://<output bucket>/tensorboard/<job name>/``);
  ``tensorboard.local_path`` lies below ``/opt/ml/output/`` outside ``/opt/ml/output/data`` (which SageMaker
  packs into ``output.tar.gz``), default SageMaker's ``/opt/ml/output/tensorboard``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

from platform_spec.errors import FieldError
from platform_spec.tracking import (
    DEFAULT_TENSORBOARD_LOCAL_PATH,
    MLFLOW_EXPERIMENT_ENV,
    MLFLOW_RUN_NAME_ENV,
    MLFLOW_TRACKING_URI_ENV,
    TENSORBOARD_OUTPUT_PREFIX,
)

from . import sagemaker_rules as model
from .config import SubmitterConfig
from .fields import ABSENT_OBJECT, whole_string_pattern

MLFLOW_KEYS: Mapping[str, str] = {
    "resource_arn": "MlflowConfig.MlflowResourceArn",
    "experiment_name": "MlflowConfig.MlflowExperimentName",
    "run_name": "MlflowConfig.MlflowRunName",
}
"""The ``mlflow`` object's keys -> the ``CreateTrainingJob`` member each becomes."""
TENSORBOARD_KEYS: Mapping[str, str] = {
    "s3_output_path": "TensorBoardOutputConfig.S3OutputPath",
    "local_path": "TensorBoardOutputConfig.LocalPath",
}
"""The ``tensorboard`` object's keys -> the ``CreateTrainingJob`` member each becomes."""
TENSORBOARD_LOCAL_ROOT = "/opt/ml/output"
"""``tensorboard.local_path`` lies below it (SageMaker's output folder)..."""
TENSORBOARD_LOCAL_EXCLUDED = "/opt/ml/output/data"
"""... but not in this one, which SageMaker packs into ``output.tar.gz``."""

_MLFLOW_ARN = re.compile(r"arn:([a-z-]+):sagemaker:([a-z0-9-]+):([0-9]{12}):(mlflow-[a-zA-Z-]+)/(.+)", re.DOTALL)
_ARN_PARTITION = re.compile(r"arn:([a-z-]+):")


def _unknown_keys(field: str, raw: Mapping[str, Any], keys: Mapping[str, str]) -> None:
    for key in raw:
        if key not in keys:
            raise FieldError(f"{field}.{key}", raw[key], "no such key: one of " + ", ".join(keys))


def _member(field: str, key: str, raw: Mapping[str, Any], keys: Mapping[str, str]) -> str | None:
    """``raw[key]`` checked against its SageMaker rule (``None``: absent or null)."""
    value = raw.get(key)
    if value is None:
        return None
    rule = model.string_rule(keys[key])
    if not isinstance(value, str) or not rule.accepts(value) or any(ord(c) < 32 for c in value):
        raise FieldError(f"{field}.{key}", value, f"a string of {rule.expected()}, without control characters")
    return value


def parse_mlflow(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[dict[str, str] | None, dict[str, str]]:
    """The ``mlflow`` field: ``{"resource_arn", "experiment_name"?, "run_name"?}`` (canonical: the same, sorted).

    Raises:
        FieldError: an unknown key, a value SageMaker's ``MlflowConfig`` refuses, no ``resource_arn``, or an ARN
            that is not a tracking server / app of the deployment's partition, region and account.
    """
    if raw is ABSENT_OBJECT:
        return None, {}
    _unknown_keys("mlflow", raw, MLFLOW_KEYS)
    values = {key: _member("mlflow", key, raw, MLFLOW_KEYS) for key in MLFLOW_KEYS}
    arn = values["resource_arn"]
    if arn is None:
        raise FieldError("mlflow.resource_arn", None, f"the ARN of a SageMaker managed MLflow {_home(config)}")
    _check_home(arn, config)
    parsed = {key: value for key, value in values.items() if value is not None}
    return parsed, dict(sorted(parsed.items()))


def _home(config: SubmitterConfig) -> str:
    partition = _partition(config)
    return (
        f"tracking server of this deployment: arn:{partition}:sagemaker:{config.region or '<region>'}:"
        f"{config.account_id or '<account>'}:mlflow-tracking-server/<name>"
    )


def _partition(config: SubmitterConfig) -> str:
    found = _ARN_PARTITION.match(config.execution_role_arn)
    return found.group(1) if found else "aws"


def _check_home(arn: str, config: SubmitterConfig) -> None:
    found = _MLFLOW_ARN.fullmatch(arn)
    if found is None or found.group(4) != "mlflow-tracking-server":
        raise FieldError("mlflow.resource_arn", arn, f"the ARN of a SageMaker managed MLflow {_home(config)}")
    partition, region, account = found.group(1, 2, 3)
    wrong = [
        f"{what} {got} (not {want})"
        for what, got, want in (
            ("partition", partition, _partition(config)),
            ("region", region, config.region),
            ("account", account, config.account_id),
        )
        if want and got != want
    ]
    if wrong:
        raise FieldError(
            "mlflow.resource_arn", arn, f"an MLflow {_home(config)}; this one is in " + " and ".join(wrong)
        )


def parse_tensorboard(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[dict[str, str] | None, dict[str, str]]:
    """The ``tensorboard`` field: ``{"s3_output_path"?, "local_path"?}``; ``{}`` turns TensorBoard output on with
    the defaults. Value: ``local_path`` filled in, ``s3_output_path`` when sent (the default needs the job name:
    :func:`create_training_job_params`); canonical: the same, sorted.

    Raises:
        FieldError: an unknown key, a value SageMaker's ``TensorBoardOutputConfig`` refuses, an S3 path outside
            ``s3://<output bucket>/tensorboard/`` or a local path outside ``/opt/ml/output/`` (or in
            ``/opt/ml/output/data``).
    """
    if raw is ABSENT_OBJECT:
        return None, {}
    _unknown_keys("tensorboard", raw, TENSORBOARD_KEYS)
    parsed: dict[str, str] = {"local_path": _local_path(_member("tensorboard", "local_path", raw, TENSORBOARD_KEYS))}
    s3_path = _member("tensorboard", "s3_output_path", raw, TENSORBOARD_KEYS)
    if s3_path is not None:
        parsed["s3_output_path"] = _s3_output_path(s3_path, config)
    return parsed, dict(sorted(parsed.items()))


def tensorboard_root(config: SubmitterConfig) -> str:
    """``s3://<output bucket>/tensorboard/``: every job's TensorBoard output lies below it."""
    return f"s3://{config.output_bucket}/{TENSORBOARD_OUTPUT_PREFIX}"


def _s3_output_path(path: str, config: SubmitterConfig) -> str:
    root = tensorboard_root(config)
    rest = path[len(root) :] if path.startswith(root) else ""
    parts = rest.rstrip("/").split("/")
    if not rest or any(part in ("", ".", "..") for part in parts):
        raise FieldError(
            "tensorboard.s3_output_path",
            path,
            f"a folder below {root} (the output bucket's TensorBoard prefix, where the execution role may write; "
            f"no empty, . or .. segments), e.g. {root}<experiment>/; leave it out for {root}<job name>/",
        )
    return path if path.endswith("/") else path + "/"


def _local_path(path: str | None) -> str:
    if path is None:
        return DEFAULT_TENSORBOARD_LOCAL_PATH
    trimmed = path.rstrip("/") or "/"
    inside = trimmed.startswith(TENSORBOARD_LOCAL_ROOT + "/")
    excluded = trimmed == TENSORBOARD_LOCAL_EXCLUDED or trimmed.startswith(TENSORBOARD_LOCAL_EXCLUDED + "/")
    if not inside or excluded or posixpath.normpath(trimmed) != trimmed:
        raise FieldError(
            "tensorboard.local_path",
            path,
            f"a normalised folder below {TENSORBOARD_LOCAL_ROOT}/ other than {TENSORBOARD_LOCAL_EXCLUDED} (SageMaker "
            f"packs that into output.tar.gz), e.g. the default {DEFAULT_TENSORBOARD_LOCAL_PATH}",
        )
    return trimmed


def create_training_job_params(
    mlflow: Mapping[str, str] | None, tensorboard: Mapping[str, str] | None, job_name: str, config: SubmitterConfig
) -> dict[str, Any]:
    """``MlflowConfig``, ``TensorBoardOutputConfig`` and the job's ``Environment`` for them (empty: none asked).

    The environment gives the trainer's MLflow client its tracking URI (the ARN), experiment and run name (the
    request's, else the job name), :data:`platform_spec.tracking.MLFLOW_ENV`.
    """
    params: dict[str, Any] = {}
    if mlflow is not None:
        members = {MLFLOW_KEYS[key].rpartition(".")[2]: value for key, value in mlflow.items()}
        params["MlflowConfig"] = members
        environment = {
            MLFLOW_TRACKING_URI_ENV: mlflow["resource_arn"],
            MLFLOW_RUN_NAME_ENV: mlflow.get("run_name", job_name),
        }
        if "experiment_name" in mlflow:
            environment[MLFLOW_EXPERIMENT_ENV] = mlflow["experiment_name"]
        params["Environment"] = environment
    if tensorboard is not None:
        s3_path = tensorboard.get("s3_output_path") or f"{tensorboard_root(config)}{job_name}/"
        params["TensorBoardOutputConfig"] = {"S3OutputPath": s3_path, "LocalPath": tensorboard["local_path"]}
    return params


def mlflow_schema() -> dict[str, Any]:
    """JSON Schema of the ``mlflow`` object (botocore's limits)."""
    return _object_schema(MLFLOW_KEYS, required=("resource_arn",))


def tensorboard_schema() -> dict[str, Any]:
    """JSON Schema of the ``tensorboard`` object (botocore's limits)."""
    return _object_schema(TENSORBOARD_KEYS, required=())


def _object_schema(keys: Mapping[str, str], *, required: tuple[str, ...]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for key, member in keys.items():
        rule = model.string_rule(member)
        prop: dict[str, Any] = {"type": "string", "minLength": rule.min_length}
        if rule.max_length is not None:
            prop["maxLength"] = rule.max_length
        if rule.pattern is not None and rule.ecma_pattern() is not None:
            prop["pattern"] = whole_string_pattern(rule.pattern)
        properties[key] = prop
    schema: dict[str, Any] = {"additionalProperties": False, "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema
