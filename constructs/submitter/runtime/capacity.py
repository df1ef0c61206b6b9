"""Capacity choice: which training plan (or spot / on-demand) a job runs on.

Plan ARNs come from the SSM String parameter the stack writes (a JSON list of ARNs), cached for
:data:`.aws.PLAN_ARNS_MAX_AGE_S` seconds. An entry that is not a training-plan ARN (an operator's edit
with a trailing newline, a bare name) or is a plan of another region or account
(:mod:`platform_spec.training_plans`) is skipped with the reason naming it and never described: a plan is
identified by its full ARN, never by its name alone. Each other plan is described
(``DescribeTrainingPlan`` with the ARN, never cached: availability changes) and judged by
:func:`judge_plan`.

**Blocks.** A plan reserves capacity in one or more blocks (``ReservedCapacitySummaries``, each with its
own ``InstanceType``, ``TotalInstanceCount``, ``StartTime``, ``EndTime`` and ``Status``), possibly with
gaps between them. A job submitted to a plan runs in the block active when it starts, else it waits
``Pending`` for the next ("For plans with multiple discontinuous reserved capacities, the status reverts
to Scheduled between active periods"; "Training jobs associated with the plan remain in Pending status
until the plan becomes Active",
https://docs.aws.amazon.com/sagemaker/latest/dg/training-plan-details-using-api-cli-sdk.html). That
block is judged, not the plan's outer times. Its usable time ends
:data:`platform_spec.capacity.CAPACITY_BLOCK_RECLAIM_S` (30 minutes) before its ``EndTime``, when
SageMaker starts reclaiming its instances. A plan is **eligible** when

* its status is ``Active`` or ``Scheduled`` and its ``TargetResources`` include ``training-job``,
* it has a block of the request's instance type whose usable time has not ended,
* the job's block starts within :data:`platform_spec.capacity.PENDING_LIMIT_S` (2 days) of now,
* the block's usable time from the job's start covers ``max_runtime_hours``; for a run's segment, the
  trainer's stop margin (:data:`platform_spec.capacity.STOP_MARGIN_S`) plus the run's
  ``min_segment_minutes`` (:attr:`platform_spec.runs.RunSpec.min_segment_s`) is enough: the trainer
  checkpoints and stops at the block's end, and the run continues (:mod:`platform_spec.runs`);
* in VPC mode, the block's ``AvailabilityZone`` is one the job may run in (:func:`.network.allowed_zones`:
  a zone with a platform subnet, or for a job reading the FSx for Lustre file system, that file system's
  zone); the job then runs in that zone's subnets (:func:`.network.job_subnets`).

The **job's block** is the first usable block (by start) with ``instance_count`` instances:
``min(AvailableInstanceCount, TotalInstanceCount)`` for the block active now (``AvailableInstanceCount``
describes the plan now), ``TotalInstanceCount`` for a later one. A waiting job starts as soon as a block
has its instances ("the job waits until it becomes available", the same page), so a block with enough
instances but too little time is not skipped for a later one: the plan is refused. The verdict's reason
names the block and the earlier blocks the job cannot start in.

**Rules** (``capacity.rule`` in the response, with ``capacity.reason``; the log line ``capacity chosen``
carries both). Reserved capacity is meant to be used before it lapses, but never at the price of a wait
while a plan can run the job at once:

1. ``named-plan``: the request's ``training_plan_arn``, if eligible.
2. ``starts-now-expires-first``: among the eligible plans whose block is active now, the one whose
   block's usable time ends first (ties: the ARN).
3. ``starts-soonest``: only when no plan can start the job now, the eligible plan whose block starts
   first (ties: the earlier end, then the ARN); the job waits ``Pending`` until then.
4. ``fallback-order`` (``capacity: auto``): spot / on-demand in the configured order; ``requested``: the
   request asked for spot or on-demand; ``idempotent-replay``: a repeated request, answered with its job.

``capacity: auto`` yields candidates in the configured fallback order (``training-plan``, ``spot``,
``on-demand`` by default); the submitter tries the next when SageMaker answers ``ResourceLimitExceeded``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger

from platform_spec.capacity import CAPACITY_BLOCK_RECLAIM_S, PENDING_LIMIT_S, STOP_MARGIN_S, USABLE_PLAN_STATUSES
from platform_spec.errors import FieldError
from platform_spec.training_plans import TRAINING_PLAN_ARN_FORMAT, TRAINING_PLAN_ARN_PATTERN, foreign_reason

from .aws import NOT_FOUND_CODES, PLAN_ARNS_MAX_AGE_S, Clients, error_code
from .config import SubmitterConfig
from .errors import ConfigurationError, Refusal, invalid
from .network import JobZones, allowed_zones
from .request import SubmitRequest
from .settings import SERVICE_NAME
from .training_job import utc

if TYPE_CHECKING:
    from mypy_boto3_sagemaker.type_defs import DescribeTrainingPlanResponseTypeDef

logger = Logger(service=SERVICE_NAME, child=True)

UNUSABLE_BLOCK_STATUSES = ("Expired", "Failed")


RULE_NAMED_PLAN = "named-plan"
RULE_STARTS_NOW_EXPIRES_FIRST = "starts-now-expires-first"
RULE_STARTS_SOONEST = "starts-soonest"
RULE_FALLBACK_ORDER = "fallback-order"
RULE_REQUESTED = "requested"
RULE_IDEMPOTENT_REPLAY = "idempotent-replay"

_RECLAIM = timedelta(seconds=CAPACITY_BLOCK_RECLAIM_S)
_RECLAIM_TEXT = f"{CAPACITY_BLOCK_RECLAIM_S // 60} min"
_USABLE_TEXT = " or ".join(USABLE_PLAN_STATUSES)


@dataclass(frozen=True)
class PlanVerdict:
    """One configured plan and whether the request may use it.

    Attributes:
        training_plan_arn: the plan.
        eligible: usable for this request.
        reason: why (or why not), one phrase.
        end_time: ``EndTime`` (UTC) of the block the job would run in, when known.
        usable_end: ``end_time`` less the reclaim time (:data:`platform_spec.capacity.CAPACITY_BLOCK_RECLAIM_S`).
        start_time: when the job would start (UTC): now, or the start of the block it waits for.
        starts_now: the job's block is active now (the job does not wait).
        availability_zone: the zone of the job's block (its ``AvailabilityZone``), when known.
    """

    training_plan_arn: str
    eligible: bool
    reason: str
    end_time: datetime | None = None
    usable_end: datetime | None = None
    start_time: datetime | None = None
    starts_now: bool = False
    availability_zone: str | None = None

    @property
    def name(self) -> str:
        """The plan's name (the ARN's last part); a malformed list entry as ``repr`` (no raw control characters)."""
        if TRAINING_PLAN_ARN_PATTERN.fullmatch(self.training_plan_arn):
            return self.training_plan_arn.rsplit("/", 1)[-1]
        return repr(self.training_plan_arn)

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
        rule: which rule decided, one of the ``RULE_*`` values (module docstring; empty: not stated).
        start_time: for a plan whose block starts later, when the job would start (UTC; it waits ``Pending``
            until then); ``None``: as soon as it is created. A run's deadline bounds its runtime from then.
        availability_zone: for a plan, the zone of the job's block: in VPC mode the job gets that zone's
            subnets (:func:`.network.job_subnets`); ``None``: not bound to a zone.
    """

    type: str
    reason: str
    training_plan_arn: str | None = None
    skipped: tuple[PlanVerdict, ...] = field(default_factory=tuple)
    rule: str = ""
    start_time: datetime | None = None
    availability_zone: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.training_plan_arn:
            out["training_plan_arn"] = self.training_plan_arn
        if self.availability_zone:
            out["availability_zone"] = self.availability_zone
        if self.rule:
            out["rule"] = self.rule
        out["reason"] = self.reason
        if self.skipped:
            out["skipped_plans"] = [v.to_dict() for v in self.skipped]
        return out


