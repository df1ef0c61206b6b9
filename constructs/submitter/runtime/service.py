"""The submitter as a plain function: request in, response out.

:func:`submit` is what the Lambda handler, ``trainctl submit --local``, the run continuation and the
tests call. Steps, each able to refuse (nothing is created before the last):

1. **Validate** the event (:func:`.request.parse_request`, :func:`.request.check_instance`); a request starting
   from Hugging Face weights takes its shape from the folder's ``config.json`` (:mod:`.init_from`).
2. **Preflight** with the planner: a configuration predicted not to fit in GPU
   memory -- ``out-of-memory``, or ``at-risk`` (its requirement within the
   model's stated error of usable memory) -- is refused with
   ``PredictedOutOfMemory`` (the estimate, the verdict and the change that
   would fit), unless ``auto_tune`` is set: then the planner's change is
   applied and reported. An ``at-risk`` configuration is submitted as it is
   when the request sets ``accept_memory_risk``.
3. **At most once** (one request, at most one job; a token, at most one job, ever), settled against
   the ledger's claims (:mod:`.ledger`) and the jobs that exist (:func:`_resolve`): the token's claim
   names its job; the job holding the request's own name (its ``job_name``, else the name derived from
   the token) answers when it is the token's, or made without a token by this same request (adopted);
   without a token the name is the key. An existing job answers when its fingerprint tag equals this
   request's (:meth:`.request.SubmitRequest.fingerprint`: what the caller sent, so adding or dropping
   ``job_name`` or ``dry_run`` is the same request) and is a ``Conflict`` otherwise; a fingerprint of
   another version (:data:`.training_job.FINGERPRINT_VERSION`) is refused as such. The token is claimed
   right before ``CreateTrainingJob`` (of concurrent requests exactly one wins; the others settle on the
   winner's claim), and SageMaker's job-name uniqueness (``ResourceInUse``) settles what is left. A dry
   run takes the same path, so it answers as the submission would.
4. **Capacity** (:func:`.capacity.choose_capacity`): ``NoCapacity`` lists every configured plan and
   why it was skipped.
5. **Create** (``CreateTrainingJob``) or, for ``dry_run``, answer ``validated`` with the parameters
   that would be sent (a dry run writes nothing). ``ResourceLimitExceeded`` becomes ``QuotaExceeded``
   naming the quota (``capacity: auto`` first tries its next candidate).

A refusal of steps 4 and 5 is settled again first (:func:`_settle`): a concurrent duplicate's job (or one
this same request made meanwhile without the token) answers instead. Only when no job answers are the
claims this submission worked under released, so a corrected request may use them.

A request with ``run`` submits the run's segment 1 under the name
:func:`platform_spec.runs.segment_job_name` and the client token
:func:`platform_spec.runs.segment_client_token` (that token's claim is the run id's: a ``run_id``
stands for one request) and, right before its job is created, writes the run's ``run.json``; the
continuation submits the next segments from the run's record it has read (:func:`submit_segment`).

Transient AWS faults are retried by botocore; when they persist the ``ClientError`` propagates (a
function error), so the caller retries. Every AWS call is bounded by the invocation's
:class:`.aws.Deadline`: too little time left raises :class:`.errors.DeadlineExceeded` (a function
error). After either, a retry with the same ``client_token`` is safe: it returns the job if one was
created, or creates it.

Response shapes: see :mod:`.errors` (refusals) and :func:`submit`.
"""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger

import planner
from platform_spec import hyperparameters as hpmod
from platform_spec import runs as runspec
from platform_spec.capacity import capacity_type_of
from platform_spec.errors import FieldError

from ...lambda_runtime.deadline import current_deadline, deadline_scope
from .aws import Clients, Deadline, error_code, error_message
from .capacity import RULE_IDEMPOTENT_REPLAY, CapacityChoice, choose_capacity
from .checkpoint_prune import prune_run_checkpoints
from .config import SubmitterConfig
from .errors import DeadlineExceeded, Refusal, invalid
from .init_from import parse_with_folder
from .job import build_create_training_job, job_name_for
from .ledger import Ledger, Record, RunLedger, RunRecord, TokenLedger, TokenRecord
from .request import SubmitRequest, check_instance, token_digest
from .sagemaker_rules import bounds
from .settings import SERVICE_NAME
from .stall import stall_minutes_of
from .training_job import (
    FINGERPRINT_VERSION,
    TAG_CLIENT_TOKEN_SHA256,
    TAG_REQUEST_SHA256,
    TAG_REQUEST_SHA256_STEM,
    describe_job,
    existing_job,
    stop_job,
)

logger = Logger(service=SERVICE_NAME, child=True)

_QUOTA_RE = re.compile(r"limit '([^']+)'")
CLAIM_ATTEMPTS = 3
"""Rounds of settle / claim when other requests with the same token keep winning the claim."""


