"""``CreateTrainingJob`` parameters from a validated request and a capacity choice.

What every job gets:

* ``AlgorithmSpecification``: the trainer image, ``TrainingInputMode=FastFile``
  (channels stream from S3 behind the usual ``/opt/ml/input/data/<channel>``
  paths), and ``MetricDefinitions`` = :data:`training.metric_lines.METRIC_DEFINITIONS`
  (the same regexes the trainer's log lines are written for).
* ``ResourceConfig``: instance type and count, volume, and ``TrainingPlanArn``
  on a training plan.
* ``CheckpointConfig``: ``s3://<checkpoint bucket>/checkpoints/<job name>/``
  (job-unique, ending in ``/``) synced with ``/opt/ml/checkpoints``.
* ``StoppingCondition``: ``MaxRuntimeInSeconds``; ``MaxWaitTimeInSeconds`` only
  with spot, together with ``EnableManagedSpotTraining``.
* ``RetryStrategy``, ``Environment`` (EFA / NCCL settings), ``HyperParameters``
  as strings (:meth:`training.hyperparameters.Hyperparameters.to_strings`),
  ``Tags`` = platform tags + request tags + the submitter's bookkeeping tags.

SageMaker's limits are checked by :func:`check_limits` with errors naming the
field: at most 100 hyperparameters of at most 2500 characters each, at most 50
tags, and the job-name rule.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime, timezone
from typing import Any

from training.metric_lines import METRIC_DEFINITIONS

from .capacity import CapacityChoice
from .config import SubmitterConfig
from .errors import invalid
from .request import JOB_NAME_RE, SubmitRequest

MAX_HYPERPARAMETERS = 100
MAX_HYPERPARAMETER_VALUE_CHARS = 2500
MAX_TAGS = 50
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"

TAG_REQUEST_SHA256 = "platform:request-sha256"
"""SHA-256 of the normalized request that created the job (idempotency check)."""
TAG_CLIENT_TOKEN_SHA256 = "platform:client-token-sha256"
"""SHA-256 of the request's ``client_token`` (the token itself is not stored)."""
TAG_CAPACITY_TYPE = "platform:capacity-type"
TAG_SUBMITTER = "platform:submitted-by"

EFA_ENVIRONMENT: dict[str, str] = {
    "FI_PROVIDER": "efa",  # libfabric over EFA (OS-bypass RDMA, SRD)
    "FI_EFA_USE_DEVICE_RDMA": "1",  # GPUDirect RDMA on P4d/P5/P6
    "FI_EFA_FORK_SAFE": "1",  # data-loader workers fork after libfabric init
    "NCCL_DEBUG": "WARN",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",  # fail fast on a lost peer instead of hanging
}
"""``Environment`` for every job: NCCL over the aws-ofi-nccl plugin on EFA."""


