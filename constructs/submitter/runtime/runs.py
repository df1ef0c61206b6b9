"""Runs: the view of a run (``describe`` / ``list_runs`` / ``stop`` with ``run_id``) and what is read of it.

A run (:mod:`platform_spec.runs`) is one training carried across training jobs, its segments. Its records
are the run families of the ledger (:class:`.ledger.RunLedger`): ``run.json`` (the run's request and
budget), a decision per segment's end, the stop, the end, the waiting marker, and each continuation of the
ended run (:mod:`.continue_run`: its new budget; the stop and end of that stretch sit beside it). Segment ``i`` is the job
:func:`platform_spec.runs.segment_job_name` names, created once through :func:`.service.submit`; the
continuation (:mod:`.continuation`) decides each segment's end and submits the next.

**Declared state.** The run's newest complete checkpoint is read from S3
(``s3://<checkpoint bucket>/run-checkpoints/<run_id>/``): the newest ``step-<n>/`` holding
``.complete`` whose ``trainer_state.json`` names step ``n`` (a damaged or foreign one is skipped, as
the trainer skips it, and the next older one is read).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from platform_spec import runs as spec
from platform_spec.capacity import capacity_type_of
from platform_spec.checkpoint_layout import (
    COMPLETE_MARKER,
    STEP_PREFIX,
    TRAINER_STATE,
    StepState,
    checkpoint_step,
    read_trainer_state,
)
from platform_spec.errors import FieldError

from .aws import Clients
from .config import SubmitterConfig
from .errors import IdempotencyRecordError, invalid, not_found
from .ledger import Record, RunLedger, RunRecord
from .training_job import describe_job, iso, job_tags, stop_job, utc

MAX_STATE_READS = 5
"""Complete checkpoints whose ``trainer_state.json`` is read, newest first, before giving up (the trainer keeps 3)."""
UNREADABLE = "unreadable"
"""``list_runs``' state of a run whose records cannot be read (:class:`.errors.IdempotencyRecordError`)."""
LIST_RUNS_DEFAULT = 20
LIST_RUNS_MAX = 100


# --- reading a run ---------------------------------------------------------------------------------


def newest_checkpoint_in(clients: Clients, bucket: str, prefix: str) -> tuple[StepState | None, list[str]]:
    """The newest complete checkpoint under ``s3://bucket/prefix`` whose ``trainer_state.json`` is readable and
    names its folder's step (what a restart resumes, as far as S3 shows it), and what was passed over.

    The ``step-<n>/`` folders are listed (one ``ListObjectsV2`` page per 1000 folders, with ``/`` as the
    delimiter: never the shards), newest first; a folder counts when its ``.complete`` marker exists and its
    ``trainer_state.json`` verifies (:func:`platform_spec.checkpoint_layout.read_trainer_state`). At most
    :data:`MAX_STATE_READS` folders are read. The job API's ``describe`` (of a job, of a run) and the run
    continuation read checkpoints only through here.

    Returns:
        ``(state or None, skipped)``: ``skipped`` names each newer folder passed over and why.
    """
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    steps: list[int] = []
    for page in clients.s3.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix + STEP_PREFIX, Delimiter="/"
    ):
        for common in page.get("CommonPrefixes") or []:
            step = checkpoint_step(common["Prefix"][len(prefix) :].rstrip("/"))
            if step is not None:
                steps.append(step)
    skipped: list[str] = []
    for step in sorted(steps, reverse=True)[:MAX_STATE_READS]:
        folder = f"{prefix}{STEP_PREFIX}{step}/"
        listed = clients.s3.list_objects_v2(Bucket=bucket, Prefix=folder, Delimiter="/")
        names = {item["Key"][len(folder) :] for item in listed.get("Contents") or []}
        if listed.get("IsTruncated"):  # a folder of more than 1000 files: ask for the two that matter
            names = {
                name
                for name in (COMPLETE_MARKER, TRAINER_STATE)
                if clients.s3.list_objects_v2(Bucket=bucket, Prefix=folder + name, MaxKeys=1).get("KeyCount")
            }
        if COMPLETE_MARKER not in names:
            skipped.append(f"step-{step}: no {COMPLETE_MARKER} (a save or an upload cut short)")
            continue
        if TRAINER_STATE not in names:
            skipped.append(f"step-{step}: {COMPLETE_MARKER} without {TRAINER_STATE}")
            continue
        got = clients.s3.get_object(Bucket=bucket, Key=folder + TRAINER_STATE)
        with got["Body"] as body:
            state = read_trainer_state(body.read(), step)
        if isinstance(state, str):
            skipped.append(f"step-{step}: {state}")
            continue
        return state, skipped
    return None, skipped