def submit(
    event: Any,
    *,
    clients: Clients,
    config: SubmitterConfig,
    now: datetime | None = None,
    deadline: Deadline | None = None,
    segment: int = 1,
    budget: runspec.RunSpec | None = None,
    instance_hours_used: float = 0.0,
) -> dict[str, Any]:
    """Validate ``event`` and create (or, for ``dry_run``, plan) one SageMaker training job.

    Args:
        event: the request (a JSON object; see :mod:`.request`). Anything else is refused.
        clients: :class:`.aws.Clients`.
        config: :class:`.config.SubmitterConfig`.
        now: the current time (tests); default: the clock.
        deadline: when the answer is due (the Lambda invocation's end); default:
            the deadline already in scope, else none (no bound beyond the clients' timeouts).
        segment: for a request with ``run``, the segment to create (1: the caller's request; the
            continuation submits the next ones, :func:`submit_segment`).
        budget: for a later segment, the run's budget now (a continued run's newest); default: the request's.
        instance_hours_used: for a later segment, the instance-hours the run's earlier segments used.
        A run's segment runs at most what its budget leaves (:func:`platform_spec.runs.segment_runtime`):
        ``InvalidRequest`` naming ``run.deadline`` or ``run.max_instance_hours`` (``details.budget_decision``:
        the decision that ends the run) when that is below a segment's floor.

    Returns:
        ``{"status": "submitted", "training_job_name", "training_job_arn",
        "capacity": {"type", "training_plan_arn"?, "availability_zone"? (a plan's, in VPC mode), "rule"?, "reason",
        "skipped_plans"?},
        "estimate": {planner figures and notes}, "replayed": bool, "infra_check": bool (SageMaker's infrastructure
        health check, ``InfraCheckConfig``), "auto_tune"?: {"changes", "hyperparameters"},
        "run"?: {"run_id", "segment", "checkpoint_s3_uri"}}``;
        for ``dry_run`` ``"status": "validated"`` with ``"create_training_job"``
        (the parameters that would be sent) instead of an ARN; or a refusal
        ``{"status": "rejected", "error": {"code", "message", "field"?, "details"?}}``.

    Raises:
        DeadlineExceeded: too little of the invocation was left for an AWS call
            (retriable; see :class:`.errors.DeadlineExceeded`).
        botocore.exceptions.ClientError: AWS faults that are not the caller's
            (throttling or 5xx after botocore's retries, access denied).
        ConfigurationError: the function's configuration is broken.
        IdempotencyRecordError: a ledger record in S3 is unreadable.
    """
    with deadline_scope(deadline if deadline is not None else current_deadline()) as scoped:
        try:
            return _submit(event, clients, config, now or datetime.now(UTC), segment, budget, instance_hours_used)
        except Refusal as refusal:
            logger.info(
                "request refused",
                extra={"refusal": {"code": refusal.code, "field": refusal.field, "message": refusal.message}},
            )
            return refusal.to_response()
        except DeadlineExceeded as exc:
            logger.warning(
                "deadline exceeded", extra={"operation": exc.operation, "remaining_s": round(exc.remaining_s, 3)}
            )
            raise
        except Exception as exc:
            if scoped is not None and scoped.error is not None:
                # a library wrapped the DeadlineExceeded (Powertools' parameters): answer as what it is
                logger.warning(
                    "deadline exceeded", extra={"operation": scoped.error.operation, "wrapped_in": type(exc).__name__}
                )
                raise scoped.error from exc
            raise


