"""Lambda entry point of the run continuation (``platform_constructs.submitter.runtime.continuation.lambda_handler``).

It decides a run's segments and submits the next, deployed from the submitter's code asset with the
submitter's environment (:func:`.settings.function_environment`). Two kinds of event:

* ``SageMaker Training Job State Change`` (``source`` ``aws.sagemaker``; the stack's rule sends the
  terminal statuses): the job named in ``detail.TrainingJobName`` is re-read, never trusted from the
  event, and when it is a run's segment the run is decided (:func:`on_segment_end`); a ``continue``
  submits the next segment from the run's record read here (:func:`.service.submit_segment`: the
  submission's own path). Duplicate events and events of older segments are ``stale-event`` no-ops. An
  event of the run's newest, undecided segment that still reads ``InProgress`` or ``Stopping`` (the event
  came before the API shows the end) raises :class:`.errors.SegmentNotEnded`: the invocation fails and
  Lambda's asynchronous retries read the job again; the scheduled tick decides it in any case.
* ``Scheduled Event`` (``source`` ``aws.events``): every run waiting for capacity is retried
  (:func:`retry_waiting`), every other active run is reconciled (:func:`reconcile`: a newest segment
  that ended without a decision, its event lost or early, is decided exactly as its event would be),
  and the longest wait still running is published. **The tick's work is bounded** by the invocation's
  time: no run's work starts with less than :data:`TICK_RESERVE_S` left; the runs not reached are
  counted (``deferred``) and reached by later ticks, which take the runs in a random order so that a
  backlog longer than one tick starves none.

**Capacity backoff.** A ``continue`` after a segment that never trained (a capacity failure:
:func:`platform_spec.runs.never_trained`) carries the count of such segments in a row and a ``not_before``
(:attr:`platform_spec.runs.Decision.backoff_s` after the decision): the next segment is not submitted then,
the run waits for capacity (its waiting marker carries the ``not_before``) and the tick starts it at the first
tick from that time. A recorded ``continue`` finished after a crash honours the same ``not_before``.

**One segment per index.** Segment ``i`` is created only under the name
:func:`platform_spec.runs.segment_job_name` and the client token
:func:`platform_spec.runs.segment_client_token` (functions of the run and the index), so duplicate and
concurrent events, a retry after a crash and the scheduled retry of a waiting run settle on one job. A
decision is recorded once (:mod:`.ledger`) before the next segment is submitted; an event whose segment
has a decision is a ``stale-event``, but a recorded ``continue`` whose next segment does not exist (its
invocation died) is finished by the next event or tick.

Per decision: one log line (:data:`.settings.RUN_DECISION_LOG_MESSAGE`, with the fields
:data:`.settings.RUN_DECISION_LOG_FIELDS`), the metric :data:`.settings.METRIC_RUN_DECISIONS` (Count,
dimension :data:`.settings.DIMENSION_DECISION`), and, except for ``stale-event``, an EventBridge event on
the default bus (``Source`` :data:`.settings.RUN_EVENT_SOURCE`, ``DetailType``
:data:`.settings.RUN_EVENT_DETAIL_TYPE`, detail = the decision record). A started segment adds
:data:`.settings.METRIC_RUN_SEGMENTS_STARTED`; every tick publishes
:data:`.settings.METRIC_RUN_CAPACITY_WAIT_SECONDS` (0 when no run waits). Metrics are EMF lines
(Powertools ``Metrics``), namespace :data:`.settings.METRICS_NAMESPACE`, ``service``
:data:`.settings.CONTINUATION_SERVICE_NAME`.

AWS faults and :class:`.errors.DeadlineExceeded` raise: EventBridge's retry runs the invocation again,
which is safe (every write is conditional; every segment has one name and token). A failed ``PutEvents``
entry is logged and does not fail the invocation: the decision is recorded and logged already.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from platform_spec import runs as spec
from platform_spec.runs import JOB_STATE_CHANGE_DETAIL_TYPE, JOB_STATE_CHANGE_SOURCE, STALE_EVENT

from ...lambda_runtime.deadline import client_config, current_deadline, deadline_scope, install_deadline_hooks
from . import runs, settings
from .aws import Clients, Deadline, client_kwargs
from .config import SubmitterConfig
from .errors import DeadlineExceeded, SegmentNotEnded
from .ledger import RunLedger
from .runs import RunState, instance_hours, newest_checkpoint, parse_iso
from .service import submit_segment
from .stall import StepAge, watch_segment
from .training_job import describe_job, stop_job

logger = Logger(service=settings.CONTINUATION_SERVICE_NAME)
metrics = Metrics(namespace=settings.METRICS_NAMESPACE, service=settings.CONTINUATION_SERVICE_NAME)

SCHEDULED_SOURCE = "aws.events"
SCHEDULED_DETAIL_TYPE = "Scheduled Event"
TICK_RESERVE_S = float(settings.FUNCTION_TIMEOUT_S)
"""Seconds of the invocation a tick keeps in hand when it starts a run's work: one run's work submits at
most one segment, which the submitter function itself answers within its timeout
(:data:`.settings.FUNCTION_TIMEOUT_S`), so a started run is not cut short for time."""
CAPACITY_REFUSALS = ("NoCapacity", "QuotaExceeded")
"""Refusals of a next segment that mean "no capacity now": the run waits and the schedule retries."""

_dependencies: tuple[Clients, SubmitterConfig, Any] | None = None


def events_client(environ: Mapping[str, str] | None = None) -> Any:
    """An EventBridge client with the submitter's retry configuration and deadline hooks (region and
    endpoint from ``environ`` when given, as :meth:`.aws.Clients.create` takes them)."""
    import botocore.session

    client = botocore.session.Session().create_client("events", config=client_config(environ), **client_kwargs(environ))
    install_deadline_hooks(client)
    return client


def dependencies() -> tuple[Clients, SubmitterConfig, Any]:
    """Clients, configuration and the EventBridge client of this (warm) container, created on first use."""
    global _dependencies
    if _dependencies is None:
        _dependencies = (Clients.create(), SubmitterConfig.from_environ(os.environ), events_client())
    return _dependencies


def handle(
    event: Any,
    *,
    clients: Clients,
    config: SubmitterConfig,
    events: Any,
    now: datetime | None = None,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """Answer one event (module docstring); what :func:`lambda_handler`, the emulator's targets and tests run.

    Returns:
        ``{"status": "decided", "decision": record}`` for a run's segment; ``{"status": "ticked",
        "decisions": [records], "longest_wait_s": s}`` for the schedule; ``{"status": "ignored",
        "reason"}`` otherwise.

    Raises:
        DeadlineExceeded, botocore.exceptions.ClientError, IdempotencyRecordError: retriable faults.
        SegmentNotEnded: the event's segment is the run's newest, undecided, and does not read ended yet.
    """
    when = now or datetime.now(UTC)
    with deadline_scope(deadline if deadline is not None else current_deadline()):
        if not isinstance(event, Mapping):
            return _ignored(f"the event is {type(event).__name__}, not a JSON object")
        source, kind = event.get("source"), event.get("detail-type")
        if source == JOB_STATE_CHANGE_SOURCE and kind == JOB_STATE_CHANGE_DETAIL_TYPE:
            detail = event.get("detail")
            if not isinstance(detail, Mapping):
                detail = {}
            name = detail.get("TrainingJobName")
            if not isinstance(name, str) or not name:
                return _ignored("the state-change event names no TrainingJobName")
            if detail.get("TrainingJobStatus") not in spec.TERMINAL_JOB_STATUSES:  # the stack's rule sends none
                return _ignored(f"the state-change event of {name!r} reports no end")
            outcome = on_segment_end(name, clients=clients, config=config, now=when)
            if outcome is None:
                return _ignored(f"training job {name!r} is not a run's segment")
            publish(outcome, events)
            return {"status": "decided", "decision": outcome.record}
        if source == SCHEDULED_SOURCE and kind == SCHEDULED_DETAIL_TYPE:
            return tick(clients=clients, config=config, events=events, now=when)
        return _ignored(f"an event of source {source!r} and detail-type {kind!r} is not one this function answers")


def tick(*, clients: Clients, config: SubmitterConfig, events: Any, now: datetime) -> dict[str, Any]:
    """Retry every run waiting for capacity and reconcile every other active run (and watch its running segment:
    :mod:`.stall`), in a random order, while at least :data:`TICK_RESERVE_S` of the invocation is left; publish
    the longest wait still running (0 when none) and each training run's step age, and the oldest (0 when none).

    Returns:
        ``{"status": "ticked", "decisions": [records], "longest_wait_s": s, "deferred": n, "step_ages_s":
        {run_id: s}, "stalled": [run_id]}``: ``deferred`` runs were left for the next tick (too little time);
        ``step_ages_s``: each run in training, seconds since its newest step (:mod:`.stall`); ``stalled``: the
        runs whose segment was stopped for a stall.

    Raises:
        The first run's fault, after every other run was worked (one run's fault keeps no other waiting).
    """
    store = RunLedger.of(clients, config)
    waiting = list(marked_runs(store, settings.RUN_WAITING_PREFIX))
    work = [(run_id, True) for run_id in waiting]
    work += [(run_id, False) for run_id in marked_runs(store, settings.RUN_ACTIVE_PREFIX) if run_id not in waiting]
    random.shuffle(work)
    decided: list[dict[str, Any]] = []
    longest = 0.0
    ages: dict[str, StepAge] = {}
    errors: list[BaseException] = []
    deadline, deferred = current_deadline(), 0
    for position, (run_id, is_waiting) in enumerate(work):
        if deadline is not None and deadline.remaining() < TICK_RESERVE_S:
            deferred = len(work) - position
            logger.warning("tick cut short for time", extra={"deferred": deferred})
            break
        try:
            if is_waiting:
                outcome, waited = retry_waiting(run_id, clients=clients, config=config, now=now)
            else:
                (outcome, age), waited = reconcile(run_id, clients=clients, config=config, now=now), 0.0
                if age is not None:
                    ages[run_id] = age
        except DeadlineExceeded:
            raise
        except Exception as exc:  # one run's fault does not keep the others waiting; raised after them
            logger.exception("run not retried or reconciled", extra={"run_id": run_id})
            errors.append(exc)
            continue
        if outcome is not None:
            publish(outcome, events)
            decided.append(outcome.record)
        longest = max(longest, waited)
    metrics.add_metric(name=settings.METRIC_RUN_CAPACITY_WAIT_SECONDS, unit=MetricUnit.Seconds, value=longest)
    metrics.flush_metrics()
    for run_id, age in sorted(ages.items()):
        metrics.add_dimension(name=settings.DIMENSION_RUN_ID, value=run_id)
        metrics.add_metric(name=settings.METRIC_RUN_STEP_AGE_SECONDS, unit=MetricUnit.Seconds, value=age.age_s)
        metrics.flush_metrics()
    oldest = max((age.age_s for age in ages.values()), default=0.0)
    metrics.add_metric(name=settings.METRIC_RUN_STEP_AGE_SECONDS, unit=MetricUnit.Seconds, value=oldest)
    metrics.flush_metrics()
    stalled = sorted(run_id for run_id, age in ages.items() if age.stopped)
    logger.info(
        "runs waiting for capacity retried, active runs reconciled",
        extra={
            "decisions": len(decided), "longest_wait_s": longest, "deferred": deferred, "oldest_step_age_s": oldest,
            "stalled": stalled,
        },
    )  # fmt: skip
    if errors:
        raise errors[0]
    return {
        "status": "ticked", "decisions": decided, "longest_wait_s": longest, "deferred": deferred,
        "step_ages_s": {run_id: age.age_s for run_id, age in ages.items()}, "stalled": stalled,
    }  # fmt: skip


def publish(outcome: Outcome, events: Any) -> None:
    """The decision's log line, metrics and (but for ``stale-event``) EventBridge event."""
    record = outcome.record
    logger.info(
        settings.RUN_DECISION_LOG_MESSAGE, extra={name: record.get(name) for name in settings.RUN_DECISION_LOG_FIELDS}
    )
    if outcome.segment_started:
        metrics.add_metric(name=settings.METRIC_RUN_SEGMENTS_STARTED, unit=MetricUnit.Count, value=1)
        metrics.flush_metrics()
    metrics.add_dimension(name=settings.DIMENSION_DECISION, value=outcome.decision)
    metrics.add_metric(name=settings.METRIC_RUN_DECISIONS, unit=MetricUnit.Count, value=1)
    metrics.flush_metrics()
    if outcome.decision == STALE_EVENT:
        return
    entry = {
        "Source": settings.RUN_EVENT_SOURCE,
        "DetailType": settings.RUN_EVENT_DETAIL_TYPE,
        "Detail": json.dumps(record, sort_keys=True, default=str),
        "EventBusName": "default",
    }
    answer = events.put_events(Entries=[entry])
    if answer.get("FailedEntryCount"):
        logger.error(
            "run decision event not published",
            extra={"run_id": record.get("run_id"), "entries": answer.get("Entries")},
        )