def newest_checkpoint(clients: Clients, config: SubmitterConfig, run_id: str) -> tuple[StepState | None, list[str]]:
    """The run's newest readable complete checkpoint, and what was skipped (:func:`newest_checkpoint_in`)."""
    return newest_checkpoint_in(clients, config.checkpoint_bucket, spec.run_checkpoint_prefix(run_id))


def instance_hours(description: Mapping[str, Any]) -> float:
    """``InstanceCount`` x (``TrainingEndTime`` - ``TrainingStartTime``) in hours (0 before it started; to now while it runs)."""
    start = utc(description.get("TrainingStartTime"))
    if start is None:
        return 0.0
    end = utc(description.get("TrainingEndTime")) or datetime.now(UTC)
    count = int((description.get("ResourceConfig") or {}).get("InstanceCount") or 1)
    return max(0.0, (end - start).total_seconds()) * count / 3600.0


@dataclass
class RunState:
    """Everything known of a run now (one listing of its store prefix, its records).

    ``continuations``: each live continuation of the ended run (``continue_run``), by the segment it resumed
    at, with its budget; ``stop`` and ``end`` are those of the newest stretch (from :attr:`first_segment`).
    """

    record: RunRecord
    keys: set[str]
    decisions: dict[int, dict[str, Any]] = field(default_factory=dict)
    stop: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    waiting: dict[str, Any] | None = None
    continuations: dict[int, tuple[Record, spec.RunSpec]] = field(default_factory=dict)

    @property
    def run_id(self) -> str:
        return self.record.run.run_id

    @property
    def first_segment(self) -> int:
        """The first segment of the run's newest stretch: 1, or the segment its newest continuation resumed at."""
        return max(self.continuations, default=1)

    @property
    def budget(self) -> spec.RunSpec:
        """The run's budget now: its request's, or its newest continuation's."""
        newest = self.continuations.get(self.first_segment)
        return self.record.run if newest is None else newest[1]


def load_run(store: RunLedger, run_id: str) -> RunState | None:
    """The run's records (``None`` when it has no ``run.json``, or a released one).

    Raises:
        IdempotencyRecordError: a record is unreadable.
    """
    keys = store.keys(store.run_prefix(run_id))
    record = store.read_run(run_id, keys)
    if record is None or record.released:
        return None
    state = RunState(record, keys)
    decision_prefix = f"{store.claim_prefix(record)}decisions/seg-"
    for key in sorted(keys):
        index = key[len(decision_prefix) : -len(".json")]
        if key.startswith(decision_prefix) and key.endswith(".json") and index.isdigit():
            found = store.read(key, keys)
            if found is not None:
                state.decisions[int(index)] = found.fields
    _load_continuations(store, state)
    state.stop = _fields(store.read(store.stop_key(record, state.first_segment), keys))
    state.end = _fields(store.read(store.end_key(record, state.first_segment), keys))
    state.waiting = _fields(store.read(store.waiting_key(run_id)))
    return state


