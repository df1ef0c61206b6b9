"""``continue_run`` (runtime/continue_run.py) against the embedded AWS: a run that ended ``stopped``, ``budget-*``
or ``no-progress`` continues from its checkpoint with a new budget, at most once per client token; an active,
finished or failed run is refused, and nothing is written for a refusal."""

from __future__ import annotations

import concurrent.futures
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from platform_spec import runs as spec

pytestmark = pytest.mark.xdist_group("submitter")


def new_run_id() -> str:
    return f"k{uuid.uuid4().hex[:12]}"


def seg(run_id: str, index: int) -> str:
    return spec.segment_job_name(run_id, index)


@pytest.fixture
def act(runtime, clients, config):
    def _act(event: dict[str, Any]) -> dict[str, Any]:
        return runtime.actions.dispatch(event, clients=clients, config=config)

    return _act


def ended_run(aws, submit, run_kit, *, decision: str = spec.BUDGET_SEGMENTS, **run: Any) -> str:
    """A run whose segment 1 trained to step 20 and ended with ``decision`` (budget-segments: max_segments 1)."""
    run_id = new_run_id()
    budget = {"max_segments": 1, **run} if decision == spec.BUDGET_SEGMENTS else run
    assert submit(run_kit.request(run_id, **budget))["status"] == "submitted"
    run_kit.checkpoint(run_id, 20)
    aws.set_job_status(seg(run_id, 1), "InProgress")
    if decision == spec.FINISHED:
        run_kit.checkpoint(run_id, 100)
    aws.set_job_status(seg(run_id, 1), "Failed" if decision == spec.FAILED else "Completed")
    answer = run_kit.handle(run_kit.event(seg(run_id, 1)))
    assert answer["decision"]["decision"] == decision, answer
    return run_id


def continued(run_id: str, token: str | None = None, **budget: Any) -> dict[str, Any]:
    return {"action": "continue_run", "run_id": run_id, "client_token": token or f"t-{uuid.uuid4()}", **budget}


def test_an_ended_run_continues_once_from_its_checkpoint_with_the_new_budget(aws, submit, run_kit, act, config):
    run_id = ended_run(aws, submit, run_kit)
    refused = act(continued(run_id))  # its budget (max_segments 1) leaves no segment
    assert refused["error"]["field"] == "max_segments" and "1 segment(s)" in refused["error"]["message"], refused
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]

    body = continued(run_id, max_segments=3)
    answer = act(body)
    assert answer["status"] == "continued" and answer["replayed"] is False, answer
    assert (answer["segment"], answer["training_job_name"]) == (2, seg(run_id, 2))
    assert answer["previous"]["decision"] == spec.BUDGET_SEGMENTS
    assert answer["budget"] == {"run_id": run_id, "max_segments": 3}
    job = aws.describe_training_job(seg(run_id, 2))
    assert job["CheckpointConfig"]["S3Uri"] == f"s3://{config.checkpoint_bucket}/run-checkpoints/{run_id}/"
    replay = act(body)  # the same request again
    assert replay["replayed"] is True and replay["capacity"]["rule"] == "idempotent-replay", replay
    assert {k: replay[k] for k in ("segment", "training_job_arn", "budget")} == {
        k: answer[k] for k in ("segment", "training_job_arn", "budget")
    }
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]

    view = act({"action": "describe", "run_id": run_id})["run"]
    assert view["state"] in ("running", "continuing") and view["budget"]["max_segments"] == 3
    assert view["continuations"][0]["first_segment"] == 2
    other = act(continued(run_id, max_segments=5))  # another token while it runs
    assert other["error"]["code"] == "Conflict" and other["error"]["field"] == "run_id", other
    changed = act({**body, "max_segments": 4})  # the same token, other fields
    assert changed["error"]["code"] == "Conflict" and changed["error"]["field"] == "client_token", changed

    # the continuation carries it on under the new budget: segment 2 advances, segment 3 starts, then the budget ends it
    run_kit.checkpoint(run_id, 40)
    aws.set_job_status(seg(run_id, 2), "InProgress")
    aws.set_job_status(seg(run_id, 2), "Completed")
    assert run_kit.handle(run_kit.event(seg(run_id, 2)))["decision"]["decision"] == spec.CONTINUE
    run_kit.checkpoint(run_id, 60)
    aws.set_job_status(seg(run_id, 3), "InProgress")
    aws.set_job_status(seg(run_id, 3), "Completed")
    assert run_kit.handle(run_kit.event(seg(run_id, 3)))["decision"]["decision"] == spec.BUDGET_SEGMENTS
    assert act({"action": "describe", "run_id": run_id})["run"]["state"] == spec.BUDGET_SEGMENTS
    # the first token still answers its own segment, never a new one
    assert act(body)["training_job_name"] == seg(run_id, 2)
    again = act(continued(run_id, max_segments=4))
    assert again["segment"] == 4 and run_kit.jobs(run_id)[-1] == seg(run_id, 4)


def test_concurrent_continuations_with_one_token_start_one_segment(aws, submit, run_kit, act):
    run_id = ended_run(aws, submit, run_kit)
    body = continued(run_id, max_segments=2)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: act(dict(body)), range(4)))
    assert {a["status"] for a in answers} == {"continued"}, answers
    assert {a["training_job_name"] for a in answers} == {seg(run_id, 2)}
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]


