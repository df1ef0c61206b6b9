"""Training-plan capacity metrics, published on an EventBridge schedule.

Each run reads the JSON list of plan ARNs from the SSM parameter the stack
writes (the submitter reads the same one), calls ``DescribeTrainingPlan`` for
every plan, and publishes with ``PutMetricData`` to
:data:`.settings.PLAN_METRICS_NAMESPACE`:

* per plan (dimension ``TrainingPlanName``): ``AvailableInstanceCount``,
  ``InUseInstanceCount``, ``TotalInstanceCount`` (unit ``Count``, as
  ``DescribeTrainingPlan`` reports them) and ``HoursUntilEnd`` (hours from now
  to ``EndTime``, 0 once passed);
* for all plans (no dimension): the three instance counts summed over the
  plans a job may be placed on (status ``Active`` or ``Scheduled``, as the
  submitter judges them); 0 when there is none, so "no reserved capacity
  left" is a value, not missing data.

All datums of a run carry the same timestamp. A plan that cannot be described
(deleted, wrong ARN, no permission) is logged and skipped; the others are
still published, then the function raises :class:`PlanMetricsError` so the
failure shows as a Lambda error (and alarms).

Every AWS call ends inside the invocation (``context.get_remaining_time_in_millis()``,
of :data:`.settings.PLAN_METRICS_TIMEOUT_S`; the platform's deadline hooks,
:mod:`platform_constructs.lambda_runtime.deadline`). The plans are described
while :data:`PUBLISH_RESERVE_S` is left for ``PutMetricData``: the plans not
described by then are skipped and logged, what was described is published
(without the all-plans totals, which would count too few), and the function
raises :class:`PlanMetricsError` naming them; the next scheduled run is the
retry. With too little time for the SSM parameter or the publish itself the
run raises :class:`DeadlineExceeded` (Lambda's ``errorType``).

The handler is a thin adapter over :func:`publish_plan_metrics`, a plain
function tested against the ``trainctl local-aws`` emulator.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from aws_lambda_powertools import Logger

from platform_spec.capacity import USABLE_PLAN_STATUSES
from platform_spec.training_plans import PlanArn, TrainingPlanArnError

from ...lambda_runtime import deadline as lambda_deadline
from ...lambda_runtime.deadline import current_deadline, deadline_scope
from . import settings
from .aws import cloudwatch_client, error_code, put_metric_data, sagemaker_client, ssm_client

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_cloudwatch.type_defs import DimensionTypeDef, MetricDatumTypeDef
    from mypy_boto3_sagemaker import SageMakerClient
    from mypy_boto3_ssm import SSMClient

logger = Logger(service=settings.PLAN_METRICS_SERVICE)

PUBLISH_RESERVE_S = 10.0
"""Seconds of the invocation the plans' descriptions leave for ``PutMetricData``: one attempt needs
``connect timeout + 1 s + reserve`` (4 s, :mod:`platform_constructs.lambda_runtime.deadline`); the rest is
read time, or a throttled retry's backoff (1 s at most after the first attempt, botocore's standard mode)."""


class DeadlineExceeded(lambda_deadline.DeadlineExceeded):
    """Too little of the invocation's time is left for the next AWS call
    (:class:`platform_constructs.lambda_runtime.deadline.DeadlineExceeded`)."""

    EFFECTS: ClassVar[Mapping[str, str]] = {"PutMetricData": "its datapoints may have been published"}
    RETRY = "Retriable: the next scheduled run describes the plans and publishes again"


class Deadline(lambda_deadline.Deadline):
    """The publisher's invocation deadline: too little time left raises this module's :class:`DeadlineExceeded`."""

    error_type = DeadlineExceeded


class PlanMetricsError(RuntimeError):
    """The run could not read the plan list, or could not describe some plans (named in the message)."""


@dataclass(frozen=True)
class PlanCapacity:
    """One plan's capacity as ``DescribeTrainingPlan`` reported it at ``observed_at``.

    Attributes:
        training_plan_name / training_plan_arn: the plan.
        status: ``Pending`` | ``Active`` | ``Scheduled`` | ``Expired`` | ``Failed``.
        total_instances / in_use_instances / available_instances: instance counts.
        end_time: the plan's ``EndTime`` (UTC).
        hours_until_end: hours from ``observed_at`` to ``end_time``, 0 once passed.
    """

    training_plan_name: str
    training_plan_arn: str
    status: str
    total_instances: int
    in_use_instances: int
    available_instances: int
    end_time: datetime
    hours_until_end: float

    @property
    def usable(self) -> bool:
        """Jobs may be placed on it (status ``Active`` or ``Scheduled``)."""
        return self.status in USABLE_PLAN_STATUSES

    @classmethod
    def from_description(cls, description: Mapping[str, Any], now: datetime) -> PlanCapacity:
        """Build from a ``DescribeTrainingPlan`` response (boto3 shape: ``EndTime`` a datetime)."""
        end = description["EndTime"]
        if end.tzinfo is None:
            end = end.replace(tzinfo=UTC)
        end = end.astimezone(UTC)
        hours = max(0.0, (end - now).total_seconds() / 3600.0)
        return cls(
            training_plan_name=description["TrainingPlanName"],
            training_plan_arn=description["TrainingPlanArn"],
            status=description.get("Status", "Unknown"),
            total_instances=int(description.get("TotalInstanceCount") or 0),
            in_use_instances=int(description.get("InUseInstanceCount") or 0),
            available_instances=int(description.get("AvailableInstanceCount") or 0),
            end_time=end,
            hours_until_end=round(hours, 3),
        )

    def to_log(self) -> dict[str, Any]:
        out = asdict(self)
        out["end_time"] = self.end_time.isoformat()
        return out


@dataclass(frozen=True)
class PlanProblem:
    """A plan that could not be described: its ARN, the AWS error code and message."""

    training_plan_arn: str
    error_code: str
    error_message: str


@dataclass
class PublishReport:
    """What one run did.

    Attributes:
        observed_at: the datums' timestamp.
        plans: the plans described (and published).
        problems: the plans AWS would not describe.
        skipped: the ARNs of the plans not described because the deadline came first (not published, and
            the all-plans totals neither).
        skipped_because: the ``DeadlineExceeded`` message that ended the descriptions, when plans were skipped.
        datums: the datums published.
    """

    observed_at: datetime
    plans: list[PlanCapacity] = field(default_factory=list)
    problems: list[PlanProblem] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    skipped_because: str | None = None
    datums: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "observed_at": self.observed_at.isoformat(),
            "plans": [p.to_log() for p in self.plans],
            "problems": [asdict(p) for p in self.problems],
            "skipped": list(self.skipped),
            "datums": self.datums,
        }


def read_plan_arns(ssm: SSMClient, parameter_name: str) -> list[str]:
    """The plan ARNs in the SSM String parameter ``parameter_name`` (a JSON list).

    Raises:
        PlanMetricsError: the value is not a JSON list of training-plan ARNs
            (names the parameter, the index and the value).
    """
    value = ssm.get_parameter(Name=parameter_name)["Parameter"]["Value"]
    try:
        arns = json.loads(value)
    except json.JSONDecodeError:
        raise PlanMetricsError(
            f"SSM parameter {parameter_name}: got {value!r}; expected a JSON list of training-plan ARNs"
        ) from None
    if not isinstance(arns, list):
        raise PlanMetricsError(
            f"SSM parameter {parameter_name}: got {value!r}; expected a JSON list of training-plan ARNs"
        )
    for index, arn in enumerate(arns):
        try:  # the platform's one ARN rule (platform_spec.training_plans)
            PlanArn.parse(arn)
        except TrainingPlanArnError as exc:
            raise PlanMetricsError(f"SSM parameter {parameter_name}[{index}]: {exc.reason}") from None
    return list(dict.fromkeys(arns))  # each plan once, order kept


def describe_plans(
    sagemaker: SageMakerClient, arns: Sequence[str], now: datetime
) -> tuple[list[PlanCapacity], list[PlanProblem], list[str]]:
    """``DescribeTrainingPlan`` for each ARN, in order, while the deadline in scope allows.

    Returns:
        ``(plans, problems, skipped)``: the plans described; AWS errors as :class:`PlanProblem` entries;
        the ARNs left when the deadline in scope refused a call (its ``error`` says why), in order.
    """
    plans: list[PlanCapacity] = []
    problems: list[PlanProblem] = []
    for index, arn in enumerate(arns):
        try:
            # by ARN, never by name alone: another account may own a plan of the same name
            description = sagemaker.describe_training_plan(TrainingPlanName=arn)
        except lambda_deadline.DeadlineExceeded:
            return plans, problems, list(arns[index:])
        except Exception as exc:  # botocore ClientError; anything else is a bug and propagates
            code = error_code(exc)
            if code is None:
                raise
            problems.append(PlanProblem(arn, code, str(exc)))
            continue
        plans.append(PlanCapacity.from_description(description, now))
    return plans, problems, []


def metric_data(plans: Sequence[PlanCapacity], now: datetime, *, totals: bool = True) -> list[MetricDatumTypeDef]:
    """``PutMetricData`` datums: four per plan plus, with ``totals``, the all-plans instance totals (see the
    module doc)."""
    datums: list[MetricDatumTypeDef] = []

    def add(name: str, value: float, unit: Literal["Count", "None"], dimensions: list[DimensionTypeDef]) -> None:
        datums.append(
            {"MetricName": name, "Dimensions": dimensions, "Timestamp": now, "Value": float(value), "Unit": unit}
        )

    for plan in plans:
        dims: list[DimensionTypeDef] = [
            {"Name": settings.DIMENSION_TRAINING_PLAN_NAME, "Value": plan.training_plan_name}
        ]
        add(settings.METRIC_AVAILABLE_INSTANCES, plan.available_instances, "Count", dims)
        add(settings.METRIC_IN_USE_INSTANCES, plan.in_use_instances, "Count", dims)
        add(settings.METRIC_TOTAL_INSTANCES, plan.total_instances, "Count", dims)
        add(settings.METRIC_HOURS_UNTIL_END, plan.hours_until_end, "None", dims)
    if not totals:
        return datums
    usable = [p for p in plans if p.usable]
    add(settings.METRIC_AVAILABLE_INSTANCES, sum(p.available_instances for p in usable), "Count", [])
    add(settings.METRIC_IN_USE_INSTANCES, sum(p.in_use_instances for p in usable), "Count", [])
    add(settings.METRIC_TOTAL_INSTANCES, sum(p.total_instances for p in usable), "Count", [])
    return datums


def publish_plan_metrics(
    *,
    ssm: SSMClient,
    sagemaker: SageMakerClient,
    cloudwatch: CloudWatchClient,
    parameter_name: str,
    now: datetime | None = None,
) -> PublishReport:
    """Read the plans, describe them, publish their metrics; returns what was done.

    Problems describing single plans are reported in the result (and logged),
    not raised; the plans that could be described are published regardless.
    Under a deadline (:func:`platform_constructs.lambda_runtime.deadline.deadline_scope`) the plans are
    described while :data:`PUBLISH_RESERVE_S` is left; the rest are skipped (reported and logged), and the
    all-plans totals are not published then.

    Raises:
        PlanMetricsError: the parameter does not hold a JSON list of plan ARNs.
        botocore.exceptions.ClientError: SSM or CloudWatch failed after retries.
        DeadlineExceeded: too little time was left for ``GetParameter`` or ``PutMetricData``.
    """
    now = (now or datetime.now(UTC)).astimezone(UTC)
    arns = read_plan_arns(ssm, parameter_name)
    invocation = current_deadline()
    describing = invocation.earlier(PUBLISH_RESERVE_S) if invocation is not None else None
    with deadline_scope(describing):
        plans, problems, skipped = describe_plans(sagemaker, arns, now)
    because = str(describing.error) if skipped and describing is not None else None
    datums = metric_data(plans, now, totals=not skipped)
    put_metric_data(cloudwatch, settings.PLAN_METRICS_NAMESPACE, datums)
    for plan in plans:
        logger.info("training plan capacity", extra=plan.to_log())
    for problem in problems:
        logger.error("training plan not described", extra=asdict(problem))
    for arn in skipped:
        logger.error(
            "training plan skipped: the deadline came first", extra={"training_plan_arn": arn, "reason": because}
        )
    return PublishReport(
        observed_at=now, plans=plans, problems=problems, skipped=skipped, skipped_because=because, datums=len(datums)
    )


@dataclass(frozen=True)
class PlanMetricsClients:
    """The publisher's AWS clients (created once per warm function)."""

    ssm: SSMClient
    sagemaker: SageMakerClient
    cloudwatch: CloudWatchClient


