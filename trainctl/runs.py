"""What ``trainctl runs`` does: ask the job API about runs (one training across several jobs) and show them.

A run is one training continued across capacity blocks: each segment is a SageMaker training job
(``<run_id>-seg-001``, ``-seg-002``, ...) resuming the run's shared checkpoint prefix, and the platform
submits the next segment when one ends with its capacity (``platform_constructs.submitter.runtime.runs``).
This module sends the job API's run actions (``list_runs``, ``describe`` and ``stop`` with ``run_id``) to
the deployed submitter function or, with ``local``, to its handler in this process (against the
emulator's ``AWS_ENDPOINT_URL``), the same two ways as ``trainctl submit`` (:mod:`trainctl.submitter_client`),
and draws the answers as tables (:mod:`trainctl.tables`):

* ``trainctl runs``: one row per run (id, state, steps, budget, created);
* ``trainctl runs RUN_ID``: the run's segments (job, status, capacity and plan, steps and tokens done,
  start and end, instance-hours, the decision taken when it ended), the idle gap before each segment,
  and what stopped the run;
* ``trainctl runs RUN_ID --stop``: stop the run (its running segment gets ``StopTrainingJob``; no further
  segment starts); a run already stopped or ended answers its state.
* ``trainctl runs RUN_ID --continue [--max-segments N] [--deadline T] [--max-instance-hours H]
  [--min-segment-minutes M] [--client-token T]``: continue a run that ended ``budget-*``, ``stopped`` or
  ``no-progress`` from its newest complete checkpoint, with the budget changed as given (``continue_run``;
  a generated client token is printed: a retry with it answers the same segment).

``--json`` prints the job API's answer as it is.
"""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from trainctl.tables import Column, Panel, Table, print_blocks

EXIT_OK = 0
EXIT_REFUSED = 1
EXIT_FAILED = 2

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_REFUSED", "run_blocks", "run_request", "runs_blocks", "show_runs"]


def run_request(
    run_id: str | None,
    *,
    stop: bool = False,
    max_results: int | None = None,
    resume: bool = False,
    budget: Mapping[str, Any] | None = None,
    client_token: str | None = None,
) -> dict[str, Any]:
    """The job API request ``trainctl runs`` sends: ``list_runs``, or ``describe`` / ``stop`` of ``run_id``, or with
    ``resume`` ``continue_run`` of it with the ``budget`` fields given (``None`` values left out) and ``client_token``
    (default: a generated one, :data:`trainctl.submitter_client.GENERATED_TOKEN_PREFIX` + UUID4).

    Raises:
        ValueError: ``stop`` or ``resume`` without a ``run_id``, both, or a budget field or ``client_token``
            without ``resume`` (naming its flag).
    """
    given = {key: value for key, value in (budget or {}).items() if value is not None}
    if client_token is not None:
        given["client_token"] = client_token
    if not resume and given:
        raise ValueError(f"{', '.join('--' + key.replace('_', '-') for key in given)} needs --continue")
    if stop and resume:
        raise ValueError("--stop and --continue: expected one of them")
    if resume:
        if run_id is None:
            raise ValueError("--continue needs a RUN_ID (which run to continue)")
        from trainctl.submitter_client import GENERATED_TOKEN_PREFIX

        given.setdefault("client_token", f"{GENERATED_TOKEN_PREFIX}{uuid.uuid4()}")
        return {"action": "continue_run", "run_id": run_id, **given}
    if run_id is None:
        if stop:
            raise ValueError("--stop needs a RUN_ID (which run to stop)")
        request: dict[str, Any] = {"action": "list_runs"}
        if max_results is not None:
            request["max_results"] = max_results
        return request
    return {"action": "stop" if stop else "describe", "run_id": run_id}