def test_a_stopped_run_continues_and_a_new_stop_stops_the_new_segment(aws, submit, run_kit, act):
    run_id = ended_run(aws, submit, run_kit, decision=spec.CONTINUE)  # segment 2 runs
    aws.set_job_status(seg(run_id, 2), "InProgress")
    assert act({"action": "stop", "run_id": run_id})["changed"] is True
    aws.set_job_status(seg(run_id, 2), "Stopped")
    assert run_kit.handle(run_kit.event(seg(run_id, 2)))["decision"]["decision"] == spec.STOPPED
    answer = act(continued(run_id))
    assert answer["segment"] == 3 and answer["previous"]["decision"] == spec.STOPPED, answer
    aws.set_job_status(seg(run_id, 3), "InProgress")
    stop = act({"action": "stop", "run_id": run_id})  # the old stop marker does not stop the continued run
    assert (stop["status"], stop["changed"], stop["training_job_name"]) == ("stopping", True, seg(run_id, 3))


@pytest.mark.parametrize("decision", [spec.FINISHED, spec.FAILED])
def test_a_finished_or_failed_run_is_final(aws, submit, run_kit, act, decision):
    run_id = ended_run(aws, submit, run_kit, decision=decision)
    answer = act(continued(run_id, max_segments=5))
    assert answer["error"]["code"] == "Conflict" and f"ended {decision}" in answer["error"]["message"], answer
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]


def test_an_active_run_unknown_run_and_bad_fields_are_refused_and_write_nothing(
    aws, submit, run_kit, act, clients, config, runtime
):
    run_id = new_run_id()
    assert submit(run_kit.request(run_id))["status"] == "submitted"
    active = act(continued(run_id))
    assert active["error"]["code"] == "Conflict" and "still active" in active["error"]["message"], active
    assert act(continued(new_run_id()))["error"]["code"] == "NotFound"
    for body, field in [
        ({"action": "continue_run", "run_id": run_id}, "client_token"),
        ({"action": "continue_run", "client_token": "t"}, "run_id"),
        (continued(run_id, deadline="tomorrow"), "deadline"),
        (continued(run_id, max_instance_hours=0), "max_instance_hours"),
        (continued(run_id, max_segments=1000), "max_segments"),
        (continued(run_id, max_steps=5), "max_steps"),
    ]:
        answer = act(body)
        assert answer["error"]["code"] == "InvalidRequest" and answer["error"]["field"] == field, (body, answer)
    store = runtime.ledger.RunLedger.of(clients, config)
    assert not [k for k in store.keys(store.run_prefix(run_id)) if "from-seg-" in k]
    assert "continue_run" not in runtime.actions.READ_ACTIONS  # the reader function never answers it


def test_a_budget_too_small_for_a_segment_is_refused_naming_the_field(aws, submit, run_kit, act):
    soon = datetime.now(UTC) + timedelta(minutes=40)
    run_id = ended_run(aws, submit, run_kit, deadline=spec.format_time(soon))
    near = spec.format_time(datetime.now(UTC) + timedelta(minutes=20))
    answer = act(continued(run_id, max_segments=2, deadline=near))
    assert answer["error"]["field"] == "deadline", answer
    assert answer["error"]["details"]["budget_decision"] == spec.BUDGET_DEADLINE
    hours = act(continued(run_id, max_segments=2, max_instance_hours=0.1))
    assert hours["error"]["field"] == "max_instance_hours" and "35 min" in hours["error"]["message"], hours
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]


def test_a_refused_segment_releases_the_continuation_and_the_same_token_retries(aws, submit, run_kit, act):
    run_id = ended_run(aws, submit, run_kit)
    body = continued(run_id, max_segments=2)
    aws.inject_fault("CreateTrainingJob", "ResourceLimitExceeded", message="limit 'ml.p6-b200.48xlarge for training'")
    try:
        refused = act(body)
    finally:
        aws.clear_faults()
    assert refused["error"]["code"] == "QuotaExceeded" and "stays as it ended" in refused["error"]["message"]
    assert act({"action": "describe", "run_id": run_id})["run"]["state"] == spec.BUDGET_SEGMENTS
    answer = act(body)
    assert answer["status"] == "continued" and answer["training_job_name"] == seg(run_id, 2), answer


def test_a_continued_run_counts_its_capacity_failures_afresh(aws, submit, run_kit, act):
    # segment 1 never trained (CapacityError) and spent the budget; the run continued on purpose then waits the
    # first backoff again on its own first capacity failure, not the second one of a count carried over
    run_id = new_run_id()
    assert submit(run_kit.request(run_id, max_segments=1))["status"] == "submitted"
    reason = spec.failure_reason(spec.CAPACITY_ERROR, "Unable to provision requested ML compute capacity")
    aws.set_job_status(seg(run_id, 1), "Failed", failure_reason=reason)
    ended = run_kit.handle(run_kit.event(seg(run_id, 1)))["decision"]
    assert (ended["decision"], ended["capacity_failures"]) == (spec.BUDGET_SEGMENTS, 1), ended
    assert act(continued(run_id, max_segments=3))["status"] == "continued"
    aws.set_job_status(seg(run_id, 2), "Failed", failure_reason=reason)
    now = datetime.now(UTC)
    waiting = run_kit.handle(run_kit.event(seg(run_id, 2)), now=now)["decision"]
    assert (waiting["decision"], waiting["capacity_failures"]) == (spec.WAITING_FOR_CAPACITY, 1), waiting
    not_before = spec.parse_time(waiting["not_before"], "not_before")
    assert (not_before - now).total_seconds() == spec.capacity_backoff_s(1)
