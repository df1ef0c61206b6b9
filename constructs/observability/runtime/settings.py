"""Names shared by the observability functions and the construct that deploys them.

The construct sets the environment variables below and builds its
``metric_*`` methods, dashboard widgets and alarms from the metric names
here, so neither side hand-types them.
"""

from __future__ import annotations

from platform_spec.capacity import TRAINING_PLAN_ARNS_PARAMETER_ENV

# -- environment variables (set by the construct) --------------------------------------------
ENV_TRAINING_PLAN_ARNS_PARAMETER = TRAINING_PLAN_ARNS_PARAMETER_ENV
"""SSM String parameter holding the JSON list of training-plan ARNs (the submitter reads the same one)."""
ENV_IDEMPOTENCY_TABLE = "IDEMPOTENCY_TABLE"
"""DynamoDB table of the job-state handler's Powertools idempotency records."""
ENV_IDEMPOTENCY_TTL_SECONDS = "IDEMPOTENCY_TTL_SECONDS"
"""How long an event's idempotency record suppresses duplicates (seconds)."""

PLAN_METRICS_SERVICE = "plan-metrics"
JOB_EVENTS_SERVICE = "job-events"

# -- the functions' timeouts (the construct's, and the deadline a context without one is given) --
PLAN_METRICS_TIMEOUT_S = 60
"""The plan-metrics publisher's timeout, seconds: its AWS calls end inside it (the invocation's deadline)."""
JOB_EVENTS_TIMEOUT_S = 30
"""The job-state handler's timeout, seconds: its AWS calls end inside it (the invocation's deadline)."""
JOB_EVENTS_RETRY_ATTEMPTS = 2
"""Lambda's retries of a job-state event whose invocation failed (the construct's ``retry_attempts``, the most
Lambda allows): EventBridge invokes the function asynchronously, and Lambda runs a failed event again after one
minute, then after two more (AWS Lambda Developer Guide, "How Lambda handles errors and retries with
asynchronous invocation"). The publisher has none: its next scheduled run is its retry."""

# -- training-plan capacity metrics (plan_metrics.py, PutMetricData) -------------------------
PLAN_METRICS_NAMESPACE = "TrainingPlatform/TrainingPlans"
DIMENSION_TRAINING_PLAN_NAME = "TrainingPlanName"
"""Per-plan metrics carry this dimension; the all-plans totals carry none."""
METRIC_AVAILABLE_INSTANCES = "AvailableInstanceCount"
METRIC_IN_USE_INSTANCES = "InUseInstanceCount"
METRIC_TOTAL_INSTANCES = "TotalInstanceCount"
METRIC_HOURS_UNTIL_END = "HoursUntilEnd"
"""Hours from the observation to the plan's ``EndTime`` (0 once it has passed); unit ``None``."""
INSTANCE_COUNT_METRICS = (METRIC_AVAILABLE_INSTANCES, METRIC_IN_USE_INSTANCES, METRIC_TOTAL_INSTANCES)
PLAN_METRICS = (*INSTANCE_COUNT_METRICS, METRIC_HOURS_UNTIL_END)
PUBLISH_SCHEDULE_MINUTES = 5
"""The publisher runs every this many minutes (EventBridge schedule)."""

# -- training-job outcomes (job_events.py, PutMetricData) ------------------------------------
JOB_METRICS_NAMESPACE = "TrainingPlatform/TrainingJobs"
METRIC_JOB_OUTCOMES = "TrainingJobOutcomes"
"""Count of jobs that reached a terminal status, dimension :data:`DIMENSION_TRAINING_JOB_STATUS`."""
DIMENSION_TRAINING_JOB_STATUS = "TrainingJobStatus"

OUTCOME_LOG_MESSAGE = "training job ended"
"""The ``message`` of the handler's one structured log line per outcome (the dashboard's
failure-reason query filters on it)."""
OUTCOME_LOG_FIELDS = (
    "training_job_name",
    "training_job_status",
    "secondary_status",
    "failure_reason",
    "instance_type",
    "instance_count",
    "capacity_type",
    "training_plan_arn",
    "billable_time_s",
)
"""Keys of that log line besides Powertools' own."""
