"""Names shared by the submitter's runtime and the construct that deploys it.

The construct sets the function's environment with :func:`function_environment`
(the emulator, ``trainctl local-aws``, calls the same function with its own
resources) and builds its ``metric_*`` methods from the metric names below, so
no side hand-types them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from platform_spec.capacity import TRAINING_PLAN_ARNS_PARAMETER_ENV

# Environment variables the function reads (set through function_environment()).
ENV_TRAINER_IMAGE_URIS = "TRAINER_IMAGE_URIS"
"""A JSON object of the trainer image of each CPU architecture built (``{"amd64": <ECR URI>, "arm64": ...}``, OCI
names, :data:`platform_spec.catalogue.TRAINER_IMAGE_ARCHITECTURES`): a job runs the image of its instance's host
architecture, and an instance type whose architecture has none is refused."""
ENV_EXECUTION_ROLE_ARN = "EXECUTION_ROLE_ARN"
ENV_DATA_BUCKET = "DATA_BUCKET"
ENV_CHECKPOINT_BUCKET = "CHECKPOINT_BUCKET"
ENV_OUTPUT_BUCKET = "OUTPUT_BUCKET"
ENV_OUTPUT_KMS_KEY_ARN = "OUTPUT_KMS_KEY_ARN"  # the platform's key: every job's OutputDataConfig.KmsKeyId
ENV_TRAINING_PLAN_ARNS_PARAMETER = TRAINING_PLAN_ARNS_PARAMETER_ENV  # SSM String parameter holding a JSON list of ARNs
ENV_DEFAULT_INSTANCE_TYPE = "DEFAULT_INSTANCE_TYPE"
ENV_ALLOWED_INSTANCE_TYPES = "ALLOWED_INSTANCE_TYPES"  # comma-separated
ENV_CAPACITY_FALLBACK = (
    "CAPACITY_FALLBACK"  # comma-separated order for capacity=auto, e.g. "training-plan,spot,on-demand"
)
ENV_ALLOWED_INPUT_PREFIXES = (
    "ALLOWED_INPUT_PREFIXES"  # comma-separated extra s3:// prefixes; the data bucket is always allowed
)
ENV_PLATFORM_TAGS = "PLATFORM_TAGS"  # JSON object of tags added to every job
ENV_VOLUME_SIZE_GB = "TRAINING_VOLUME_SIZE_GB"
ENV_CLIENT_TOKEN_RECORDS = "CLIENT_TOKEN_RECORDS_URI"  # s3://<output bucket>/<CLIENT_TOKEN_RECORDS_PREFIX>
ENV_VPC_SUBNETS = "VPC_SUBNETS"
"""VPC mode: a JSON list of ``{"subnet_id": ..., "availability_zone": ...}``, the private subnets jobs run in
(``VpcConfig.Subnets``; a job on a training plan runs in those of the plan's availability zone). Absent: jobs
get no ``VpcConfig`` (the platform without ``vpc``)."""
ENV_VPC_SECURITY_GROUP_IDS = "VPC_SECURITY_GROUP_IDS"
"""VPC mode: comma-separated security group IDs of every job (``VpcConfig.SecurityGroupIds``): the jobs' group,
which allows all traffic between its members (EFA) and nothing else inbound."""
ENV_FSX_LUSTRE = "FSX_LUSTRE"
"""With ``fsxLustre``: a JSON object ``{"file_system_id", "mount_name", "subnet_id", "availability_zone"}``, the
platform's FSx for Lustre file system, which requests may name as a channel (a job reading it runs in its subnet).
Absent: no file system, and a request naming one is refused."""

CLIENT_TOKEN_RECORDS_PREFIX = "submitter/client-tokens/"
"""Key prefix, in the output bucket, of the client-token records (runtime/ledger.py): the
construct grants the function this prefix only; the records never expire."""
CLIENT_TOKEN_RECORDS_SID = "ClientTokenRecordsSubmitterOnly"
"""Sid of the output bucket's statement that denies writing the client-token records to all but the submitter
(the construct's; a damaged record's error names it, as what an operator lifts to delete the record)."""
TRAINING_JOB_OUTPUT_PREFIX = "training-jobs/"
"""Key prefix, in the output bucket, of every job's ``OutputDataConfig.S3OutputPath`` (runtime/job.py):
SageMaker writes a job's artifacts under ``<prefix><job name>/``, and the execution role may write
the output bucket below this prefix only, never the client-token records."""
JOB_CHECKPOINT_PREFIX = "checkpoints/"
"""Key prefix, in the checkpoint bucket, of a plain job's ``CheckpointConfig.S3Uri``
(``<prefix><job name>/``, runtime/job.py); the construct grants reading below it. A run's segments
use :data:`platform_spec.runs.RUN_CHECKPOINT_PREFIX` instead (``run-checkpoints/<run_id>/``)."""
RUN_STORE_PREFIX = "submitter/runs/"
"""Key prefix, in the output bucket, of the run store (runtime/ledger.py): ``<prefix><run_id>/run.json``
(the run's request and budget), ``decisions/seg-NNN.json``, ``stop.json``, ``end.json`` (below ``gN/``
for the Nth claim of a released run id), :data:`RUN_WAITING_PREFIX` and :data:`RUN_ACTIVE_PREFIX`. The submitter and the
continuation function are granted this prefix; the execution role never."""
RUN_WAITING_PREFIX = f"{RUN_STORE_PREFIX}_waiting/"
"""Key prefix of the runs waiting for capacity, ``<prefix><run_id>.json`` (``_`` is no run id's first
character): with :data:`RUN_ACTIVE_PREFIX`, the only records ever deleted, by the continuation, which is
granted deleting there only."""
RUN_ACTIVE_PREFIX = f"{RUN_STORE_PREFIX}_active/"
"""Key prefix of the runs not known to have ended, ``<prefix><run_id>.json``: written with ``run.json``
(before segment 1 is created), removed by the continuation's tick once the run has ended. The tick
reconciles these runs (a segment that ended without a decision is decided), so its work follows the
runs in flight, not every run ever made."""
ENV_ACCOUNT_ID = "PLATFORM_ACCOUNT_ID"  # the deployment's account (Aws.ACCOUNT_ID): plans of other accounts are refused
ENV_REGION = "AWS_REGION"  # set by Lambda itself: plans of other regions are refused

FUNCTION_TIMEOUT_S = 60
"""The deployed function's default timeout, seconds (the construct's ``JobSubmitterProps.timeout``);
``trainctl submit --local`` gives the handler the same deadline."""

# CloudWatch custom metrics, emitted with EMF (aws-lambda-powertools Metrics).
METRICS_NAMESPACE = "TrainingPlatform"
SERVICE_NAME = "job-submitter"  # Powertools adds it as the `service` dimension
METRIC_SUBMISSIONS = "Submissions"  # count, dimensions: service, CapacityType
METRIC_REFUSALS = "Refusals"  # count, dimensions: service, ErrorCode
DIMENSION_CAPACITY_TYPE = "CapacityType"
DIMENSION_ERROR_CODE = "ErrorCode"

# The run continuation function (runtime/continuation.py): same namespace, its own `service` dimension.
CONTINUATION_SERVICE_NAME = "run-continuation"
METRIC_RUN_DECISIONS = "RunDecisions"  # count, dimensions: service, Decision (platform_spec.runs.DECISIONS)
METRIC_RUN_SEGMENTS_STARTED = "RunSegmentsStarted"  # count, dimension: service
METRIC_RUN_CAPACITY_WAIT_SECONDS = "RunCapacityWaitSeconds"  # seconds, dimension: service; every scheduled tick
METRIC_RUN_STEP_AGE_SECONDS = "RunStepAgeSeconds"
"""Seconds since the newest step of a run in training (runtime/stall.py), every scheduled tick: per run (dimensions
service, :data:`DIMENSION_RUN_ID`) and the oldest of them (dimension service; 0 when no run trains)."""
DIMENSION_DECISION = "Decision"
DIMENSION_RUN_ID = "RunId"
RUN_EVENT_SOURCE = "platform.training-runs"
"""``Source`` of the EventBridge event (default bus) published for every run decision."""
RUN_EVENT_DETAIL_TYPE = "Training Run Decision"
"""``DetailType`` of that event; its detail is the decision record (runtime/continuation.py)."""
RUN_DECISION_LOG_MESSAGE = "run decision"
"""The ``message`` of the continuation's one log line per decision (JSON, Powertools Logger), with the
fields :data:`RUN_DECISION_LOG_FIELDS`: what the dashboard's Logs Insights table of run decisions reads."""
RUN_DECISION_LOG_FIELDS = ("run_id", "segment", "decision", "reason", "newest_step", "next_training_job_name")
"""The fields of that log line, each the decision record's field of that name (runtime/continuation.py; one the
record lacks is left out of the line, and its table cell is empty): ``continuation.publish`` logs exactly
these, and the dashboard's run decisions table (observability/widgets.py) shows them, in this order."""

