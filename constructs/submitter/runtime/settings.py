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

# CloudWatch custom metrics, emitted with EMF (aws-lambda-powertools Metrics).
METRICS_NAMESPACE = "TrainingPlatform"
SERVICE_NAME = "job-submitter"  # Powertools adds it as the `service` dimension
METRIC_SUBMISSIONS = "Submissions"  # count, dimensions: service, CapacityType
METRIC_REFUSALS = "Refusals"  # count, dimensions: service, ErrorCode
DIMENSION_CAPACITY_TYPE = "CapacityType"
DIMENSION_ERROR_CODE = "ErrorCode"

CAPACITY_TYPES = ("training-plan", "spot", "on-demand")
ERROR_CODES = ("InvalidRequest", "NoCapacity", "PredictedOutOfMemory", "QuotaExceeded", "Conflict")
