"""Names shared by the submitter's runtime and the construct that deploys it.

The construct sets these environment variables on the function and builds its
``metric_*`` methods from the metric names below, so neither side hand-types
them.
"""

from __future__ import annotations

# Environment variables the function reads (set by the construct, or by
# `trainctl local-aws --env-file` for local runs).
ENV_TRAINER_IMAGE_URI = "TRAINER_IMAGE_URI"
ENV_EXECUTION_ROLE_ARN = "EXECUTION_ROLE_ARN"
ENV_DATA_BUCKET = "DATA_BUCKET"
ENV_CHECKPOINT_BUCKET = "CHECKPOINT_BUCKET"
ENV_OUTPUT_BUCKET = "OUTPUT_BUCKET"
ENV_TRAINING_PLAN_ARNS_PARAMETER = "TRAINING_PLAN_ARNS_PARAMETER"  # SSM String parameter holding a JSON list of ARNs
ENV_DEFAULT_INSTANCE_TYPE = "DEFAULT_INSTANCE_TYPE"
ENV_ALLOWED_INSTANCE_TYPES = "ALLOWED_INSTANCE_TYPES"  # comma-separated
ENV_CAPACITY_FALLBACK = "CAPACITY_FALLBACK"  # comma-separated order for capacity=auto, e.g. "training-plan,spot,on-demand"
ENV_ALLOWED_INPUT_PREFIXES = "ALLOWED_INPUT_PREFIXES"  # comma-separated extra s3:// prefixes; the data bucket is always allowed
ENV_PLATFORM_TAGS = "PLATFORM_TAGS"  # JSON object of tags added to every job
ENV_VOLUME_SIZE_GB = "TRAINING_VOLUME_SIZE_GB"
ENV_CLIENT_TOKEN_RECORDS = "CLIENT_TOKEN_RECORDS_URI"  # s3://<output bucket>/<CLIENT_TOKEN_RECORDS_PREFIX>

CLIENT_TOKEN_RECORDS_PREFIX = "submitter/client-tokens/"
"""Key prefix, in the output bucket, of the client-token records (runtime/idempotency.py): the
construct grants the function this prefix only; the records never expire."""
TRAINING_JOB_OUTPUT_PREFIX = "training-jobs/"
"""Key prefix, in the output bucket, of every job's ``OutputDataConfig.S3OutputPath`` (runtime/job.py):
SageMaker writes a job's artifacts under ``<prefix><job name>/``, and the execution role may write
the output bucket below this prefix only, never the client-token records."""
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

CAPACITY_TYPES = ("training-plan", "spot", "on-demand")
ERROR_CODES = ("InvalidRequest", "NoCapacity", "PredictedOutOfMemory", "QuotaExceeded", "Conflict")