ERROR_CODES = (
    "InvalidRequest",
    "NoCapacity",
    "PredictedOutOfMemory",
    "QuotaExceeded",
    "Conflict",
    "NotFound",
    "ActionNotAllowed",
)
"""Refusal codes (``runtime/errors.py``). ``NotFound``: the job (or run) an action names does not exist or
was not made by this platform (the two are answered alike). ``ActionNotAllowed``: the request's ``action``
is not among the function's :data:`ENV_ALLOWED_ACTIONS`."""

ENV_ALLOWED_ACTIONS = "SUBMITTER_ALLOWED_ACTIONS"
"""Comma-separated actions the function answers (``runtime/actions.py``); absent: every action. Another
action is refused with ``ActionNotAllowed`` naming ``action`` and the allowed values."""


def function_environment(
    *,
    trainer_image_uris: Mapping[str, str],
    execution_role_arn: str,
    data_bucket: str,
    checkpoint_bucket: str,
    output_bucket: str,
    output_kms_key_arn: str,
    plan_arns_parameter: str,
    account_id: str,
    default_instance_type: str,
    allowed_instance_types: Sequence[str],
    capacity_fallback: Sequence[str],
    allowed_input_prefixes: Sequence[str] = (),
    platform_tags: Mapping[str, str] | None = None,
    volume_size_gb: int | None = None,
    allowed_actions: Sequence[str] | None = None,
    vpc_subnets: Sequence[Mapping[str, str]] = (),
    vpc_security_group_ids: Sequence[str] = (),
    fsx_lustre: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The function's environment variables: what ``config.SubmitterConfig.from_environ`` reads.

    The one mapping from a deployment's resources and settings to the variables: the construct
    calls it with CloudFormation tokens (bucket names, the role ARN, ``Aws.ACCOUNT_ID``), the
    emulator (``trainctl local-aws``) with its own names. ``AWS_REGION`` is not among them:
    Lambda sets it itself.

    Args:
        trainer_image_uris: the ECR image of each CPU architecture built (:data:`ENV_TRAINER_IMAGE_URIS`);
            each job runs the one of its instance's host architecture.
        execution_role_arn: the SageMaker execution role jobs assume.
        data_bucket / checkpoint_bucket / output_bucket: bucket names.
        output_kms_key_arn: ARN of the KMS key every job's output is encrypted with
            (``OutputDataConfig.KmsKeyId``): the key of the platform's buckets.
        plan_arns_parameter: name of the SSM String parameter holding the plan ARNs (a JSON list).
        account_id: the deployment's account; plans of other accounts are refused.
        default_instance_type: instance type of requests that name none.
        allowed_instance_types: instance types requests may name (written comma-separated).
        capacity_fallback: order tried for ``capacity=auto`` (values from :data:`platform_spec.capacity.CAPACITY_TYPES`).
        allowed_input_prefixes: extra ``s3://`` input prefixes. Default: none (the variable is
            left out; the data bucket is always allowed).
        platform_tags: tags added to every job. Default: none (``{}``).
        volume_size_gb: ``ResourceConfig.VolumeSizeInGB``. Default: the variable is left out
            and the function uses ``config.DEFAULT_VOLUME_SIZE_GB``.
        allowed_actions: the actions the function answers (:data:`ENV_ALLOWED_ACTIONS`, written
            comma-separated; e.g. ``actions.READ_ACTIONS`` for a reader). Default: the variable is left out
            and every action is answered.
        vpc_subnets: VPC mode's subnets, each ``{"subnet_id": ..., "availability_zone": ...}``
            (:data:`ENV_VPC_SUBNETS`). Default: none, and the VPC variables are left out.
        vpc_security_group_ids: the jobs' security groups (:data:`ENV_VPC_SECURITY_GROUP_IDS`); required
            with ``vpc_subnets``.
        fsx_lustre: the FSx for Lustre file system, ``{"file_system_id", "mount_name", "subnet_id",
            "availability_zone"}`` (:data:`ENV_FSX_LUSTRE`; needs ``vpc_subnets``). Default: none.

    Raises:
        ValueError: ``vpc_subnets`` without ``vpc_security_group_ids`` (or the reverse), or ``fsx_lustre``
            without them.

    Returns:
        Variable name -> value (strings; tokens stay tokens).
    """
    env = {
        ENV_TRAINER_IMAGE_URIS: json.dumps(dict(trainer_image_uris), sort_keys=True),
        ENV_EXECUTION_ROLE_ARN: execution_role_arn,
        ENV_DATA_BUCKET: data_bucket,
        ENV_CHECKPOINT_BUCKET: checkpoint_bucket,
        ENV_OUTPUT_BUCKET: output_bucket,
        ENV_OUTPUT_KMS_KEY_ARN: output_kms_key_arn,
        ENV_TRAINING_PLAN_ARNS_PARAMETER: plan_arns_parameter,
        ENV_DEFAULT_INSTANCE_TYPE: default_instance_type,
        ENV_ALLOWED_INSTANCE_TYPES: ",".join(allowed_instance_types),
        ENV_CAPACITY_FALLBACK: ",".join(capacity_fallback),
        ENV_PLATFORM_TAGS: json.dumps(dict(platform_tags or {}), sort_keys=True),
        ENV_CLIENT_TOKEN_RECORDS: f"s3://{output_bucket}/{CLIENT_TOKEN_RECORDS_PREFIX}",
        ENV_ACCOUNT_ID: account_id,
        # Powertools' own variables: the EMF namespace and the `service` dimension.
        "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
    }
    if allowed_input_prefixes:
        env[ENV_ALLOWED_INPUT_PREFIXES] = ",".join(allowed_input_prefixes)
    if volume_size_gb is not None:
        env[ENV_VOLUME_SIZE_GB] = str(volume_size_gb)
    if allowed_actions is not None:
        env[ENV_ALLOWED_ACTIONS] = ",".join(allowed_actions)
    if bool(vpc_subnets) != bool(vpc_security_group_ids):
        raise ValueError("vpc_subnets and vpc_security_group_ids go together (VPC mode needs both)")
    if fsx_lustre is not None and not vpc_subnets:
        raise ValueError("fsx_lustre needs vpc_subnets: an FSx for Lustre file system is reached in the VPC only")
    if vpc_subnets:
        env[ENV_VPC_SUBNETS] = json.dumps([dict(subnet) for subnet in vpc_subnets], sort_keys=True)
        env[ENV_VPC_SECURITY_GROUP_IDS] = ",".join(vpc_security_group_ids)
    if fsx_lustre is not None:
        env[ENV_FSX_LUSTRE] = json.dumps(dict(fsx_lustre), sort_keys=True)
    return env
