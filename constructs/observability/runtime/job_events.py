"""Training-job outcomes from EventBridge ``SageMaker Training Job State Change`` events.

The stack's rule delivers the events whose ``TrainingJobStatus`` is terminal
(``Completed``, ``Failed``, ``Stopped``). For each, the handler

* publishes ``TrainingJobOutcomes`` = 1 (unit ``Count``) to
  :data:`.settings.JOB_METRICS_NAMESPACE`, dimension ``TrainingJobStatus``,
  timestamped with the event's ``time`` (so a late or retried delivery is
  counted in the minute the job ended);
* writes one structured log line (``message`` = :data:`.settings.OUTCOME_LOG_MESSAGE`)
  with the job's name, status, secondary status, ``FailureReason``, instance
  type and count, capacity type and plan, which the dashboard's
  "recent failures" query reads.

SageMaker may send more than one event for a state change, so each
``(TrainingJobArn, TrainingJobStatus)`` is recorded once: Powertools
idempotency with a DynamoDB table (records expire after
``IDEMPOTENCY_TTL_SECONDS``) turns duplicates into no-ops that return the
first answer.

The event ``detail`` mirrors ``DescribeTrainingJob``; only the fields named
above are read. An event that is not a training-job state change raises
:class:`EventError` (naming the field): the rule should never deliver one.

Every AWS call ends inside the invocation (``context.get_remaining_time_in_millis()``,
of :data:`.settings.JOB_EVENTS_TIMEOUT_S`): with too little time left for the
next call or retry the handler logs ``deadline exceeded`` and raises
:class:`DeadlineExceeded` (Lambda's ``errorType``), rather than being killed
mid-call. That is a function error, so Lambda runs the event again
(:data:`.settings.JOB_EVENTS_RETRY_ATTEMPTS` times): Powertools removes the
event's in-progress record when it can, and the record lapses at the end of
this invocation's time when it cannot, so the retry records the outcome,
once. A ``PutMetricData`` sent whose answer did not come may have counted the
outcome already: the message says so, and the retry counts it again.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

from aws_lambda_powertools import Logger

from platform_spec.capacity import capacity_type_of
from platform_spec.runs import JOB_STATE_CHANGE_DETAIL_TYPE, JOB_STATE_CHANGE_SOURCE, TERMINAL_JOB_STATUSES

from ...lambda_runtime import deadline as lambda_deadline
from ...lambda_runtime.deadline import current_deadline, deadline_scope
from . import settings
from .aws import cloudwatch_client, dynamodb_client, put_metric_data

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.idempotency import IdempotencyConfig
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_cloudwatch.type_defs import MetricDatumTypeDef
    from mypy_boto3_dynamodb import DynamoDBClient

logger = Logger(service=settings.JOB_EVENTS_SERVICE)

Recorder = Callable[["TrainingJobOutcome"], dict[str, Any]]
"""Records one outcome (publishes its count and logs it); returns what :func:`record_outcome` returns."""

DEFAULT_IDEMPOTENCY_TTL_SECONDS = 7 * 24 * 3600
"""A week: longer than EventBridge's (24 h) and Lambda's (6 h) retry windows."""


class DeadlineExceeded(lambda_deadline.DeadlineExceeded):
    """Too little of the invocation's time is left for the next AWS call
    (:class:`platform_constructs.lambda_runtime.deadline.DeadlineExceeded`): a function error, so Lambda runs the
    event again."""

    EFFECTS: ClassVar[Mapping[str, str]] = {
        "PutMetricData": "the outcome may have been counted, and a retry counts it again",
        "PutItem": "the event's in-progress record may exist (it lapses when this invocation's time is up)",
        "UpdateItem": "the outcome was counted; if its record was not marked done, a retry counts it again",
    }
    RETRY = (
        f"Retriable: Lambda runs the event again (up to {settings.JOB_EVENTS_RETRY_ATTEMPTS} times, after 1 and "
        "2 minutes), and the retry records the outcome once"
    )


class Deadline(lambda_deadline.Deadline):
    """The handler's invocation deadline: too little time left raises this module's :class:`DeadlineExceeded`."""

    error_type = DeadlineExceeded


class EventError(ValueError):
    """The event is not a well-formed training-job state change: names the field, value and expectation."""

    def __init__(self, field: str, value: Any, expected: str) -> None:
        self.field, self.value, self.expected = field, value, expected
        super().__init__(f"event field {field}: got {value!r}; expected {expected}")


@dataclass(frozen=True)
class TrainingJobOutcome:
    """A training job that reached a status, as read from one state-change event.

    Attributes:
        training_job_name / training_job_arn: the job.
        training_job_status: ``Completed`` | ``Failed`` | ``Stopped`` (or a
            non-terminal one, which is not counted).
        secondary_status: e.g. ``MaxRuntimeExceeded`` for a job stopped at its limit.
        failure_reason: SageMaker's ``FailureReason`` (first 1024 characters of
            the trainer's ``/opt/ml/output/failure``), or ``None``.
        instance_type / instance_count: ``ResourceConfig``.
        capacity_type: ``training-plan`` (``ResourceConfig.TrainingPlanArn`` set),
            ``spot`` (``EnableManagedSpotTraining``) or ``on-demand``.
        training_plan_arn: the plan the job ran on, or ``None``.
        billable_time_s: ``BillableTimeInSeconds`` when the event carries it.
        event_time: the event's ``time`` (UTC).
        event_id: the event's ``id``.
    """

    training_job_name: str
    training_job_arn: str
    training_job_status: str
    secondary_status: str | None
    failure_reason: str | None
    instance_type: str | None
    instance_count: int | None
    capacity_type: str
    training_plan_arn: str | None
    billable_time_s: int | None
    event_time: datetime
    event_id: str

    @property
    def terminal(self) -> bool:
        return self.training_job_status in TERMINAL_JOB_STATUSES

    @classmethod
    def from_event(cls, event: Any) -> TrainingJobOutcome:
        """Read an EventBridge event.

        Raises:
            EventError: not a ``SageMaker Training Job State Change`` from
                ``aws.sagemaker``, or a required field is missing or malformed.
        """
        if not isinstance(event, Mapping):
            raise EventError("(event)", type(event).__name__, "an EventBridge event object")
        if event.get("source") != JOB_STATE_CHANGE_SOURCE:
            raise EventError("source", event.get("source"), repr(JOB_STATE_CHANGE_SOURCE))
        if event.get("detail-type") != JOB_STATE_CHANGE_DETAIL_TYPE:
            raise EventError("detail-type", event.get("detail-type"), repr(JOB_STATE_CHANGE_DETAIL_TYPE))
        detail = event.get("detail")
        if not isinstance(detail, Mapping):
            raise EventError("detail", detail, "an object shaped like DescribeTrainingJob's response")
        name = _string(detail, "TrainingJobName")
        status = _string(detail, "TrainingJobStatus")
        arn = detail.get("TrainingJobArn")
        if arn is not None and not isinstance(arn, str):
            raise EventError("detail.TrainingJobArn", arn, "a string")
        resources = event.get("resources") or []
        arn = arn or next((r for r in resources if isinstance(r, str) and ":training-job/" in r), None) or name
        resource_config = detail.get("ResourceConfig") or {}
        if not isinstance(resource_config, Mapping):
            raise EventError("detail.ResourceConfig", resource_config, "an object")
        plan_arn = resource_config.get("TrainingPlanArn") or None
        capacity = capacity_type_of(detail)
        count = resource_config.get("InstanceCount")
        billable = detail.get("BillableTimeInSeconds")
        return cls(
            training_job_name=name,
            training_job_arn=arn,
            training_job_status=status,
            secondary_status=detail.get("SecondaryStatus") if isinstance(detail.get("SecondaryStatus"), str) else None,
            failure_reason=detail.get("FailureReason") if isinstance(detail.get("FailureReason"), str) else None,
            instance_type=resource_config.get("InstanceType")
            if isinstance(resource_config.get("InstanceType"), str)
            else None,
            instance_count=int(count) if isinstance(count, (int, float)) and not isinstance(count, bool) else None,
            capacity_type=capacity,
            training_plan_arn=plan_arn,
            billable_time_s=int(billable)
            if isinstance(billable, (int, float)) and not isinstance(billable, bool)
            else None,
            event_time=_event_time(event.get("time")),
            event_id=str(event.get("id") or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready fields (``event_time`` in ISO 8601)."""
        out = asdict(self)
        out["event_time"] = self.event_time.isoformat()
        return out

    def log_fields(self) -> dict[str, Any]:
        """The structured log line's fields (:data:`.settings.OUTCOME_LOG_FIELDS`)."""
        values = self.to_dict()
        return {key: values[key] for key in settings.OUTCOME_LOG_FIELDS}