# --- deciding a run --------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one continuation step decided (the decision record, and whether a segment was started)."""

    record: dict[str, Any]
    segment_started: bool = False

    @property
    def decision(self) -> str:
        return str(self.record["decision"])


def _record(state: RunState, index: int, decision: spec.Decision, now: datetime, **extra: Any) -> dict[str, Any]:
    return {
        "run_id": state.run_id,
        "segment": index,
        "training_job_name": spec.segment_job_name(state.run_id, index),
        "decision": decision.decision,
        "reason": decision.reason,
        "max_steps": state.record.max_steps,
        "decided_at": spec.format_time(now),
        **extra,
    }


def on_segment_end(job_name: str, *, clients: Clients, config: SubmitterConfig, now: datetime) -> Outcome | None:
    """Decide a run after its segment ``job_name`` changed state (a SageMaker state-change event).

    The job is re-read (``DescribeTrainingJob`` and its tags; the event's status is never trusted),
    then the run's records and newest checkpoint; the decision (:func:`platform_spec.runs.decide`) is
    recorded, and for ``continue`` the next segment is submitted.

    Returns:
        The outcome, or ``None`` when the job is not a run's segment (no such job, no run tags, or a run
        without ``run.json``).
    """
    segment = _segment(clients, job_name)
    if segment is None:
        return None
    run_id, index, description = segment
    store = RunLedger.of(clients, config)
    state = runs.load_run(store, run_id)
    if state is None:
        logger.warning("segment of a run without run.json", extra={"training_job_name": job_name, "run_id": run_id})
        return None
    status, secondary = str(description.get("TrainingJobStatus")), description.get("SecondaryStatus")
    outcome = spec.SegmentOutcome(index, status, secondary, description.get("FailureReason"))
    next_exists = index < spec.MAX_SEGMENTS and runs.run_segment(clients, run_id, index + 1) is not None
    decided = state.decisions.get(index)
    if decided is not None and not next_exists and outcome.ended:
        resumed = _resume(state, index, decided, clients=clients, config=config, now=now)
        if resumed is not None:
            return resumed
    if state.end is not None and decided is None:
        ended = spec.Decision(spec.STALE_EVENT, f"the run already ended ({state.end.get('decision')})")
        return Outcome(_record(state, index, ended, now))
    newest = index + 1 if next_exists else index
    if newest == index and decided is None and not outcome.ended:
        raise SegmentNotEnded(
            f"training job {job_name!r} (segment {index} of run {run_id!r}) reads {status}: its end is decided "
            "when DescribeTrainingJob reads it ended (this invocation's retry, or the scheduled tick)"
        )
    stall = store.read(store.stall_key(state.record, index), state.keys)
    stalled = str(stall.fields.get("reason") or "stopped for a stall") if stall is not None else None
    record = _decide(
        state, outcome, description, newest, decided is not None, stalled, clients=clients, config=config, now=now
    )
    if record["decision"] == spec.STALE_EVENT:
        return Outcome(record)
    if record["decision"] == spec.CONTINUE:
        record["next_training_job_name"] = spec.segment_job_name(run_id, index + 1)
    if store.create(store.decision_key(state.record, index), record) is None:
        stale = spec.Decision(spec.STALE_EVENT, f"segment {index} was decided concurrently (a duplicate event)")
        return Outcome(_record(state, index, stale, now))
    if record["decision"] != spec.CONTINUE:
        return Outcome(record)
    return _next_segment(state, index + 1, record, clients=clients, config=config, now=now)


