"""Runs: the run store, the run's view (``describe`` / ``list_runs`` / ``stop`` with ``run_id``) and its continuation.

A run (:mod:`platform_spec.runs`) is one training carried across training jobs, its segments. Its
state lives in the output bucket under :data:`.settings.RUN_STORE_PREFIX` (``submitter/runs/``)::

    <run_id>/run.json                 the run's request (the submission event) and budget; written once
    <run_id>/decisions/seg-NNN.json   the decision on segment NNN's end (written once each)
    <run_id>/stop.json                the run was stopped (``stop`` with ``run_id``)
    <run_id>/end.json                 how a run that was waiting for capacity ended
    _waiting/<run_id>.json            the run's next segment found no capacity: retried on the schedule

Every write is an S3 conditional write (strongly consistent and atomic, as :mod:`.idempotency`
explains): ``If-None-Match: *`` for what is written once, so of concurrent writers exactly one wins
and the others read the winner's record; ``If-Match`` for a ``run.json`` replaced by another request
while its run had no job yet. Objects are looked up by listing the run's prefix first (a missing key
answers ``403``, not ``404``, without ``s3:ListBucket``).

**One segment per index.** Segment ``i`` is created only through :func:`.service.submit` under the
name :func:`platform_spec.runs.segment_job_name` and the client token
:func:`platform_spec.runs.segment_client_token` (both functions of the run and the index): duplicate
and concurrent events, a retry after a crash, and the scheduled retry of a waiting run all settle on
one job (the token's record and SageMaker's name uniqueness, :mod:`.service`). A decision is recorded
before the next segment is submitted; an event whose segment already has a decision is a
``stale-event``, except that a recorded ``continue`` whose next segment does not exist (the invocation
that recorded it died) is finished by the next event or tick.

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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger

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

from .aws import Clients, error_code
from .config import SubmitterConfig
from .errors import Refusal, invalid, not_found
from .settings import RUN_STORE_PREFIX, SERVICE_NAME
from .training_job import describe_job, job_tags, stop_job

logger = Logger(service=SERVICE_NAME, child=True)

RECORD_SCHEMA = 1
WAITING_PREFIX = "_waiting/"
"""Below :data:`.settings.RUN_STORE_PREFIX`: one marker per run waiting for capacity (no run id starts with ``_``)."""
CAPACITY_REFUSALS = ("NoCapacity", "QuotaExceeded")
"""Refusals of a next segment that mean "no capacity now": the run waits and the schedule retries."""
MAX_STATE_READS = 5
"""Complete checkpoints whose ``trainer_state.json`` is read, newest first, before giving up (the trainer keeps 3)."""
UNREADABLE = "unreadable"
"""``list_runs``' state of a run whose store records cannot be read (:class:`RunStoreError`)."""
LIST_RUNS_DEFAULT = 20
LIST_RUNS_MAX = 100
_LOST_RACE_CODES = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


class RunStoreError(RuntimeError):
    """An object of the run store cannot be read as its record (names it); nothing is done while it stands."""


# --- the store -----------------------------------------------------------------------------------