def _string(detail: Mapping[str, Any], key: str) -> str:
    value = detail.get(key)
    if not isinstance(value, str) or not value:
        raise EventError(f"detail.{key}", value, "a non-empty string")
    return value


def _event_time(value: Any) -> datetime:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise EventError("time", value, "an ISO 8601 timestamp such as 2026-01-31T12:00:00Z") from None
        return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).astimezone(UTC)
    if value is None:
        return datetime.now(UTC)
    raise EventError("time", value, "an ISO 8601 timestamp such as 2026-01-31T12:00:00Z")


def outcome_datum(outcome: TrainingJobOutcome) -> MetricDatumTypeDef:
    """The ``PutMetricData`` datum counting one outcome."""
    return {
        "MetricName": settings.METRIC_JOB_OUTCOMES,
        "Dimensions": [{"Name": settings.DIMENSION_TRAINING_JOB_STATUS, "Value": outcome.training_job_status}],
        "Timestamp": outcome.event_time,
        "Value": 1.0,
        "Unit": "Count",
    }


def record_outcome(outcome: TrainingJobOutcome, *, cloudwatch: CloudWatchClient) -> dict[str, Any]:
    """Publish the outcome's count and log it; returns ``{"counted": bool, ...}``.

    Non-terminal statuses are ignored (``counted`` false); the rule does not
    deliver them, but a hand-made test event might.
    """
    if not outcome.terminal:
        logger.info("training job status not terminal; not counted", extra=outcome.log_fields())
        return {
            "counted": False,
            "training_job_name": outcome.training_job_name,
            "training_job_status": outcome.training_job_status,
        }
    put_metric_data(cloudwatch, settings.JOB_METRICS_NAMESPACE, [outcome_datum(outcome)])
    if outcome.training_job_status == "Failed":
        logger.warning(settings.OUTCOME_LOG_MESSAGE, extra=outcome.log_fields())
    else:
        logger.info(settings.OUTCOME_LOG_MESSAGE, extra=outcome.log_fields())
    return {
        "counted": True,
        "training_job_name": outcome.training_job_name,
        "training_job_status": outcome.training_job_status,
    }


