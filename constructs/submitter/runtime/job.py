"""``CreateTrainingJob`` parameters from a validated request and a capacity choice.

What every job gets (each request field, a row of :data:`.request.FIELDS`, maps
here, read with ``request.value("<name>")``; ``auto_tune``, ``accept_memory_risk`` and ``dry_run`` act
before, :mod:`.service`):

* ``TrainingJobName``: ``job_name`` (:func:`job_name_for`).
* ``AlgorithmSpecification``: the trainer image, ``TrainingInputMode=FastFile`` (channels stream from S3
  behind the usual ``/opt/ml/input/data/<channel>`` paths), and ``MetricDefinitions`` =
  :data:`platform_spec.metric_lines.METRIC_DEFINITIONS` (the regexes the trainer's log lines are written for).
* ``ResourceConfig``: ``instance_type``, ``instance_count``, the volume, and ``TrainingPlanArn`` on a
  training plan (``capacity`` and ``training_plan_arn``, through the :class:`.capacity.CapacityChoice`).
* ``CheckpointConfig``: ``s3://<checkpoint bucket>/checkpoints/<job name>/`` (job-unique, ending in ``/``)
  synced with ``/opt/ml/checkpoints``; a run's segments share ``s3://<checkpoint
  bucket>/run-checkpoints/<run_id>/`` (:func:`checkpoint_uri`).
* ``StoppingCondition``: ``max_runtime_hours`` as ``MaxRuntimeInSeconds``, for a run's segment bounded by
  what its budget leaves (:func:`platform_spec.runs.segment_runtime`); ``MaxWaitTimeInSeconds``
  (``max_wait_hours``) only with spot, together with ``EnableManagedSpotTraining``, for a run with a
  ``deadline`` held within it (the wait counts the run too).
* ``Environment`` only for MLflow (``mlflow``: the client's tracking URI, experiment and run name,
  :func:`.tracking.create_training_job_params`, beside ``MlflowConfig``); the NCCL/EFA settings live in the
  trainer image (``training/Dockerfile``, which cites AWS's guidance for the installed aws-ofi-nccl plugin).
* ``TensorBoardOutputConfig`` (``tensorboard``): ``s3://<output bucket>/tensorboard/<job name>/`` unless the
  request names a folder there, synced from ``/opt/ml/output/tensorboard`` unless it names another.
* ``RetryStrategy`` (``max_retry_attempts``), ``HyperParameters`` as strings
  (:meth:`platform_spec.hyperparameters.Hyperparameters.to_strings`; ``model_config`` is merged into them
  when the request is parsed), ``InputDataConfig`` (``inputs``: an ``s3://`` channel as an ``S3DataSource``
  streamed with the job's ``FastFile``; an FSx channel as a read-only ``FileSystemDataSource`` with the
  channel's ``InputMode`` ``File``, the mode SageMaker mounts a file system in), and ``Tags``: platform tags,
  ``tags`` and the submitter's bookkeeping tags (their names' home is :mod:`.training_job`).
* ``VpcConfig`` in VPC mode: the platform's security groups and the subnets :func:`.network.job_subnets`
  chooses (the FSx file system's, or the training plan block's zone's, else all).
* ``EnableNetworkIsolation`` (``network_isolation``) and ``EnableInterContainerTrafficEncryption``
  (``inter_container_encryption``), sent when true.
* ``InfraCheckConfig`` ``{"EnableInfraCheck": true}`` (``infra_check``, its default filled in: on for a
  multi-node job, :func:`platform_spec.catalogue.default_infra_check`), sent when on, as the other switches
  are: off is SageMaker's default, and the SageMaker Python SDK (``trainctl.sdk``) cannot send a false one (its
  serializer drops false values).

SageMaker's limits, each read from botocore's model of ``CreateTrainingJob`` (:mod:`.sagemaker_rules`),
are checked naming the field: the number of tags where they are merged, the job-name rule, the number of
hyperparameters and the length of their names and values by :func:`check_limits`.
"""

from __future__ import annotations

import re
import secrets
from datetime import UTC, datetime
from typing import Any

from platform_spec.errors import FieldError
from platform_spec.metric_lines import METRIC_DEFINITIONS
from platform_spec.network import FSX_ACCESS_MODE, FSX_FILE_SYSTEM_TYPE, FSX_INPUT_MODE
from platform_spec.runs import TAG_RUN_ID, TAG_RUN_SEGMENT, SegmentRuntime, run_checkpoint_prefix

