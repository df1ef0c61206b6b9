"""``continue_run``: continue a run that ended on purpose, with a new budget, from its newest complete checkpoint.

::

    {"action": "continue_run", "run_id": "my-run", "client_token": "3f6c1e0a-...",
     "deadline": "2026-03-01T00:00:00Z", "max_instance_hours": 400, "max_segments": 20}

A run that ended ``budget-*``, ``stopped`` or ``no-progress`` (:data:`platform_spec.runs.CONTINUABLE_DECISIONS`)
keeps its checkpoints; this action submits its next segment, ``<run_id>-seg-<N+1>`` after its ``N`` segments, by
the submission's own path (:func:`.service.submit_segment`: the run's request, the same checkpoint prefix, so
the segment resumes from the newest complete checkpoint), and the continuation carries it on from there as
before. The budget fields mean what they mean in a request's ``run`` (the run's totals: ``max_segments`` counts
every segment so far, ``max_instance_hours`` every instance-hour); each one sent replaces the run's, each one
left out keeps it. The budget is checked as a submission's: it must leave the next segment a segment's floor
(:func:`platform_spec.runs.segment_runtime`), else ``InvalidRequest`` names the field.

**At most once.** The continuation is a record of the run's ledger (:meth:`.ledger.RunLedger.continuation_key`,
keyed by the segment it resumes at; ``If-None-Match``), naming the SHA-256 of ``client_token`` and the fields
sent. The same token and fields again (a retry, or concurrently) answer the same segment (``replayed``); the
same token with other fields, or another token for a segment already continued, is a ``Conflict``. A
continuation whose segment is refused (no capacity, a quota, a request the submitter no longer accepts) is
released, as a run's first segment's claim is: the run stays as it ended, and the refusal is the answer.

Refused before anything is written: a run still active (``Conflict``), or one that ended ``finished`` or
``failed`` (``Conflict``: nothing is left to train, or its code would fail again), ``NotFound`` for no such run.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from platform_spec import runs as spec
from platform_spec.errors import FieldError

from .aws import Clients
from .config import SubmitterConfig
from .errors import Refusal, invalid
from .fields import Check, Field, check_table, parse
from .ledger import Record, RunLedger
from .request import CLIENT_TOKEN_PATTERN, parse_request, token_digest
from .runs import RunState, existing_run, instance_hours, load_run, segments_of, terminal_record
from .service import CLAIM_ATTEMPTS, budget_refusal, least_runtime_s, submit_segment
from .training_job import stop_job

ACTION = "continue_run"
BUDGET_KEYS: tuple[str, ...] = tuple(key for key in spec.RUN_FIELDS if key != "run_id")
"""The budget fields the action takes: the keys of a request's ``run`` (:data:`platform_spec.runs.RUN_FIELDS`)
but ``run_id``."""


def _budget_field(key: str, kind: Any) -> Field:
    """A budget row, checked by the run's own rules (:func:`platform_spec.runs.parse_run`), named without ``run.``."""

    def one(raw: Any, config: Any) -> tuple[Any, Any]:
        try:
            budget, canonical = spec.parse_run({"run_id": "r", key: raw})
        except FieldError as error:
            raise FieldError(key, raw, error.expected, detail=error.detail) from None
        return getattr(budget, key), canonical[key]

    return Field(key, kind, help=spec.RUN_FIELDS[key], expected=spec.RUN_FIELDS[key], parse=one)


def _present(name: str, what: str) -> Check:
    def check(values: Mapping[str, Any], config: Any) -> None:
        if values[name] is None:
            raise FieldError(name, None, what)

    return Check(check)


FIELDS: tuple[Field, ...] = (
    Field("action", "string", choices=(ACTION,), fingerprint=False),
    Field(
        "run_id", "string", pattern=spec.RUN_ID_PATTERN, expected=spec.RUN_ID_EXPECTED, fingerprint=False,
        checks=(_present("run_id", f"the run_id of the ended run to continue ({spec.RUN_ID_EXPECTED})"),),
    ),
    Field(
        "client_token", "string", pattern=CLIENT_TOKEN_PATTERN, fingerprint=False,
        expected="1-128 characters of A-Z a-z 0-9 . _ : / = + @ -",
        checks=(_present("client_token", "a client_token (1-128 of A-Z a-z 0-9 . _ : / = + @ -): a retry with it "
                         "answers the same segment"),),
    ),
    _budget_field("max_segments", "integer"),
    _budget_field("deadline", "string"),
    _budget_field("max_instance_hours", "number"),
    _budget_field("min_segment_minutes", "number"),
)  # fmt: skip
"""The action's fields (:mod:`.fields`); ``sent`` (the budget fields sent, canonical) is what a token stands for."""
check_table(FIELDS)