def make_recorder(
    *,
    cloudwatch: CloudWatchClient,
    dynamodb: DynamoDBClient,
    table_name: str,
    expires_after_seconds: int = DEFAULT_IDEMPOTENCY_TTL_SECONDS,
) -> tuple[Recorder, IdempotencyConfig]:
    """An idempotent :func:`record_outcome` keyed on ``(TrainingJobArn, TrainingJobStatus)``.

    Returns ``(record, idempotency_config)``; the handler registers its Lambda
    context on the config. A duplicate returns the first call's answer
    without publishing again.
    """
    from aws_lambda_powertools.utilities.idempotency import (
        DynamoDBPersistenceLayer,
        IdempotencyConfig,
        idempotent_function,
    )

    persistence = DynamoDBPersistenceLayer(table_name=table_name, boto3_client=dynamodb)
    config = IdempotencyConfig(
        event_key_jmespath="[training_job_arn, training_job_status]",
        raise_on_no_idempotency_key=True,
        expires_after_seconds=expires_after_seconds,
    )

    def _record(*, fields: dict[str, Any], outcome: TrainingJobOutcome) -> dict[str, Any]:
        return record_outcome(outcome, cloudwatch=cloudwatch)

    # Powertools types its decorator's result as Any; the wrapped function keeps _record's keywords and answer
    once: Callable[..., dict[str, Any]] = idempotent_function(
        data_keyword_argument="fields", config=config, persistence_store=persistence
    )(_record)

    def record(outcome: TrainingJobOutcome) -> dict[str, Any]:
        key = {"training_job_arn": outcome.training_job_arn, "training_job_status": outcome.training_job_status}
        return once(fields=key, outcome=outcome)

    return record, config


def handle(event: Any, record: Recorder, *, deadline: Deadline | None = None) -> dict[str, Any]:
    """Read ``event`` and record its outcome with ``record``; what :func:`lambda_handler` runs.

    Args:
        event: the EventBridge event.
        record: what records the outcome (:func:`make_recorder`).
        deadline: when the invocation must have answered by. Default: the one in scope, if any.

    Raises:
        EventError: ``event`` is not a training-job state change (names the field).
        DeadlineExceeded: too little of ``deadline`` was left for an AWS call (also when Powertools'
            idempotency wrapped it); retriable.
        botocore.exceptions.ClientError: DynamoDB or CloudWatch failed after botocore's retries.
    """
    outcome = TrainingJobOutcome.from_event(event)
    logger.set_correlation_id(outcome.event_id or None)
    with deadline_scope(deadline if deadline is not None else current_deadline()) as scoped:
        try:
            return record(outcome)
        except Exception as exc:
            if scoped is None or scoped.error is None:
                raise
            error = scoped.error  # the first: what Powertools' clean-up ran into after it is a consequence
            logger.warning(
                "deadline exceeded",
                extra={
                    "operation": error.operation,
                    "remaining_s": round(error.remaining_s, 3),
                    "training_job_name": outcome.training_job_name,
                    "training_job_status": outcome.training_job_status,
                    "error": str(error),
                },
            )
            if error is exc:
                raise
            raise error from exc  # Powertools' idempotency wraps it (IdempotencyPersistenceLayerError)


_recorder: tuple[Recorder, IdempotencyConfig] | None = None


def _default_recorder() -> tuple[Recorder, IdempotencyConfig]:
    global _recorder
    if _recorder is None:
        _recorder = make_recorder(
            cloudwatch=cloudwatch_client(),
            dynamodb=dynamodb_client(),
            table_name=os.environ[settings.ENV_IDEMPOTENCY_TABLE],
            expires_after_seconds=int(
                os.environ.get(settings.ENV_IDEMPOTENCY_TTL_SECONDS, DEFAULT_IDEMPOTENCY_TTL_SECONDS)
            ),
        )
    return _recorder


@logger.inject_lambda_context
def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    """EventBridge rule target: record one training job's terminal status within the invocation's time
    (a context without ``get_remaining_time_in_millis`` gets the function's, :data:`.settings.JOB_EVENTS_TIMEOUT_S`).
    """
    record, config = _default_recorder()
    config.register_lambda_context(context)
    deadline = Deadline.from_lambda_context(context) or Deadline(settings.JOB_EVENTS_TIMEOUT_S)
    return handle(event, record, deadline=deadline)