def configured_plan_entries(clients: Clients, config: SubmitterConfig) -> list[Any]:
    """The entries of the SSM parameter's JSON list, duplicates dropped (cached briefly per warm function).

    Entries are returned as they are: choosing a plan skips each entry that is
    not a training-plan ARN with a reason naming it, so one malformed entry (a trailing newline, a name
    without its ARN) blocks neither the other plans nor ``auto``'s spot and
    on-demand fallback.

    Raises:
        ConfigurationError: the parameter is missing, not JSON, or not a JSON list.
        botocore.exceptions.ClientError: a transient fault that outlived botocore's retries.
    """
    from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError, TransformParameterError

    name = config.training_plan_arns_parameter
    try:
        # any JSON value (Powertools types a json transform's result as a dict): checked below
        value: object = clients.parameters.get(name, max_age=PLAN_ARNS_MAX_AGE_S, transform="json")
    except GetParameterError as exc:
        cause = exc.__context__
        if cause is not None and error_code(cause) not in (None, "ParameterNotFound"):
            raise cause from None  # throttling, 5xx, access denied: not a configuration problem
        raise ConfigurationError(f"SSM parameter {name!r} could not be read: {exc}") from None
    except TransformParameterError as exc:
        raise ConfigurationError(f"SSM parameter {name!r} is not JSON: {exc}") from None
    if not isinstance(value, list):
        raise ConfigurationError(f"SSM parameter {name!r}: expected a JSON list of training plan ARNs, got {value!r}")
    entries: list[Any] = []
    for entry in value:
        if entry not in entries:
            entries.append(entry)
    return entries