def segment_of(clients: Clients, description: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(run_id, index)`` of the job ``description`` (``DescribeTrainingJob``) when it is a run's segment, else
    ``None``.

    A segment is recognised by the tags the submitter sets on it (:data:`platform_spec.runs.TAG_RUN_ID`,
    :data:`platform_spec.runs.TAG_RUN_SEGMENT`; requests may not set ``platform:`` tags), never by its name
    alone: a job named like a segment by anyone else is not the run's. Its name must also be the one the tags
    give it (:func:`platform_spec.runs.segment_job_name`). One ``ListTags`` call.
    """
    tags = job_tags(clients, description["TrainingJobArn"])
    run_id, raw = tags.get(spec.TAG_RUN_ID, ""), tags.get(spec.TAG_RUN_SEGMENT, "")
    index = int(raw) if raw.isascii() and raw.isdigit() else 0
    if not spec.RUN_ID_RE.match(run_id) or not 1 <= index <= spec.MAX_SEGMENTS:
        return None
    if description.get("TrainingJobName") != spec.segment_job_name(run_id, index):
        return None
    return run_id, index


def run_segment(clients: Clients, run_id: str, index: int) -> dict[str, Any] | None:
    """``DescribeTrainingJob`` of segment ``index`` of run ``run_id``: the job of its name whose tags name this
    run and index (:func:`segment_of`), else ``None`` (no such job, or someone else's job of that name)."""
    description = describe_job(clients, spec.segment_job_name(run_id, index))
    if description is None or segment_of(clients, description) != (run_id, index):
        return None
    return description


def _load_continuations(store: RunLedger, state: RunState) -> None:
    """The run's live (not released) continuation records, each with its budget.

    Raises:
        IdempotencyRecordError: one is not a continuation record of this run.
    """
    for index in store.continuation_segments(state.record, state.keys):
        found = store.read(store.continuation_key(state.record, index), state.keys)
        if found is None or found.released:
            continue
        try:
            budget, _ = spec.parse_run(found.fields["budget"])
            if budget.run_id != state.run_id or not isinstance(found.fields.get("client_token_sha256"), str):
                raise ValueError("fields")
        except (KeyError, TypeError, ValueError, FieldError):
            raise store.invalid(found.uri, "is not a run continuation record") from None
        state.continuations[index] = (found, budget)


def segments_of(clients: Clients, state: RunState) -> list[dict[str, Any]]:
    """``DescribeTrainingJob`` of each of the run's segments (:func:`run_segment`), in order (segment ``i``
    exists only after a ``continue`` on segment ``i - 1``, so the decisions bound the probing)."""
    out: list[dict[str, Any]] = []
    highest = max(state.decisions, default=0) + 1
    for index in range(1, highest + 1):
        description = run_segment(clients, state.run_id, index)
        if description is None:
            break
        out.append(description)
    return out


def run_view(clients: Clients, config: SubmitterConfig, state: RunState, now: datetime) -> dict[str, Any]:
    """The run as ``describe`` with ``run_id`` answers it.

    Returns:
        ``{"run_id", "state", "stopped_by"?, "reason"?, "max_steps", "newest_complete_step", "tokens_done",
        "budget", "created", "instance_hours", "segments": [{"index", "training_job_name", "status",
        "secondary_status", "capacity": {"type", "training_plan_arn"?}, "start_time", "end_time",
        "first_step", "last_step", "tokens", "instance_hours", "failure_reason"?, "decision"?}],
        "idle_gaps_s": [seconds between segment i's end and segment i+1's start], "waiting_since"?,
        "not_before"?}``.
        ``state`` is ``running``, ``waiting-for-capacity``, ``continuing`` (a segment is being
        submitted), or the terminal decision that ended it (``finished``, ``stopped``, ...);
        ``stopped_by`` is that decision and ``reason`` its reason; ``not_before`` (ISO 8601 UTC): a run
        waiting after segments that never trained starts its next segment no earlier than this.
    """
    descriptions = segments_of(clients, state)
    newest, _ = newest_checkpoint(clients, config, state.run_id)
    segments: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for index, description in enumerate(descriptions, start=1):
        decided = state.decisions.get(index)
        segments.append(_segment_row(index, description, decided, previous, newest))
        previous = decided
    gaps = []
    for before, after in itertools.pairwise(descriptions):
        end, start = utc(before.get("TrainingEndTime")), utc(after.get("TrainingStartTime"))
        if end is not None and start is not None:
            gaps.append(round(max(0.0, (start - end).total_seconds()), 3))
    view: dict[str, Any] = {
        "run_id": state.run_id,
        "state": "",
        "max_steps": state.record.max_steps,
        "newest_complete_step": newest.step if newest else None,
        "tokens_done": newest.tokens if newest else None,
        "budget": state.budget.to_dict(),
        "created": state.record.created,
        "instance_hours": round(sum(instance_hours(d) for d in descriptions), 4),
        "segments": segments,
        "idle_gaps_s": gaps,
    }
    if state.continuations:
        view["continuations"] = [
            {key: found.fields.get(key) for key in ("first_segment", "requested_at", "previous", "budget")}
            for _, (found, _) in sorted(state.continuations.items())
        ]
    view.update(_run_state(state, descriptions))
    if state.stop is not None:
        view["stop_requested"] = state.stop.get("requested_at")
    return view


def _segment_row(
    index: int,
    description: Mapping[str, Any],
    decided: dict[str, Any] | None,
    previous: dict[str, Any] | None,
    newest: StepState | None,
) -> dict[str, Any]:
    """One segment of :func:`run_view`: its steps and tokens from its decision (the newest checkpoint while it runs)."""
    first = (previous or {}).get("newest_step")
    last = decided.get("newest_step") if decided else (newest.step if newest else None)
    tokens_at_end = decided.get("tokens") if decided else (newest.tokens if newest else None)
    tokens_at_start = (previous or {}).get("tokens") if index > 1 else 0
    capacity: dict[str, Any] = {"type": capacity_type_of(description)}
    plan = (description.get("ResourceConfig") or {}).get("TrainingPlanArn")
    if plan:
        capacity["training_plan_arn"] = plan
    row: dict[str, Any] = {
        "index": index,
        "training_job_name": description["TrainingJobName"],
        "status": description.get("TrainingJobStatus"),
        "secondary_status": description.get("SecondaryStatus"),
        "capacity": capacity,
        "start_time": iso(description.get("TrainingStartTime")),
        "end_time": iso(description.get("TrainingEndTime")),
        "first_step": None if last is None else (1 if first is None else first + 1),
        "last_step": last,
        "tokens": None if tokens_at_end is None or tokens_at_start is None else max(0, tokens_at_end - tokens_at_start),
        "instance_hours": round(instance_hours(description), 4),
    }
    if description.get("FailureReason"):
        row["failure_reason"] = description["FailureReason"]
    if decided:
        row["decision"] = {"decision": decided.get("decision"), "reason": decided.get("reason")}
    return row


def _run_state(state: RunState, descriptions: list[dict[str, Any]]) -> dict[str, Any]:
    """``state`` (and ``stopped_by``, ``reason``, ``waiting_since``, ``not_before``) of :func:`run_view`."""
    ended = terminal_record(state)
    if ended is not None:
        return {"state": ended["decision"], "stopped_by": ended["decision"], "reason": ended.get("reason")}
    if state.waiting is not None:
        waiting = state.waiting
        view = {
            "state": spec.WAITING_FOR_CAPACITY,
            "waiting_since": waiting.get("since"),
            "reason": waiting.get("reason"),
        }
        if waiting.get("not_before"):
            view["not_before"] = waiting["not_before"]  # the capacity backoff: no segment starts before it
        return view
    if descriptions and descriptions[-1].get("TrainingJobStatus") in ("InProgress", "Stopping"):
        return {"state": "running"}
    return {"state": "continuing"}


def terminal_record(state: RunState) -> dict[str, Any] | None:
    """The record of the decision that ended the run's newest stretch (its ``end.json``, or a terminal decision on
    a segment of it), or ``None`` (a continued run is active again from the segment it resumed at)."""
    if state.end is not None:
        return state.end
    if state.decisions and max(state.decisions) >= state.first_segment:
        last = state.decisions[max(state.decisions)]
        if last.get("decision") in spec.TERMINAL_DECISIONS:
            return last
    return None


# --- the actions: describe / list_runs / stop with run_id ---------------------------------------


def describe_run(
    request: Mapping[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime
) -> dict[str, Any]:
    """``{"action": "describe", "run_id": R}`` -> ``{"status": "described", "run": run_view(...)}``.

    Raises:
        Refusal: ``NotFound`` on ``run_id`` (no such run).
    """
    state = existing_run(RunLedger.of(clients, config), request["run_id"])
    return {"status": "described", "run": run_view(clients, config, state, now)}


def existing_run(store: RunLedger, run_id: str) -> RunState:
    state = load_run(store, run_id)
    if state is None:
        raise not_found("run_id", run_id, f"run {run_id!r}")
    return state


def list_runs(
    request: Mapping[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime
) -> dict[str, Any]:
    """``{"action": "list_runs", "max_results"?: N, "next_token"?: T}`` -> one page of runs, oldest id first.

    Returns:
        ``{"status": "listed", "runs": [{"run_id", "created", "state", "max_steps", "budget"}],
        "next_token"?}``; ``state`` is the terminal decision, ``waiting-for-capacity`` or ``active``;
        a run whose store records cannot be read is listed as ``{"run_id", "state": "unreadable",
        "reason"}`` (naming the object), and ``describe`` of it raises :class:`.errors.IdempotencyRecordError`.

    Raises:
        Refusal: ``InvalidRequest`` naming ``max_results`` (1-100) or ``next_token`` (not one this action gave).
    """
    limit = request["max_results"]  # checked by the action's table (runtime/actions.py)
    store = RunLedger.of(clients, config)
    after = _token_position(store, request.get("next_token"))
    # run ids start with a lowercase letter: the first page starts after "`" (just before "a"), past the
    # "_waiting/" index; a later one after every key of the last run listed ("<run_id>/" < "<run_id>0")
    params: dict[str, Any] = {
        "Bucket": store.bucket,
        "Prefix": store.prefix,
        "Delimiter": "/",
        "MaxKeys": limit,
        "StartAfter": f"{store.prefix}{after}0" if after else f"{store.prefix}`",
    }
    page = clients.s3.list_objects_v2(**params)
    out: list[dict[str, Any]] = []
    last = None
    for common in page.get("CommonPrefixes") or []:
        run_id = common["Prefix"][len(store.prefix) :].rstrip("/")
        if not spec.RUN_ID_RE.match(run_id):
            continue  # not written by the store
        last = run_id
        try:
            state = load_run(store, run_id)
        except IdempotencyRecordError as exc:  # one damaged record hides that run's state, not the other runs
            out.append({"run_id": run_id, "state": UNREADABLE, "reason": str(exc)})
            continue
        if state is None:
            continue
        ended = terminal_record(state)
        out.append(
            {
                "run_id": run_id,
                "created": state.record.created,
                "state": ended["decision"] if ended else spec.WAITING_FOR_CAPACITY if state.waiting else "active",
                "max_steps": state.record.max_steps,
                "budget": state.budget.to_dict(),
            }
        )
    answer: dict[str, Any] = {"status": "listed", "runs": out}
    if page.get("IsTruncated") and last is not None:
        answer["next_token"] = _token(store, last)
    return answer


_TOKEN_VERSION = 2


def _token_sum(store: RunLedger, run_id: str) -> str:
    """A checksum binding a ``list_runs`` token to its position and to this deployment's run store."""
    return hashlib.sha256(f"{store.bucket}/{store.prefix}\n{run_id}".encode()).hexdigest()[:24]


def _token(store: RunLedger, run_id: str) -> str:
    """``list_runs``' ``next_token``: where the next page starts (after ``run_id``), opaque to callers."""
    body = {"v": _TOKEN_VERSION, "after": run_id, "sum": _token_sum(store, run_id)}
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode()


def _token_position(store: RunLedger, token: Any) -> str | None:
    """The run id a ``next_token`` continues after (``None`` without one).

    Raises:
        Refusal: ``InvalidRequest`` on ``next_token`` for anything :func:`_token` did not make for this
            deployment (made by hand, altered, or another deployment's).
    """
    if token is None:
        return None
    problem = FieldError("next_token", token, "the next_token of an earlier list_runs answer")
    if not isinstance(token, str) or not token or len(token) > 512:
        raise invalid(problem)
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode("ascii")))
    except (ValueError, UnicodeError, binascii.Error):
        raise invalid(problem) from None
    after = data.get("after") if isinstance(data, dict) and data.get("v") == _TOKEN_VERSION else None
    if not isinstance(after, str) or not spec.RUN_ID_RE.match(after):
        raise invalid(problem)
    if not hmac.compare_digest(str(data.get("sum", "")), _token_sum(store, after)):
        raise invalid(problem)
    return after


def stop_run(request: Mapping[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime) -> dict[str, Any]:
    """``{"action": "stop", "run_id": R}``: stop the run (idempotent).

    Writes the stop marker (once), stops the running segment (``StopTrainingJob``; its end is then
    decided ``stopped``), and ends a run waiting for capacity at once (``end.json``, ``stopped``; its
    waiting marker is removed by the continuation's next tick, :func:`retry_waiting`).

    Returns:
        ``{"status": "stopping" | "stopped", "run_id", "changed": bool, "state", "training_job_name"?}``:
        ``changed`` is ``False`` when the run was already stopped or had ended (its ``state`` says how).

    Raises:
        Refusal: ``NotFound`` on ``run_id``.
    """
    run_id = request["run_id"]
    store = RunLedger.of(clients, config)
    state = existing_run(store, run_id)
    ended = terminal_record(state)
    if ended is not None:
        return {"status": "stopped", "run_id": run_id, "changed": False, "state": ended["decision"]}
    changed = (
        state.stop is None
        and store.create(
            store.stop_key(state.record, state.first_segment), {"run_id": run_id, "requested_at": spec.format_time(now)}
        )
        is not None
    )
    # read the run again after the marker: a continuation that decided and submitted a segment before the
    # marker existed is seen here (its decision and job), and one that did not see the marker stops its
    # segment itself (_start_segment)
    state = load_run(store, run_id) or state
    ended = terminal_record(state)  # decided meanwhile (e.g. finished): that decision stands
    if ended is not None:
        return {"status": "stopped", "run_id": run_id, "changed": changed, "state": ended["decision"]}
    answer: dict[str, Any] = {"run_id": run_id, "changed": changed}
    descriptions = segments_of(clients, state)
    newest = descriptions[-1] if descriptions else None
    if (
        newest is not None
        and newest.get("TrainingJobStatus") == "InProgress"
        and stop_job(clients, newest["TrainingJobName"])
    ):
        answer["changed"] = True
    if newest is not None and newest.get("TrainingJobStatus") in ("InProgress", "Stopping"):
        answer.update(status="stopping", state="running", training_job_name=newest["TrainingJobName"])
        return answer
    # nothing runs: the run ends now (waiting for capacity, or between a segment's end and the next)
    record = {
        "run_id": run_id,
        "segment": len(descriptions),
        "decision": spec.STOPPED,
        "reason": "the run was stopped (stop requested) while no segment was running",
        "decided_at": spec.format_time(now),
    }
    if store.create(store.end_key(state.record, state.first_segment), record) is not None:
        answer["changed"] = True
    # a waiting marker stays: the submitter may not delete from the run store (its role has no
    # s3:DeleteObject), and the continuation's next tick removes the marker of a run that ended
    answer.update(status="stopped", state=spec.STOPPED)
    return answer


# --- helpers ---------------------------------------------------------------------------------------


def _fields(found: Record | None) -> dict[str, Any] | None:
    return None if found is None else found.fields


def parse_iso(value: Any) -> datetime | None:
    try:
        return spec.parse_time(value, "since")
    except FieldError:
        return None