@dataclass
class RunStore:
    """The run store in the output bucket (module docstring).

    Args:
        s3: an S3 client.
        bucket: the output bucket.
        prefix: the store's key prefix (:data:`.settings.RUN_STORE_PREFIX`).
    """

    s3: Any
    bucket: str
    prefix: str = RUN_STORE_PREFIX

    @classmethod
    def of(cls, clients: Clients, config: SubmitterConfig) -> RunStore:
        return cls(clients.s3, config.output_bucket)

    def run_prefix(self, run_id: str) -> str:
        return f"{self.prefix}{run_id}/"

    def run_key(self, run_id: str) -> str:
        return f"{self.run_prefix(run_id)}run.json"

    def decision_key(self, run_id: str, index: int) -> str:
        return f"{self.run_prefix(run_id)}decisions/seg-{index:03d}.json"

    def stop_key(self, run_id: str) -> str:
        return f"{self.run_prefix(run_id)}stop.json"

    def end_key(self, run_id: str) -> str:
        return f"{self.run_prefix(run_id)}end.json"

    def waiting_key(self, run_id: str) -> str:
        return f"{self.prefix}{WAITING_PREFIX}{run_id}.json"

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def keys(self, prefix: str) -> set[str]:
        """Every key under ``prefix`` (paginated ``ListObjectsV2``)."""
        found: set[str] = set()
        for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            found.update(item["Key"] for item in page.get("Contents") or [])
        return found

    def read(self, key: str, known: set[str] | None = None) -> tuple[dict[str, Any], str] | None:
        """``(record, ETag)`` of ``key``, or ``None`` when it does not exist.

        Args:
            known: the keys listed under the run's prefix (saves a listing); ``None``: list the key.

        Raises:
            RunStoreError: the object is not a JSON object.
        """
        if known is None:
            listed = self.s3.list_objects_v2(Bucket=self.bucket, Prefix=key, MaxKeys=1)
            known = {item["Key"] for item in listed.get("Contents") or []}
        if key not in known:
            return None
        try:
            got = self.s3.get_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                return None
            raise
        with got["Body"] as body:
            raw = body.read()
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, ValueError):
            data = None
        if not isinstance(data, dict) or data.get("schema") != RECORD_SCHEMA:
            raise RunStoreError(
                f"run-store object {self.uri(key)} is not a schema-{RECORD_SCHEMA} JSON record; inspect it"
            )
        return data, str(got.get("ETag", ""))

    def write(self, key: str, record: Mapping[str, Any], *, if_match: str | None = None) -> str | None:
        """Write ``record`` once (``If-None-Match: *``), or over the version ``if_match``; ``None`` when another
        writer got there first (the condition failed)."""
        body = json.dumps({"schema": RECORD_SCHEMA, **record}, sort_keys=True, default=_json_default).encode()
        condition = {"IfMatch": if_match} if if_match is not None else {"IfNoneMatch": "*"}
        try:
            written = self.s3.put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType="application/json", **condition
            )
        except Exception as exc:
            if error_code(exc) in _LOST_RACE_CODES:
                return None
            raise
        return str(written.get("ETag", ""))

    def delete(self, key: str) -> None:
        self.s3.delete_object(Bucket=self.bucket, Key=key)


@dataclass(frozen=True)
class RunRecord:
    """``run.json``: the run's request and budget.

    Attributes:
        run: the run (its id and budget).
        request: the submission event that started the run (``run`` included): every segment is
            submitted from it.
        request_sha256: the request's fingerprint (:meth:`.request.SubmitRequest.fingerprint`).
        max_steps: the run's ``max_steps``.
        created: when it was written (ISO 8601).
        etag: the object's ETag.
        released: why the run was released (``{"reason", "at"}``: SageMaker refused its first segment, so
            it never had a job), or ``None``. A released run does not exist for the job API, and its
            ``run_id`` is free; the record is kept (marked, never deleted: the submitter may not delete).
    """

    run: spec.RunSpec
    request: dict[str, Any]
    request_sha256: str
    max_steps: int
    created: str
    etag: str = ""
    released: dict[str, Any] | None = None

    def to_record(self) -> dict[str, Any]:
        record = {
            "run_id": self.run.run_id,
            "budget": self.run.to_dict(),
            "request": self.request,
            "request_sha256": self.request_sha256,
            "max_steps": self.max_steps,
            "created": self.created,
        }
        if self.released is not None:
            record["released"] = self.released
        return record


def read_run(store: RunStore, run_id: str, known: set[str] | None = None) -> RunRecord | None:
    """The run's ``run.json``, or ``None``.

    Raises:
        RunStoreError: it exists and is not a run record.
    """
    found = store.read(store.run_key(run_id), known)
    if found is None:
        return None
    data, etag = found
    try:
        run, _ = spec.parse_run(data["budget"])
        request, sha, max_steps, created = data["request"], data["request_sha256"], data["max_steps"], data["created"]
        released = data.get("released")
        if run.run_id != run_id or not isinstance(request, dict) or not isinstance(max_steps, int):
            raise ValueError("fields")
        if released is not None and not isinstance(released, dict):
            raise ValueError("released")
    except (KeyError, TypeError, ValueError, FieldError):
        raise RunStoreError(
            f"run-store object {store.uri(store.run_key(run_id))} is not a run record; inspect it"
        ) from None
    return RunRecord(run, request, str(sha), max_steps, str(created), etag, released)