def malformed_entry_reason(entry: Any) -> str | None:
    """Why an entry of the plan list is not a training-plan ARN, or ``None`` when it is one."""
    if isinstance(entry, str) and TRAINING_PLAN_ARN_PATTERN.fullmatch(entry):
        return None
    return f"not a training-plan ARN: {entry!r} (expected {TRAINING_PLAN_ARN_FORMAT})"


def describe_plan(clients: Clients, arn: str) -> DescribeTrainingPlanResponseTypeDef | None:
    """``DescribeTrainingPlan`` for the full ``arn`` (never its name alone), or ``None`` if it does not exist.

    ``TrainingPlanName`` accepts a name or an ARN (botocore's ``TrainingPlanNameOrArn``);
    the ARN names the account and region, so a plan of the same name elsewhere is never
    taken for this one.
    """
    try:
        return clients.sagemaker.describe_training_plan(TrainingPlanName=arn)
    except Exception as exc:  # botocore ClientError; anything else propagates below
        if error_code(exc) in NOT_FOUND_CODES:
            return None
        raise


@dataclass(frozen=True)
class _Block:
    start: datetime
    end: datetime
    total: int
    arn: str | None
    zone: str | None

    @property
    def usable_end(self) -> datetime:
        return self.end - _RECLAIM


def _blocks(description: Mapping[str, Any], instance_type: str) -> tuple[list[_Block], list[str]]:
    """The plan's blocks of ``instance_type`` by start, and notes on the ones that cannot be judged."""
    plan_start, plan_end = utc(description.get("StartTime")), utc(description.get("EndTime"))
    blocks, notes = [], []
    for summary in description.get("ReservedCapacitySummaries") or []:
        if summary.get("InstanceType") != instance_type or summary.get("Status") in UNUSABLE_BLOCK_STATUSES:
            continue
        start = utc(summary.get("StartTime")) or plan_start
        end = utc(summary.get("EndTime")) or plan_end
        if start is None or end is None:
            notes.append(f"block {summary.get('ReservedCapacityArn', '?')} has no StartTime/EndTime")
            continue
        total, arn = int(summary.get("TotalInstanceCount") or 0), summary.get("ReservedCapacityArn")
        zone = summary.get("AvailabilityZone")
        blocks.append(_Block(start, end, total, arn, zone))
    blocks.sort(key=lambda b: (b.start, b.end))
    return blocks, notes


def judge_plan(
    arn: str,
    description: Mapping[str, Any] | None,
    request: SubmitRequest,
    now: datetime,
    zones: JobZones | None = None,
) -> PlanVerdict:
    """Apply the eligibility rules (module docstring) to one described plan; ``zones``: the availability zones
    the job may run in (VPC mode, :func:`.network.allowed_zones`), ``None``: any."""
    if description is None:
        return PlanVerdict(arn, False, "not found (DescribeTrainingPlan: ResourceNotFound)")
    refused = _plan_refusal(arn, description, request)
    if refused is not None:
        return refused
    blocks, notes = _blocks(description, request.instance_type)
    usable = [b for b in blocks if b.usable_end > now]
    if not usable:
        if not blocks:
            return PlanVerdict(arn, False, "; ".join(notes) or f"no {request.instance_type} block is {_USABLE_TEXT}")
        why = (
            f"its last {request.instance_type} block ends {blocks[-1].end.isoformat()}; instances are reclaimed "
            f"{_RECLAIM_TEXT} before a block ends, so none is usable after now"
        )
        return PlanVerdict(arn, False, why, blocks[-1].end)
    available_now = int(description.get("AvailableInstanceCount") or 0)
    passed: list[str] = []  # blocks the job cannot start in (too few instances), each with why
    for index, block in enumerate(usable):
        verdict = _judge_block(arn, block, usable[index + 1 :], passed, available_now, request, now, zones)
        if verdict is not None:
            return verdict
    return PlanVerdict(arn, False, "; ".join(passed), usable[-1].end, usable[-1].usable_end)