def continue_run(event: Any, *, clients: Clients, config: SubmitterConfig, now: datetime) -> dict[str, Any]:
    """Continue the ended run ``run_id`` (module docstring).

    Returns:
        ``{"status": "continued", "run_id", "segment", "training_job_name", "training_job_arn"?, "capacity"?,
        "budget": the run's budget now, "replayed": bool, "previous": {"decision", "reason"}}``.

    Raises:
        Refusal: ``InvalidRequest`` naming a field (a malformed one, or a budget that leaves the next segment
            less than its floor, or ``max_segments`` not above the segments run so far); ``NotFound`` on
            ``run_id``; ``Conflict`` on ``run_id`` (the run is active, or ended ``finished`` / ``failed``,
            or was continued concurrently with another token) or on ``client_token`` (used with other fields);
            the next segment's refusal (``NoCapacity``, ``QuotaExceeded``, ...), the continuation released.
    """
    try:
        values, sent = parse(event, FIELDS, config, unknown=f"a field of action {ACTION!r}")
    except FieldError as error:
        raise invalid(error) from None
    run_id, digest = values["run_id"], token_digest(values["client_token"])
    store = RunLedger.of(clients, config)
    state = existing_run(store, run_id)
    for index, (found, budget) in sorted(state.continuations.items()):
        if found.fields.get("client_token_sha256") == digest:
            _same_fields(found, sent)
            return _start(store, state, index, found, budget, clients=clients, config=config, now=now)
    ended = terminal_record(state)
    if ended is None or ended.get("decision") not in spec.CONTINUABLE_DECISIONS:
        raise _not_continuable(state, ended)
    descriptions = segments_of(clients, state)
    index, used = len(descriptions) + 1, sum(instance_hours(d) for d in descriptions)
    asked = {key: values[key] for key in BUDGET_KEYS if values[key] is not None}
    old = state.budget
    budget = spec.RunSpec(
        run_id, asked.get("max_segments", old.max_segments), asked.get("deadline", old.deadline),
        asked.get("max_instance_hours", old.max_instance_hours), asked.get("min_segment_minutes", old.min_segment_minutes),
    )  # fmt: skip
    _check_budget(state, budget, index, used, config, now)
    record = {
        "run_id": run_id, "first_segment": index, "budget": budget.to_dict(), "sent": sent,
        "client_token_sha256": digest, "requested_at": spec.format_time(now), "instance_hours_before": used,
        "previous": {"decision": ended.get("decision"), "reason": ended.get("reason")}, "state": "claimed",
    }  # fmt: skip
    written = _write(store, state, index, record)
    return _start(
        store, load_run(store, run_id) or state, index, written, budget, clients=clients, config=config, now=now
    )


def _same_fields(found: Record, sent: Mapping[str, Any]) -> None:
    """The token's continuation was asked with the same budget fields, else ``Conflict`` on ``client_token``."""
    if found.fields.get("sent") != dict(sent):
        raise Refusal(
            "Conflict",
            f"client_token already continued run {found.fields.get('run_id')!r} at segment "
            f"{found.fields.get('first_segment')} with other budget fields ({found.fields.get('sent')}); a client_token "
            "stands for one request: use a new client_token for this one",
            field="client_token",
            details={"continuation_record": found.uri},
        )


def _not_continuable(state: RunState, ended: Mapping[str, Any] | None) -> Refusal:
    continuable = ", ".join(spec.CONTINUABLE_DECISIONS)
    if ended is None:
        why = "is still active (a segment runs, waits for capacity, or is being submitted): stop it first"
    else:
        why = f"ended {ended.get('decision')} ({ended.get('reason')}), which is final"
    return Refusal(
        "Conflict",
        f"run_id: run {state.run_id!r} {why}; continue_run continues a run that ended {continuable}",
        field="run_id",
        details={"run_id": state.run_id, "state": None if ended is None else ended.get("decision")},
    )


