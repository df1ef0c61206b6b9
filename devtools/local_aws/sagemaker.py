"""SageMaker extensions of the ``trainctl local-aws`` emulator (on top of moto).

moto (5.2) has no training-plan operations, and its training jobs do not
behave like SageMaker's: ``DescribeTrainingJob`` replaces the job's
``MetricDefinitions`` with made-up ones, reports every job ``Completed`` at
once, and ``CreateTrainingJob`` silently overwrites a job of the same name.
:func:`install` patches moto's ``SageMakerResponse`` (in the emulator's own
process only) so that

* ``DescribeTrainingPlan``, ``ListTrainingPlans`` and
  ``SearchTrainingPlanOfferings`` exist, serve the seeded plans, and have
  their requests and responses checked against botocore's service model
  (:mod:`devtools.local_aws.shapes`). Plans are kept by ARN and are seen only from
  their own account and region; ``DescribeTrainingPlan`` takes a name or an
  ARN, as the real one does. A plan reserves one or more blocks
  (``ReservedCapacitySummaries``, gaps allowed); statuses follow the clock as
  SageMaker documents them (``Scheduled`` before the first block, ``Active``
  while one runs, ``Scheduled`` again in a gap, ``Expired`` after the last),
  and ``AvailableInstanceCount`` / ``InUseInstanceCount`` count the current
  (else the next) block and the emulator's running jobs on the plan;
* ``CreateTrainingJob`` enforces name uniqueness (``ResourceInUse``), checks
  ``TrainingPlanArn`` (a plan of the caller's account and region, reserving
  the instance type), the spot rules, and a ``VpcConfig`` and
  ``FileSystemDataSource`` channels against moto's EC2 and FSx
  (:mod:`devtools.local_aws.network`) as SageMaker does, puts a job on a
  ``Scheduled`` plan in ``Pending``, and stores the request as sent;
* ``DescribeTrainingJob`` returns the job as sent (``MetricDefinitions``,
  ``HyperParameters``, ``ResourceConfig`` with ``TrainingPlanArn``,
  ``CheckpointConfig``, ``Environment``, ``RetryStrategy`` ...) with a status
  lifecycle driven by :meth:`SageMakerExtension.set_job_status` (the
  emulator's admin endpoint): ``InProgress`` -> ``Completed`` / ``Failed`` /
  ``Stopping`` -> ``Stopped``, with ``FailureReason`` and
  ``FinalMetricDataList``;
* ``StopTrainingJob`` moves an ``InProgress`` job to ``Stopping``;
* ``InfraCheckConfig`` is kept and described as sent; :meth:`SageMakerExtension.fail_infra_checks` (``PUT
  /_local-aws/infra-check-failures``, :meth:`LocalAws.fail_infra_checks
  <devtools.local_aws.client.LocalAws.fail_infra_checks>`) makes the infrastructure health check of the next
  jobs created with ``EnableInfraCheck`` true fail: each ends ``Failed`` with :data:`INFRA_CHECK_FAILURE_REASON`
  before its trainer starts (no ``TrainingStartTime``, no billable time), when the job runner reaches it (after a
  plan's block starts), or at once when the emulator runs no jobs. SageMaker's own reason for such a failure is not
  published (:data:`platform_spec.health.INFRA_CHECK_ERROR`).

``Search`` of training jobs is :mod:`devtools.local_aws.search`'s. Job log lines go to CloudWatch Logs and
their metrics to CloudWatch as SageMaker puts them (:func:`publish_logs`).

This is an emulator for tests and demos, not SageMaker: there is no
scheduling, no container, no billing. With the job runner on
(:mod:`devtools.local_aws.jobs`) a created job really trains on the CPU and
moves itself through these statuses; every status change emits a state-change
event (:meth:`SageMakerExtension.notify`). It needs moto (the project's extra
``local``); without it, importing this module raises
:class:`devtools.local_aws.stack.EmulatorUnavailable` naming ``pip install .[local]``.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import itertools
import math
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from devtools.local_aws.shapes import operation_model, validate_input, validate_output, validate_shape
from devtools.local_aws.stack import MOTO_MISSING, EmulatorUnavailable
from platform_spec.capacity import USABLE_PLAN_STATUSES
from platform_spec.health import INFRA_CHECK_ERROR
from platform_spec.metric_lines import SAGEMAKER_LOG_GROUP, SAGEMAKER_METRIC_NAMESPACE
from platform_spec.runs import ALGORITHM_ERROR, TERMINAL_JOB_STATUSES
from platform_spec.runs import failure_reason as spec_failure_reason

try:  # moto is the extra `local`: this module is imported only once the emulator starts
    from moto.core.exceptions import ServiceException
    from moto.core.responses import ActionResult, EmptyResult
    from moto.sagemaker.exceptions import ResourceInUseException, ResourceNotFound, ValidationError
    from moto.sagemaker.models import sagemaker_backends
    from moto.sagemaker.responses import SageMakerResponse
except ImportError as exc:
    raise EmulatorUnavailable(f"{MOTO_MISSING} ({exc})") from None

ACTIVE_STATUSES = ("InProgress", "Stopping")
_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "InProgress": ("InProgress", "Completed", "Failed", "Stopping", "Stopped"),
    "Stopping": ("Stopped", "Failed"),
}
_SECONDARY = {
    "Completed": ("Completed", "Training job completed"),
    "Failed": ("Failed", "Training job failed"),
    "Stopping": ("Stopping", "Stopping the training job"),
    "Stopped": ("Stopped", "Training job stopped"),
}
INFRA_CHECK_FAILURE_REASON = spec_failure_reason(
    INFRA_CHECK_ERROR,
    "the infrastructure health check (InfraCheckConfig) found the job's instances unhealthy; nothing was trained "
    "(emulated: LocalAws.fail_infra_checks)",
)
"""``FailureReason`` of a job whose infrastructure health check the emulator fails (the error type is the
platform's choice: :data:`platform_spec.health.INFRA_CHECK_ERROR`)."""
_RELATIVE_TIME = re.compile(r"^now\s*(?:([+-])\s*(\d+(?:\.\d+)?)\s*([smhdw]))?$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def _milliseconds(moment: datetime) -> datetime:
    """``moment`` to the millisecond, the precision of SageMaker's timestamps on the wire."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


class InternalFailure(ServiceException):
    """The emulator produced a response its service model forbids (a bug in the emulator)."""

    code = "InternalFailure"


class TransitionError(ValueError):
    """An admin status change that SageMaker's lifecycle does not allow."""


def _seed_time(value: Any, now: datetime, where: str) -> datetime:
    """A seed timestamp: ``datetime``, epoch seconds, ISO 8601, or ``now``, ``now+14d``, ``now-1h`` (s, m, h, d, w).

    Raises:
        ValueError: an unreadable value, naming ``where`` it is.
    """
    try:
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return datetime.fromtimestamp(value, tz=UTC)
        if isinstance(value, str):
            match = _RELATIVE_TIME.match(value.strip())
            if match:
                sign, amount, unit = match.groups()
                delta = timedelta(seconds=float(amount) * _UNITS[unit]) if sign else timedelta(0)
                return now - delta if sign == "-" else now + delta
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
        raise ValueError(f"expected a timestamp (ISO 8601, epoch seconds or now[+-]N[smhdw]), got {value!r}")
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _block(
    plan_arn: str, number: int, instance_type: str, total: int, start: datetime, end: datetime, status: str
) -> dict[str, Any]:
    """A ``ReservedCapacitySummary`` with every field SageMaker reports (ARN, zone from the plan's ARN)."""
    region, account = plan_arn.split(":")[3:5]
    digest = hashlib.sha256(f"{plan_arn}#{number}".encode() if number else plan_arn.encode()).hexdigest()[:16]
    minutes = int((end - start).total_seconds() // 60)
    return {
        "ReservedCapacityArn": f"arn:aws:sagemaker:{region}:{account}:reserved-capacity/rc-{digest}",
        "ReservedCapacityType": "Instance",
        "InstanceType": instance_type,
        "TotalInstanceCount": total,
        "Status": status,
        "AvailabilityZone": f"{region}a",
        "DurationHours": minutes // 60,
        "DurationMinutes": minutes % 60,
        "StartTime": start,
        "EndTime": end,
    }


def _name_plan(where: str, plan: dict[str, Any], *, account: str, region: str) -> str:
    """Fill in the seed's ``TrainingPlanName`` or ``TrainingPlanArn`` from the other; returns the ARN."""
    arn, name = plan.get("TrainingPlanArn"), plan.get("TrainingPlanName")
    if not arn and not name:
        raise ValueError(f"{where}: needs TrainingPlanArn or TrainingPlanName")
    if arn and name and str(arn).rsplit("/", 1)[-1] != name:
        raise ValueError(f"{where}.TrainingPlanName: {name!r} is not the name in TrainingPlanArn {arn}")
    plan["TrainingPlanName"] = name = name or str(arn).rsplit("/", 1)[-1]
    plan["TrainingPlanArn"] = arn = arn or f"arn:aws:sagemaker:{region}:{account}:training-plan/{name}"
    return str(arn)


def _span_minutes(where: str, plan: Mapping[str, Any]) -> int:
    """Minutes from a plan's ``StartTime`` to its ``EndTime`` (both required of a plan seeded without blocks)."""
    for key in ("StartTime", "EndTime"):
        if key not in plan:
            raise ValueError(f"{where}.{key}: required")
    return int((plan["EndTime"] - plan["StartTime"]).total_seconds() // 60)


def _cover_blocks(where: str, plan: dict[str, Any], blocks: list[dict[str, Any]]) -> int:
    """Give the plan its ``blocks``, the times and count they imply; returns their reserved minutes."""
    first, last = min(b["StartTime"] for b in blocks), max(b["EndTime"] for b in blocks)
    plan.setdefault("StartTime", first)
    plan.setdefault("EndTime", last)
    if plan["StartTime"] > first or plan["EndTime"] < last:
        raise ValueError(
            f"{where}: StartTime..EndTime must cover every block ({first.isoformat()} .. {last.isoformat()})"
        )
    plan.setdefault("TotalInstanceCount", max(b["TotalInstanceCount"] for b in blocks))
    plan["ReservedCapacitySummaries"] = blocks
    return sum(b["DurationHours"] * 60 + b["DurationMinutes"] for b in blocks)


def _seed_blocks(
    where: str, summaries: Any, plan: Mapping[str, Any], instance_type: str | None, *, now: datetime
) -> list[dict[str, Any]]:
    """The seed's ``ReservedCapacitySummaries``, each filled in (:func:`_block`); blocks of one type never overlap."""
    if not isinstance(summaries, list) or not summaries:
        raise ValueError(f"{where}.ReservedCapacitySummaries: expected a non-empty list of blocks")
    blocks = [
        _seed_block(f"{where}.ReservedCapacitySummaries[{number}]", number, summary, plan, instance_type, now)
        for number, summary in enumerate(summaries)
    ]
    by_type: dict[str, list[dict[str, Any]]] = {}
    for block in blocks:
        by_type.setdefault(block["InstanceType"], []).append(block)
    for kind, same in by_type.items():
        same.sort(key=lambda b: b["StartTime"])
        for before, after in itertools.pairwise(same):
            if after["StartTime"] < before["EndTime"]:
                raise ValueError(
                    f"{where}.ReservedCapacitySummaries: {kind} blocks overlap ({before['StartTime'].isoformat()} .. "
                    f"{before['EndTime'].isoformat()} and {after['StartTime'].isoformat()} .. {after['EndTime'].isoformat()})"
                )
    return blocks


def _seed_block(
    at: str, number: int, summary: Any, plan: Mapping[str, Any], instance_type: str | None, now: datetime
) -> dict[str, Any]:
    if not isinstance(summary, Mapping):
        raise ValueError(f"{at}: expected an object with StartTime, EndTime and TotalInstanceCount")
    block = dict(copy.deepcopy(summary))
    for key in ("StartTime", "EndTime"):
        if key not in block:
            raise ValueError(f"{at}.{key}: required")
        block[key] = _seed_time(block[key], now, f"{at}.{key}")
    if block["EndTime"] <= block["StartTime"]:
        raise ValueError(f"{at}.EndTime: must be after StartTime")
    block.setdefault("InstanceType", instance_type)
    if block["InstanceType"] is None:
        raise ValueError(f"{at}.InstanceType: required (or InstanceType at plan level)")
    block.setdefault("TotalInstanceCount", plan.get("TotalInstanceCount"))
    if block["TotalInstanceCount"] is None:
        raise ValueError(f"{at}.TotalInstanceCount: required (or TotalInstanceCount at plan level)")
    filled = _block(
        plan["TrainingPlanArn"], number, block["InstanceType"], int(block["TotalInstanceCount"]),
        block["StartTime"], block["EndTime"], plan.get("Status", "Active"),
    )  # fmt: skip
    filled.update(block)
    return filled


def _clock_status(period: Mapping[str, Any], now: datetime) -> str:
    """A plan's or block's status by the clock: ``Scheduled`` before its ``StartTime``, ``Active``, ``Expired``
    from its ``EndTime``."""
    return "Expired" if now >= period["EndTime"] else "Active" if now >= period["StartTime"] else "Scheduled"


def _plan_status(plan: Mapping[str, Any], blocks: list[dict[str, Any]], now: datetime) -> str:
    """A usable plan's status at ``now``: its blocks' (``Scheduled`` again in a gap between two), else its own times."""
    if not blocks:
        return _clock_status(plan, now)
    if any(b["StartTime"] <= now < b["EndTime"] for b in blocks):
        return "Active"
    return "Expired" if now >= max(b["EndTime"] for b in blocks) else "Scheduled"


def _reserved_instances(plan: Mapping[str, Any], blocks: list[dict[str, Any]], now: datetime) -> int:
    """Instances of the blocks running at ``now``, else of those starting next; the plan's total without blocks."""
    current = [b for b in blocks if b["StartTime"] <= now < b["EndTime"]]
    if not current:
        upcoming = [b for b in blocks if b["StartTime"] > now]
        first = min((b["StartTime"] for b in upcoming), default=None)
        current = [b for b in upcoming if b["StartTime"] == first]
    return sum(int(b["TotalInstanceCount"]) for b in current) if current else int(plan["TotalInstanceCount"])


@dataclass
class JobRecord:
    """A training job as the emulator keeps it: the request as sent plus its lifecycle."""

    account: str
    region: str
    name: str
    arn: str
    params: dict[str, Any]
    created: datetime
    status: str = "InProgress"
    secondary: str = "Starting"
    transitions: list[dict[str, Any]] = field(default_factory=list)
    started: datetime | None = None
    ended: datetime | None = None
    modified: datetime | None = None
    failure_reason: str | None = None
    final_metrics: list[dict[str, Any]] = field(default_factory=list)
    infra_check_fails: bool = False
    """Its infrastructure health check fails (:meth:`SageMakerExtension.fail_infra_checks`)."""

    @property
    def plan_arn(self) -> str | None:
        return (self.params.get("ResourceConfig") or {}).get("TrainingPlanArn")

    @property
    def instance_count(self) -> int:
        return int((self.params.get("ResourceConfig") or {}).get("InstanceCount") or 0)

    def move(self, secondary: str, message: str, at: datetime) -> None:
        if self.transitions and "EndTime" not in self.transitions[-1]:
            self.transitions[-1]["EndTime"] = at
        self.transitions.append({"Status": secondary, "StartTime": at, "StatusMessage": message})
        self.secondary = secondary
        self.modified = at


class SageMakerExtension:
    """State of the emulator's training plans and training jobs (one per emulator process)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.plans: dict[str, dict[str, Any]] = {}
        self.jobs: dict[tuple[str, str, str], JobRecord] = {}
        self.runner: Any = None
        """The job runner (:class:`devtools.local_aws.jobs.JobRunner`) once the emulator serves; None: jobs never run."""
        self.events: Any = None
        """The event bus (:class:`devtools.local_aws.jobs.EventBus`); None: no state-change events."""
        self.infra_check_failures = 0
        """How many of the next jobs created with ``EnableInfraCheck`` true fail their check (:meth:`fail_infra_checks`)."""

    def fail_infra_checks(self, count: int) -> int:
        """Make the infrastructure health check of the next ``count`` jobs created with
        ``InfraCheckConfig.EnableInfraCheck`` true fail (0: none; replaces what was armed before): each ends
        ``Failed`` with :data:`INFRA_CHECK_FAILURE_REASON` before its trainer starts (module docstring). Returns
        ``count``.

        Raises:
            ValueError: ``count`` is not an integer >= 0.
        """
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ValueError(f"infra-check-failures count: got {count!r}; expected an integer >= 0")
        with self.lock:
            self.infra_check_failures = count
        return count

    def take_infra_check_failure(self, params: Mapping[str, Any]) -> bool:
        """Whether a job created with ``params`` fails its infrastructure health check (one armed failure used)."""
        with self.lock:
            if not (params.get("InfraCheckConfig") or {}).get("EnableInfraCheck") or self.infra_check_failures < 1:
                return False
            self.infra_check_failures -= 1
            return True

    # --- plans -----------------------------------------------------------------------------

    def seed_plans(
        self, seeds: Iterable[Mapping[str, Any]], *, account: str, region: str, replace: bool = True
    ) -> list[str]:
        """Load plans shaped like ``DescribeTrainingPlan``'s response; returns their ARNs.

        Plans are kept by ARN: two accounts (or regions) may each hold a plan of
        the same name. Accepted beyond the response shape:

        * ``InstanceType`` at plan level: the instance type of every block that
          names none; without ``ReservedCapacitySummaries``, one block spanning
          the plan's ``StartTime`` .. ``EndTime`` with ``TotalInstanceCount``
          instances is made of it;
        * ``ReservedCapacitySummaries`` entries (the plan's reserved blocks,
          possibly with gaps between them) need only ``StartTime``, ``EndTime``
          and ``TotalInstanceCount`` (default: the plan's); the ARN, type, zone,
          durations and status are filled in. Blocks of one instance type may
          not overlap. The plan's ``StartTime`` / ``EndTime`` default to the
          first block's start and the last block's end, and must cover them;
          ``TotalInstanceCount`` defaults to the largest block;
        * relative times (``now+14d``) anywhere a time is expected;
        * a missing ``TrainingPlanArn`` (made from the name, ``account`` and
          ``region``) or ``TrainingPlanName`` (the ARN's last part).

        Missing counts default to ``AvailableInstanceCount = TotalInstanceCount -
        InUseInstanceCount`` and ``TargetResources`` to ``["training-job"]``.
        The result is checked against botocore's ``DescribeTrainingPlan`` output shape.

        Raises:
            ValueError: naming the plan (index) and field that is wrong; nothing is loaded then.
        """
        now = datetime.now(UTC)
        loaded: dict[str, dict[str, Any]] = {}
        for index, seed in enumerate(seeds):
            plan = self._normalise_seed(index, seed, account=account, region=region, now=now)
            if plan["TrainingPlanArn"] in loaded:
                raise ValueError(f"plan[{index}].TrainingPlanArn: {plan['TrainingPlanArn']} is seeded twice")
            loaded[plan["TrainingPlanArn"]] = plan
        with self.lock:
            if replace:
                self.plans = loaded
            else:
                self.plans.update(loaded)
            return list(self.plans)

    def _normalise_seed(
        self, index: int, seed: Mapping[str, Any], *, account: str, region: str, now: datetime
    ) -> dict[str, Any]:
        where = f"plan[{index}]"
        if not isinstance(seed, Mapping):
            raise ValueError(f"{where}: expected an object shaped like DescribeTrainingPlan's response")
        plan = dict(copy.deepcopy(seed))
        instance_type = plan.pop("InstanceType", None)
        arn = _name_plan(where, plan, account=account, region=region)
        for key in ("StartTime", "EndTime"):
            if key in plan:
                plan[key] = _seed_time(plan[key], now, f"{where}.{key}")
        plan.setdefault("Status", "Active")
        plan.setdefault("TargetResources", ["training-job"])
        summaries = plan.get("ReservedCapacitySummaries")
        if summaries is not None:
            minutes = _cover_blocks(where, plan, _seed_blocks(where, summaries, plan, instance_type, now=now))
        else:
            minutes = _span_minutes(where, plan)
        if plan["EndTime"] <= plan["StartTime"]:
            raise ValueError(f"{where}.EndTime: must be after StartTime")
        total = plan.get("TotalInstanceCount")
        if total is None:
            raise ValueError(f"{where}.TotalInstanceCount: required")
        plan.setdefault("InUseInstanceCount", 0)
        plan.setdefault("AvailableInstanceCount", max(0, int(total) - int(plan["InUseInstanceCount"])))
        plan.setdefault("DurationHours", minutes // 60)
        plan.setdefault("DurationMinutes", minutes % 60)
        plan.setdefault("CurrencyCode", "USD")
        if instance_type is not None and summaries is None:
            plan["ReservedCapacitySummaries"] = [
                _block(arn, 0, instance_type, int(total), plan["StartTime"], plan["EndTime"], plan["Status"])
            ]
        problems = validate_shape(plan, operation_model("sagemaker", "DescribeTrainingPlan").output_shape, where)
        if problems:
            raise ValueError("; ".join(problems))
        return plan

    def find_plan(self, name_or_arn: str, *, account: str | None = None, region: str | None = None) -> str:
        """The key (ARN) of the plan ``name_or_arn`` names, as seen from ``account`` / ``region``.

        A name finds the plan of that name in ``account`` and ``region``; an ARN
        finds exactly that plan, and only from its own account and region (plans
        are not shared across accounts). ``None`` for ``account`` / ``region``: any.

        Raises:
            KeyError: no such plan there.
        """
        with self.lock:
            if name_or_arn.startswith("arn:"):
                parts = name_or_arn.split(":")
                foreign = (account is not None and parts[4:5] != [account]) or (
                    region is not None and parts[3:4] != [region]
                )
                if name_or_arn in self.plans and not foreign:
                    return name_or_arn
                raise KeyError(name_or_arn)
            for key, plan in self.plans.items():
                parts = key.split(":")
                if (
                    plan["TrainingPlanName"] == name_or_arn
                    and (account is None or parts[4] == account)
                    and (region is None or parts[3] == region)
                ):
                    return key
        raise KeyError(name_or_arn)

    def capacity_arns(self, plan_arn: str) -> list[str]:
        """The ``ReservedCapacityArn`` of each block of the plan ``plan_arn`` (none for a plan the emulator has not)."""
        with self.lock:
            plan = self.plans.get(plan_arn) or {}
            return [b["ReservedCapacityArn"] for b in plan.get("ReservedCapacitySummaries") or []]

    def describe_plan(
        self, name_or_arn: str, now: datetime | None = None, *, account: str | None = None, region: str | None = None
    ) -> dict[str, Any]:
        """The plan as ``DescribeTrainingPlan`` answers now (statuses and counts live).

        Status follows the clock as SageMaker documents it: ``Scheduled`` before
        the first block, ``Active`` while a block runs, back to ``Scheduled`` in a
        gap between blocks, ``Expired`` after the last (seeded ``Pending`` /
        ``Failed`` / ``Expired`` stay). Each block's status follows its own
        times. ``AvailableInstanceCount`` counts the block running now (else the
        next one) less the instances of the emulator's running jobs on the plan.

        Raises:
            KeyError: no such plan (see :meth:`find_plan`).
        """
        now = now or datetime.now(UTC)
        with self.lock:
            plan = copy.deepcopy(self.plans[self.find_plan(name_or_arn, account=account, region=region)])
            in_use = sum(
                job.instance_count
                for job in self.jobs.values()
                if job.plan_arn == plan["TrainingPlanArn"] and job.status in ACTIVE_STATUSES
            )
        blocks = plan.get("ReservedCapacitySummaries") or []
        status = plan["Status"]
        if status in USABLE_PLAN_STATUSES:
            status = _plan_status(plan, blocks, now)
            for block in blocks:
                block["Status"] = _clock_status(block, now)
        plan["Status"] = status
        block_total = _reserved_instances(plan, blocks, now)
        seeded_in_use = int(plan["InUseInstanceCount"])
        plan["InUseInstanceCount"] = seeded_in_use + in_use
        available = min(int(plan["AvailableInstanceCount"]), block_total - seeded_in_use) - in_use
        plan["AvailableInstanceCount"] = max(0, available) if status in USABLE_PLAN_STATUSES else 0
        return plan

    # --- jobs ------------------------------------------------------------------------------

    def find_job(self, name: str) -> JobRecord:
        """The job called ``name`` (any account/region). Raises ``KeyError``."""
        with self.lock:
            for (_, _, job_name), record in self.jobs.items():
                if job_name == name:
                    return record
        raise KeyError(name)

    def set_job_status(
        self,
        name: str,
        status: str,
        *,
        secondary_status: str | None = None,
        failure_reason: str | None = None,
        final_metrics: Mapping[str, float] | None = None,
        log_lines: Iterable[str] | None = None,
        now: datetime | None = None,
        message: str | None = None,
        record: JobRecord | None = None,
        before_start: bool = False,
    ) -> JobRecord:
        """Drive a job's lifecycle (the emulator's admin endpoint and job runner call this).

        ``final_metrics`` (metric name -> value) become ``FinalMetricDataList``;
        ``log_lines`` are matched with the job's own ``MetricDefinitions`` (the
        last match of each regex wins, as SageMaker reports final values) and
        merged under ``final_metrics``. ``message`` is the new secondary status's
        ``StatusMessage`` (default: one saying the emulator set it); ``record`` is the
        job itself (default: found by ``name``); ``before_start``: a terminal status reached before the job
        started training (no ``TrainingStartTime``, no training or billable time). Every change emits a
        state-change event (:meth:`notify`).

        Raises:
            KeyError: no such job.
            TransitionError: SageMaker's lifecycle does not allow the change.
        """
        now = now or datetime.now(UTC)
        with self.lock:
            job = record if record is not None else self.find_job(name)
            allowed = _TRANSITIONS.get(job.status, ())
            if status not in allowed:
                raise TransitionError(
                    f"training job {name!r} is {job.status}; it can move to {', '.join(allowed) or 'nothing (terminal)'}, not {status}"
                )
            if status == "InProgress":
                secondary = secondary_status or "Training"
                if job.started is None and secondary in ("Training", "Downloading", "DownloadingTrainingImage"):
                    job.started = now
                job.move(secondary, message or f"{secondary} (set through the emulator)", now)
            else:
                secondary, default_message = _SECONDARY[status]
                message = message or default_message
                if status == "Failed":
                    job.failure_reason = failure_reason or spec_failure_reason(
                        ALGORITHM_ERROR, "the job failed (set through the emulator)"
                    )
                    message = job.failure_reason
                if status in TERMINAL_JOB_STATUSES:
                    job.started = job.started if before_start else job.started or now
                    job.ended = now
                job.move(secondary_status or secondary, message, now)
            job.status = status
            metrics = dict(metrics_from_log(job.params, log_lines or ()))
            metrics.update(final_metrics or {})
            if metrics:
                job.final_metrics = [
                    {"MetricName": k, "Value": float(v), "Timestamp": now} for k, v in sorted(metrics.items())
                ]
            sync_moto_status(sagemaker_backends[job.account][job.region], job)
            self.notify(job)
            return job

    def notify(self, job: JobRecord) -> None:
        """Emit the job's ``SageMaker Training Job State Change`` event (its state now) on the event bus."""
        if self.events is None:
            return
        with self.lock:
            detail = self.describe_job(job)
            detail["Tags"] = {t["Key"]: t["Value"] for t in job.params.get("Tags") or []}
            self.events.emit(detail, arn=job.arn)

    def describe_job(self, job: JobRecord) -> dict[str, Any]:
        """``DescribeTrainingJob``'s answer: the request as sent plus the lifecycle fields."""
        shape = operation_model("sagemaker", "DescribeTrainingJob").output_shape
        out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in job.params.items() if k in shape.members}
        output_path = (job.params.get("OutputDataConfig") or {}).get("S3OutputPath", "").rstrip("/")
        out.update(
            {
                "TrainingJobName": job.name,
                "TrainingJobArn": job.arn,
                "ModelArtifacts": {"S3ModelArtifacts": f"{output_path}/{job.name}/output/model.tar.gz"},
                "TrainingJobStatus": job.status,
                "SecondaryStatus": job.secondary,
                "CreationTime": job.created,
                "LastModifiedTime": job.modified or job.created,
                "SecondaryStatusTransitions": copy.deepcopy(job.transitions),
                "EnableNetworkIsolation": bool(job.params.get("EnableNetworkIsolation", False)),
                "EnableInterContainerTrafficEncryption": bool(
                    job.params.get("EnableInterContainerTrafficEncryption", False)
                ),
                "EnableManagedSpotTraining": bool(job.params.get("EnableManagedSpotTraining", False)),
            }
        )
        # the times in milliseconds, as the wire carries them, and the seconds between those: a caller
        # computing them from what it received gets the same figure (microseconds could cross a second)
        if job.started:
            out["TrainingStartTime"] = _milliseconds(job.started)
        if job.ended:
            out["TrainingEndTime"] = _milliseconds(job.ended)
        if job.ended and job.started:
            elapsed = _milliseconds(job.ended) - _milliseconds(job.started)
            seconds = max(1, int(elapsed.total_seconds()))
            out["TrainingTimeInSeconds"] = seconds
            out["BillableTimeInSeconds"] = seconds
        if job.failure_reason:
            out["FailureReason"] = job.failure_reason
        if job.final_metrics:
            out["FinalMetricDataList"] = copy.deepcopy(job.final_metrics)
        return out


def metrics_from_log(params: Mapping[str, Any], lines: Iterable[str]) -> dict[str, float]:
    """Final metric values from log ``lines`` with the job's ``MetricDefinitions`` (last match wins).

    A captured value that is not a finite number (``nan``: the trainer's MFU on a CPU, which has no peak
    to divide by) is dropped: CloudWatch refuses it (``PutMetricData``: "The value NaN ... is invalid"),
    and one such value would fail its whole batch.
    """
    definitions = (params.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
    compiled = []
    for d in definitions:
        try:
            compiled.append((d["Name"], re.compile(d["Regex"])))
        except (KeyError, re.error):
            continue
    values: dict[str, float] = {}
    for line in lines:
        for metric, regex in compiled:
            match = regex.search(line)
            if match:
                try:
                    value = float(match.group(1))
                except (IndexError, ValueError):
                    continue
                if math.isfinite(value):
                    values[metric] = value
    return values


def publish_logs(
    client: Callable[[str], Any], job: JobRecord, lines: Sequence[str], times: Sequence[float] | None = None
) -> None:
    """Put ``lines`` in CloudWatch Logs and their metrics in CloudWatch, as SageMaker does.

    Group ``/aws/sagemaker/TrainingJobs``, stream ``<job>/algo-1-<creation epoch>``; metrics
    matched with the job's ``MetricDefinitions`` go to namespace ``/aws/sagemaker/TrainingJobs``,
    dimension ``TrainingJobName``. ``client(service)``: a boto3 client of the emulator. ``times``
    (epoch seconds, one per line): when each line was seen, the timestamp of its log event and its
    datapoints (default: now).
    """
    if not lines:
        return
    logs, cloudwatch = client("logs"), client("cloudwatch")
    stream = f"{job.name}/algo-1-{int(job.created.timestamp())}"
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_group(logGroupName=SAGEMAKER_LOG_GROUP)
    with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
        logs.create_log_stream(logGroupName=SAGEMAKER_LOG_GROUP, logStreamName=stream)
    seen = list(times) if times is not None else [time.time()] * len(lines)
    events = [{"timestamp": int(t * 1000), "message": line or " "} for t, line in zip(seen, lines, strict=True)]
    for start in range(0, len(events), 1000):  # PutLogEvents takes at most 10,000 events a call
        logs.put_log_events(
            logGroupName=SAGEMAKER_LOG_GROUP, logStreamName=stream, logEvents=events[start : start + 1000]
        )
    data = [
        {
            "MetricName": name,
            "Value": value,
            "Timestamp": datetime.fromtimestamp(t, tz=UTC),
            "Dimensions": [{"Name": "TrainingJobName", "Value": job.name}],
        }
        for t, line in zip(seen, lines, strict=True)
        for name, value in metrics_from_log(job.params, [line]).items()
    ]
    for start in range(0, len(data), 500):
        cloudwatch.put_metric_data(Namespace=SAGEMAKER_METRIC_NAMESPACE, MetricData=data[start : start + 500])


EXTENSION = SageMakerExtension()
"""The emulator process's SageMaker state."""


# --- moto response methods ------------------------------------------------------------------


def checked_params(response: SageMakerResponse, operation: str) -> dict[str, Any]:
    """The request's parameters, checked against botocore's model of ``operation`` (``ValidationException``)."""
    params = dict(response.params or {})
    problems = validate_input("sagemaker", operation, params)
    if problems:
        raise ValidationError(message=f"{operation}: " + "; ".join(problems))
    return params


def checked_result(operation: str, result: dict[str, Any]) -> ActionResult:
    """``result`` as moto's answer, checked against botocore's model of ``operation`` (``InternalFailure``)."""
    problems = validate_output("sagemaker", operation, result)
    if problems:
        raise InternalFailure(f"emulator bug: {operation} response violates the service model: " + "; ".join(problems))
    return ActionResult(result)


def describe_training_plan(self: SageMakerResponse) -> ActionResult:
    params = checked_params(self, "DescribeTrainingPlan")
    name = params["TrainingPlanName"]  # a name or an ARN (TrainingPlanNameOrArn)
    try:
        plan = EXTENSION.describe_plan(name, account=self.current_account, region=self.region)
    except KeyError:
        raise ResourceNotFound(message=f"Training plan {name} not found.") from None
    return checked_result("DescribeTrainingPlan", plan)


_SUMMARY_KEYS = tuple(
    operation_model("sagemaker", "ListTrainingPlans").output_shape.members["TrainingPlanSummaries"].member.members
)


def list_training_plans(self: SageMakerResponse) -> ActionResult:
    params = checked_params(self, "ListTrainingPlans")
    now = datetime.now(UTC)
    account, region = self.current_account, self.region
    with EXTENSION.lock:
        plans = [
            EXTENSION.describe_plan(arn, now) for arn in EXTENSION.plans if arn.split(":")[3:5] == [region, account]
        ]
    plans = [p for p in plans if _listed(p, params)]
    sort_by = params.get("SortBy", "StartTime")
    sort_key = sort_by if sort_by in ("TrainingPlanName", "Status") else "StartTime"
    plans.sort(key=lambda p: p[sort_key], reverse=params.get("SortOrder", "Ascending") == "Descending")
    try:
        start = int(params.get("NextToken") or 0)
    except ValueError:
        raise ValidationError(message="Invalid NextToken") from None
    size = params.get("MaxResults") or 100
    page = plans[start : start + size]
    result: dict[str, Any] = {"TrainingPlanSummaries": [{k: p[k] for k in _SUMMARY_KEYS if k in p} for p in page]}
    if start + size < len(plans):
        result["NextToken"] = str(start + size)
    return checked_result("ListTrainingPlans", result)


def _listed(plan: Mapping[str, Any], params: Mapping[str, Any]) -> bool:
    """Whether ``ListTrainingPlans``' ``Filters`` (every ``Status`` one), ``StartTimeAfter`` and
    ``StartTimeBefore`` keep ``plan``."""
    after, before = params.get("StartTimeAfter"), params.get("StartTimeBefore")
    return (
        all(plan["Status"] == f["Value"] for f in params.get("Filters") or [] if f["Name"] == "Status")
        and (not after or plan["StartTime"] > after)
        and (not before or plan["StartTime"] < before)
    )


def search_training_plan_offerings(self: SageMakerResponse) -> ActionResult:
    params = checked_params(self, "SearchTrainingPlanOfferings")
    instance_type = params.get("InstanceType")
    count = params.get("InstanceCount") or 1
    hours = int(params.get("DurationHours") or 24)
    now = datetime.now(UTC)
    start = max(params.get("StartTimeAfter") or now, now)
    start = (start + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    end = start + timedelta(hours=hours)
    offerings: list[dict[str, Any]] = []
    before = params.get("EndTimeBefore")
    if instance_type and (before is None or end <= before):
        digest = hashlib.sha256(f"{instance_type}/{count}/{start.isoformat()}/{hours}".encode()).hexdigest()[:24]
        offerings.append(
            {
                "TrainingPlanOfferingId": f"tpo-{digest}",
                "TargetResources": list(params.get("TargetResources") or ["training-job"]),
                "RequestedStartTimeAfter": params.get("StartTimeAfter") or now,
                **({"RequestedEndTimeBefore": before} if before else {}),
                "DurationHours": hours,
                "DurationMinutes": 0,
                "CurrencyCode": "USD",
                "ReservedCapacityOfferings": [
                    {
                        "ReservedCapacityType": "Instance",
                        "InstanceType": instance_type,
                        "InstanceCount": count,
                        "AvailabilityZone": f"{self.region}a",
                        "DurationHours": hours,
                        "DurationMinutes": 0,
                        "StartTime": start,
                        "EndTime": end,
                    }
                ],
            }
        )
    return checked_result("SearchTrainingPlanOfferings", {"TrainingPlanOfferings": offerings})


def _check_spot(spot: bool, stopping: Mapping[str, Any]) -> None:
    """SageMaker's rules for ``MaxWaitTimeInSeconds``, which only (and always) a managed spot job has."""
    if spot and "MaxWaitTimeInSeconds" not in stopping:
        raise ValidationError(message="MaxWaitTimeInSeconds is required when EnableManagedSpotTraining is true.")
    if not spot and "MaxWaitTimeInSeconds" in stopping:
        raise ValidationError(message="MaxWaitTimeInSeconds can be set only when EnableManagedSpotTraining is true.")
    if spot and stopping.get("MaxWaitTimeInSeconds", 0) < stopping.get("MaxRuntimeInSeconds", 0):
        raise ValidationError(message="MaxWaitTimeInSeconds must be greater than or equal to MaxRuntimeInSeconds.")


def _check_plan(plan_arn: str, instance_type: str | None, *, account: str, region: str) -> None:
    """A job's ``TrainingPlanArn``: a plan of the caller's account and region, reserving ``instance_type``,
    usable and meant for training jobs."""
    try:
        plan = EXTENSION.describe_plan(plan_arn, account=account, region=region)
    except KeyError:
        raise ValidationError(
            message=f"Training plan {plan_arn} does not exist in account {account}, region {region}."
        ) from None
    types = {s["InstanceType"] for s in plan.get("ReservedCapacitySummaries", [])}
    if instance_type not in types:
        raise ValidationError(
            message=f"Instance type {instance_type} does not match training plan {plan_arn} ({', '.join(sorted(types))})."
        )
    if plan["Status"] not in USABLE_PLAN_STATUSES or "training-job" not in plan.get("TargetResources", []):
        raise ValidationError(message=f"Training plan {plan_arn} is {plan['Status']} and cannot run training jobs.")


def _check_network(params: Mapping[str, Any], *, account: str, region: str) -> None:
    """A job's ``VpcConfig`` and ``FileSystemDataSource`` channels against moto's EC2 and FSx
    (:mod:`devtools.local_aws.network`, imported only for such a job: moto's EC2 models take a while to import)."""
    has_file_system = any(
        "FileSystemDataSource" in (c.get("DataSource") or {}) for c in params.get("InputDataConfig") or []
    )
    if not params.get("VpcConfig") and not has_file_system:
        return
    from devtools.local_aws import network

    if params.get("VpcConfig"):
        network.check_vpc_config(params["VpcConfig"], account=account, region=region)
    elif has_file_system:
        raise ValidationError(
            message="VpcConfig: a job with a FileSystemDataSource channel needs a VpcConfig whose subnets reach "
            "the file system."
        )
    network.check_file_systems(params, account=account, region=region)


def create_training_job(self: SageMakerResponse) -> ActionResult:
    params = checked_params(self, "CreateTrainingJob")
    name = params.get("TrainingJobName")
    backend = self.sagemaker_backend
    resource = params.get("ResourceConfig") or {}
    stopping = params.get("StoppingCondition") or {}
    spot = bool(params.get("EnableManagedSpotTraining"))
    plan_arn = resource.get("TrainingPlanArn")
    _check_spot(spot, stopping)
    if plan_arn:
        if spot:
            raise ValidationError(message="Managed spot training cannot be used with a training plan.")
        _check_plan(plan_arn, resource.get("InstanceType"), account=backend.account_id, region=backend.region_name)
    _check_network(params, account=backend.account_id, region=backend.region_name)
    now = datetime.now(UTC)
    with EXTENSION.lock:
        if name in backend.training_jobs:
            raise ResourceInUseException(
                message=f"Training job names must be unique within an AWS account and region, and a training job "
                f"with this name already exists ({backend.training_jobs[name].arn})"
            )
        job = backend.create_training_job(
            training_job_name=name,
            hyper_parameters=copy.deepcopy(params.get("HyperParameters")),
            algorithm_specification=copy.deepcopy(params.get("AlgorithmSpecification")),
            role_arn=params.get("RoleArn"),
            input_data_config=copy.deepcopy(params.get("InputDataConfig")),
            output_data_config=copy.deepcopy(params.get("OutputDataConfig")),
            resource_config=copy.deepcopy(resource),
            vpc_config=copy.deepcopy(params.get("VpcConfig")),
            stopping_condition=copy.deepcopy(stopping),
            tags=copy.deepcopy(params.get("Tags")),
            enable_network_isolation=params.get("EnableNetworkIsolation", False),
            enable_inter_container_traffic_encryption=params.get("EnableInterContainerTrafficEncryption", False),
            enable_managed_spot_training=spot,
            checkpoint_config=copy.deepcopy(params.get("CheckpointConfig")),
            debug_hook_config=copy.deepcopy(params.get("DebugHookConfig")),
            debug_rule_configurations=copy.deepcopy(params.get("DebugRuleConfigurations")),
            tensor_board_output_config=copy.deepcopy(params.get("TensorBoardOutputConfig")),
            experiment_config=copy.deepcopy(params.get("ExperimentConfig")),
        )
        job.training_job_status = "InProgress"
        job.secondary_status = "Starting"
        record = JobRecord(
            account=backend.account_id,
            region=backend.region_name,
            name=name,
            arn=job.arn,
            params=copy.deepcopy(params),
            created=now,
            infra_check_fails=EXTENSION.take_infra_check_failure(params),
        )
        pending = plan_arn and EXTENSION.describe_plan(plan_arn, now)["Status"] == "Scheduled"
        if pending:
            record.move("Pending", "Waiting for the training plan to start", now)
        else:
            record.move("Starting", "Launching requested ML instances", now)
        EXTENSION.jobs[(record.account, record.region, name)] = record
        EXTENSION.notify(record)
        if EXTENSION.runner is not None:
            EXTENSION.runner.job_created(record)
        if record.infra_check_fails and not (EXTENSION.runner is not None and EXTENSION.runner.executes(name)):
            EXTENSION.set_job_status(
                name, "Failed", failure_reason=INFRA_CHECK_FAILURE_REASON, record=record, before_start=True
            )
    return ActionResult({"TrainingJobArn": job.arn})


def _record(self: SageMakerResponse, name: str) -> JobRecord:
    record = EXTENSION.jobs.get((self.sagemaker_backend.account_id, self.sagemaker_backend.region_name, name))
    if record is None:
        arn = f"arn:aws:sagemaker:{self.region}:{self.current_account}:training-job/{name}"
        raise ValidationError(message=f"Requested resource not found: training job {arn}")
    return record


def describe_training_job(self: SageMakerResponse) -> ActionResult:
    name = self._get_param("TrainingJobName")
    with EXTENSION.lock:
        result = EXTENSION.describe_job(_record(self, name))
    return checked_result("DescribeTrainingJob", result)


def stop_training_job(self: SageMakerResponse) -> EmptyResult:
    name = self._get_param("TrainingJobName")
    with EXTENSION.lock:
        record = _record(self, name)
        if record.status != "InProgress":
            raise ValidationError(message=f"The training job {name} is {record.status} and cannot be stopped.")
        EXTENSION.set_job_status(name, "Stopping", record=record)
        if EXTENSION.runner is not None:
            EXTENSION.runner.stop_requested(name)  # SIGTERM to an executed job's entry point
    return EmptyResult()


def sync_moto_status(backend: Any, record: JobRecord) -> None:
    """Keep moto's own job object (``ListTrainingJobs``, ``Search``) in step with the record."""
    job = backend.training_jobs.get(record.name)
    if job is not None:
        job.training_job_status = record.status
        job.secondary_status = record.secondary
        job.last_modified_time = record.modified or record.created
        if record.ended:
            job.training_end_time = record.ended


_PATCHES = {
    "describe_training_plan": describe_training_plan,
    "list_training_plans": list_training_plans,
    "search_training_plan_offerings": search_training_plan_offerings,
    "create_training_job": create_training_job,
    "describe_training_job": describe_training_job,
    "stop_training_job": stop_training_job,
}


def install() -> None:
    """Patch moto's ``SageMakerResponse`` with the methods above (idempotent; emulator process only)."""
    for name, function in _PATCHES.items():
        setattr(SageMakerResponse, name, function)