def claim_run(store: RunStore, record: RunRecord, *, replace: str | None = None) -> RunRecord | None:
    """Write ``run.json`` for a run's first segment; ``None`` when another request wrote it first.

    Args:
        replace: the ETag of a ``run.json`` to replace: another request's whose run never had a job, or a
            released one.
    """
    etag = store.write(store.run_key(record.run.run_id), record.to_record(), if_match=replace)
    return None if etag is None else RunRecord(**{**record.__dict__, "etag": etag})


def release_run(store: RunStore, record: RunRecord, reason: str, now: datetime) -> bool:
    """Mark ``record`` (written by this request) released: SageMaker refused the run's first segment, so the
    run never had a job. Conditional on its ETag (a record another request wrote since is left alone);
    the record is overwritten, never deleted.

    Returns:
        Whether the record was marked.
    """
    released = RunRecord(**{**record.__dict__, "released": {"reason": reason, "at": _now_iso(now)}})
    return store.write(store.run_key(record.run.run_id), released.to_record(), if_match=record.etag) is not None


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
    start = description.get("TrainingStartTime")
    if not isinstance(start, datetime):
        return 0.0
    end = description.get("TrainingEndTime")
    if not isinstance(end, datetime):
        end = datetime.now(UTC)
    count = int((description.get("ResourceConfig") or {}).get("InstanceCount") or 1)
    return max(0.0, (_utc(end) - _utc(start)).total_seconds()) * count / 3600.0


@dataclass
class RunState:
    """Everything known of a run now (one listing of its store prefix, its records, its newest segments)."""

    record: RunRecord
    keys: set[str]
    decisions: dict[int, dict[str, Any]] = field(default_factory=dict)
    stop: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    waiting: dict[str, Any] | None = None

    @property
    def run_id(self) -> str:
        return self.record.run.run_id


def load_run(store: RunStore, run_id: str) -> RunState | None:
    """The run's records (``None`` when it has no ``run.json``).

    Raises:
        RunStoreError: a record is unreadable.
    """
    keys = store.keys(store.run_prefix(run_id))
    record = read_run(store, run_id, keys)
    if record is None or record.released is not None:
        return None
    state = RunState(record, keys)
    decision_prefix = f"{store.run_prefix(run_id)}decisions/seg-"
    for key in sorted(keys):
        if key.startswith(decision_prefix) and key.endswith(".json"):
            index = key[len(decision_prefix) : -len(".json")]
            if index.isdigit():
                found = store.read(key, keys)
                if found is not None:
                    state.decisions[int(index)] = found[0]
    state.stop = _data(store.read(store.stop_key(run_id), keys))
    state.end = _data(store.read(store.end_key(run_id), keys))
    state.waiting = _data(store.read(store.waiting_key(run_id)))
    return state