def _check_budget(
    state: RunState, budget: spec.RunSpec, index: int, used: float, config: SubmitterConfig, now: datetime
) -> None:
    """The new budget leaves segment ``index`` room: a segment, and a segment's floor of time (from now).

    Raises:
        Refusal: ``InvalidRequest`` naming ``max_segments``, ``deadline`` or ``max_instance_hours``.
    """
    most = budget.max_segments or spec.MAX_SEGMENTS
    if index > most:
        raise invalid(
            FieldError(
                "max_segments", budget.max_segments,
                f"more than the {index - 1} segment(s) the run has had (at most {spec.MAX_SEGMENTS}; the budget counts "
                "every segment of the run)",
            )
        )  # fmt: skip
    request = parse_request(state.record.request, config)
    runtime = spec.segment_runtime(
        budget, max_runtime_s=request.max_runtime_seconds, instance_count=request.instance_count,
        instance_hours=used, starts=now, least_runtime_s=least_runtime_s(),
    )  # fmt: skip
    if runtime.ended is not None:
        raise budget_refusal(budget, runtime, runtime.bound_by.removeprefix("run."))  # this action's fields


def _write(store: RunLedger, state: RunState, index: int, record: dict[str, Any]) -> Record:
    """The continuation's record at segment ``index``: new, or over a released one; when another writer got there
    first, theirs if it is this token's and fields' (a concurrent duplicate), else ``Conflict``."""
    key = store.continuation_key(state.record, index)
    for _ in range(CLAIM_ATTEMPTS):
        found = store.read(key)
        if found is None:
            written = store.create(key, record)
        elif found.released:
            written = store.replace(found, record)
        elif found.fields.get("client_token_sha256") == record["client_token_sha256"]:
            _same_fields(found, record["sent"])
            return found
        else:
            raise Refusal(
                "Conflict",
                f"run_id: run {state.run_id!r} was continued at segment {index} concurrently by another client_token",
                field="run_id",
                details={"run_id": state.run_id, "continuation_record": found.uri},
            )
        if written is not None:
            return written
    raise RuntimeError(
        f"run_id: the continuation record {store.uri(key)} kept changing under concurrent writers; retry"
    )


def _start(
    store: RunLedger,
    state: RunState,
    index: int,
    found: Record,
    budget: spec.RunSpec,
    *,
    clients: Clients,
    config: SubmitterConfig,
    now: datetime,
) -> dict[str, Any]:
    """Submit segment ``index`` (idempotent: one name and token per segment) and answer; a refusal releases the
    continuation (the run stays as it ended) and is raised. A continuation a later one superseded is answered
    with its segment, never submitted again."""
    answer: dict[str, Any] = {
        "status": "continued", "run_id": state.run_id, "segment": index,
        "training_job_name": spec.segment_job_name(state.run_id, index), "budget": budget.to_dict(),
        "previous": found.fields.get("previous"),
    }  # fmt: skip
    if index != state.first_segment:
        return {**answer, "replayed": True}
    used = float(found.fields.get("instance_hours_before") or 0.0)
    response = submit_segment(
        state.record, index, budget=budget, instance_hours_used=used, clients=clients, config=config, now=now
    )
    if response.get("status") != "submitted":
        error = response.get("error") or {}
        reason = f"segment {index} was refused ({error.get('code')}: {error.get('message')})"
        store.release(found, reason)
        field = error.get("field")
        if isinstance(field, str) and field.removeprefix("run.") in BUDGET_KEYS:
            field = field.removeprefix("run.")  # this action's budget fields are not below run
        raise Refusal(
            str(error.get("code") or "InvalidRequest"),
            f"{reason}; run {state.run_id!r} stays as it ended",
            field=field,
            details=error.get("details"),
        )
    if store.read(store.stop_key(state.record, index)) is not None:
        # a stop that landed while the segment was created saw none running (runs.stop_run): stop it here
        answer["stopped_on_start"] = stop_job(clients, answer["training_job_name"])
    if response.get("checkpoint_prune"):  # what the prune before the segment kept and deleted
        answer["checkpoint_prune"] = response["checkpoint_prune"]
    return {
        **answer, "training_job_arn": response.get("training_job_arn"), "capacity": response.get("capacity"),
        "replayed": bool(response.get("replayed")),
    }  # fmt: skip