from . import sagemaker_rules as model
from . import settings
from .capacity import CapacityChoice
from .config import SubmitterConfig
from .errors import invalid
from .network import job_subnets
from .request import FsxChannel, SubmitRequest, derived_job_name, job_name_expected, token_digest
from .tracking import create_training_job_params
from .training_job import TAG_CAPACITY_TYPE, TAG_CLIENT_TOKEN_SHA256, TAG_REQUEST_SHA256, TAG_SUBMITTER

CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"


def job_name_for(request: SubmitRequest, now: datetime | None = None) -> str:
    """The training job name for ``request``: its ``job_name``; else, with a ``client_token``, the name derived
    from the token alone (:func:`.request.derived_job_name`, so a retry finds its first job by name); else
    ``<model>-<precision>-<UTC yyyymmdd-HHMMSS>-<4 random hex>``."""
    if request.job_name:
        return request.job_name
    if request.client_token:
        return derived_job_name(request.client_token)
    hp = request.hyperparameters
    stem = _slug(f"{hp.model}-{hp.precision}")[:32]
    now = now or datetime.now(UTC)
    return f"{stem}-{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def build_create_training_job(
    request: SubmitRequest,
    *,
    job_name: str,
    capacity: CapacityChoice,
    config: SubmitterConfig,
    fingerprint: str | None = None,
    runtime: SegmentRuntime | None = None,
) -> dict[str, Any]:
    """The keyword arguments of ``sagemaker.create_training_job`` (see module docstring).

    Args:
        fingerprint: the value of the :data:`.training_job.TAG_REQUEST_SHA256` tag; default
            ``request.fingerprint()`` (equal for an auto-tuned request: it hashes
            what the caller sent).
        runtime: a run's segment's runtime within its budget (``MaxRuntimeInSeconds``, and the deadline that
            bounds a spot wait); default: ``max_runtime_hours``.

    Raises:
        Refusal: ``InvalidRequest`` when a SageMaker limit is exceeded (:func:`check_limits`).
    """
    resource: dict[str, Any] = {
        "InstanceType": request.instance_type,
        "InstanceCount": request.instance_count,
        "VolumeSizeInGB": config.volume_size_gb,
    }
    seconds = request.max_runtime_seconds if runtime is None else runtime.seconds
    stopping: dict[str, int] = {"MaxRuntimeInSeconds": seconds}
    if capacity.type == "training-plan":
        resource["TrainingPlanArn"] = capacity.training_plan_arn
    if capacity.type == "spot":
        wait = request.spot_wait_seconds()
        if runtime is not None and runtime.until_deadline_s is not None:
            wait = min(wait, runtime.until_deadline_s)
        stopping["MaxWaitTimeInSeconds"] = max(seconds, wait)

    params: dict[str, Any] = {
        "TrainingJobName": job_name,
        "AlgorithmSpecification": {
            "TrainingImage": config.trainer_image_for(request.instance_type),
            "TrainingInputMode": "FastFile",
            "MetricDefinitions": [dict(d) for d in METRIC_DEFINITIONS],
            "EnableSageMakerMetricsTimeSeries": True,
        },
        "RoleArn": config.execution_role_arn,
        "HyperParameters": request.hyperparameters.to_strings(),
        "OutputDataConfig": {
            "S3OutputPath": f"s3://{config.output_bucket}/{settings.TRAINING_JOB_OUTPUT_PREFIX}",
            "KmsKeyId": config.output_kms_key_arn,
        },
        "ResourceConfig": resource,
        "StoppingCondition": stopping,
        "CheckpointConfig": {
            "S3Uri": checkpoint_uri(request, job_name, config),
            "LocalPath": CHECKPOINT_LOCAL_PATH,
        },
        "RetryStrategy": {"MaximumRetryAttempts": request.max_retry_attempts},
        "Tags": _tags(request, capacity, config, fingerprint or request.fingerprint()),
    }
    if request.inputs:
        params["InputDataConfig"] = [_channel(name, source) for name, source in sorted(request.inputs.items())]
    if config.vpc_mode:
        params["VpcConfig"] = {
            "SecurityGroupIds": list(config.vpc_security_group_ids),
            "Subnets": job_subnets(request, config, capacity.availability_zone),
        }
    params.update(create_training_job_params(request.value("mlflow"), request.value("tensorboard"), job_name, config))
    if request.value("network_isolation"):
        params["EnableNetworkIsolation"] = True
    if request.value("inter_container_encryption"):
        params["EnableInterContainerTrafficEncryption"] = True
    if capacity.type == "spot":
        params["EnableManagedSpotTraining"] = True
    if request.value("infra_check"):
        params["InfraCheckConfig"] = {"EnableInfraCheck": True}
    check_limits(params)
    return params