def submit_segment(
    record: RunRecord,
    index: int,
    *,
    budget: runspec.RunSpec,
    instance_hours_used: float,
    clients: Clients,
    config: SubmitterConfig,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Submit segment ``index`` of the run whose ``run.json`` the continuation read, from the request it holds
    (:func:`submit`'s path, answers and faults; ``run.json`` is not read again), within ``budget`` (the run's
    newest: a continued run's) less the ``instance_hours_used`` by its earlier segments.

    While the segment's job does not exist yet, the run's checkpoint prefix is pruned to its newest complete
    checkpoint first (:func:`.checkpoint_prune.prune_run_checkpoints`): the answer's ``checkpoint_prune``
    (:meth:`.checkpoint_prune.PruneResult.to_dict`) says what was kept and deleted."""
    pruned = None
    if describe_job(clients, runspec.segment_job_name(record.run.run_id, index)) is None:
        pruned = prune_run_checkpoints(clients, config, record.run.run_id)
    response = submit(
        record.request, clients=clients, config=config, now=now, segment=index, budget=budget,
        instance_hours_used=instance_hours_used,
    )  # fmt: skip
    if pruned is not None:
        response["checkpoint_prune"] = pruned.to_dict()
    return response


@dataclasses.dataclass
class _Submission:
    """One submission as it proceeds: the request, what preflight made of it, and its claims in the ledger."""

    request: SubmitRequest
    event: Any
    clients: Clients
    config: SubmitterConfig
    now: datetime
    fingerprint: str = ""
    tuned: SubmitRequest | None = None
    estimate: dict[str, Any] = dataclasses.field(default_factory=dict)
    tuning: dict[str, Any] | None = None
    tokens: TokenLedger | None = None
    runs: RunLedger | None = None
    """The run store, when this submission writes a run's ``run.json`` (its segment 1)."""
    run_found: RunRecord | None = None
    """That ``run.json`` as read before anything is written (strictly: a malformed one stops the submission)."""
    run_claim: RunRecord | None = None
    """The run's claim this submission works under (the ``run.json`` it wrote or found as its own)."""
    held: list[tuple[Ledger, Record]] = dataclasses.field(default_factory=list)
    """The claims this submission works under: released when SageMaker refuses its job."""
    budget: runspec.RunSpec | None = None
    """A run's budget now (the request's, or a continued run's newest); ``None`` without ``run``."""
    instance_hours_used: float = 0.0
    """Instance-hours the run's earlier segments used."""

    def __post_init__(self) -> None:
        self.fingerprint = self.request.fingerprint()


def _submit(
    event: Any,
    clients: Clients,
    config: SubmitterConfig,
    now: datetime,
    index: int,
    budget: runspec.RunSpec | None,
    instance_hours_used: float,
) -> dict[str, Any]:
    request, event = parse_with_folder(event, clients, config)
    run = request.run
    if run is None:
        if index != 1:
            raise ValueError(f"segment {index!r}: only a request with run has segments")
        return _submit_request(_Submission(request, event, clients, config, now))
    request = dataclasses.replace(
        request,
        job_name=runspec.segment_job_name(run.run_id, index),
        client_token=runspec.segment_client_token(run.run_id, index),
    )
    sub = _Submission(request, event, clients, config, now, budget=budget or run)
    sub.instance_hours_used = instance_hours_used
    if index == 1:
        sub.runs = RunLedger.of(clients, config)
        sub.run_found = sub.runs.read_run(run.run_id)
    try:
        response = _submit_request(sub)
    except Refusal as refusal:
        raise _bind_to_run(refusal) from None
    response["run"] = {
        "run_id": run.run_id,
        "segment": index,
        "checkpoint_s3_uri": f"s3://{config.checkpoint_bucket}/{runspec.run_checkpoint_prefix(run.run_id)}",
    }
    return response


def _write_run(sub: _Submission) -> None:
    """Write the run's ``run.json`` (segment 1, right before its job is created, under the token's claim): a new
    one, or over one that binds no job (released, or another request's whose claim this token won since), as
    the run id's next claim (its generation: the new claim starts with none of the old one's records). The
    submission holds the record it wrote or found. The run's active marker is written too (once: a retry or a
    concurrent duplicate finds it), before segment 1 can exist, so the continuation's tick sees every run that
    has a segment."""
    run, runs, found = sub.request.run, sub.runs, sub.run_found
    assert run is not None and runs is not None
    for _ in range(CLAIM_ATTEMPTS):
        if found and found.record and not found.released and found.is_request(sub.fingerprint):
            sub.held.append((runs, found.record))  # this request's (a concurrent one's, or one that died uncreated)
            sub.run_claim = found
            runs.create(runs.active_key(run.run_id), {"run_id": run.run_id, "since": found.created})
            return
        record = RunRecord(
            run, dict(sub.event), sub.fingerprint, sub.request.hyperparameters.max_steps,
            runspec.format_time(sub.now), generation=1 if found is None else found.generation + 1,
        )  # fmt: skip
        if found is None or found.record is None:
            written = runs.create(runs.run_key(run.run_id), record.fields())
        else:
            written = runs.replace(found.record, record.fields())
        if written is not None:
            sub.held.append((runs, written))
            sub.run_claim = record
            runs.create(runs.active_key(run.run_id), {"run_id": run.run_id, "since": record.created})
            return
        found = runs.read_run(run.run_id)  # another invocation wrote it meanwhile
    raise Refusal(
        "Conflict",
        f"run.run_id: run {run.run_id!r} was started concurrently by a different request; use another run_id",
        field="run.run_id",
        details={"run_id": run.run_id},
    )


def _bind_to_run(refusal: Refusal) -> Refusal:
    """A refusal on the derived ``client_token`` of a run's segment, re-aimed at ``run.run_id`` (the caller sent no token)."""
    if refusal.field != "client_token":
        return refusal
    message = "run.run_id: " + refusal.message.replace("client_token", "run_id")
    return Refusal(refusal.code, message, field="run.run_id", details=refusal.details)


def _submit_request(sub: _Submission) -> dict[str, Any]:
    """Settle the request (:func:`_settle`); when it is refused, the claims it holds are released: no job
    answers it (a job that does is replayed instead)."""
    check_instance(sub.request, sub.config)
    refused = _preflight(sub)
    if sub.request.client_token:
        sub.tokens = TokenLedger.of(sub.clients, sub.config)
    try:
        return _settle(sub, refused)
    except Refusal as refusal:
        for ledger, record in sub.held:
            _release(ledger, record, f"{refusal.code}: {refusal.message}")
        raise


def _settle(sub: _Submission, refused: Exception | None) -> dict[str, Any]:
    """Answer with the job that settles the request, else create it; ``refused``: what answers when no job does.

    One rule for refusals: when the capacity choice or SageMaker refuses what this request would create
    (no capacity, quota, the name in use, validation), the request is settled again, waiting briefly for
    the job a claim names (:func:`_resolve` ``settle``): a concurrent duplicate's job, or a job made
    meanwhile without the token by this same request (bound to the token), answers instead of the refusal.
    """
    candidates: list[CapacityChoice] | None = None
    settle, lost = False, 0
    while lost < CLAIM_ATTEMPTS:
        slot = _resolve(sub, settle=settle)
        if slot.existing is not None:
            answer = _existing_answer(sub, slot)
        elif refused is not None:
            raise refused
        else:
            _segment_runtime(sub, None)  # the budget refuses before the plans are read
            try:
                candidates = candidates or choose_capacity(
                    _tuned(sub), clients=sub.clients, config=sub.config, now=sub.now
                )
                answer = _submit_as(sub, slot, candidates)
            except Exception as exc:
                if not isinstance(exc, Refusal) and error_code(exc) != "ResourceInUse":
                    raise
                logger.info("refused; settling again", extra={"refusal": getattr(exc, "code", error_code(exc))})
                refused, settle = exc, True
                continue
        if answer is not None:
            return answer
        lost += 1
        logger.info("client token claimed concurrently; settling", extra={"training_job_name": slot.job_name})
    raise RuntimeError(
        f"client_token: the claim on its record was lost {CLAIM_ATTEMPTS} times to concurrent requests; retry"
    )


def _existing_answer(sub: _Submission, slot: _Slot) -> dict[str, Any] | None:
    """The answer of the job that settles the request (``slot.existing``): its replay, or ``Conflict``. A job made
    without a token by this same request (``adopt``) is bound to the token first; ``None`` when another request
    claimed the token meanwhile (settle again)."""
    assert slot.existing is not None
    if slot.adopt and not sub.request.dry_run and not _claim_token(sub, slot, adopted=True):
        return None
    return _replay(sub, slot.existing, via=slot.via)


def _submit_as(sub: _Submission, slot: _Slot, candidates: list[CapacityChoice]) -> dict[str, Any] | None:
    """Create the job under ``slot`` (for ``dry_run``, answer what would be sent) after claiming what it needs: the
    token (``None`` when another request claimed it first) and the run's ``run.json``."""
    first = build_create_training_job(
        _tuned(sub), job_name=slot.job_name, capacity=candidates[0], config=sub.config, fingerprint=sub.fingerprint,
        runtime=_segment_runtime(sub, candidates[0]),
    )  # fmt: skip
    logger.info(
        "capacity chosen",
        extra={"training_job_name": slot.job_name, "capacity": candidates[0].to_dict(), "dry_run": sub.request.dry_run},
    )
    if sub.request.dry_run:
        return _answer(sub, "validated", slot.job_name, None, candidates[0], create_training_job=first)
    if slot.write and not _claim_token(sub, slot):
        return None
    if sub.tokens is not None and slot.record is not None and not slot.write:
        sub.held.append((sub.tokens, slot.record.record))  # finishing that claim: it is ours now
    if sub.runs is not None:
        _write_run(sub)
    return _create(sub, slot.job_name, candidates)


def _preflight(sub: _Submission) -> Refusal | None:
    """Run :func:`preflight`; a predicted out-of-memory is returned, not raised: it refuses only what would be
    created, and a request that has its job already (a retry after a planner upgrade, or without
    ``accept_memory_risk``, which is not fingerprinted) replays it. So is, for a run's segment 1, a
    ``stall_minutes`` the planner predicts every healthy segment outlasts (:func:`stall_refusal`)."""
    try:
        sub.tuned, sub.estimate, sub.tuning = preflight(sub.request)
    except Refusal as exc:
        if exc.code != "PredictedOutOfMemory":
            raise
        sub.estimate = dict((exc.details or {}).get("estimate") or {})
        return exc
    return stall_refusal(_tuned(sub), sub.estimate) if sub.runs is not None else None


def stall_refusal(request: SubmitRequest, estimate: dict[str, Any]) -> Refusal | None:
    """``InvalidRequest`` naming ``stall_minutes`` when the run's limit (sent, or
    :data:`platform_spec.health.DEFAULT_STALL_MINUTES`) is not above the time between two ``[metrics]`` lines the
    planner predicts (``hyperparameters.log_interval`` x the plan's ``step_time_s``): the outside watch
    (:mod:`.stall`) dates a job's newest step by those lines, so it would stop every healthy segment. ``None``
    when it is above, off (0), or the plan has no step time.

    Checked for a new run only (its segment 1): a later segment is the run's, accepted already; refusing it
    after a planner change would end a run that trains."""
    minutes = stall_minutes_of({"stall_minutes": request.value("stall_minutes")})
    step_s, interval = estimate.get("step_time_s"), request.hyperparameters.log_interval
    if not minutes or not isinstance(step_s, (int, float)) or minutes * 60.0 > interval * step_s:
        return None
    sent = request.value("stall_minutes") is not None
    return invalid(
        FieldError(
            "stall_minutes",
            minutes if sent else None,
            f"0 (off) or more than the {interval * step_s / 60.0:.1f} minutes between two [metrics] lines the "
            f"planner predicts (hyperparameters.log_interval {interval} x its step time {step_s:.1f} s on "
            f"{request.instance_type}): the watch dates the newest step by them and would stop every healthy "
            f"segment{'' if sent else f' (stall_minutes defaults to {minutes:g} with run)'}; or a lower log_interval",
        )
    )


def _tuned(sub: _Submission) -> SubmitRequest:
    return sub.tuned if sub.tuned is not None else sub.request


def _segment_runtime(sub: _Submission, choice: CapacityChoice | None) -> runspec.SegmentRuntime | None:
    """A run's segment's runtime on ``choice`` (``None``: starting now), within its budget
    (:func:`platform_spec.runs.segment_runtime`); ``None`` for a request without ``run``.

    Raises:
        Refusal: ``InvalidRequest`` naming ``run.deadline`` or ``run.max_instance_hours`` when the budget leaves
            less than a segment's floor (``details``: ``budget_decision``, the decision that ends a run then,
            and ``least_segment_s``).
    """
    budget, request = sub.budget, _tuned(sub)
    if budget is None:
        return None
    starts = choice.start_time if choice is not None and choice.start_time is not None else sub.now
    runtime = runspec.segment_runtime(
        budget, max_runtime_s=request.max_runtime_seconds, instance_count=request.instance_count,
        instance_hours=sub.instance_hours_used, starts=max(starts, sub.now), least_runtime_s=least_runtime_s(),
    )  # fmt: skip
    if runtime.ended is None:
        return runtime
    raise budget_refusal(budget, runtime, runtime.bound_by)


def budget_refusal(budget: runspec.RunSpec, runtime: runspec.SegmentRuntime, field: str) -> Refusal:
    """``InvalidRequest`` naming ``field`` (``runtime.bound_by``: ``run.deadline`` or ``run.max_instance_hours``,
    as a request or an action names it) for a budget whose ``runtime`` ended the segment before it began;
    ``details``: ``budget_decision`` (the decision that ends a run then) and ``least_segment_s``."""
    floor = runspec.segment_floor_s(budget, least_runtime_s())
    value: Any = budget.max_instance_hours
    if runtime.bound_by == "run.deadline" and budget.deadline is not None:
        value = runspec.format_time(budget.deadline)
    expected = f"a budget that leaves the run's next segment at least {floor / 60:g} min"
    assert runtime.ended is not None
    return invalid(
        FieldError(field, value, expected, detail=runtime.reason),
        details={"budget_decision": runtime.ended.decision, "least_segment_s": floor},
    )


def least_runtime_s() -> int:
    """SageMaker's least ``StoppingCondition.MaxRuntimeInSeconds`` (botocore's model)."""
    return bounds("StoppingCondition.MaxRuntimeInSeconds")[0] or 1


def _create(sub: _Submission, job_name: str, candidates: list[CapacityChoice]) -> dict[str, Any]:
    """``CreateTrainingJob`` on each candidate in turn (another only after ``ResourceLimitExceeded``); SageMaker's
    refusals are raised (``ResourceInUse`` as it is) and settled by :func:`_settle`."""
    quota_refusals: list[Refusal] = []
    for choice in candidates:
        params = build_create_training_job(
            _tuned(sub), job_name=job_name, capacity=choice, config=sub.config, fingerprint=sub.fingerprint,
            runtime=_segment_runtime(sub, choice),
        )  # fmt: skip
        try:
            created = sub.clients.sagemaker.create_training_job(**params)
        except Exception as exc:
            code = error_code(exc)
            if code == "ResourceInUse":
                raise
            if code != "ResourceLimitExceeded":
                raise _refusal_of(exc) from None
            quota_refusals.append(_quota_refusal(exc, _tuned(sub), choice))
            if sub.request.capacity != "auto":
                raise quota_refusals[-1] from None
            logger.warning("quota exceeded, trying the next capacity", extra={"capacity": choice.to_dict()})
            continue
        arn = created["TrainingJobArn"]
        logger.info(
            "training job created",
            extra={"training_job_name": job_name, "training_job_arn": arn, "capacity": choice.type},
        )
        _stop_if_the_run_was_stopped(sub, job_name)
        return _answer(sub, "submitted", job_name, arn, choice)
    raise _every_quota(quota_refusals)


def _stop_if_the_run_was_stopped(sub: _Submission, job_name: str) -> None:
    """A run's first segment, just created: a stop of the run that landed while it was created saw no segment
    running and ended the run (``runs.stop_run`` writes its marker, then reads the run), so the segment is stopped
    here; of the two, one always sees the other. The continuation does the same for the later segments."""
    if sub.runs is None or sub.run_claim is None or sub.runs.read(sub.runs.stop_key(sub.run_claim)) is None:
        return
    stopped = stop_job(sub.clients, job_name)
    logger.info("run stopped while its first segment was created", extra={"stopped_on_start": stopped})


def _refusal_of(exc: Exception) -> Exception:
    """SageMaker's ``ValidationException`` as an ``InvalidRequest``; any other fault as it is."""
    if error_code(exc) != "ValidationException":
        return exc
    message = f"SageMaker rejected the job: {error_message(exc)}"
    return Refusal("InvalidRequest", message, details={"sagemaker_error": "ValidationException"})


def _every_quota(refusals: list[Refusal]) -> Refusal:
    """The last quota refusal; with several, one naming every capacity's quota."""
    last = refusals[-1]
    if len(refusals) > 1:
        last.details = dict(last.details or {}, quotas=[r.details["quota"] for r in refusals if r.details])
        last.message = "every capacity in the fallback order is over its quota: " + "; ".join(
            r.message for r in refusals
        )
    return last


def _release(ledger: Ledger, record: Record, reason: str) -> None:
    """Mark a claim released after SageMaker refused its job (best effort: never masks the refusal; an unreleased
    claim only keeps the token or run id bound until the same request finishes it)."""
    try:
        if not ledger.release(record, reason):
            logger.info("claim changed since it was read; left as is", extra={"record": record.uri})
    except Exception as exc:
        logger.warning("claim not released", extra={"record": record.uri, "error": repr(exc)})


# --- preflight -------------------------------------------------------------------------------


def preflight(request: SubmitRequest) -> tuple[SubmitRequest, dict[str, Any], dict[str, Any] | None]:
    """The planner's estimate for the request's instance type and count.

    Returns:
        ``(request to submit, estimate dict, tuning)`` where ``tuning`` is
        ``None`` or ``{"changes": [...], "hyperparameters": {changed name: new value}}``.

    Raises:
        Refusal: ``PredictedOutOfMemory`` with the estimate, its ``status`` and the planner's
            suggested change, when the configuration does not fit (``out-of-memory``, or
            ``at-risk`` without ``accept_memory_risk``) and ``auto_tune`` is off (or the planner
            finds no change that fits).
    """
    try:
        plan_input = planner.PlanInput.from_hyperparameters(
            request.hyperparameters,
            instance_type=request.instance_type,
            instance_count=request.instance_count,
            inter_container_encryption=request.value("inter_container_encryption"),
        )
        plan = planner.estimate(plan_input)
    except ValueError as exc:  # planner.errors.PlanInputError names the field
        field = getattr(exc, "field", None)
        where = f"hyperparameters.{field}" if field in hpmod.SPECS else (field or "hyperparameters")
        expected = getattr(exc, "expected", f"a configuration the planner can estimate ({exc})")
        raise invalid(FieldError(where, getattr(exc, "value", None), expected)) from None
    if plan.fits:
        return request, plan.to_dict(), None
    status = plan.status
    if status == "at-risk" and request.value("accept_memory_risk"):
        logger.warning(
            "at-risk configuration accepted",
            extra={"memory_gb_required": plan.memory_gb.required, "memory_gb_usable": plan.memory_gb.usable},
        )
        return request, plan.to_dict(), None

    tuned = planner.auto_tune(plan_input)
    suggestion = None
    if tuned is not None:
        tuned_input, changes = tuned
        new_hp = _hyperparameters_from(request.hyperparameters, tuned_input)
        suggestion = {"changes": list(changes), "hyperparameters": _diff(request.hyperparameters, new_hp)}
    memory = plan.memory_gb.total
    if request.auto_tune and tuned is not None:
        tuned_plan = planner.estimate(tuned_input)
        logger.info("auto_tune applied", extra={"auto_tune": suggestion})
        return dataclasses.replace(request, hyperparameters=new_hp), tuned_plan.to_dict(), suggestion

    accept = "accept_memory_risk to submit it as it is" if status == "at-risk" else ""
    if tuned is None:
        why = "the planner found no change of the hyperparameters that fits" + (f"; set {accept}" if accept else "")
    else:
        why = "set auto_tune to apply the suggested change" + (f", or {accept}" if accept else "")
    required, usable = plan.memory_gb.required, plan.memory_gb.usable
    figures = f"{memory:.1f} GB peak per GPU ({required:.1f} GB with margins) of {usable:.1f} GB usable"
    verdict = (
        f"at risk of running out of memory: within the model's {planner.AT_RISK_FRACTION:.0%} error of the limit"
        if status == "at-risk"
        else "out of memory"
    )
    raise Refusal(
        "PredictedOutOfMemory",
        f"the planner predicts {figures} on {request.instance_type}, {verdict}; {why}",
        field="hyperparameters",
        details={"status": status, "estimate": plan.to_dict(), "suggestion": suggestion},
    )


def _hyperparameters_from(original: Any, tuned_input: Any) -> Any:
    """The trainer hyperparameters a tuned :class:`planner.PlanInput` stands for.

    ``PlanInput`` fields that are hyperparameters carry the same names
    (``PlanInput.hyperparameters()``); everything else stays as requested.
    """
    values = tuned_input.hyperparameters()
    changes = {k: v for k, v in values.items() if hasattr(original, k) and getattr(original, k) != v}
    return dataclasses.replace(original, **changes)


def _diff(before: Any, after: Any) -> dict[str, Any]:
    old, new = before.to_strings(), after.to_strings()
    return {k: v for k, v in new.items() if old.get(k) != v}


# --- at most once ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Slot:
    """Where this request's job goes (or the job that already answers it).

    ``existing``: a job that settles the request (replay or ``Conflict``), found ``via`` ``client_token`` or
    ``job_name``. Else ``job_name`` is the name to create under; ``record`` the token's claim this
    invocation works under; ``write``: the token must still be claimed (over ``record``, if any).
    ``adopt``: ``existing`` was made without a client token by this same request; the token is bound to it
    (claimed naming it) before it answers.
    """

    job_name: str = ""
    existing: dict[str, Any] | None = None
    via: str = "job_name"
    record: TokenRecord | None = None
    write: bool = False
    adopt: bool = False


def _resolve(sub: _Submission, *, settle: bool = False) -> _Slot:
    """Settle the request against what its token and name already stand for (reads only).

    With a client token, in order: its claim (the job it names, when that job is the token's); the job,
    if any, already holding the request's own name (the caller's ``job_name`` or the name derived from
    the token), which is the token's when tagged with it, another token's (``Conflict`` on ``job_name``),
    or one made without a token (adopted when it is this same request). ``settle``: wait briefly for the
    job a claim names (:func:`.training_job.existing_job`), which its writer may be creating.
    """
    request = sub.request
    own_name = request.job_name or job_name_for(request, sub.now)
    if request.client_token is None or sub.tokens is None:
        if request.job_name:  # without a token the name is the key
            existing = existing_job(sub.clients, request.job_name, settle=settle)
            if existing is not None:
                return _Slot(own_name, existing, "job_name")
        return _Slot(own_name)
    digest = token_digest(request.client_token)
    record = sub.tokens.lookup(digest)
    if record is None:
        return _by_own_name(sub, digest, own_name, None)
    slot = _from_record(sub, record, digest, settle=settle)
    return slot or _by_own_name(sub, digest, own_name, record)


def _by_own_name(sub: _Submission, digest: str, own_name: str, record: TokenRecord | None) -> _Slot:
    """A token's request whose token binds no job yet: settle it against the job holding ``own_name``, if any."""
    existing = existing_job(sub.clients, own_name)
    if existing is None:
        return _Slot(own_name, None, "client_token", record, write=True)
    owner = existing["tags"].get(TAG_CLIENT_TOKEN_SHA256)
    if owner == digest:
        return _Slot(own_name, existing, "client_token", record)  # the token's job, its claim lost
    if owner is not None:
        raise _another_tokens_job(existing, derived=sub.request.job_name is None)
    same, _ = _same_request(existing["tags"], sub.fingerprint)
    return _Slot(own_name, existing, "job_name", record, write=same, adopt=same)


def _from_record(sub: _Submission, record: TokenRecord, digest: str, *, settle: bool) -> _Slot | None:
    """What the token's claim says: its job (replay or ``Conflict``), a name to finish under, or ``None``
    when it binds no job (released, or its name is held by another request's job)."""
    name = record.training_job_name
    existing = existing_job(sub.clients, name, settle=settle and not record.record.released)
    if existing is not None:
        if _record_owns(existing, record, digest):
            return _Slot(name, existing, "client_token", record)  # the token's job
        # another request (another token, or none) created the claimed name first: the token never got a job
        logger.info(
            "the job a client-token claim names is another request's; the token binds no job",
            extra={"training_job_name": name, "record": record.record.uri},
        )
        return None
    if record.record.released:
        return None
    if record.is_request(sub.fingerprint):
        # this request's first submission is in flight or was interrupted: finish it under the claimed name
        return _Slot(name, None, "client_token", record)
    other = (
        "for a different request"
        if record.fingerprint_version == FINGERPRINT_VERSION
        else f"under request fingerprint version {record.fingerprint_version} (this submitter computes version "
        f"{FINGERPRINT_VERSION} and cannot compare them)"
    )
    raise Refusal(
        "Conflict",
        f"client_token was first used at {record.created} {other}, whose job {name!r} has not been created: that "
        "submission is in flight or was interrupted; retry that request to finish it, or use a new client_token",
        field="client_token",
        details={"training_job_name": name, "client_token_record": record.record.uri},
    )


def _claim_token(sub: _Submission, slot: _Slot, *, adopted: bool = False) -> bool:
    """Claim the token naming ``slot.job_name`` (over ``slot.record`` for ``replace``); ``False`` when another
    request claimed it first (the caller settles again)."""
    assert sub.tokens is not None and sub.request.client_token is not None
    replace = slot.record.record if slot.record is not None else None
    claimed = sub.tokens.claim(
        token_digest(sub.request.client_token), slot.job_name, sub.fingerprint, sub.now.isoformat(),
        replace=replace, adopted=adopted,
    )  # fmt: skip
    if claimed is None:
        return False
    if adopted:
        logger.info("client token bound to a job made without one", extra={"training_job_name": slot.job_name})
    sub.held.append((sub.tokens, claimed.record))
    return True


def _record_owns(existing: dict[str, Any], record: TokenRecord, digest: str) -> bool:
    """Whether the job at a claim's name is the token's: tagged with the token, or made without a
    token and bound to it (adopted, or created by the very request the claim holds)."""
    tags: dict[str, str] = existing["tags"]
    owner = tags.get(TAG_CLIENT_TOKEN_SHA256)
    if owner is not None:
        return owner == digest
    return record.adopted or tags.get(TAG_REQUEST_SHA256) == record.request_sha256


def _another_tokens_job(existing: dict[str, Any], *, derived: bool) -> Refusal:
    """``Conflict`` on ``job_name``: the name is held by a job that another client token made."""
    description = existing["description"]
    name, arn = description["TrainingJobName"], description["TrainingJobArn"]
    advice = "use another job_name"
    if derived:  # derived names are reserved now: a job made outside, or by an earlier submitter, holds it
        advice = "it is the name derived from this client_token, taken by a job of an earlier version of the "
        advice += "submitter, which did not reserve derived names; send a job_name for this request"
    return Refusal(
        "Conflict",
        f"training job {name!r} belongs to another client_token (its {TAG_CLIENT_TOKEN_SHA256} tag is another "
        f"token's), so it cannot answer this one; {advice}",
        field="job_name",
        details={"training_job_name": name, "training_job_arn": arn},
    )


def _same_request(tags: dict[str, str], fingerprint: str) -> tuple[bool, str]:
    """Whether the job with ``tags`` was created by this request, and how that was decided."""
    if TAG_REQUEST_SHA256 in tags:
        return tags[TAG_REQUEST_SHA256] == fingerprint, "its request fingerprint differs"
    other = sorted(k for k in tags if k.startswith(TAG_REQUEST_SHA256_STEM))
    if other:
        return False, (
            f"its request fingerprint is of another version (tag {other[0]}); this submitter computes version "
            f"{FINGERPRINT_VERSION} ({TAG_REQUEST_SHA256}) and cannot compare them"
        )
    return False, "it was not created by the job submitter"


def _replay(sub: _Submission, existing: dict[str, Any], *, via: str) -> dict[str, Any]:
    description, tags = existing["description"], existing["tags"]
    name, arn = description["TrainingJobName"], description["TrainingJobArn"]
    same, why_not = _same_request(tags, sub.fingerprint)
    if not same:
        if via == "client_token":
            message = (
                f"client_token already answers for training job {name!r}, created by a different request "
                f"({why_not}); a client_token stands for one request: use a new client_token for this one"
            )
        else:
            made_by = "" if TAG_CLIENT_TOKEN_SHA256 in tags else " without a client_token"
            message = (
                f"training job {name!r} already exists and was created{made_by} by a different request "
                f"({why_not}); use another job_name"
            )
        raise Refusal("Conflict", message, field=via, details={"training_job_name": name, "training_job_arn": arn})
    created = description.get("CreationTime")
    when = created.isoformat() if isinstance(created, datetime) else "earlier"
    choice = CapacityChoice(
        capacity_type_of(description),
        f"idempotent replay: the job was created by an identical request at {when}",
        training_plan_arn=(description.get("ResourceConfig") or {}).get("TrainingPlanArn"),
        rule=RULE_IDEMPOTENT_REPLAY,
    )
    logger.info("idempotent replay", extra={"training_job_name": name, "training_job_arn": arn, "via": via})
    status = "validated" if sub.request.dry_run else "submitted"
    return _answer(
        sub, status, name, arn, choice, replayed=True, training_job_status=description.get("TrainingJobStatus")
    )


# --- responses -------------------------------------------------------------------------------


def _answer(
    sub: _Submission,
    status: str,
    job_name: str,
    job_arn: str | None,
    choice: CapacityChoice,
    *,
    replayed: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "training_job_name": job_name}
    if job_arn is not None:
        out["training_job_arn"] = job_arn
    out.update(capacity=choice.to_dict(), estimate=sub.estimate, replayed=replayed)
    out["infra_check"] = bool(sub.request.value("infra_check"))
    if sub.tuning is not None:
        out["auto_tune"] = sub.tuning
    out.update(extra)
    return out


def _quota_refusal(exc: BaseException, request: SubmitRequest, choice: CapacityChoice) -> Refusal:
    message = error_message(exc)
    match = _QUOTA_RE.search(message)
    if match:
        quota = match.group(1)
    elif choice.type == "spot":
        quota = f"{request.instance_type} for spot training job usage"
    else:
        quota = f"{request.instance_type} for training job usage"
    return Refusal(
        "QuotaExceeded",
        f"SageMaker quota {quota!r} does not allow {request.instance_count} more {request.instance_type} "
        f"({choice.type}); request an increase in Service Quotas",
        details={"quota": quota, "capacity_type": choice.type, "sagemaker_message": message},
    )