def _segment(clients: Clients, job_name: str) -> tuple[str, int, dict[str, Any]] | None:
    """``(run_id, index, DescribeTrainingJob)`` of a run's segment (by its tags: :func:`.runs.segment_of`),
    else ``None``."""
    description = describe_job(clients, job_name)
    found = runs.segment_of(clients, description) if description is not None else None
    if description is None or found is None:
        logger.info("not a run segment (its tags do not name a run)", extra={"training_job_name": job_name})
        return None
    return found[0], found[1], description


def _decide(
    state: RunState,
    outcome: spec.SegmentOutcome,
    description: dict[str, Any],
    newest_segment: int,
    already_decided: bool,
    stalled: str | None,
    *,
    clients: Clients,
    config: SubmitterConfig,
    now: datetime,
) -> dict[str, Any]:
    """The decision record on segment ``outcome.index``'s end (:func:`platform_spec.runs.decide`), given the
    run's newest segment, whether this one was decided already and the reason of its stall stop, if any
    (:mod:`.stall`)."""
    index = outcome.index
    checkpoint, skipped = newest_checkpoint(clients, config, state.run_id)
    if skipped:
        logger.warning("checkpoints skipped", extra={"run_id": state.run_id, "skipped": skipped})
    previous = state.decisions.get(index - 1, {}) if index > 1 else {}
    start = previous.get("newest_step")
    hours_before = sum(float(d.get("segment_instance_hours") or 0.0) for i, d in state.decisions.items() if i < index)
    used = hours_before + instance_hours(description)
    decision = spec.decide(
        outcome,
        spec=state.budget,
        newest_segment=newest_segment,
        already_decided=already_decided,
        stop_requested=state.stop is not None,
        newest_step=checkpoint.step if checkpoint else None,
        start_step=start,
        # a continuation (continue_run) starts counting afresh: the person who continued it chose to try again
        capacity_failures_before=int(previous.get("capacity_failures") or 0) if index > state.first_segment else 0,
        max_steps=state.record.max_steps,
        instance_hours=used,
        now=now,
        stalled=stalled,
    )
    waits = {"not_before": spec.format_time(now + timedelta(seconds=decision.backoff_s))} if decision.backoff_s else {}
    return _record(
        state,
        index,
        decision,
        now,
        job_status=outcome.status,
        secondary_status=outcome.secondary_status,
        failure_reason=outcome.failure_reason,
        newest_step=checkpoint.step if checkpoint else None,
        tokens=checkpoint.tokens if checkpoint else None,
        start_step=start,
        segment_instance_hours=round(instance_hours(description), 6),
        instance_hours=round(used, 6),
        skipped_checkpoints=skipped,
        capacity_failures=decision.capacity_failures,
        **({"stalled": stalled} if stalled is not None else {}),
        **waits,
    )