def segments_of(clients: Clients, state: RunState) -> list[dict[str, Any]]:
    """``DescribeTrainingJob`` of each of the run's segments, in order (segment ``i`` exists only after a
    ``continue`` on segment ``i - 1``, so the decisions bound the probing)."""
    out: list[dict[str, Any]] = []
    highest = max(state.decisions, default=0) + 1
    for index in range(1, highest + 1):
        description = describe_job(clients, spec.segment_job_name(state.run_id, index))
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
        "idle_gaps_s": [seconds between segment i's end and segment i+1's start], "waiting_since"?}``.
        ``state`` is ``running``, ``waiting-for-capacity``, ``continuing`` (a segment is being
        submitted), or the terminal decision that ended it (``finished``, ``stopped``, ...);
        ``stopped_by`` is that decision and ``reason`` its reason.
    """
    descriptions = segments_of(clients, state)
    newest, _ = newest_checkpoint(clients, config, state.run_id)
    segments: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for index, description in enumerate(descriptions, start=1):
        decided = state.decisions.get(index)
        first = (previous or {}).get("newest_step")
        last = decided.get("newest_step") if decided else (newest.step if newest else None)
        tokens_at_end = decided.get("tokens") if decided else (newest.tokens if newest else None)
        tokens_at_start = (previous or {}).get("tokens") if index > 1 else 0
        resource = description.get("ResourceConfig") or {}
        capacity: dict[str, Any] = {"type": capacity_type_of(description)}
        if resource.get("TrainingPlanArn"):
            capacity["training_plan_arn"] = resource["TrainingPlanArn"]
        row: dict[str, Any] = {
            "index": index,
            "training_job_name": description["TrainingJobName"],
            "status": description.get("TrainingJobStatus"),
            "secondary_status": description.get("SecondaryStatus"),
            "capacity": capacity,
            "start_time": _iso(description.get("TrainingStartTime")),
            "end_time": _iso(description.get("TrainingEndTime")),
            "first_step": None if last is None else (1 if first is None else first + 1),
            "last_step": last,
            "tokens": None
            if tokens_at_end is None or tokens_at_start is None
            else max(0, tokens_at_end - tokens_at_start),
            "instance_hours": round(instance_hours(description), 4),
        }
        if description.get("FailureReason"):
            row["failure_reason"] = description["FailureReason"]
        if decided:
            row["decision"] = {"decision": decided.get("decision"), "reason": decided.get("reason")}
        segments.append(row)
        previous = decided
    gaps = []
    for before, after in itertools.pairwise(descriptions):
        end, start = before.get("TrainingEndTime"), after.get("TrainingStartTime")
        if isinstance(end, datetime) and isinstance(start, datetime):
            gaps.append(round(max(0.0, (_utc(start) - _utc(end)).total_seconds()), 3))
    view: dict[str, Any] = {
        "run_id": state.run_id,
        "state": "",
        "max_steps": state.record.max_steps,
        "newest_complete_step": newest.step if newest else None,
        "tokens_done": newest.tokens if newest else None,
        "budget": state.record.run.to_dict(),
        "created": state.record.created,
        "instance_hours": round(sum(instance_hours(d) for d in descriptions), 4),
        "segments": segments,
        "idle_gaps_s": gaps,
    }
    ended = terminal_record(state)
    if ended is not None:
        view["state"] = ended["decision"]
        view["stopped_by"] = ended["decision"]
        view["reason"] = ended.get("reason")
    elif state.waiting is not None:
        view["state"] = spec.WAITING_FOR_CAPACITY
        view["waiting_since"] = state.waiting.get("since")
        view["reason"] = state.waiting.get("reason")
    elif descriptions and descriptions[-1].get("TrainingJobStatus") in ("InProgress", "Stopping"):
        view["state"] = "running"
    else:
        view["state"] = "continuing"
    if state.stop is not None:
        view["stop_requested"] = state.stop.get("requested_at")
    return view


def terminal_record(state: RunState) -> dict[str, Any] | None:
    """The record of the decision that ended the run (``end.json``, or a terminal segment decision), or ``None``."""
    if state.end is not None:
        return state.end
    if state.decisions:
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
    run_id = request["run_id"]
    state = load_run(RunStore.of(clients, config), run_id)
    if state is None:
        raise not_found("run_id", run_id, f"run {run_id!r}")
    return {"status": "described", "run": run_view(clients, config, state, now)}


def list_runs(
    request: Mapping[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime
) -> dict[str, Any]:
    """``{"action": "list_runs", "max_results"?: N, "next_token"?: T}`` -> one page of runs, oldest id first.

    Returns:
        ``{"status": "listed", "runs": [{"run_id", "created", "state", "max_steps", "budget"}],
        "next_token"?}``; ``state`` is the terminal decision, ``waiting-for-capacity`` or ``active``;
        a run whose store records cannot be read is listed as ``{"run_id", "state": "unreadable",
        "reason"}`` (naming the object), and ``describe`` of it raises :class:`RunStoreError`.

    Raises:
        Refusal: ``InvalidRequest`` naming ``max_results`` (1-100) or ``next_token`` (not one this action gave).
    """
    limit = request["max_results"]  # checked by the action's table (runtime/actions.py)
    store = RunStore.of(clients, config)
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
        except RunStoreError as exc:  # one damaged record hides that run's state, not the other runs
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
                "budget": state.record.run.to_dict(),
            }
        )
    answer: dict[str, Any] = {"status": "listed", "runs": out}
    if page.get("IsTruncated") and last is not None:
        answer["next_token"] = _token(store, last)
    return answer


_TOKEN_VERSION = 2


def _token_sum(store: RunStore, run_id: str) -> str:
    """A checksum binding a ``list_runs`` token to its position and to this deployment's run store."""
    return hashlib.sha256(f"{store.bucket}/{store.prefix}\n{run_id}".encode()).hexdigest()[:24]