def _plan_refusal(arn: str, description: Mapping[str, Any], request: SubmitRequest) -> PlanVerdict | None:
    """The plan's own refusal (another plan's answer, its status, its target resources, its instance types)."""
    described = description.get("TrainingPlanArn")
    if described is not None and described != arn:
        return PlanVerdict(arn, False, f"DescribeTrainingPlan answered for {described}, a different plan")
    status = description.get("Status")
    if status not in USABLE_PLAN_STATUSES:
        return PlanVerdict(arn, False, f"status is {status} (needs {_USABLE_TEXT})", utc(description.get("EndTime")))
    targets = description.get("TargetResources") or []
    if "training-job" not in targets:
        return PlanVerdict(arn, False, f"reserved for {', '.join(targets) or 'nothing'}, not training-job")
    summaries = description.get("ReservedCapacitySummaries") or []
    types = sorted({s.get("InstanceType") for s in summaries if s.get("InstanceType")})
    if request.instance_type not in types:
        needs = f"reserves {', '.join(types) or 'no instances'}, request needs {request.instance_type}"
        return PlanVerdict(arn, False, needs)
    return None


def _judge_block(
    arn: str,
    block: _Block,
    later: list[_Block],
    passed: list[str],
    available_now: int,
    request: SubmitRequest,
    now: datetime,
    zones: JobZones | None = None,
) -> PlanVerdict | None:
    """The verdict when the job would start in ``block``; ``None`` (and a note in ``passed``) when the block
    has too few instances for it, so the job waits for a later one. A block in a zone not among ``zones`` is
    the job's all the same (SageMaker starts it there): the plan is refused, naming the zones."""
    starts_now = block.start <= now
    job_start = now if starts_now else block.start
    window = f"block {block.start.isoformat()} to {block.end.isoformat()}"
    before = "; ".join(passed) + "; " if passed else ""
    if not starts_now and (job_start - now).total_seconds() > PENDING_LIMIT_S:
        return PlanVerdict(
            arn,
            False,
            f"{before}its next {request.instance_type} block starts {block.start.isoformat()}, "
            f"{(job_start - now).total_seconds() / 86400:.1f} days from now; SageMaker ends a job that waits "
            f"Pending on a plan for more than {PENDING_LIMIT_S // 86400} days (InsufficientCapacityError)",
            block.end, block.usable_end, job_start,
        )  # fmt: skip
    # AvailableInstanceCount describes the plan now: it bounds the active block only; a later
    # block starts with every instance it reserves
    instances = min(available_now, block.total) if starts_now else block.total
    if instances < request.instance_count:
        where = "" if starts_now else f" in its {window}"
        passed.append(f"{instances} instance(s) available{where}, request needs {request.instance_count}")
        return None
    # SageMaker starts a waiting job as soon as a block has its instances: this block is the job's
    room = block.usable_end - job_start
    run_segment = request.run is not None and timedelta(seconds=request.run.least_segment_s) <= room
    times = (block.end, block.usable_end, job_start, starts_now, block.zone)
    if zones is not None and block.zone not in zones.zones:
        return PlanVerdict(arn, False, f"{before}{window}: {zones.refusal(block.zone)}", *times)
    if room < timedelta(seconds=request.max_runtime_seconds) and not run_segment:
        return PlanVerdict(arn, False, f"{before}{window}: {_too_short(room, later, request)}", *times)
    if zones is not None:
        window += f" in {block.zone}"
    if starts_now:
        when = f"active, {instances} {request.instance_type} available now"
    else:
        hours = (job_start - now).total_seconds() / 3600
        when = (
            f"scheduled: its block starts {block.start.isoformat()} ({hours:.1f} h from now; the job waits Pending), "
            f"{instances} {request.instance_type} available"
        )
    earlier = f"; it cannot start in an earlier block: {'; '.join(passed)}" if passed else ""
    if room < timedelta(seconds=request.max_runtime_seconds):
        earlier += (
            f"; the block leaves {room.total_seconds() / 3600:.1f} h of max_runtime_hours="
            f"{request.max_runtime_hours:g}: the run's segment ends at the block's end and the run continues"
        )
    return PlanVerdict(arn, True, f"{when}, {window} (usable until {block.usable_end.isoformat()}){earlier}", *times)


