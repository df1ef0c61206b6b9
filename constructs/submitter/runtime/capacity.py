"""Capacity choice: which training plan (or spot / on-demand) a job runs on.

Plan ARNs come from the SSM String parameter the stack writes (a JSON list of
ARNs), cached for :data:`.aws.PLAN_ARNS_MAX_AGE_S` seconds. Each plan is then
described (``DescribeTrainingPlan``, never cached: availability changes) and
judged by :func:`judge_plan`. A plan is eligible when

* its status is ``Active`` or ``Scheduled`` (jobs wait in ``Pending`` until a
  scheduled plan starts),
* its ``TargetResources`` include ``training-job``,
* it reserves the request's instance type (``ReservedCapacitySummaries[].InstanceType``),
* ``AvailableInstanceCount`` >= the request's ``instance_count``,
* its ``EndTime`` leaves room for ``max_runtime_hours`` after ``max(now, StartTime)``.

Among eligible plans the one that **expires first** wins (ties: the ARN), so
reserved capacity is used before it lapses; the answer and the log say why,
and list every skipped plan with its reason.

``capacity: auto`` yields candidates in the configured fallback order
(``training-plan``, ``spot``, ``on-demand`` by default): the chosen plan if
any, then spot, then on-demand. The submitter tries them in turn when
SageMaker answers ``ResourceLimitExceeded`` for one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from .aws import PLAN_ARNS_MAX_AGE_S, error_code
from .config import SubmitterConfig
from .errors import ConfigurationError, Refusal, invalid
from .request import TRAINING_PLAN_ARN_RE, SubmitRequest

ELIGIBLE_STATUSES = ("Active", "Scheduled")


@dataclass(frozen=True)
class PlanVerdict:
    """One configured plan and whether the request may use it.

    Attributes:
        training_plan_arn: the plan.
        eligible: usable for this request.
        reason: why (or why not), one phrase.
        end_time: the plan's ``EndTime`` (UTC), when known.
    """

    training_plan_arn: str
    eligible: bool
    reason: str
    end_time: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"training_plan_arn": self.training_plan_arn, "reason": self.reason}


@dataclass(frozen=True)
class CapacityChoice:
    """Where the job runs.

    Attributes:
        type: ``training-plan`` | ``spot`` | ``on-demand``.
        reason: why this capacity, one sentence.
        training_plan_arn: the plan, for ``training-plan``.
        skipped: plans considered and not used, each ``{"training_plan_arn", "reason"}``.
    """

    type: str
    reason: str
    training_plan_arn: str | None = None
    skipped: tuple[PlanVerdict, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.training_plan_arn:
            out["training_plan_arn"] = self.training_plan_arn
        out["reason"] = self.reason
        if self.skipped:
            out["skipped_plans"] = [v.to_dict() for v in self.skipped]
        return out


def configured_plan_arns(clients: Any, config: SubmitterConfig) -> list[str]:
    """The plan ARNs in the SSM parameter (cached briefly per warm function).

    Raises:
        ConfigurationError: the parameter is missing or not a JSON list of plan ARNs.
        botocore.exceptions.ClientError: a transient fault that outlived botocore's retries.
    """
    from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError, TransformParameterError

    name = config.training_plan_arns_parameter
    try:
        value = clients.parameters.get(name, max_age=PLAN_ARNS_MAX_AGE_S, transform="json")
    except GetParameterError as exc:
        cause = exc.__context__
        if cause is not None and error_code(cause) not in (None, "ParameterNotFound"):
            raise cause from None  # throttling, 5xx, access denied: not a configuration problem
        raise ConfigurationError(f"SSM parameter {name!r} could not be read: {exc}") from None
    except TransformParameterError as exc:
        raise ConfigurationError(f"SSM parameter {name!r} is not JSON: {exc}") from None
    if not isinstance(value, list) or not all(isinstance(a, str) and TRAINING_PLAN_ARN_RE.match(a) for a in value):
        raise ConfigurationError(f"SSM parameter {name!r}: expected a JSON list of training plan ARNs, got {value!r}")
    return list(dict.fromkeys(value))


def describe_plan(clients: Any, arn: str) -> dict[str, Any] | None:
    """``DescribeTrainingPlan`` for ``arn`` (by its name), or ``None`` if it does not exist."""
    try:
        return clients.sagemaker.describe_training_plan(TrainingPlanName=arn.rsplit("/", 1)[-1])
    except Exception as exc:  # botocore ClientError; anything else propagates below
        if error_code(exc) in ("ResourceNotFound", "ValidationException"):
            return None
        raise


def judge_plan(
    arn: str, description: dict[str, Any] | None, request: SubmitRequest, now: datetime
) -> PlanVerdict:
    """Apply the eligibility rules (module docstring) to one described plan."""
    if description is None:
        return PlanVerdict(arn, False, "not found (DescribeTrainingPlan: ResourceNotFound)")
    status = description.get("Status")
    end = _utc(description.get("EndTime"))
    start = _utc(description.get("StartTime"))
    if status not in ELIGIBLE_STATUSES:
        return PlanVerdict(arn, False, f"status is {status} (needs Active or Scheduled)", end)
    targets = description.get("TargetResources") or []
    if "training-job" not in targets:
        return PlanVerdict(arn, False, f"reserved for {', '.join(targets) or 'nothing'}, not training-job", end)
    types = sorted({s.get("InstanceType") for s in description.get("ReservedCapacitySummaries") or [] if s.get("InstanceType")})
    if request.instance_type not in types:
        return PlanVerdict(
            arn, False, f"reserves {', '.join(types) or 'no instances'}, request needs {request.instance_type}", end
        )
    available = int(description.get("AvailableInstanceCount") or 0)
    if available < request.instance_count:
        return PlanVerdict(
            arn, False, f"{available} instance(s) available, request needs {request.instance_count}", end
        )
    if end is None:
        return PlanVerdict(arn, False, "has no EndTime", end)
    begins = max(now, start) if start else now
    room = end - begins
    needed = timedelta(seconds=request.max_runtime_seconds)
    if room < needed:
        hours = max(room.total_seconds(), 0) / 3600
        return PlanVerdict(
            arn,
            False,
            f"ends {end.isoformat()}, {hours:.1f} h after the job could start; request needs "
            f"max_runtime_hours={request.max_runtime_hours:g}",
            end,
        )
    when = "active" if status == "Active" else f"scheduled to start {start.isoformat() if start else '?'}"
    return PlanVerdict(
        arn, True, f"{when}, {available} {request.instance_type} available, ends {end.isoformat()}", end
    )


def choose_capacity(
    request: SubmitRequest,
    *,
    clients: Any,
    config: SubmitterConfig,
    now: datetime | None = None,
) -> list[CapacityChoice]:
    """Candidate capacities for ``request``, best first (one entry unless ``capacity`` is ``auto``).

    Raises:
        Refusal: ``InvalidRequest`` for a ``training_plan_arn`` that is not configured;
            ``NoCapacity`` listing every configured plan and why it was skipped.
    """
    now = now or datetime.now(timezone.utc)
    if request.capacity == "spot":
        return [CapacityChoice("spot", "spot capacity requested (managed spot training)")]
    if request.capacity == "on-demand":
        return [CapacityChoice("on-demand", "on-demand capacity requested")]

    order: Sequence[str] = ("training-plan",) if request.capacity == "training-plan" else config.capacity_fallback
    if request.training_plan_arn is not None and "training-plan" not in order:
        raise invalid(
            "training_plan_arn",
            request.training_plan_arn,
            f"no plan: capacity auto tries {', '.join(order)} here (training plans are not in the fallback order)",
        )
    verdicts: list[PlanVerdict] = []
    candidates: list[CapacityChoice] = []
    for kind in order:
        if kind == "training-plan":
            verdicts = _judge_configured_plans(request, clients=clients, config=config, now=now)
            eligible = sorted((v for v in verdicts if v.eligible), key=lambda v: (v.end_time, v.training_plan_arn))
            if eligible:
                best = eligible[0]
                best_name = best.training_plan_arn.rsplit("/", 1)[-1]
                skipped = tuple(
                    v if not v.eligible else PlanVerdict(
                        v.training_plan_arn, True, f"eligible, but expires after {best_name} ({v.reason})", v.end_time
                    )
                    for v in verdicts
                    if v is not best
                )
                others = f"; {len(eligible) - 1} other eligible plan(s) expire later" if len(eligible) > 1 else ""
                candidates.append(
                    CapacityChoice(
                        "training-plan",
                        f"training plan {best.training_plan_arn.rsplit('/', 1)[-1]}: {best.reason} "
                        f"(the eligible plan that expires first{others})",
                        training_plan_arn=best.training_plan_arn,
                        skipped=skipped,
                    )
                )
        else:
            why = _fallback_reason(kind, verdicts, order)
            candidates.append(CapacityChoice(kind, why, skipped=tuple(verdicts)))
    if not candidates:
        raise Refusal(
            "NoCapacity",
            _no_capacity_message(request, verdicts),
            details={
                "instance_type": request.instance_type,
                "instance_count": request.instance_count,
                "plans": [v.to_dict() for v in verdicts],
            },
        )
    return candidates


def _judge_configured_plans(
    request: SubmitRequest, *, clients: Any, config: SubmitterConfig, now: datetime
) -> list[PlanVerdict]:
    arns = configured_plan_arns(clients, config)
    if request.training_plan_arn is not None:
        if request.training_plan_arn not in arns:
            raise invalid(
                "training_plan_arn",
                request.training_plan_arn,
                "one of the configured plans: " + (", ".join(arns) or "(none configured)"),
            )
        arns = [request.training_plan_arn]
    return [judge_plan(arn, describe_plan(clients, arn), request, now) for arn in arns]


def _fallback_reason(kind: str, verdicts: list[PlanVerdict], order: Sequence[str]) -> str:
    what = "managed spot training" if kind == "spot" else "on-demand capacity"
    if "training-plan" not in order or order.index(kind) < order.index("training-plan"):
        return f"{what}: first in the configured fallback order"
    if not verdicts:
        return f"{what}: no training plan is configured"
    return f"{what}: no configured training plan is eligible ({len(verdicts)} skipped)"


def _no_capacity_message(request: SubmitRequest, verdicts: list[PlanVerdict]) -> str:
    head = f"no training plan can run {request.instance_count} x {request.instance_type} for {request.max_runtime_hours:g} h"
    if not verdicts:
        return head + ": no training plan is configured"
    reasons = "; ".join(f"{v.training_plan_arn.rsplit('/', 1)[-1]}: {v.reason}" for v in verdicts)
    return f"{head}: {reasons}"


def _utc(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    return None