_clients: PlanMetricsClients | None = None


def _default_clients() -> PlanMetricsClients:
    global _clients
    if _clients is None:
        _clients = PlanMetricsClients(ssm=ssm_client(), sagemaker=sagemaker_client(), cloudwatch=cloudwatch_client())
    return _clients


@logger.inject_lambda_context
def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    """EventBridge schedule target: publish the plans' metrics now (the event's content is not used), within the
    invocation's time (a context without ``get_remaining_time_in_millis`` gets the function's,
    :data:`.settings.PLAN_METRICS_TIMEOUT_S`).

    Raises:
        PlanMetricsError: plans could not be described, or were skipped for the deadline (after the others
            were published), or the parameter is malformed.
        DeadlineExceeded: too little time was left for ``GetParameter`` or ``PutMetricData``.
    """
    clients = _default_clients()
    deadline = Deadline.from_lambda_context(context) or Deadline(settings.PLAN_METRICS_TIMEOUT_S)
    with deadline_scope(deadline):
        try:
            report = publish_plan_metrics(
                ssm=clients.ssm,
                sagemaker=clients.sagemaker,
                cloudwatch=clients.cloudwatch,
                parameter_name=os.environ[settings.ENV_TRAINING_PLAN_ARNS_PARAMETER],
            )
        except DeadlineExceeded as exc:
            logger.error("deadline exceeded", extra={"operation": exc.operation, "error": str(exc)})
            raise
    failures = []
    if report.problems:
        names = ", ".join(f"{p.training_plan_arn} ({p.error_code})" for p in report.problems)
        failures.append(f"{len(report.problems)} training plan(s) could not be described: {names}")
    if report.skipped:
        failures.append(
            f"{len(report.skipped)} training plan(s) not described before the invocation's deadline (their metrics "
            f"and the all-plans totals were not published): {', '.join(report.skipped)}; {report.skipped_because}"
        )
    if failures:
        raise PlanMetricsError("; ".join(failures))
    return report.to_dict()