def _too_short(room: timedelta, later: list[_Block], request: SubmitRequest) -> str:
    """Why a block's usable time is too short for the job (and, for a run's segment, for its least time)."""
    hours = max(room.total_seconds(), 0) / 3600
    nxt = f"; its next block starts {later[0].start.isoformat()}" if later else ""
    if request.run is not None:
        least = request.run.least_segment_s
        nxt = (
            f"; a run's segment may end with the block, but needs at least {least / 60:g} min of it (the "
            f"trainer's {STOP_MARGIN_S / 60:g} min stop margin + min_segment_minutes="
            f"{request.run.min_segment_s / 60:g}){nxt}"
        )
    return (
        f"instances are reclaimed {_RECLAIM_TEXT} before it ends, {hours:.1f} h after the job could start; "
        f"request needs max_runtime_hours={request.max_runtime_hours:g}{nxt}"
    )


def choose_capacity(
    request: SubmitRequest,
    *,
    clients: Clients,
    config: SubmitterConfig,
    now: datetime | None = None,
) -> list[CapacityChoice]:
    """Candidate capacities for ``request``, best first (one entry unless ``capacity`` is ``auto``).

    Raises:
        Refusal: ``InvalidRequest`` for a ``training_plan_arn`` that is not configured or
            belongs to another region or account; ``NoCapacity`` listing every configured
            plan and why it was skipped.
        ConfigurationError: the SSM parameter is missing or not a JSON list (a malformed
            entry in the list is skipped, with the reason naming it), or the function does
            not know its region or account (so it cannot tell its own plans from others').
    """
    now = now or datetime.now(UTC)
    if request.capacity == "spot":
        return [CapacityChoice("spot", "spot capacity requested (managed spot training)", rule=RULE_REQUESTED)]
    if request.capacity == "on-demand":
        return [CapacityChoice("on-demand", "on-demand capacity requested", rule=RULE_REQUESTED)]

    order: Sequence[str] = ("training-plan",) if request.capacity == "training-plan" else config.capacity_fallback
    if request.training_plan_arn is not None and "training-plan" not in order:
        raise invalid(
            FieldError(
                "training_plan_arn",
                request.training_plan_arn,
                f"no plan: capacity auto tries {', '.join(order)} here (training plans are not in the fallback order)",
            )
        )
    verdicts: list[PlanVerdict] = []
    candidates: list[CapacityChoice] = []
    for kind in order:
        if kind == "training-plan":
            verdicts = _judge_configured_plans(request, clients=clients, config=config, now=now)
            choice = _best_plan(request, verdicts)
            if choice is not None:
                candidates.append(choice)
        else:
            why = _fallback_reason(kind, verdicts, order)
            candidates.append(CapacityChoice(kind, why, skipped=tuple(verdicts), rule=RULE_FALLBACK_ORDER))
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


def _best_plan(request: SubmitRequest, verdicts: list[PlanVerdict]) -> CapacityChoice | None:
    """The plan the rules (module docstring) pick among ``verdicts``, or ``None`` if none is eligible."""
    eligible = [v for v in verdicts if v.eligible]
    if not eligible:
        return None
    far = datetime.max.replace(tzinfo=UTC)
    now_plans = sorted((v for v in eligible if v.starts_now), key=lambda v: (v.usable_end or far, v.training_plan_arn))
    waiting = sorted(
        (v for v in eligible if not v.starts_now),
        key=lambda v: (v.start_time or far, v.usable_end or far, v.training_plan_arn),
    )
    if request.training_plan_arn is not None:
        best, rule = eligible[0], RULE_NAMED_PLAN
        why = "the plan the request named"
    elif now_plans:
        best, rule = now_plans[0], RULE_STARTS_NOW_EXPIRES_FIRST
        others = []
        if len(now_plans) > 1:
            others.append(f"{len(now_plans) - 1} other plan(s) that could start it now expire later")
        if waiting:
            others.append(f"{len(waiting)} scheduled plan(s) would make it wait")
        why = "of the plans that can start the job now, the one whose block expires first" + (
            f"; {'; '.join(others)}" if others else ""
        )
    else:
        best, rule = waiting[0], RULE_STARTS_SOONEST
        why = (
            f"no configured plan can start the job now; its block starts soonest, within the "
            f"{PENDING_LIMIT_S // 86400} days SageMaker keeps a job Pending"
            + (f"; {len(waiting) - 1} other scheduled plan(s) start later" if len(waiting) > 1 else "")
        )
    skipped = tuple(v if not v.eligible else _passed_over(v, best) for v in verdicts if v is not best)
    return CapacityChoice(
        "training-plan",
        f"training plan {best.name}: {best.reason} (rule {rule}: {why})",
        training_plan_arn=best.training_plan_arn,
        skipped=skipped,
        rule=rule,
        start_time=None if best.starts_now else best.start_time,
        availability_zone=best.availability_zone,
    )