def _cell(value: Any, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def _escape(text: Any) -> str:
    """``text`` as literal rich markup (``[`` starts a tag)."""
    return str(text).replace("[", "\\[")


def _plan_name(arn: str | None) -> str:
    return arn.rsplit("/", 1)[-1] if arn else ""


def _time(value: str | None) -> str:
    """An ISO-8601 UTC time as ``YYYY-MM-DD HH:MM:SS`` (``-`` when absent)."""
    if not value:
        return "-"
    return value.replace("T", " ")[:19]


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = float(seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _steps(first: Any, last: Any) -> str:
    """``first-last`` of a segment's steps; ``none`` when it trained none (its newest checkpoint is older)."""
    if last is None:
        return "-"
    if first is None:
        return str(last)
    return "none" if last < first else f"{first}-{last}"


def _budget(budget: Mapping[str, Any] | None) -> str:
    if not budget:
        return "-"
    parts = []
    if budget.get("max_segments") is not None:
        parts.append(f"{budget['max_segments']} segments")
    if budget.get("deadline"):
        parts.append(f"until {_time(budget['deadline'])}")
    if budget.get("max_instance_hours") is not None:
        parts.append(f"{budget['max_instance_hours']} instance-h")
    return ", ".join(parts) or "-"


def runs_blocks(listing: Mapping[str, Any]) -> list[Panel | Table]:
    """The tables of a ``list_runs`` answer (``{"runs": [...], "next_token"?}``)."""
    table = Table(
        "Runs",
        [
            Column("run", no_wrap=True),
            Column("state"),
            Column("max steps", justify="right"),
            Column("budget"),
            Column("created (UTC)"),
        ],
        caption="more runs: --next-token " + listing["next_token"]
        if listing.get("next_token")
        else None
        if listing.get("runs")
        else "no runs (a submission with `run` starts one)",
    )
    for run in listing.get("runs") or []:
        table.add_row(
            _escape(run.get("run_id")),
            _escape(run.get("state")),
            _cell(run.get("max_steps")),
            _escape(_budget(run.get("budget"))),
            _time(run.get("created")),
        )
    return [table]


def run_blocks(view: Mapping[str, Any]) -> list[Panel | Table]:
    """The tables of one run (the ``run`` of a ``describe`` answer with ``run_id``; see
    ``platform_constructs.submitter.runtime.runs.run_view``): a summary panel and one row per segment,
    with the idle gap before it (the time between the previous segment's end and its start)."""
    gaps = list(view.get("idle_gaps_s") or [])
    table = Table(
        f"Run {_escape(view.get('run_id'))}: segments",
        [
            Column("#", justify="right"),
            Column("training job", no_wrap=True),
            Column("status"),
            Column("capacity"),
            Column("steps", justify="right"),
            Column("tokens", justify="right"),
            Column("idle before", justify="right"),
            Column("start (UTC)"),
            Column("end (UTC)"),
            Column("decided"),
        ],
    )
    decisions = Table(
        f"Run {_escape(view.get('run_id'))}: what the platform decided when each segment ended",
        [Column("#", justify="right"), Column("decision"), Column("reason")],
    )
    for position, segment in enumerate(view.get("segments") or []):
        capacity = segment.get("capacity") or {}
        where = capacity.get("type", "-")
        plan = _plan_name(capacity.get("training_plan_arn"))
        if plan:
            where += f" {plan}"
        decision = segment.get("decision") or {}
        if decision.get("decision"):
            decisions.add_row(
                _cell(segment.get("index")), _escape(decision["decision"]), _escape(decision.get("reason") or "-")
            )
        status = segment.get("status") or "-"
        if segment.get("secondary_status") and segment.get("secondary_status") != status:
            status += f" ({segment['secondary_status']})"
        table.add_row(
            _cell(segment.get("index")),
            _escape(segment.get("training_job_name")),
            _escape(status),
            _escape(where),
            _steps(segment.get("first_step"), segment.get("last_step")),
            _cell(segment.get("tokens"), "{:,}"),
            _duration(gaps[position - 1]) if 0 < position <= len(gaps) else "-",
            _time(segment.get("start_time")),
            _time(segment.get("end_time")),
            _escape(decision.get("decision") or "-"),
        )
    lines = [
        f"state: {_escape(view.get('state'))}"
        + (f": {_escape(view['reason'])}" if view.get("reason") else "")
        + (f"; stop requested {_time(view['stop_requested'])}" if view.get("stop_requested") else ""),
        f"steps: {_cell(view.get('newest_complete_step'))} of {_cell(view.get('max_steps'))} "
        f"(newest complete checkpoint); tokens: {_cell(view.get('tokens_done'), '{:,}')}",
        f"segments: {len(view.get('segments') or [])}; idle between them: "
        f"{_duration(sum(gaps)) if gaps else '-'}; instance-hours: {_cell(view.get('instance_hours'), '{:.3f}')}",
        f"budget: {_escape(_budget(view.get('budget')))}",
    ]
    if view.get("waiting_since"):
        waiting = f"waiting for capacity since {_time(view['waiting_since'])}"
        if view.get("not_before"):  # the capacity backoff after segments that never trained
            waiting += f"; the next segment starts no earlier than {_time(view['not_before'])}"
        lines.append(waiting)
    blocks: list[Panel | Table] = [Panel("\n".join(lines), title=f"Run {_escape(view.get('run_id'))}"), table]
    if decisions.rows:
        blocks.append(decisions)
    return blocks


def show_runs(
    run_id: str | None,
    *,
    local: bool = False,
    function: str | None = None,
    region: str | None = None,
    stop: bool = False,
    as_json: bool = False,
    max_results: int | None = None,
    next_token: str | None = None,
    resume: bool = False,
    budget: Mapping[str, Any] | None = None,
    client_token: str | None = None,
) -> int:
    """``trainctl runs``: list the runs, or show (``stop``: stop; ``resume``: continue with ``budget`` and
    ``client_token``, :func:`run_request`) one, through the job API.

    Returns:
        :data:`EXIT_OK`; :data:`EXIT_REFUSED` when the job API refused the request (unknown run,
        a reader function asked to stop, ...: its refusal is printed); :data:`EXIT_FAILED` when no
        answer came (the failure is one line on stderr, as ``trainctl submit``'s).
    """
    from platform_constructs.submitter.runtime.errors import ConfigurationError
    from trainctl.submitter_client import SubmitError, send

    prog = "trainctl runs" + (" --local" if local else "")
    if not local and not function:
        print(f"{prog}: no job API: give --function NAME (the stack output SubmitterFunctionName) or --local",
              file=sys.stderr)  # fmt: skip
        return EXIT_FAILED
    try:
        request = run_request(
            run_id, stop=stop, max_results=max_results, resume=resume, budget=budget, client_token=client_token
        )
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if next_token is not None:
        request["next_token"] = next_token
    try:
        response = send(request, local=local, function=function, region=region)
    except SubmitError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except ConfigurationError as exc:
        print(f"{prog}: {exc} (source the env file of `trainctl local-aws`)", file=sys.stderr)
        return EXIT_FAILED
    status = response.get("status")
    if as_json or status == "rejected":
        print(json.dumps(response, indent=2))
        return EXIT_REFUSED if status == "rejected" else EXIT_OK
    blocks: Sequence[Panel | Table]
    if run_id is None:
        blocks = runs_blocks(response)
    elif "run" in response:
        blocks = run_blocks(response["run"])
    elif status == "continued":
        again = " (replayed: the segment this client_token started)" if response.get("replayed") else ""
        print(
            f"run {run_id}: continued from {(response.get('previous') or {}).get('decision')}: segment "
            f"{response.get('segment')}, {response.get('training_job_name')}{again}; budget "
            f"{_budget(response.get('budget'))}; client_token {request['client_token']} (a retry with it answers the "
            "same segment)"
        )
        return EXIT_OK
    else:  # a stop's answer, in a line
        what = {
            "stopping": f"stopping: {response.get('training_job_name')} gets StopTrainingJob; no next segment starts",
            "stopped": f"stopped ({response.get('state')})",
        }.get(str(status), str(status))
        print(f"run {run_id}: {what}" + ("" if response.get("changed") else " (already; nothing changed)"))
        return EXIT_OK
    print_blocks(blocks)
    return EXIT_OK