def _channel(name: str, source: str | FsxChannel) -> dict[str, Any]:
    """One ``InputDataConfig`` entry: an ``s3://`` prefix, or a directory of the platform's FSx for Lustre."""
    if isinstance(source, FsxChannel):
        data_source: dict[str, Any] = {
            "FileSystemDataSource": {
                "FileSystemId": source.file_system_id,
                "FileSystemAccessMode": FSX_ACCESS_MODE,
                "FileSystemType": FSX_FILE_SYSTEM_TYPE,
                "DirectoryPath": source.directory_path,
            }
        }
        return {"ChannelName": name, "DataSource": data_source, "InputMode": FSX_INPUT_MODE}
    s3 = {"S3DataType": "S3Prefix", "S3Uri": source, "S3DataDistributionType": "FullyReplicated"}
    return {"ChannelName": name, "DataSource": {"S3DataSource": s3}}


def checkpoint_uri(request: SubmitRequest, job_name: str, config: SubmitterConfig) -> str:
    """``CheckpointConfig.S3Uri``: ``s3://<checkpoint bucket>/checkpoints/<job name>/``
    (:data:`.settings.JOB_CHECKPOINT_PREFIX`), or for a run's
    segment the run's one prefix, ``s3://<checkpoint bucket>/run-checkpoints/<run_id>/``
    (:func:`platform_spec.runs.run_checkpoint_prefix`), so each segment resumes the last one's checkpoint."""
    run = request.run
    if run is not None:
        return f"s3://{config.checkpoint_bucket}/{run_checkpoint_prefix(run.run_id)}"
    return f"s3://{config.checkpoint_bucket}/{settings.JOB_CHECKPOINT_PREFIX}{job_name}/"


def check_limits(params: dict[str, Any]) -> None:
    """SageMaker's limits on ``CreateTrainingJob`` (from botocore's model), checked before the call.

    Raises:
        Refusal: ``InvalidRequest`` naming the field over the limit.
    """
    name = params.get("TrainingJobName", "")
    if not model.string_rule("TrainingJobName").accepts(name):
        raise invalid(FieldError("job_name", name, job_name_expected()))
    hps = params.get("HyperParameters", {})
    most = model.bounds("HyperParameters")[1]
    if most is not None and len(hps) > most:
        raise invalid(
            FieldError("hyperparameters", f"{len(hps)} entries", f"at most {most} (SageMaker's HyperParameters limit)")
        )
    key_rule, value_rule = model.string_rule("HyperParameters.key"), model.string_rule("HyperParameters.value")
    for key, value in hps.items():
        if not key_rule.accepts(key):
            raise invalid(FieldError(f"hyperparameters.{key}", key, f"a name of {key_rule.expected()}"))
        if not value_rule.accepts(value):
            raise invalid(
                FieldError(f"hyperparameters.{key}", f"{len(value)} characters", f"a value of {value_rule.expected()}")
            )


def _tags(
    request: SubmitRequest, capacity: CapacityChoice, config: SubmitterConfig, fingerprint: str
) -> list[dict[str, str]]:
    merged: dict[str, str] = dict(config.platform_tags)
    merged.update(request.tags)
    merged[TAG_REQUEST_SHA256] = fingerprint
    merged[TAG_CAPACITY_TYPE] = capacity.type
    merged[TAG_SUBMITTER] = settings.SERVICE_NAME  # the submitter, by its service name
    if request.client_token:
        merged[TAG_CLIENT_TOKEN_SHA256] = token_digest(request.client_token)
    if request.run is not None:
        merged[TAG_RUN_ID] = request.run.run_id
        merged[TAG_RUN_SEGMENT] = str(request.segment or 1)
    most = model.bounds("Tags")[1]
    if most is not None and len(merged) > most:
        own = len(merged) - len(request.tags)
        raise invalid(
            FieldError(
                "tags",
                f"{len(request.tags)} tags",
                f"at most {most - own} (SageMaker allows {most}; the platform sets {own})",
            )
        )
    return [{"Key": k, "Value": v} for k, v in merged.items()]


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9]+", "-", text).strip("-").lower()
    return slug or "job"