def _token(store: RunStore, run_id: str) -> str:
    """``list_runs``' ``next_token``: where the next page starts (after ``run_id``), opaque to callers."""
    body = {"v": _TOKEN_VERSION, "after": run_id, "sum": _token_sum(store, run_id)}
    return base64.urlsafe_b64encode(json.dumps(body).encode()).decode()


def _token_position(store: RunStore, token: Any) -> str | None:
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
    store = RunStore.of(clients, config)
    state = load_run(store, run_id)
    if state is None:
        raise not_found("run_id", run_id, f"run {run_id!r}")
    ended = terminal_record(state)
    if ended is not None:
        return {"status": "stopped", "run_id": run_id, "changed": False, "state": ended["decision"]}
    changed = (
        state.stop is None
        and store.write(store.stop_key(run_id), {"run_id": run_id, "requested_at": _now_iso(now)}) is not None
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
        "decided_at": _now_iso(now),
    }
    if store.write(store.end_key(run_id), record) is not None:
        answer["changed"] = True
    # a waiting marker stays: the submitter may not delete from the run store (its role has no
    # s3:DeleteObject), and the continuation's next tick removes the marker of a run that ended
    answer.update(status="stopped", state=spec.STOPPED)
    return answer


# --- continuation -----------------------------------------------------------------------------------

Submit = Callable[..., dict[str, Any]]


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
        "decided_at": _now_iso(now),
        **extra,
    }


def on_segment_end(
    job_name: str, *, clients: Clients, config: SubmitterConfig, submit: Submit, now: datetime
) -> Outcome | None:
    """Decide a run after its segment ``job_name`` changed state (a SageMaker state-change event).

    The job is re-read (``DescribeTrainingJob`` and its tags; the event's status is never trusted),
    then the run's records and newest checkpoint; the decision (:func:`platform_spec.runs.decide`) is
    recorded, and for ``continue`` the next segment is submitted through ``submit``
    (:func:`.service.submit`).

    Returns:
        The outcome, or ``None`` when the job is not a run's segment (no such job, no run tags, or a run
        without ``run.json``).
    """
    parsed = spec.parse_segment_job_name(job_name)
    if parsed is None:
        return None
    run_id, index = parsed
    description = describe_job(clients, job_name)
    if description is None:
        return None
    tags = job_tags(clients, description["TrainingJobArn"])
    if tags.get(spec.TAG_RUN_ID) != run_id or tags.get(spec.TAG_RUN_SEGMENT) != str(index):
        logger.info("not a run segment (its tags do not name the run)", extra={"training_job_name": job_name})
        return None
    store = RunStore.of(clients, config)
    state = load_run(store, run_id)
    if state is None:
        logger.warning("segment of a run without run.json", extra={"training_job_name": job_name, "run_id": run_id})
        return None
    outcome = spec.SegmentOutcome(
        index,
        str(description.get("TrainingJobStatus")),
        description.get("SecondaryStatus"),
        description.get("FailureReason"),
    )
    next_exists = (
        describe_job(clients, spec.segment_job_name(run_id, index + 1)) is not None
        if index < spec.MAX_SEGMENTS
        else False
    )
    newest_segment = index + 1 if next_exists else index
    decided = state.decisions.get(index)
    if decided is not None and not next_exists and outcome.ended:
        resumed = _resume(state, index, decided, clients=clients, config=config, submit=submit, now=now)
        if resumed is not None:
            return resumed
    if state.end is not None and decided is None:
        return Outcome(
            _record(
                state,
                index,
                spec.Decision(spec.STALE_EVENT, f"the run already ended ({state.end.get('decision')})"),
                now,
            )
        )
    checkpoint, skipped = newest_checkpoint(clients, config, run_id)
    if skipped:
        logger.warning("checkpoints skipped", extra={"run_id": run_id, "skipped": skipped})
    start = state.decisions.get(index - 1, {}).get("newest_step") if index > 1 else None
    hours_before = sum(float(d.get("segment_instance_hours") or 0.0) for i, d in state.decisions.items() if i < index)
    used = hours_before + instance_hours(description)
    decision = spec.decide(
        outcome,
        spec=state.record.run,
        newest_segment=newest_segment,
        already_decided=decided is not None,
        stop_requested=state.stop is not None,
        newest_step=checkpoint.step if checkpoint else None,
        start_step=start,
        max_steps=state.record.max_steps,
        instance_hours=used,
        now=now,
    )
    record = _record(
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
    )
    if decision.decision == spec.STALE_EVENT:
        return Outcome(record)
    if decision.decision == spec.CONTINUE:
        record["next_training_job_name"] = spec.segment_job_name(run_id, index + 1)
    if store.write(store.decision_key(run_id, index), record) is None:
        stale = spec.Decision(spec.STALE_EVENT, f"segment {index} was decided concurrently (a duplicate event)")
        return Outcome(_record(state, index, stale, now))
    if decision.decision != spec.CONTINUE:
        return Outcome(record)
    return _start_segment(state, index + 1, record, clients=clients, config=config, submit=submit, now=now)