def job_name_for(request: SubmitRequest, now: datetime | None = None) -> str:
    """The training job name for ``request``.

    * ``job_name`` when given;
    * else, with a ``client_token``: ``job-`` + 24 hex of SHA-256(token) -
      a function of the token alone, so a retry with the same token finds its
      first job by name even if the rest of the request changed (and is then
      refused as a ``Conflict`` rather than creating a second job);
    * else ``<model>-<precision>-<UTC yyyymmdd-HHMMSS>-<4 random hex>``.
    """
    if request.job_name:
        return request.job_name
    if request.client_token:
        return f"job-{token_digest(request.client_token)[:24]}"
    hp = request.hyperparameters
    stem = _slug(f"{hp.model}-{hp.precision}")[:32]
    now = now or datetime.now(timezone.utc)
    return f"{stem}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def build_create_training_job(
    request: SubmitRequest,
    *,
    job_name: str,
    capacity: CapacityChoice,
    config: SubmitterConfig,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``sagemaker.create_training_job`` (see module docstring).

    Args:
        fingerprint: the value of the ``platform:request-sha256`` tag; default
            ``request.fingerprint()`` (pass the caller's original request's
            fingerprint when ``request`` was auto-tuned).

    Raises:
        Refusal: ``InvalidRequest`` when a SageMaker limit is exceeded (:func:`check_limits`).
    """
    resource: dict[str, Any] = {
        "InstanceType": request.instance_type,
        "InstanceCount": request.instance_count,
        "VolumeSizeInGB": config.volume_size_gb,
    }
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": request.max_runtime_seconds}
    if capacity.type == "training-plan":
        resource["TrainingPlanArn"] = capacity.training_plan_arn
    if capacity.type == "spot":
        stopping["MaxWaitTimeInSeconds"] = request.spot_wait_seconds()

    params: dict[str, Any] = {
        "TrainingJobName": job_name,
        "AlgorithmSpecification": {
            "TrainingImage": config.trainer_image_uri,
            "TrainingInputMode": "FastFile",
            "MetricDefinitions": [dict(d) for d in METRIC_DEFINITIONS],
            "EnableSageMakerMetricsTimeSeries": True,
        },
        "RoleArn": config.execution_role_arn,
        "HyperParameters": request.hyperparameters.to_strings(),
        "OutputDataConfig": {"S3OutputPath": f"s3://{config.output_bucket}/training-jobs/"},
        "ResourceConfig": resource,
        "StoppingCondition": stopping,
        "CheckpointConfig": {
            "S3Uri": f"s3://{config.checkpoint_bucket}/checkpoints/{job_name}/",
            "LocalPath": CHECKPOINT_LOCAL_PATH,
        },
        "RetryStrategy": {"MaximumRetryAttempts": request.max_retry_attempts},
        "Environment": dict(EFA_ENVIRONMENT),
        "Tags": _tags(request, capacity, config, fingerprint or request.fingerprint()),
    }
    if request.inputs:
        params["InputDataConfig"] = [
            {
                "ChannelName": channel,
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": uri,
                        "S3DataDistributionType": "FullyReplicated",
                    }
                },
            }
            for channel, uri in sorted(request.inputs.items())
        ]
    if capacity.type == "spot":
        params["EnableManagedSpotTraining"] = True
    check_limits(params)
    return params


def check_limits(params: dict[str, Any]) -> None:
    """SageMaker's limits on ``CreateTrainingJob``, checked before the call.

    Raises:
        Refusal: ``InvalidRequest`` naming the field over the limit.
    """
    name = params.get("TrainingJobName", "")
    if not JOB_NAME_RE.match(name):
        raise invalid("job_name", name, "1-63 letters, digits and hyphens, starting and ending with a letter or digit")
    hps = params.get("HyperParameters", {})
    if len(hps) > MAX_HYPERPARAMETERS:
        raise invalid("hyperparameters", f"{len(hps)} entries", f"at most {MAX_HYPERPARAMETERS} (SageMaker's limit)")
    for key, value in hps.items():
        if len(value) > MAX_HYPERPARAMETER_VALUE_CHARS:
            raise invalid(
                f"hyperparameters.{key}", f"{len(value)} characters", f"at most {MAX_HYPERPARAMETER_VALUE_CHARS} characters"
            )
    tags = params.get("Tags", [])
    if len(tags) > MAX_TAGS:
        raise invalid("tags", f"{len(tags)} tags in all", f"at most {MAX_TAGS} (SageMaker's limit)")


def _tags(
    request: SubmitRequest, capacity: CapacityChoice, config: SubmitterConfig, fingerprint: str
) -> list[dict[str, str]]:
    merged: dict[str, str] = dict(config.platform_tags)
    merged.update(request.tags)
    merged[TAG_REQUEST_SHA256] = fingerprint
    merged[TAG_CAPACITY_TYPE] = capacity.type
    merged[TAG_SUBMITTER] = "job-submitter"
    if request.client_token:
        merged[TAG_CLIENT_TOKEN_SHA256] = token_digest(request.client_token)
    if len(merged) > MAX_TAGS:
        own = len(merged) - len(request.tags)
        raise invalid(
            "tags", f"{len(request.tags)} tags", f"at most {MAX_TAGS - own} (SageMaker allows {MAX_TAGS}; the platform sets {own})"
        )
    return [{"Key": k, "Value": v} for k, v in merged.items()]


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower()
    return slug or "job"
