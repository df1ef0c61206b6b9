"""The submitter as a plain function: request in, response out.

:func:`submit` is what the Lambda handler, ``trainctl submit --local`` and the
tests call. Steps, each able to refuse (nothing is created before the last):

1. **Validate** the event (:func:`.request.parse_request`, :func:`.request.check_instance`).
2. **Preflight** with the planner: a configuration predicted not to fit in GPU
   memory -- ``out-of-memory``, or ``at-risk`` (its requirement within the
   model's stated error of usable memory) -- is refused with
   ``PredictedOutOfMemory`` (the estimate, the verdict and the change that
   would fit), unless ``auto_tune`` is set: then the planner's change is
   applied and reported. An ``at-risk`` configuration is submitted as it is
   when the request sets ``accept_memory_risk``.
3. **Idempotency** (one request, at most one job; a token, at most one job, ever):

   * with a ``client_token``: the token's record (:mod:`.idempotency`) names
     its job. A job that exists there and is the token's (tagged
     ``platform:client-token-sha256`` with it, or made without a token and
     bound to it) is returned when its ``platform:request-sha256-v2`` tag
     equals this request's fingerprint (:meth:`.request.SubmitRequest.fingerprint`:
     what the caller sent, so adding or dropping ``job_name``, or ``dry_run``,
     is the same request) and refused as ``Conflict`` on ``client_token``
     otherwise. A record whose job does not exist yet (its writer is in
     flight, or was killed before ``CreateTrainingJob``) is finished by the
     same request under the recorded name, and refused as ``Conflict`` for a
     different one. A record that binds no job (released, or its name taken
     by another request first) leaves the token free. Without a record, jobs
     created by the previous version (no records then) are found with
     ``Search`` on the token tag and compared with that version's fingerprint
     (:meth:`~.request.SubmitRequest.legacy_fingerprint_v1`). Then the job
     already holding the request's own name (its ``job_name``, else the name
     derived from the token), if any: another token's is a ``Conflict`` on
     ``job_name``; one made without a token by this same request is adopted
     (the token's record is written naming it); else ``Conflict``. Else the
     token is claimed by writing its record with an S3 conditional write,
     right before ``CreateTrainingJob``: of concurrent requests exactly one
     wins, the others settle against the winner's record;
   * with a ``job_name`` alone: an existing job of that name is compared the
     same way (the name is the key);
   * SageMaker's job-name uniqueness (``ResourceInUse``) settles what is left:
     the loser describes the winner's job and answers with it, by the same
     rules of ownership.

   A dry run takes the same path, so it answers as the submission would.

4. **Capacity** (:func:`.capacity.choose_capacity`): ``NoCapacity`` lists every
   configured plan and why it was skipped.
5. **Create** (``CreateTrainingJob``) or, for ``dry_run``, answer ``validated``
   with the parameters that would be sent (a dry run writes nothing).
   ``ResourceLimitExceeded`` becomes ``QuotaExceeded`` naming the quota
   (``capacity: auto`` first tries its next candidate). When SageMaker refuses
   the job, the token's record is marked released, so a corrected request may
   use the token.

Transient AWS faults are retried by botocore; when they persist the
``ClientError`` propagates (a function error), so the caller retries. Every
AWS call is bounded by the invocation's :class:`.aws.Deadline`: too little
time left raises :class:`.errors.DeadlineExceeded` (a function error). After
either, a retry with the same ``client_token`` is safe: it returns the job if
one was created, or creates it.

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

from .aws import Clients, Deadline, current_deadline, deadline_scope, error_code, error_message
from .capacity import RULE_IDEMPOTENT_REPLAY, CapacityChoice, choose_capacity
from .config import SubmitterConfig
from .errors import ConfigurationError, DeadlineExceeded, Refusal, invalid
from .idempotency import RELEASED, TokenRecord, TokenRecords
from .job import build_create_training_job, job_name_for
from .request import SubmitRequest, check_instance, parse_request, token_digest
from .runs import (
    RunRecord,
    RunStore,
    RunStoreError,
    bind_refusal_to_run,
    claim_run,
    read_run,
    release_run,
)
from .settings import SERVICE_NAME
from .training_job import (
    TAG_CLIENT_TOKEN_SHA256,
    TAG_REQUEST_SHA256,
    TAG_REQUEST_SHA256_V1,
    describe_job,
    existing_job,
)

logger = Logger(service=SERVICE_NAME, child=True)

_QUOTA_RE = re.compile(r"limit '([^']+)'")
CLAIM_ATTEMPTS = 3
"""Rounds of read-record / claim when other requests with the same token keep winning the claim."""


def submit(
    event: Any,
    *,
    clients: Clients,
    config: SubmitterConfig,
    now: datetime | None = None,
    deadline: Deadline | None = None,
    segment: int | None = None,
) -> dict[str, Any]:
    """Validate ``event`` and create (or, for ``dry_run``, plan) one SageMaker training job.

    Args:
        event: the request (a JSON object; see :mod:`.request`). Anything else is refused.
        clients: :class:`.aws.Clients`.
        config: :class:`.config.SubmitterConfig`.
        now: the current time (tests); default: the clock.
        deadline: when the answer is due (the Lambda invocation's end); default:
            the deadline already in scope, else none (no bound beyond the clients' timeouts).
        segment: for a request with ``run``, the segment to create (default 1: the caller's
            request; the run continuation, :mod:`.runs`, passes the next one). A run's segment is named
            :func:`platform_spec.runs.segment_job_name` and submitted under the client token
            :func:`platform_spec.runs.segment_client_token`, so it is created once whatever the
            retries; segment 1 writes the run's ``run.json`` (once) right before its job is created.
            A ``run_id`` whose ``run.json`` holds another request is a ``Conflict`` on ``run.run_id``.

    Returns:
        ``{"status": "submitted", "training_job_name", "training_job_arn",
        "capacity": {"type", "training_plan_arn"?, "reason", "skipped_plans"?},
        "estimate": {planner figures}, "replayed": bool, "auto_tune"?: {"changes", "hyperparameters"}}``;
        for ``dry_run`` ``"status": "validated"`` with ``"create_training_job"``
        (the parameters that would be sent) instead of an ARN; or a refusal
        ``{"status": "rejected", "error": {"code", "message", "field"?, "details"?}}``.

    Raises:
        DeadlineExceeded: too little of the invocation was left for an AWS call
            (retriable; see :class:`.errors.DeadlineExceeded`).
        botocore.exceptions.ClientError: AWS faults that are not the caller's
            (throttling or 5xx after botocore's retries, access denied).
        ConfigurationError: the function's configuration is broken.
        IdempotencyRecordError: the token's record in S3 is unreadable.
    """
    with deadline_scope(deadline if deadline is not None else current_deadline()) as scoped:
        try:
            return _submit(event, clients=clients, config=config, now=now or datetime.now(UTC), segment=segment)
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


@dataclasses.dataclass
class _RunClaim:
    """A run's ``run.json`` as the submission of its segment found it: ``write`` ``"new"`` / ``"replace"``
    when segment 1 must still write it (``existing``: the record of another request, whose run never had
    a job, that it replaces)."""

    store: RunStore
    existing: RunRecord | None
    write: str | None
    written: RunRecord | None = None
    """The ``run.json`` this submission wrote (released when SageMaker refuses the segment)."""


def _submit(
    event: Any, *, clients: Clients, config: SubmitterConfig, now: datetime, segment: int | None = None
) -> dict[str, Any]:
    request = parse_request(event, config)
    run = request.run
    if run is None:
        if segment is not None:
            raise ValueError(f"segment {segment!r}: only a request with run has segments")
        return _submit_request(request, None, event, clients=clients, config=config, now=now)
    index = 1 if segment is None else segment
    request = dataclasses.replace(
        request,
        job_name=runspec.segment_job_name(run.run_id, index),
        client_token=runspec.segment_client_token(run.run_id, index),
    )
    try:
        response = _submit_request(
            request, _run_claim(request, clients, config), event, clients=clients, config=config, now=now
        )
    except Refusal as refusal:
        raise bind_refusal_to_run(refusal) from None
    response["run"] = {
        "run_id": run.run_id,
        "segment": index,
        "checkpoint_s3_uri": f"s3://{config.checkpoint_bucket}/{runspec.run_checkpoint_prefix(run.run_id)}",
    }
    return response


def _run_claim(request: SubmitRequest, clients: Clients, config: SubmitterConfig) -> _RunClaim:
    """Settle a run's segment against the run's ``run.json`` (reads only)."""
    run, index = request.run, request.segment or 1
    assert run is not None
    store = RunStore.of(clients, config)
    existing = read_run(store, run.run_id)
    if existing is None:
        if index > 1:
            raise RunStoreError(
                f"run {run.run_id!r} has no {store.uri(store.run_key(run.run_id))}; segment {index} has no request"
            )
        return _RunClaim(store, None, "new")
    if existing.released is not None and index == 1:
        return _RunClaim(store, existing, "replace")  # SageMaker refused that run's first segment: it never ran
    if existing.request_sha256 == request.fingerprint():
        return _RunClaim(store, existing, None)
    first = runspec.segment_job_name(run.run_id, 1)
    if index == 1 and describe_job(clients, first) is None:
        return _RunClaim(store, existing, "replace")  # that request's run never had a job
    raise Refusal(
        "Conflict",
        f"run.run_id: run {run.run_id!r} was started at {existing.created} by a different request (its fingerprint "
        "differs); a run_id stands for one request: use another run_id",
        field="run.run_id",
        details={"run_id": run.run_id, "training_job_name": first, "run_record": store.uri(store.run_key(run.run_id))},
    )


def _write_run(request: SubmitRequest, claim: _RunClaim, event: Any, fingerprint: str, now: datetime) -> None:
    """Write the run's ``run.json`` (segment 1, right before its job is created); a concurrent writer's
    record is accepted when it holds this same request, else ``Conflict``."""
    run = request.run
    assert run is not None
    record = RunRecord(run, dict(event), fingerprint, request.hyperparameters.max_steps, runspec.format_time(now))
    replace = claim.existing.etag if claim.write == "replace" and claim.existing is not None else None
    written = claim_run(claim.store, record, replace=replace)
    if written is not None:
        claim.write, claim.written = None, written
        return
    winner = read_run(claim.store, run.run_id)
    if winner is not None and winner.request_sha256 == fingerprint:
        claim.write = None
        return
    raise Refusal(
        "Conflict",
        f"run.run_id: run {run.run_id!r} was started concurrently by a different request; use another run_id",
        field="run.run_id",
        details={"run_id": run.run_id},
    )


def _submit_request(
    request: SubmitRequest,
    run_claim: _RunClaim | None,
    event: Any,
    *,
    clients: Clients,
    config: SubmitterConfig,
    now: datetime,
) -> dict[str, Any]:
    check_instance(request, config)
    # A predicted out-of-memory refuses only what would be created: a request that already has its job
    # (a retry after a planner upgrade, or without accept_memory_risk, which is not fingerprinted) replays it.
    refused: Refusal | None = None
    try:
        tuned, estimate, tuning = preflight(request)
    except Refusal as exc:
        if exc.code != "PredictedOutOfMemory":
            raise
        refused, tuned, tuning = exc, request, None
        estimate = dict((exc.details or {}).get("estimate") or {})
    fingerprint = request.fingerprint()
    records = _records(clients, config) if request.client_token else None

    candidates: list[CapacityChoice] | None = None
    for _ in range(CLAIM_ATTEMPTS):
        slot = _resolve(request, fingerprint, clients=clients, records=records, now=now)
        if slot.existing is not None:
            if slot.adopt and records is not None and not request.dry_run:
                adopted = records.claim(
                    token_digest(request.client_token or ""), slot.job_name, fingerprint,
                    replace=slot.record if slot.write == "replace" else None, adopted=True,
                )  # fmt: skip
                if adopted is None:
                    logger.info(
                        "client token claimed concurrently; settling", extra={"training_job_name": slot.job_name}
                    )
                    continue
                logger.info("client token bound to a job made without one", extra={"training_job_name": slot.job_name})
            return _replay(request, slot.existing, fingerprint, estimate, tuning, via=slot.via)
        if refused is not None:
            raise refused
        run = request.run
        if run is not None and request.segment == 1 and run.deadline is not None and run.deadline <= now:
            raise invalid(
                FieldError(
                    "run.deadline", runspec.format_time(run.deadline), f"a time after now ({runspec.format_time(now)})"
                )
            )
        if candidates is None:
            candidates = choose_capacity(tuned, clients=clients, config=config, now=now)
        first = build_create_training_job(
            tuned, job_name=slot.job_name, capacity=candidates[0], config=config, fingerprint=fingerprint
        )
        logger.info(
            "capacity chosen",
            extra={"training_job_name": slot.job_name, "capacity": candidates[0].to_dict(), "dry_run": request.dry_run},
        )
        if request.dry_run:
            return _answer("validated", slot.job_name, None, candidates[0], estimate, tuning, create_training_job=first)
        if run_claim is not None and run_claim.write is not None:
            _write_run(request, run_claim, event, fingerprint, now)
        if records is not None and slot.write:
            claimed = records.claim(
                token_digest(request.client_token or ""), slot.job_name, fingerprint,
                replace=slot.record if slot.write == "replace" else None,
            )  # fmt: skip
            if claimed is None:
                logger.info("client token claimed concurrently; settling", extra={"training_job_name": slot.job_name})
                continue
            slot = dataclasses.replace(slot, record=claimed, write=None)
        return _create(
            request,
            tuned,
            slot,
            candidates,
            fingerprint,
            estimate,
            tuning,
            clients=clients,
            records=records,
            config=config,
            run_claim=run_claim,
            now=now,
        )
    raise RuntimeError(
        f"client_token: the claim on its record was lost {CLAIM_ATTEMPTS} times to concurrent requests; retry"
    )


def _create(
    request: SubmitRequest,
    tuned: SubmitRequest,
    slot: _Slot,
    candidates: list[CapacityChoice],
    fingerprint: str,
    estimate: dict[str, Any],
    tuning: dict[str, Any] | None,
    *,
    clients: Clients,
    records: TokenRecords | None,
    config: SubmitterConfig,
    run_claim: _RunClaim | None = None,
    now: datetime | None = None,
) -> dict[str, Any]:
    """``CreateTrainingJob`` on each candidate in turn (another only after ``ResourceLimitExceeded``).

    When SageMaker refuses the job (quota, validation, the name held by another
    request), the token's record is released. When the name turns out to hold
    the token's own job (``ResourceInUse`` after a lost answer), that job
    answers and the record stays.
    """
    job_name = slot.job_name
    quota_refusals: list[Refusal] = []
    own_job: dict[str, Any] | None = None
    try:
        for choice in candidates:
            params = build_create_training_job(
                tuned, job_name=job_name, capacity=choice, config=config, fingerprint=fingerprint
            )
            try:
                created = clients.sagemaker.create_training_job(**params)
            except Exception as exc:
                code = error_code(exc)
                if code == "ResourceInUse":
                    existing = existing_job(clients, job_name, settle=True)
                    if existing is None:
                        raise
                    owner = _token_owner(request, existing)
                    if owner == "this":
                        own_job = existing
                        break
                    if owner == "another":
                        raise _another_tokens_job(existing, derived=request.job_name is None) from None
                    return _replay(request, existing, fingerprint, estimate, tuning, via="job_name")
                if code == "ResourceLimitExceeded":
                    quota_refusals.append(_quota_refusal(exc, tuned, choice))
                    if request.capacity == "auto":
                        logger.warning("quota exceeded, trying the next capacity", extra={"capacity": choice.to_dict()})
                        continue
                    raise quota_refusals[-1] from None
                if code == "ValidationException":
                    raise Refusal(
                        "InvalidRequest",
                        f"SageMaker rejected the job: {error_message(exc)}",
                        details={"sagemaker_error": code},
                    ) from None
                raise
            logger.info(
                "training job created",
                extra={
                    "training_job_name": job_name,
                    "training_job_arn": created["TrainingJobArn"],
                    "capacity": choice.type,
                },
            )
            return _answer("submitted", job_name, created["TrainingJobArn"], choice, estimate, tuning)
        if own_job is None:
            last = quota_refusals[-1]
            if len(quota_refusals) > 1:
                last.details = dict(
                    last.details or {}, quotas=[r.details["quota"] for r in quota_refusals if r.details]
                )
                last.message = "every capacity in the fallback order is over its quota: " + "; ".join(
                    r.message for r in quota_refusals
                )
            raise last
    except Refusal as refusal:
        if records is not None and slot.record is not None:
            _release(records, slot.record, f"{refusal.code}: {refusal.message}")
        if run_claim is not None and run_claim.written is not None:
            _release_run(
                run_claim.store, run_claim.written, f"{refusal.code}: {refusal.message}", now or datetime.now(UTC)
            )
        raise
    # the token's own job holds the name (an earlier attempt's answer was lost): it answers, the record stays
    return _replay(request, own_job, fingerprint, estimate, tuning, via="client_token")


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
            request.hyperparameters, instance_type=request.instance_type, instance_count=request.instance_count
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

    if tuned is None:
        why = "the planner found no change of the hyperparameters that fits"
        if status == "at-risk":
            why += "; set accept_memory_risk to submit it as it is"
    else:
        why = "set auto_tune to apply the suggested change"
        if status == "at-risk":
            why += ", or accept_memory_risk to submit it as it is"
    required, usable = getattr(plan.memory_gb, "required", None), getattr(plan.memory_gb, "usable", None)
    if isinstance(required, (int, float)) and isinstance(usable, (int, float)):
        figures = f"{memory:.1f} GB peak per GPU ({required:.1f} GB with margins) of {usable:.1f} GB usable"
    else:
        figures = f"{memory:.1f} GB per GPU, more than fits"
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


# --- idempotency -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Slot:
    """Where this request's job goes (or the job that already answers it).

    ``existing``: a job that settles the request (replay or ``Conflict``), found
    ``via`` ``client_token`` or ``job_name``. Else ``job_name`` is the name to
    create under; ``record`` the token's record this invocation works under;
    ``write``: ``"new"`` / ``"replace"`` when the token must still be claimed.
    ``adopt``: ``existing`` was made without a client token by this same
    request; the token is bound to it (its record written) before it answers.
    """

    job_name: str = ""
    existing: dict[str, Any] | None = None
    via: str = "job_name"
    record: TokenRecord | None = None
    write: str | None = None
    adopt: bool = False


def _records(clients: Clients, config: SubmitterConfig) -> TokenRecords:
    if not config.client_token_records:
        raise ConfigurationError("the client-token records location (CLIENT_TOKEN_RECORDS_URI) is not configured")
    if getattr(clients, "s3", None) is None:
        raise ConfigurationError("the submitter's clients have no S3 client for the client-token records")
    return TokenRecords(clients.s3, config.client_token_records)


def _resolve(
    request: SubmitRequest, fingerprint: str, *, clients: Clients, records: TokenRecords | None, now: datetime
) -> _Slot:
    """Settle the request against what its token and name already stand for (reads only).

    With a client token, in order: its record (the job it names, when that job
    is the token's); a job of the previous version tagged with the token
    (``Search``); the job, if any, already holding the request's own name (the
    caller's ``job_name`` or the name derived from the token), which is the
    token's when tagged with it, another token's (``Conflict`` on ``job_name``),
    or one made without a token (adopted when it is this same request). A dry
    run takes the same path and so answers as the submission would.
    """
    own_name = request.job_name or job_name_for(request, now)
    if request.client_token is None or records is None:
        if request.job_name:  # without a token the name is the key
            existing = existing_job(clients, request.job_name)
            if existing is not None:
                return _Slot(own_name, existing, "job_name")
        return _Slot(own_name)
    digest = token_digest(request.client_token)
    record = records.lookup(digest)
    if record is not None:
        slot = _from_record(request, fingerprint, record, digest, clients)
        if slot is not None:
            return slot
        return _by_own_name(request, fingerprint, digest, own_name, clients, record=record, write="replace")
    legacy = _job_by_token_tag(clients, digest)  # a job of the previous version (no records then)
    if legacy is not None:
        return _Slot(legacy["description"]["TrainingJobName"], legacy, "client_token")
    return _by_own_name(request, fingerprint, digest, own_name, clients, record=None, write="new")


def _by_own_name(
    request: SubmitRequest,
    fingerprint: str,
    digest: str,
    own_name: str,
    clients: Clients,
    *,
    record: TokenRecord | None,
    write: str,
) -> _Slot:
    """A token's request whose token binds no job yet: settle it against the job holding ``own_name``, if any."""
    existing = existing_job(clients, own_name)
    if existing is None:
        return _Slot(own_name, None, "client_token", record, write)
    owner = existing["tags"].get(TAG_CLIENT_TOKEN_SHA256)
    if owner == digest:
        return _Slot(own_name, existing, "client_token", record)  # the token's job (made before records existed)
    if owner is not None:
        raise _another_tokens_job(existing, derived=request.job_name is None)
    same, _ = _same_request(request, existing["tags"], fingerprint, own_name)
    return _Slot(own_name, existing, "job_name", record, write if same else None, adopt=same)


def _from_record(
    request: SubmitRequest, fingerprint: str, record: TokenRecord, digest: str, clients: Clients
) -> _Slot | None:
    """What the token's record says: its job (replay or ``Conflict``), a name to finish under, or
    ``None`` when the record binds no job (released, or its name is held by another request's job)."""
    name = record.training_job_name
    existing = existing_job(clients, name)
    if existing is not None:
        if _record_owns(existing, record, digest):
            return _Slot(name, existing, "client_token", record)  # the token's job
        # another request (another token, or none) created the recorded name first: the token never got a job
        logger.info(
            "the job a client-token record names is another request's; the token binds no job",
            extra={"training_job_name": name, "record": record.uri},
        )
        return None
    if record.state == RELEASED:
        return None
    if record.request_sha256 == fingerprint:
        # this request's first submission is in flight or was interrupted: finish it under the recorded name
        return _Slot(name, None, "client_token", record)
    raise Refusal(
        "Conflict",
        f"client_token was first used at {record.created} for a different request, whose job {name!r} has not "
        "been created: that submission is in flight or was interrupted; retry that request to finish it, or use "
        "a new client_token",
        field="client_token",
        details={"training_job_name": name, "client_token_record": record.uri},
    )


def _record_owns(existing: dict[str, Any], record: TokenRecord, digest: str) -> bool:
    """Whether the job at a record's name is the token's: tagged with the token, or made without a
    token and bound to it (adopted, or created by the very request the record holds)."""
    tags: dict[str, str] = existing["tags"]
    owner = tags.get(TAG_CLIENT_TOKEN_SHA256)
    if owner is not None:
        return owner == digest
    return record.adopted or tags.get(TAG_REQUEST_SHA256) == record.request_sha256


def _token_owner(request: SubmitRequest, existing: dict[str, Any]) -> str:
    """``"this"`` / ``"another"`` / ``"none"``: whose client token the job ``existing`` carries,
    relative to ``request`` (``"none"`` for a request without one, whatever the job's tag)."""
    owner = existing["tags"].get(TAG_CLIENT_TOKEN_SHA256)
    if request.client_token is None or owner is None:
        return "none"
    return "this" if owner == token_digest(request.client_token) else "another"


def _another_tokens_job(existing: dict[str, Any], *, derived: bool) -> Refusal:
    """``Conflict`` on ``job_name``: the name is held by a job that another client token made."""
    description = existing["description"]
    name, arn = description["TrainingJobName"], description["TrainingJobArn"]
    if derived:
        advice = (
            "it is the name derived from this client_token, taken by a job of an earlier version of the submitter, "
            "which did not reserve derived names; send a job_name for this request"
        )
    else:
        advice = "use another job_name"
    return Refusal(
        "Conflict",
        f"training job {name!r} belongs to another client_token (its {TAG_CLIENT_TOKEN_SHA256} tag is another "
        f"token's), so it cannot answer this one; {advice}",
        field="job_name",
        details={"training_job_name": name, "training_job_arn": arn},
    )


def _release_run(store: RunStore, record: RunRecord, reason: str, now: datetime) -> None:
    """Mark the run's ``run.json`` released after SageMaker refused its first segment (best effort: never masks
    the refusal; an unreleased record is replaced by the run_id's next request all the same)."""
    try:
        if not release_run(store, record, reason, now):
            logger.warning("run record changed since written; not released", extra={"run_id": record.run.run_id})
    except Exception as exc:
        logger.warning("run record not released", extra={"run_id": record.run.run_id, "error": repr(exc)})


def _release(records: TokenRecords, record: TokenRecord, reason: str) -> None:
    """Mark the token's record released after SageMaker refused its job (best effort: never masks the refusal)."""
    try:
        if not records.release(record, reason):
            logger.info("client-token record changed since it was read; left as is", extra={"record": record.uri})
    except Exception as exc:  # the refusal is the answer; an unreleased record only keeps the token bound
        logger.warning("client-token record not released", extra={"record": record.uri, "error": repr(exc)})


def _job_by_token_tag(clients: Clients, digest: str) -> dict[str, Any] | None:
    """The oldest job tagged with this token's digest (``Search``), as ``{"description", "tags"}``, or ``None``.

    Finds jobs created before client-token records existed. ``Search`` is
    eventually consistent: it is not the lock (the record is), only the
    memory of jobs older than the upgrade.
    """
    response = clients.sagemaker.search(
        Resource="TrainingJob",
        SearchExpression={
            "Filters": [{"Name": f"Tags.{TAG_CLIENT_TOKEN_SHA256}", "Operator": "Equals", "Value": digest}]
        },
        SortBy="CreationTime",
        SortOrder="Ascending",
        MaxResults=10,
    )
    jobs = [r["TrainingJob"] for r in response.get("Results") or [] if r.get("TrainingJob")]
    if not jobs:
        return None
    if len(jobs) > 1:
        logger.warning(
            "several jobs carry one client token; answering with the oldest",
            extra={"training_job_names": [j.get("TrainingJobName") for j in jobs]},
        )
    job = jobs[0]
    return {"description": job, "tags": {t["Key"]: t["Value"] for t in job.get("Tags") or []}}


def _same_request(request: SubmitRequest, tags: dict[str, str], fingerprint: str, job_name: str) -> tuple[bool, str]:
    """Whether the job with ``tags`` was created by this request, and how that was decided."""
    if TAG_REQUEST_SHA256 in tags:
        return tags[TAG_REQUEST_SHA256] == fingerprint, "its request fingerprint differs"
    legacy = tags.get(TAG_REQUEST_SHA256_V1)
    if legacy:
        # the previous version hashed the job name too: the job's own name, or none (a derived name)
        same = legacy in {request.legacy_fingerprint_v1(name) for name in (job_name, None)}
        return same, (
            f"it was created by an earlier version of the submitter and its {TAG_REQUEST_SHA256_V1} tag does not "
            "match this request under that version's rules"
        )
    return False, "it was not created by the job submitter"


def _replay(
    request: SubmitRequest,
    existing: dict[str, Any],
    fingerprint: str,
    estimate: dict[str, Any],
    tuning: dict[str, Any] | None,
    *,
    via: str = "job_name",
) -> dict[str, Any]:
    description, tags = existing["description"], existing["tags"]
    name, arn = description["TrainingJobName"], description["TrainingJobArn"]
    same, why_not = _same_request(request, tags, fingerprint, name)
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
    resource = description.get("ResourceConfig") or {}
    kind = capacity_type_of(description)
    created = description.get("CreationTime")
    when = created.isoformat() if isinstance(created, datetime) else "earlier"
    choice = CapacityChoice(
        kind,
        f"idempotent replay: the job was created by an identical request at {when}",
        training_plan_arn=resource.get("TrainingPlanArn"),
        rule=RULE_IDEMPOTENT_REPLAY,
    )
    logger.info("idempotent replay", extra={"training_job_name": name, "training_job_arn": arn, "via": via})
    status = "validated" if request.dry_run else "submitted"
    return _answer(
        status,
        name,
        arn,
        choice,
        estimate,
        tuning,
        replayed=True,
        training_job_status=description.get("TrainingJobStatus"),
    )


# --- responses -------------------------------------------------------------------------------


def _answer(
    status: str,
    job_name: str,
    job_arn: str | None,
    choice: CapacityChoice,
    estimate: dict[str, Any],
    tuning: dict[str, Any] | None,
    *,
    replayed: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "training_job_name": job_name}
    if job_arn is not None:
        out["training_job_arn"] = job_arn
    out["capacity"] = choice.to_dict()
    out["estimate"] = estimate
    out["replayed"] = replayed
    if tuning is not None:
        out["auto_tune"] = tuning
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