def _resume(
    state: RunState,
    index: int,
    decided: dict[str, Any],
    *,
    clients: Clients,
    config: SubmitterConfig,
    submit: Submit,
    now: datetime,
) -> Outcome | None:
    """A recorded ``continue`` whose next segment does not exist and is not waiting: finish it (the
    invocation that recorded it died before submitting). ``None`` when there is nothing to finish."""
    if decided.get("decision") != spec.CONTINUE or state.waiting is not None or state.end is not None:
        return None
    logger.info("finishing a recorded continue", extra={"run_id": state.run_id, "segment": index})
    return _start_segment(state, index + 1, dict(decided), clients=clients, config=config, submit=submit, now=now)


def _start_segment(
    state: RunState,
    index: int,
    record: dict[str, Any],
    *,
    clients: Clients,
    config: SubmitterConfig,
    submit: Submit,
    now: datetime,
) -> Outcome:
    """Submit segment ``index`` (from ``run.json``'s request): ``continue``, ``waiting-for-capacity`` (a
    capacity refusal: the waiting marker is written) or ``failed`` (another refusal: ``end.json``)."""
    store = RunStore.of(clients, config)
    if state.stop is None and store.read(store.stop_key(state.run_id)) is not None:
        # stopped since the run was read: end it rather than start a segment it would only stop
        ended = {**record, "decision": spec.STOPPED, "reason": "the run was stopped (stop requested)"}
        ended["decided_at"] = _now_iso(now)
        store.write(store.end_key(state.run_id), ended)
        if state.waiting is not None:
            store.delete(store.waiting_key(state.run_id))
        return Outcome(ended)
    response = submit(state.record.request, clients=clients, config=config, now=now, segment=index)
    name = spec.segment_job_name(state.run_id, index)
    if response.get("status") == "submitted":
        if state.waiting is not None:
            store.delete(store.waiting_key(state.run_id))
        record = {**record, "decision": spec.CONTINUE, "next_training_job_name": name}
        record["capacity"] = response.get("capacity")
        if store.read(store.stop_key(state.run_id)) is not None:
            # a stop landed while the segment was submitted; it may have seen no segment running (stop_run
            # reads the run after writing its marker, so one of the two sees the other): stop it here
            record["stopped_on_start"] = stop_job(clients, name)
        return Outcome(record, segment_started=not response.get("replayed"))
    error = response.get("error") or {}
    code, message = error.get("code"), error.get("message")
    if code in CAPACITY_REFUSALS:
        since = (state.waiting or {}).get("since") or _now_iso(now)
        marker = {"run_id": state.run_id, "segment": index, "since": since, "error_code": code, "reason": message}
        if state.waiting is None:
            store.write(store.waiting_key(state.run_id), marker)
        reason = f"segment {index} found no capacity ({code}: {message}); retried on the schedule"
        return Outcome({**record, "decision": spec.WAITING_FOR_CAPACITY, "reason": reason, "waiting_since": since})
    reason = f"segment {index} was refused ({code}: {message})"
    ended = {**record, "decision": spec.FAILED, "reason": reason, "decided_at": _now_iso(now)}
    store.write(store.end_key(state.run_id), ended)
    if state.waiting is not None:
        store.delete(store.waiting_key(state.run_id))
    return Outcome(ended)