def _resume(
    state: RunState, index: int, decided: dict[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime
) -> Outcome | None:
    """A recorded ``continue`` whose next segment does not exist and is not waiting: finish it (the
    invocation that recorded it died before submitting). ``None`` when there is nothing to finish."""
    if decided.get("decision") != spec.CONTINUE or state.waiting is not None or state.end is not None:
        return None
    logger.info("finishing a recorded continue", extra={"run_id": state.run_id, "segment": index})
    return _next_segment(state, index + 1, dict(decided), clients=clients, config=config, now=now)


def _next_segment(
    state: RunState, index: int, record: dict[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime
) -> Outcome:
    """After a recorded ``continue``: submit segment ``index`` (:func:`_start_segment`), or, before the
    record's ``not_before`` (the capacity backoff, :attr:`platform_spec.runs.Decision.backoff_s`), make
    the run wait for capacity until then: its waiting marker carries ``not_before``, and
    :func:`retry_waiting` starts nothing before it."""
    not_before = parse_iso(record.get("not_before"))
    if not_before is None or now >= not_before:
        return _start_segment(state, index, record, clients=clients, config=config, now=now)
    store = RunLedger.of(clients, config)
    since = spec.format_time(now)
    failures = int(record.get("capacity_failures") or 0)
    reason = (
        f"segment {index - 1} never trained ({failures} segment(s) in a row: "
        f"{record.get('failure_reason') or record.get('job_status')}); segment {index} waits until "
        f"{record['not_before']}, then is retried on the schedule"
    )
    marker = {"run_id": state.run_id, "segment": index, "since": since, "not_before": record["not_before"]}
    store.create(store.waiting_key(state.run_id), {**marker, "reason": reason})  # once: a racing twin wrote the same
    return Outcome({**record, "decision": spec.WAITING_FOR_CAPACITY, "reason": reason, "waiting_since": since})


def _start_segment(
    state: RunState, index: int, record: dict[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime
) -> Outcome:
    """Submit segment ``index`` from the run's record: ``continue``, ``waiting-for-capacity`` (a capacity
    refusal: the waiting marker is written) or ``failed`` (another refusal: ``end.json``)."""
    store = RunLedger.of(clients, config)
    if state.stop is None and store.read(store.stop_key(state.record, state.first_segment)) is not None:
        # stopped since the run was read: end it rather than start a segment it would only stop
        return _end(
            store, state, {**record, "decision": spec.STOPPED, "reason": "the run was stopped (stop requested)"}, now
        )
    used = record.get("instance_hours")  # through segment index - 1: its decision's (or the one it copies)
    if not isinstance(used, (int, float)):
        used = sum(float(d.get("segment_instance_hours") or 0.0) for i, d in state.decisions.items() if i < index)
    response = submit_segment(
        state.record, index, budget=state.budget, instance_hours_used=float(used), clients=clients, config=config,
        now=now,
    )  # fmt: skip
    if response.get("checkpoint_prune"):  # what the prune before the segment kept and deleted
        record = {**record, "checkpoint_prune": response["checkpoint_prune"]}
    if response.get("status") == "submitted":
        name = spec.segment_job_name(state.run_id, index)
        if state.waiting is not None:
            store.delete(store.waiting_key(state.run_id))
        record = {**record, "decision": spec.CONTINUE, "next_training_job_name": name}
        record["capacity"] = response.get("capacity")
        if store.read(store.stop_key(state.record, state.first_segment)) is not None:
            # a stop landed while the segment was submitted; it may have seen no segment running (stop_run
            # reads the run after writing its marker, so one of the two sees the other): stop it here
            record["stopped_on_start"] = stop_job(clients, name)
        return Outcome(record, segment_started=not response.get("replayed"))
    error = response.get("error") or {}
    code, message = error.get("code"), error.get("message")
    if code not in CAPACITY_REFUSALS:
        # a budget that leaves too little for a segment ends the run with its budget decision (service.submit)
        ended = (error.get("details") or {}).get("budget_decision")
        ended = ended if ended in spec.TERMINAL_DECISIONS else spec.FAILED
        return _end(
            store,
            state,
            {**record, "decision": ended, "reason": f"segment {index} was refused ({code}: {message})"},
            now,
        )
    since = (state.waiting or {}).get("since") or spec.format_time(now)
    if state.waiting is None:
        marker = {"run_id": state.run_id, "segment": index, "since": since, "error_code": code, "reason": message}
        store.create(store.waiting_key(state.run_id), marker)
    reason = f"segment {index} found no capacity ({code}: {message}); retried on the schedule"
    return Outcome({**record, "decision": spec.WAITING_FOR_CAPACITY, "reason": reason, "waiting_since": since})


def _end(store: RunLedger, state: RunState, ended: dict[str, Any], now: datetime) -> Outcome:
    """End the run with the decision ``ended`` (``end.json``, once); its waiting marker, if any, goes."""
    ended["decided_at"] = spec.format_time(now)
    store.create(store.end_key(state.record, state.first_segment), ended)
    if state.waiting is not None:
        store.delete(store.waiting_key(state.run_id))
    return Outcome(ended)


def marked_runs(store: RunLedger, prefix: str) -> Iterator[str]:
    """The run ids with a marker under ``prefix`` (:data:`.settings.RUN_WAITING_PREFIX`,
    :data:`.settings.RUN_ACTIVE_PREFIX`)."""
    for key in sorted(store.keys(prefix)):
        run_id = key[len(prefix) :].removesuffix(".json")
        if spec.RUN_ID_RE.match(run_id):
            yield run_id


def retry_waiting(
    run_id: str, *, clients: Clients, config: SubmitterConfig, now: datetime
) -> tuple[Outcome | None, float]:
    """One scheduled retry of a run waiting for capacity: a stopped run or one whose budget is spent ends
    (at once, even during a capacity backoff); before the waiting marker's ``not_before`` (the capacity
    backoff) nothing is started; else the next segment is submitted.

    Returns:
        ``(outcome, seconds waited so far)``: the outcome is ``None`` when the marker was gone or its
        ``not_before`` is still ahead; the wait is 0 unless the run is still waiting.
    """
    store = RunLedger.of(clients, config)
    state = runs.load_run(store, run_id)
    if state is None or state.waiting is None:
        return None, 0.0
    index = int(state.waiting.get("segment") or 0)
    if index < 2:
        raise store.invalid(store.uri(store.waiting_key(run_id)), "names no segment >= 2")
    base = dict(state.decisions.get(index - 1) or {"run_id": run_id, "segment": index - 1})
    if state.end is not None or runs.run_segment(clients, run_id, index) is not None:
        store.delete(store.waiting_key(run_id))  # ended, or the segment was started by another invocation
        return None, 0.0
    if state.stop is not None:
        ended: spec.Decision | None = spec.Decision(
            spec.STOPPED, "the run was stopped (stop requested) while waiting for capacity"
        )
    else:
        used = sum(float(d.get("segment_instance_hours") or 0.0) for d in state.decisions.values())
        ended = spec.budget_exhausted(state.budget, segments=index - 1, instance_hours=used, now=now)
    if ended is not None:
        return _end(store, state, {**base, "decision": ended.decision, "reason": ended.reason}, now), 0.0
    since = parse_iso(state.waiting.get("since"))
    waited = max(0.0, (now - since).total_seconds()) if since is not None else 0.0
    not_before = parse_iso(state.waiting.get("not_before"))
    if not_before is not None and now < not_before:
        return None, waited  # the capacity backoff: nothing starts before it
    base["decided_at"] = spec.format_time(now)
    outcome = _start_segment(state, index, base, clients=clients, config=config, now=now)
    return outcome, waited if outcome.decision == spec.WAITING_FOR_CAPACITY else 0.0


def reconcile(
    run_id: str, *, clients: Clients, config: SubmitterConfig, now: datetime
) -> tuple[Outcome | None, StepAge | None]:
    """One scheduled look at an active run that is not waiting for capacity: the decision its newest segment's
    event would have made, when that segment has ended without one (the event was lost, or came before the
    job read ended and its retries ran out), through :func:`on_segment_end` itself, so the same ledger records
    make an event that comes later, twice or at the same time a ``stale-event`` (one decision, one next
    segment). A recorded ``continue`` whose next segment was never created is finished the same way.

    The run's active marker is removed once the run has ended (or its ``run.json`` is gone or released). A
    segment still running is watched (:func:`.stall.watch_segment`): stopped when its newest step is older
    than the run's ``stall_minutes``; its end is then decided as any end is, by its event or a later tick.

    Returns:
        ``(outcome, step age)``: the outcome, or ``None`` when there is nothing to decide (a segment runs, the
        run waits for capacity, segment 1 is not created yet, or the run has ended); the running segment's
        :class:`.stall.StepAge` when it is training, else ``None``.
    """
    store = RunLedger.of(clients, config)
    state = runs.load_run(store, run_id)
    if state is None or runs.terminal_record(state) is not None:
        store.delete(store.active_key(run_id))
        return None, None
    if state.waiting is not None:
        return None, None  # retry_waiting's
    highest = max(state.decisions, default=0)
    newest = runs.run_segment(clients, run_id, highest + 1) if highest < spec.MAX_SEGMENTS else None
    if newest is not None:
        if newest.get("TrainingJobStatus") not in spec.TERMINAL_JOB_STATUSES:
            if state.stop is not None:
                return None, None  # stopping on request: not the watch's
            age = watch_segment(state.record, highest + 1, newest, clients=clients, config=config, now=now)
            return None, age
        index = highest + 1
    elif highest and state.decisions[highest].get("decision") == spec.CONTINUE:
        index = highest  # its next segment was never created
    else:
        return None, None
    logger.info("reconciling a run's ended segment", extra={"run_id": run_id, "segment": index})
    return on_segment_end(spec.segment_job_name(run_id, index), clients=clients, config=config, now=now), None


def _ignored(reason: str) -> dict[str, Any]:
    logger.info("event ignored", extra={"reason": reason})
    return {"status": "ignored", "reason": reason}


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    """AWS Lambda handler (EventBridge targets: the state-change rule and the schedule)."""
    clients, config, events = dependencies()
    return handle(event, clients=clients, config=config, events=events, deadline=Deadline.from_lambda_context(context))