def _passed_over(verdict: PlanVerdict, best: PlanVerdict) -> PlanVerdict:
    """An eligible plan that lost to ``best``, with the reason it lost."""
    if verdict.starts_now:
        why = f"eligible, but expires after {best.name}"
    elif best.starts_now:
        start = verdict.start_time.isoformat() if verdict.start_time else "later"
        why = f"eligible, but the job would wait Pending until {start}, while {best.name} can start it now"
    else:
        why = f"eligible, but starts after {best.name}"
    return PlanVerdict(
        verdict.training_plan_arn,
        True,
        f"{why} ({verdict.reason})",
        verdict.end_time,
        verdict.usable_end,
        verdict.start_time,
        verdict.starts_now,
        verdict.availability_zone,
    )


def _judge_configured_plans(
    request: SubmitRequest, *, clients: Clients, config: SubmitterConfig, now: datetime
) -> list[PlanVerdict]:
    if not config.region or not config.account_id:
        raise ConfigurationError(
            "the submitter does not know its region and account (AWS_REGION, PLATFORM_ACCOUNT_ID), so it cannot "
            "tell its own training plans from another account's or region's"
        )
    named = request.training_plan_arn
    if named is not None:
        _check_named_plan(named, config)
    entries = configured_plan_entries(clients, config)
    if named is not None:
        arns = [e for e in entries if malformed_entry_reason(e) is None]
        if named not in arns:
            expected = "one of the configured plans: " + (", ".join(arns) or "(none configured)")
            raise invalid(FieldError("training_plan_arn", named, expected))
        entries = [named]
    zones = allowed_zones(request, config)
    return [_judge_entry(entry, request, clients=clients, config=config, now=now, zones=zones) for entry in entries]


def _check_named_plan(arn: str, config: SubmitterConfig) -> None:
    """Refuse (``InvalidRequest`` on ``training_plan_arn``) a named plan that is no ARN or another region's or account's."""
    try:
        foreign = foreign_reason(arn, region=config.region, account=config.account_id)
    except ValueError:
        raise invalid(
            FieldError("training_plan_arn", arn, f"a SageMaker training-plan ARN {TRAINING_PLAN_ARN_FORMAT}")
        ) from None
    if foreign is not None:
        where = f"a plan of this platform's region {config.region} and account {config.account_id} ({foreign})"
        raise invalid(FieldError("training_plan_arn", arn, where))


def _judge_entry(
    entry: Any,
    request: SubmitRequest,
    *,
    clients: Clients,
    config: SubmitterConfig,
    now: datetime,
    zones: JobZones | None,
) -> PlanVerdict:
    """The verdict on one entry of the plan list: malformed or another region's or account's entries are
    skipped (and logged) without being described."""
    parameter = config.training_plan_arns_parameter
    malformed = malformed_entry_reason(entry)
    if malformed is not None:
        logger.warning(
            "malformed entry in the training plan list skipped", extra={"entry": repr(entry), "parameter": parameter}
        )
        name = entry if isinstance(entry, str) else repr(entry)
        return PlanVerdict(name, False, f"{malformed}; skipped: correct it in SSM parameter {parameter}")
    reason = foreign_reason(entry, region=config.region, account=config.account_id)
    if reason is not None:
        logger.warning(
            "training plan of another region or account skipped",
            extra={"training_plan_arn": entry, "parameter": parameter, "reason": reason},
        )
        return PlanVerdict(entry, False, f"refused without describing it: {reason}")
    return judge_plan(entry, describe_plan(clients, entry), request, now, zones)


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
    reasons = "; ".join(f"{v.name}: {v.reason}" for v in verdicts)
    return f"{head}: {reasons}"