def waiting_runs(store: RunStore) -> Iterator[str]:
    """The run ids with a waiting marker."""
    prefix = f"{store.prefix}{WAITING_PREFIX}"
    for key in sorted(store.keys(prefix)):
        run_id = key[len(prefix) :].removesuffix(".json")
        if spec.RUN_ID_RE.match(run_id):
            yield run_id


def retry_waiting(
    run_id: str, *, clients: Clients, config: SubmitterConfig, submit: Submit, now: datetime
) -> tuple[Outcome | None, float]:
    """One scheduled retry of a run waiting for capacity.

    Returns:
        ``(outcome, seconds waited so far)``: the outcome is ``None`` when the marker was gone; the wait
        is 0 unless the run is still waiting.
    """
    store = RunStore.of(clients, config)
    state = load_run(store, run_id)
    if state is None or state.waiting is None:
        return None, 0.0
    index = int(state.waiting.get("segment") or 0)
    if index < 2:
        raise RunStoreError(f"waiting marker {store.uri(store.waiting_key(run_id))} names no segment >= 2; inspect it")
    base = dict(state.decisions.get(index - 1) or {"run_id": run_id, "segment": index - 1})
    base["decided_at"] = _now_iso(now)
    if state.end is not None or describe_job(clients, spec.segment_job_name(run_id, index)) is not None:
        store.delete(store.waiting_key(run_id))  # ended, or the segment was started by another invocation
        return None, 0.0
    ended: spec.Decision | None = None
    if state.stop is not None:
        ended = spec.Decision(spec.STOPPED, "the run was stopped (stop requested) while waiting for capacity")
    else:
        used = sum(float(d.get("segment_instance_hours") or 0.0) for d in state.decisions.values())
        ended = spec.budget_exhausted(state.record.run, segments=index - 1, instance_hours=used, now=now)
    if ended is not None:
        record = {**base, "decision": ended.decision, "reason": ended.reason}
        store.write(store.end_key(run_id), record)
        store.delete(store.waiting_key(run_id))
        return Outcome(record), 0.0
    outcome = _start_segment(state, index, base, clients=clients, config=config, submit=submit, now=now)
    waited = 0.0
    if outcome.decision == spec.WAITING_FOR_CAPACITY:
        since = _parse_iso(state.waiting.get("since"))
        waited = max(0.0, (now - since).total_seconds()) if since else 0.0
    return outcome, waited


def bind_refusal_to_run(refusal: Refusal) -> Refusal:
    """A refusal on the derived ``client_token`` of a run's segment, re-aimed at ``run.run_id`` (the caller sent no token)."""
    if refusal.field != "client_token":
        return refusal
    return Refusal(
        refusal.code,
        "run.run_id: " + refusal.message.replace("client_token", "run_id"),
        field="run.run_id",
        details=refusal.details,
    )


# --- helpers ---------------------------------------------------------------------------------------


def _data(found: tuple[dict[str, Any], str] | None) -> dict[str, Any] | None:
    return None if found is None else found[0]


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _iso(value: Any) -> str | None:
    return spec.format_time(_utc(value)) if isinstance(value, datetime) else None


def _now_iso(now: datetime) -> str:
    return spec.format_time(now)


def _parse_iso(value: Any) -> datetime | None:
    try:
        return spec.parse_time(value, "since")
    except FieldError:
        return None


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return spec.format_time(_utc(value))
    raise TypeError(f"{type(value).__name__} is not JSON")


__all__ = [
    "RunRecord",
    "RunStore",
    "RunStoreError",
    "describe_run",
    "list_runs",
    "load_run",
    "on_segment_end",
    "retry_waiting",
    "run_view",
    "stop_run",
    "waiting_runs",
]
