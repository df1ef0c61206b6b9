"""The run continuation against the embedded AWS: state-change events built like SageMaker's (the
job's status set through the emulator's admin ``set_job_status``, checkpoints written into the
emulated S3 at the run's prefix) and the scheduled tick."""

from __future__ import annotations

import concurrent.futures
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.exceptions import ClientError

from platform_spec import health
from platform_spec import runs as spec

from .conftest import PLANS

pytestmark = pytest.mark.xdist_group("submitter")


def new_run_id() -> str:
    return f"c{uuid.uuid4().hex[:12]}"


def seg(run_id: str, index: int) -> str:
    return spec.segment_job_name(run_id, index)


def end_segment(aws, run_kit, run_id: str, index: int, status: str = "Completed", **fields: Any) -> dict[str, Any]:
    """Run segment ``index`` and end it with ``status``; returns its state-change event."""
    aws.set_job_status(seg(run_id, index), "InProgress")
    aws.set_job_status(seg(run_id, index), status, **fields)
    return run_kit.event(seg(run_id, index))


def start_run(submit, run_kit, run_id: str, **run: Any) -> None:
    answer = submit(run_kit.request(run_id, **run))
    assert answer["status"] == "submitted", answer


def decision(answer: dict[str, Any]) -> str:
    assert answer["status"] == "decided", answer
    return answer["decision"]["decision"]


def test_capacity_end_below_max_steps_continues_exactly_once(aws, submit, run_kit, config):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 40)
    event = end_segment(aws, run_kit, run_id, 1)
    first = run_kit.handle(event)
    assert decision(first) == spec.CONTINUE
    record = first["decision"]
    assert record["newest_step"] == 40 and record["next_training_job_name"] == seg(run_id, 2)
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]
    job = aws.describe_training_job(seg(run_id, 2))
    assert job["CheckpointConfig"]["S3Uri"] == f"s3://{config.checkpoint_bucket}/run-checkpoints/{run_id}/"

    assert decision(run_kit.handle(event)) == spec.STALE_EVENT  # the same event twice
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]


def test_a_late_event_is_retried_then_decided(aws, submit, run_kit, runtime, config):
    """SageMaker's ``Completed`` event arrives while DescribeTrainingJob still reads ``InProgress``: the
    invocation fails (Lambda's asynchronous retry runs it again), nothing is recorded or started, and the
    retry decides once the job reads ended."""
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 30)
    aws.set_job_status(seg(run_id, 1), "InProgress")
    event = run_kit.event(seg(run_id, 1))
    event["detail"]["TrainingJobStatus"] = "Completed"  # what the event says; the API does not say it yet
    with pytest.raises(runtime.errors.SegmentNotEnded, match="reads InProgress"):
        run_kit.handle(event)
    decisions = f"submitter/runs/{run_id}/decisions/"
    assert aws.client("s3").list_objects_v2(Bucket=config.output_bucket, Prefix=decisions)["KeyCount"] == 0
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]
    aws.set_job_status(seg(run_id, 1), "Completed")
    assert decision(run_kit.handle(event)) == spec.CONTINUE  # the retry
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]
    aws.set_job_status(seg(run_id, 2), "InProgress")
    running = run_kit.event(seg(run_id, 2))  # an event that reports no end (the stack's rule sends none)
    assert run_kit.handle(running)["status"] == "ignored"
    running["detail"]["TrainingJobStatus"] = "Failed"
    with pytest.raises(runtime.errors.SegmentNotEnded):  # the new segment's early event is not dropped either
        run_kit.handle(running)


def test_concurrent_events_start_one_segment(aws, submit, run_kit):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 30)
    event = end_segment(aws, run_kit, run_id, 1)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: run_kit.handle(json.loads(json.dumps(event))), range(4)))
    decisions = sorted(decision(a) for a in answers)
    assert decisions.count(spec.CONTINUE) >= 1
    assert set(decisions) <= {spec.CONTINUE, spec.STALE_EVENT}
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]


def test_an_older_segments_late_event_is_stale(aws, submit, run_kit):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 30)
    event = end_segment(aws, run_kit, run_id, 1)
    assert decision(run_kit.handle(event)) == spec.CONTINUE
    run_kit.checkpoint(run_id, 60)
    assert decision(run_kit.handle(end_segment(aws, run_kit, run_id, 2))) == spec.CONTINUE
    late = run_kit.handle(event)  # segment 1's event again, after segment 3 exists
    assert decision(late) == spec.STALE_EVENT and "not the run's newest" in late["decision"]["reason"]
    assert run_kit.jobs(run_id) == [seg(run_id, i) for i in (1, 2, 3)]


def test_reaching_max_steps_finishes(aws, submit, run_kit, runtime, clients, config):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 100)
    answer = run_kit.handle(end_segment(aws, run_kit, run_id, 1))
    assert decision(answer) == spec.FINISHED
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]
    view = runtime.actions.dispatch({"action": "describe", "run_id": run_id}, clients=clients, config=config)["run"]
    assert view["state"] == spec.FINISHED and view["stopped_by"] == spec.FINISHED


def test_a_code_failure_is_not_retried(aws, submit, run_kit):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 20)
    event = end_segment(
        aws, run_kit, run_id, 1, "Failed", failure_reason="AlgorithmError: ZeroDivisionError at step 21"
    )
    answer = run_kit.handle(event)
    assert decision(answer) == spec.FAILED and "ZeroDivisionError" in answer["decision"]["reason"]
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]


TICK = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}


def mine(answer: dict[str, Any], run_id: str) -> list[str]:
    """The decisions a tick made on ``run_id``."""
    assert answer["status"] == "ticked", answer
    return [d["decision"] for d in answer["decisions"] if d["run_id"] == run_id]


def fail_for_capacity(aws, run_kit, run_id: str, index: int, kind: str = spec.CAPACITY_ERROR) -> dict[str, Any]:
    """End segment ``index`` as SageMaker fails a job that never got instances; returns its event."""
    reason = spec.failure_reason(kind, f"Unable to provision requested ML compute capacity (segment {index})")
    return end_segment(aws, run_kit, run_id, index, "Failed", failure_reason=reason)


def waits_until(answer: dict[str, Any], now: datetime) -> tuple[datetime, float]:
    """The ``not_before`` of a ``waiting-for-capacity`` answer, and its seconds after ``now``."""
    assert decision(answer) == spec.WAITING_FOR_CAPACITY, answer
    not_before = spec.parse_time(answer["decision"]["not_before"], "not_before")
    return not_before, (not_before - now).total_seconds()


def test_capacity_failures_wait_with_growing_intervals_until_the_cap_ends_the_run(
    aws, submit, run_kit, runtime, clients, config
):
    """Issue 24: segments that never trained are not resubmitted at once. Each waits for capacity, twice as
    long as the one before (to the ceiling); a tick before its ``not_before`` starts nothing, the first tick
    from it starts the next segment; the MAX_CAPACITY_FAILURES-th in a row ends the run ``no-progress``."""
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    now, waits = datetime.now(UTC), []
    for index in range(1, spec.MAX_CAPACITY_FAILURES):
        kind = spec.INSUFFICIENT_CAPACITY_ERROR if index % 2 else spec.CAPACITY_ERROR
        answer = run_kit.handle(fail_for_capacity(aws, run_kit, run_id, index, kind), now=now)
        not_before, wait = waits_until(answer, now)
        assert answer["decision"]["capacity_failures"] == index
        waits.append(wait)
        assert run_kit.jobs(run_id) == [seg(run_id, i) for i in range(1, index + 1)]
        view = runtime.actions.dispatch({"action": "describe", "run_id": run_id}, clients=clients, config=config)
        assert view["run"]["state"] == spec.WAITING_FOR_CAPACITY
        assert view["run"]["not_before"] == answer["decision"]["not_before"]
        early = run_kit.handle(TICK, now=not_before - timedelta(seconds=1))
        assert mine(early, run_id) == [] and early["longest_wait_s"] >= wait - 1
        assert run_kit.jobs(run_id) == [seg(run_id, i) for i in range(1, index + 1)]
        assert mine(run_kit.handle(TICK, now=not_before), run_id) == [spec.CONTINUE]
        assert run_kit.jobs(run_id) == [seg(run_id, i) for i in range(1, index + 2)]
        now = not_before + timedelta(minutes=1)
    assert waits == [300, 600, 1200, 2400, 3600]
    last = spec.MAX_CAPACITY_FAILURES
    ended = run_kit.handle(fail_for_capacity(aws, run_kit, run_id, last), now=now)
    assert decision(ended) == spec.NO_PROGRESS
    reason = ended["decision"]["reason"]
    assert f"the {last}th segment in a row that never trained" in reason and f"(segment {last})" in reason
    assert run_kit.jobs(run_id) == [seg(run_id, i) for i in range(1, last + 1)]
    assert mine(run_kit.handle(TICK, now=now + timedelta(hours=2)), run_id) == []
    assert run_kit.jobs(run_id) == [seg(run_id, i) for i in range(1, last + 1)]


def test_a_failed_infrastructure_health_check_waits_out_the_backoff_and_continues_with_the_check_on(
    aws, submit, run_kit
):
    """Issue 27: SageMaker's infrastructure health check, on by default for a multi-node run, fails segment 1's
    instances (the emulator's ``fail_infra_checks``): the job ends ``Failed`` before it trains, without billable
    time; the run waits out the capacity backoff (a new job gets new instances), and the tick's segment 2 runs with
    the check on, as the run's request says."""
    run_id = new_run_id()
    body = run_kit.request(run_id)
    body["instance_count"] = 2
    assert aws.fail_infra_checks(1) == 1
    try:
        answer = submit(body)
    finally:
        aws.fail_infra_checks(0)
    assert answer["status"] == "submitted" and answer["infra_check"] is True, answer
    job = aws.describe_training_job(seg(run_id, 1))
    assert (job["TrainingJobStatus"], job["InfraCheckConfig"]) == ("Failed", {"EnableInfraCheck": True})
    assert job["FailureReason"].startswith(f"{health.INFRA_CHECK_ERROR}: "), job["FailureReason"]
    assert "TrainingStartTime" not in job and "BillableTimeInSeconds" not in job
    now = datetime.now(UTC)
    answer = run_kit.handle(run_kit.event(seg(run_id, 1)), now=now)
    not_before, wait = waits_until(answer, now)
    assert wait == spec.capacity_backoff_s(1) and answer["decision"]["capacity_failures"] == 1, answer
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]
    assert mine(run_kit.handle(TICK, now=not_before), run_id) == [spec.CONTINUE]
    second = aws.describe_training_job(seg(run_id, 2))
    assert (second["TrainingJobStatus"], second["InfraCheckConfig"]) == ("InProgress", {"EnableInfraCheck": True})


def test_a_segment_that_trained_resets_the_capacity_backoff(aws, submit, run_kit):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    now = datetime.now(UTC)
    not_before, wait = waits_until(run_kit.handle(fail_for_capacity(aws, run_kit, run_id, 1), now=now), now)
    assert wait == spec.CAPACITY_BACKOFF_BASE_S
    assert mine(run_kit.handle(TICK, now=not_before), run_id) == [spec.CONTINUE]
    run_kit.checkpoint(run_id, 30)
    trained = run_kit.handle(end_segment(aws, run_kit, run_id, 2), now=not_before)
    assert decision(trained) == spec.CONTINUE and trained["decision"]["capacity_failures"] == 0
    assert "not_before" not in trained["decision"]
    assert run_kit.jobs(run_id) == [seg(run_id, i) for i in (1, 2, 3)]  # at once
    now = not_before + timedelta(hours=1)
    answer = run_kit.handle(fail_for_capacity(aws, run_kit, run_id, 3), now=now)
    assert waits_until(answer, now)[1] == spec.CAPACITY_BACKOFF_BASE_S  # counted from 1 again, not 2
    assert answer["decision"]["capacity_failures"] == 1


def test_the_backoff_starts_one_segment_for_repeated_and_concurrent_ticks_and_events(aws, submit, run_kit):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    now = datetime.now(UTC)
    event = fail_for_capacity(aws, run_kit, run_id, 1)
    not_before, _ = waits_until(run_kit.handle(event, now=now), now)
    for _ in range(2):  # the same event again, during the wait: nothing starts
        assert decision(run_kit.handle(event, now=now + timedelta(seconds=10))) == spec.STALE_EVENT
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        bodies = [TICK, TICK, event, TICK]
        answers = list(pool.map(lambda b: run_kit.handle(json.loads(json.dumps(b)), now=not_before), bodies))
    made = [decision(a) for a in answers if a["status"] == "decided"]
    made += [d for a in answers if a["status"] == "ticked" for d in mine(a, run_id)]
    assert spec.CONTINUE in made and set(made) <= {spec.CONTINUE, spec.STALE_EVENT}, made
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]
    assert mine(run_kit.handle(TICK, now=not_before), run_id) == []  # the same tick again
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]


def test_a_continue_recorded_before_a_crash_still_waits_out_its_backoff(
    aws, submit, run_kit, config, continuation_clients
):
    """The invocation that recorded the ``continue`` died before it wrote the waiting marker: the tick that
    finishes the recorded decision honours the record's ``not_before`` (writes the marker, starts nothing)."""
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    now = datetime.now(UTC)
    event = fail_for_capacity(aws, run_kit, run_id, 1)
    not_before, _ = waits_until(run_kit.handle(event, now=now), now)
    marker = f"submitter/runs/_waiting/{run_id}.json"
    # as if never written (the continuation writes and deletes waiting markers, and only it may)
    continuation_clients.s3.delete_object(Bucket=config.output_bucket, Key=marker)
    resumed = run_kit.handle(TICK, now=now + timedelta(seconds=30))
    assert mine(resumed, run_id) == [spec.WAITING_FOR_CAPACITY]
    assert [d["not_before"] for d in resumed["decisions"] if d["run_id"] == run_id] == [spec.format_time(not_before)]
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]
    assert decision(run_kit.handle(event, now=now + timedelta(seconds=60))) == spec.STALE_EVENT
    assert mine(run_kit.handle(TICK, now=not_before - timedelta(seconds=1)), run_id) == []
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]
    assert mine(run_kit.handle(TICK, now=not_before), run_id) == [spec.CONTINUE]
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]


def test_a_stopped_run_is_stopped(aws, submit, run_kit, runtime, clients, config):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    aws.set_job_status(seg(run_id, 1), "InProgress")
    run_kit.checkpoint(run_id, 15)
    stopping = runtime.actions.dispatch({"action": "stop", "run_id": run_id}, clients=clients, config=config)
    assert stopping["status"] == "stopping" and stopping["changed"] is True
    aws.set_job_status(seg(run_id, 1), "Stopped")
    answer = run_kit.handle(run_kit.event(seg(run_id, 1)))
    assert decision(answer) == spec.STOPPED and "stop requested" in answer["decision"]["reason"]
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]
    again = runtime.actions.dispatch({"action": "stop", "run_id": run_id}, clients=clients, config=config)
    assert again == {"status": "stopped", "run_id": run_id, "changed": False, "state": spec.STOPPED}


def test_no_progress_ends_the_run(aws, submit, run_kit):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 50)
    assert decision(run_kit.handle(end_segment(aws, run_kit, run_id, 1))) == spec.CONTINUE
    answer = run_kit.handle(end_segment(aws, run_kit, run_id, 2))  # no newer checkpoint
    assert decision(answer) == spec.NO_PROGRESS
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]


@pytest.mark.parametrize(
    ("run", "now", "expected"),
    [
        ({"max_segments": 1}, None, spec.BUDGET_SEGMENTS),
        ({"deadline": "2099-01-01T00:00:00Z"}, datetime(2099, 1, 2, tzinfo=UTC), spec.BUDGET_DEADLINE),
    ],
)
def test_budget_exhausted(aws, submit, run_kit, run, now, expected):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id, **run)
    run_kit.checkpoint(run_id, 10)
    event = end_segment(aws, run_kit, run_id, 1)
    assert decision(run_kit.handle(event, now=now)) == expected
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]


def test_a_budget_that_leaves_the_next_segment_too_little_ends_the_run_with_its_decision(aws, submit, run_kit):
    """The deadline leaves segment 1 40 min (over the 35 min floor); when it ends 10 min later, 30 min are left:
    no segment 2, the run ends budget-deadline naming the field (before: segment 2 ran its full 24 h)."""
    run_id = new_run_id()
    deadline = datetime.now(UTC) + timedelta(minutes=40)
    start_run(submit, run_kit, run_id, deadline=spec.format_time(deadline))
    assert aws.describe_training_job(seg(run_id, 1))["StoppingCondition"]["MaxRuntimeInSeconds"] <= 40 * 60
    run_kit.checkpoint(run_id, 10)
    answer = run_kit.handle(end_segment(aws, run_kit, run_id, 1), now=datetime.now(UTC) + timedelta(minutes=10))
    assert decision(answer) == spec.BUDGET_DEADLINE and "run.deadline" in answer["decision"]["reason"], answer
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]


def test_a_later_segment_runs_what_the_instance_hours_leave(aws, submit, run_kit, runtime, clients, config):
    """Segment 2 is bounded by the instance-hours its predecessors left (here 1 h of 1.5 used by segment 1)."""
    run_id = new_run_id()
    start_run(submit, run_kit, run_id, max_instance_hours=1.5)
    assert aws.describe_training_job(seg(run_id, 1))["StoppingCondition"]["MaxRuntimeInSeconds"] == 5400
    record = runtime.ledger.RunLedger.of(clients, config).read_run(run_id)
    answer = runtime.service.submit_segment(
        record, 2, budget=record.run, instance_hours_used=0.5, clients=clients, config=config
    )
    assert answer["status"] == "submitted", answer
    assert aws.describe_training_job(seg(run_id, 2))["StoppingCondition"]["MaxRuntimeInSeconds"] == 3600


def test_checkpoints_without_marker_or_with_a_foreign_state_are_ignored(aws, submit, run_kit):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 30)
    run_kit.checkpoint(run_id, 100, complete=False)  # cut short: no .complete
    run_kit.checkpoint(run_id, 90, state={"step": 7})  # copied from elsewhere
    run_kit.checkpoint(run_id, 80, state=b'{"step": 8')  # damaged
    answer = run_kit.handle(end_segment(aws, run_kit, run_id, 1))
    assert decision(answer) == spec.CONTINUE
    record = answer["decision"]
    assert record["newest_step"] == 30
    assert [s.split(":")[0] for s in record["skipped_checkpoints"]] == ["step-100", "step-90", "step-80"]


def test_an_event_of_a_job_that_is_no_run_segment_is_ignored(aws, submit, run_kit, make_request):
    plain = submit(make_request())
    aws.set_job_status(plain["training_job_name"], "Completed")
    assert run_kit.handle(run_kit.event(plain["training_job_name"]))["status"] == "ignored"
    assert run_kit.handle({"source": "aws.sagemaker", "detail-type": "Something else"})["status"] == "ignored"


def test_someone_elses_job_named_like_the_next_segment_does_not_stall_the_run(aws, submit, run_kit, config):
    """Issue 24: a job named ``<run_id>-seg-002`` that is not the run's (made outside the platform: the
    submitter refuses that name in a plain request) is not taken for segment 2. Segment 1's end is decided,
    and the run ends ``failed`` naming the job in the way, instead of staying ``continuing`` forever."""
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 30)
    mine = aws.describe_training_job(seg(run_id, 1))
    foreign = {k: mine[k] for k in ("AlgorithmSpecification", "RoleArn", "OutputDataConfig", "StoppingCondition")}
    resources = {k: mine["ResourceConfig"][k] for k in ("InstanceType", "InstanceCount", "VolumeSizeInGB")}
    aws.client("sagemaker").create_training_job(TrainingJobName=seg(run_id, 2), ResourceConfig=resources, **foreign)
    answer = run_kit.handle(end_segment(aws, run_kit, run_id, 1))
    assert decision(answer) == spec.FAILED, answer
    assert "segment 2 was refused" in answer["decision"]["reason"] and seg(run_id, 2) in answer["decision"]["reason"]
    assert run_kit.handle(run_kit.event(seg(run_id, 2)))["status"] == "ignored"  # not the run's


def test_a_lost_event_is_decided_by_the_tick_and_the_late_event_is_stale(aws, submit, run_kit, runtime, config):
    """Segment 1 ends and its event never comes (or comes early and its retries run out): the tick decides it
    as the event would, once; the event arriving afterwards, twice, is a no-op; the ended run leaves the tick."""
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    assert mine(run_kit.handle(TICK), run_id) == []  # segment 1 runs: nothing to decide
    run_kit.checkpoint(run_id, 30)
    event = end_segment(aws, run_kit, run_id, 1)  # never delivered
    assert mine(run_kit.handle(TICK), run_id) == [spec.CONTINUE]
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]
    assert mine(run_kit.handle(TICK), run_id) == []  # segment 2 runs
    for _ in range(2):
        assert decision(run_kit.handle(event)) == spec.STALE_EVENT
    run_kit.checkpoint(run_id, 100)
    aws.set_job_status(seg(run_id, 2), "InProgress")
    early = run_kit.event(seg(run_id, 2))
    early["detail"]["TrainingJobStatus"] = "Completed"
    with pytest.raises(runtime.errors.SegmentNotEnded):
        run_kit.handle(early)  # early, and (say) its retries run out too
    aws.set_job_status(seg(run_id, 2), "Completed")
    assert mine(run_kit.handle(TICK), run_id) == [spec.FINISHED]
    marker = f"{runtime.settings.RUN_ACTIVE_PREFIX}{run_id}.json"
    s3 = aws.client("s3")
    assert s3.list_objects_v2(Bucket=config.output_bucket, Prefix=marker)["KeyCount"] == 1
    assert mine(run_kit.handle(TICK), run_id) == []  # the run ended: its marker goes
    assert s3.list_objects_v2(Bucket=config.output_bucket, Prefix=marker)["KeyCount"] == 0
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]


def test_the_event_and_the_tick_racing_start_one_segment(aws, submit, run_kit):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 30)
    event = end_segment(aws, run_kit, run_id, 1)
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda i: run_kit.handle(json.loads(json.dumps(event if i % 2 else TICK))), range(4)))
    made = [decision(a) for a in answers if a["status"] == "decided"]
    made += [d for a in answers if a["status"] == "ticked" for d in mine(a, run_id)]
    assert made.count(spec.CONTINUE) >= 1 and set(made) <= {spec.CONTINUE, spec.STALE_EVENT}, made
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]


def test_a_tick_starts_no_run_with_too_little_time_left(aws, submit, run_kit, clients, config):
    """The tick's work is bounded by the invocation's time: with less than TICK_RESERVE_S left it starts no
    run's work and counts the runs it left to the next tick."""
    from platform_constructs.submitter.runtime import aws as runtime_aws
    from platform_constructs.submitter.runtime import continuation

    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 30)
    end_segment(aws, run_kit, run_id, 1)
    short = runtime_aws.Deadline(continuation.TICK_RESERVE_S - 1)
    events = aws.client("events")
    cut = continuation.handle(TICK, clients=clients, config=config, events=events, deadline=short)
    assert cut["decisions"] == [] and cut["deferred"] >= 1
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]
    enough = runtime_aws.Deadline(continuation.TICK_RESERVE_S + 60)
    ticked = continuation.handle(TICK, clients=clients, config=config, events=events, deadline=enough)
    assert mine(ticked, run_id) == [spec.CONTINUE] and ticked["deferred"] == 0


P5_RUN = {
    "TrainingPlanName": "p5-run-a", "Status": "Active", "InstanceType": "ml.p5.48xlarge",
    "TotalInstanceCount": 3, "StartTime": "now-1d", "EndTime": "now+10d",
}  # fmt: skip


def set_plans(aws, run_kit, clients, plans) -> None:
    """Replace the emulator's plans, and forget the SSM list the warm submitter's and continuation's clients
    cached (60 s)."""
    aws.set_plans(plans)
    for warm in (clients, run_kit.clients):
        warm.parameters.clear_cache()


def waiting_run(aws, submit, run_kit, clients, run_id: str) -> dict[str, Any]:
    """A run of 3 x p5 whose segment 1 ended with its capacity after the only p5 plan went away: the
    continuation's answer to segment 1's end (a run waiting for capacity). Callers restore the plans."""
    body = run_kit.request(run_id)
    body.update(instance_type="ml.p5.48xlarge", instance_count=3)
    body["hyperparameters"] = {**body["hyperparameters"], "precision": "bf16"}
    set_plans(aws, run_kit, clients, [*PLANS, P5_RUN])
    assert submit(body)["status"] == "submitted"
    run_kit.checkpoint(run_id, 25)
    aws.set_job_status(seg(run_id, 1), "InProgress")
    aws.set_job_status(seg(run_id, 1), "Completed")
    set_plans(aws, run_kit, clients, PLANS)  # the block is gone
    return run_kit.handle(run_kit.event(seg(run_id, 1)))


def test_waiting_for_capacity_then_the_tick_submits(aws, submit, run_kit, clients):
    """Segment 2 finds no plan with 3 x p5 (waiting); the tick retries, and starts it once a plan appears."""
    run_id = new_run_id()
    try:
        waiting = waiting_run(aws, submit, run_kit, clients, run_id)
        assert decision(waiting) == spec.WAITING_FOR_CAPACITY and "NoCapacity" in waiting["decision"]["reason"]
        assert run_kit.jobs(run_id) == [seg(run_id, 1)]
        tick = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
        later = datetime.now(UTC) + timedelta(minutes=10)
        still = run_kit.handle(tick, now=later)
        mine = [d for d in still["decisions"] if d["run_id"] == run_id]
        assert [d["decision"] for d in mine] == [spec.WAITING_FOR_CAPACITY]
        assert still["longest_wait_s"] >= 600
        set_plans(aws, run_kit, clients, [*PLANS, {**P5_RUN, "TrainingPlanName": "p5-run-b"}])
        started = run_kit.handle(tick)
        mine = [d for d in started["decisions"] if d["run_id"] == run_id]
        assert [d["decision"] for d in mine] == [spec.CONTINUE]
        assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]
        assert all(d["run_id"] != run_id for d in run_kit.handle(tick)["decisions"])  # no longer waiting
    finally:
        aws.complete_active_jobs()
        set_plans(aws, run_kit, clients, PLANS)


def test_stopping_a_waiting_run_ends_it(aws, submit, run_kit, runtime, clients, config):
    run_id = new_run_id()
    try:
        assert decision(waiting_run(aws, submit, run_kit, clients, run_id)) == spec.WAITING_FOR_CAPACITY
        stopped = runtime.actions.dispatch({"action": "stop", "run_id": run_id}, clients=clients, config=config)
        assert stopped["status"] == "stopped" and stopped["changed"] is True
        view = runtime.actions.dispatch({"action": "describe", "run_id": run_id}, clients=clients, config=config)
        assert view["run"]["state"] == spec.STOPPED
        # the submitter's role may not delete from the run store (tests/cdk/test_runs_infrastructure.py): the
        # marker stays until the continuation's tick, which removes it without deciding anything
        marker = f"submitter/runs/_waiting/{run_id}.json"
        s3 = aws.client("s3")
        assert s3.list_objects_v2(Bucket=config.output_bucket, Prefix=marker).get("KeyCount") == 1
        tick = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
        assert all(d["run_id"] != run_id for d in run_kit.handle(tick)["decisions"])
        assert s3.list_objects_v2(Bucket=config.output_bucket, Prefix=marker).get("KeyCount") == 0
    finally:
        set_plans(aws, run_kit, clients, PLANS)


def test_a_run_view_shows_segments_steps_tokens_and_idle_gaps(aws, submit, run_kit, runtime, clients, config):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 40)
    assert decision(run_kit.handle(end_segment(aws, run_kit, run_id, 1))) == spec.CONTINUE
    run_kit.checkpoint(run_id, 100)
    assert decision(run_kit.handle(end_segment(aws, run_kit, run_id, 2))) == spec.FINISHED
    view = runtime.actions.dispatch({"action": "describe", "run_id": run_id}, clients=clients, config=config)["run"]
    assert view["state"] == spec.FINISHED and view["newest_complete_step"] == 100
    first, second = view["segments"]
    assert (first["first_step"], first["last_step"], first["tokens"]) == (1, 40, 40 * 8 * 2048)
    assert (second["first_step"], second["last_step"], second["tokens"]) == (41, 100, 60 * 8 * 2048)
    assert first["decision"]["decision"] == spec.CONTINUE and second["decision"]["decision"] == spec.FINISHED
    assert len(view["idle_gaps_s"]) == 1 and view["idle_gaps_s"][0] >= 0


def test_a_continue_whose_submission_failed_is_finished_by_the_retried_event(aws, submit, run_kit):
    """The decision is recorded before the next segment is submitted: when that submission dies (here a
    persistent SageMaker fault), EventBridge's retry of the event finishes it, once."""
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 20)
    event = end_segment(aws, run_kit, run_id, 1)
    aws.inject_fault("CreateTrainingJob", "InternalFailure", count=-1, status=500)
    with pytest.raises(ClientError, match="InternalFailure"):
        run_kit.handle(event)
    aws.clear_faults()
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]
    retried = run_kit.handle(event)
    assert decision(retried) == spec.CONTINUE and retried["decision"]["newest_step"] == 20
    assert run_kit.jobs(run_id) == [seg(run_id, 1), seg(run_id, 2)]
    assert decision(run_kit.handle(event)) == spec.STALE_EVENT


def test_a_run_stopped_between_segments_starts_none(aws, submit, run_kit, runtime, clients, config):
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 20)
    event = end_segment(aws, run_kit, run_id, 1)
    stopped = runtime.actions.dispatch({"action": "stop", "run_id": run_id}, clients=clients, config=config)
    assert stopped["status"] == "stopped" and stopped["changed"] is True
    assert decision(run_kit.handle(event)) == spec.STALE_EVENT  # the run ended with the stop
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]


def test_a_stop_landing_while_the_next_segment_is_submitted_stops_that_segment(
    aws, submit, run_kit, runtime, clients, config, monkeypatch
):
    """The stop arrives after the continuation checked for it and before its CreateTrainingJob: the stop
    sees no segment running and ends the run, so the continuation stops the segment it just made."""
    from platform_constructs.submitter.runtime import continuation, service

    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 20)
    event = end_segment(aws, run_kit, run_id, 1)

    def submit_after_a_stop(*args, **kwargs):
        stopped = runtime.actions.dispatch({"action": "stop", "run_id": run_id}, clients=clients, config=config)
        assert stopped["status"] == "stopped", stopped  # no segment ran when it looked
        return service.submit_segment(*args, **kwargs)

    monkeypatch.setattr(continuation, "submit_segment", submit_after_a_stop)
    answer = run_kit.handle(event)
    assert decision(answer) == spec.CONTINUE and answer["decision"]["stopped_on_start"] is True
    assert aws.describe_training_job(seg(run_id, 2))["TrainingJobStatus"] in ("Stopping", "Stopped")
    view = runtime.actions.dispatch({"action": "describe", "run_id": run_id}, clients=clients, config=config)
    assert view["run"]["state"] == spec.STOPPED


def test_a_stop_that_read_the_run_before_its_segment_was_decided_still_stops_the_segment(
    aws, submit, run_kit, runtime, clients, config, monkeypatch
):
    """The stop reads the run (no decision yet), then a whole continuation runs (decides segment 1 and
    submits segment 2, before the stop's marker exists), then the marker is written: the stop reads the
    run again and stops segment 2 rather than answering ``stopped`` over a running segment."""
    from platform_constructs.submitter.runtime import runs

    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 20)
    event = end_segment(aws, run_kit, run_id, 1)
    real_load = runs.load_run
    first_read = []

    def load_then_continue(store, wanted):
        state = real_load(store, wanted)
        if wanted == run_id and not first_read:
            first_read.append(state)
            assert decision(run_kit.handle(event)) == spec.CONTINUE
        return state

    monkeypatch.setattr(runs, "load_run", load_then_continue)
    stopping = runtime.actions.dispatch({"action": "stop", "run_id": run_id}, clients=clients, config=config)
    monkeypatch.setattr(runs, "load_run", real_load)
    assert first_read and first_read[0].decisions == {}
    assert stopping["status"] == "stopping" and stopping["training_job_name"] == seg(run_id, 2), stopping
    assert aws.describe_training_job(seg(run_id, 2))["TrainingJobStatus"] == "Stopping"


def test_a_decision_record_cut_short_is_a_retriable_fault_that_starts_nothing(
    aws, submit, run_kit, runtime, config, continuation_clients
):
    """Strict reading in the continuation: a damaged decision record raises the ledger's error naming it (the
    invocation fails and EventBridge retries), and no segment is submitted while it stands."""
    run_id = new_run_id()
    start_run(submit, run_kit, run_id)
    run_kit.checkpoint(run_id, 20)
    event = end_segment(aws, run_kit, run_id, 1)
    key = f"submitter/runs/{run_id}/decisions/seg-001.json"
    s3 = continuation_clients.s3  # the continuation writes decision records, and only it may
    s3.put_object(Bucket=config.output_bucket, Key=key, Body=b'{"schema": 1, "decis')
    with pytest.raises(runtime.errors.IdempotencyRecordError, match=f"s3://{config.output_bucket}/{key} is not JSON"):
        run_kit.handle(event)
    assert run_kit.jobs(run_id) == [seg(run_id, 1)]
    aws.remove_object(config.output_bucket, key)  # an operator's repair: no role may delete a decision record
    assert decision(run_kit.handle(event)) == spec.CONTINUE  # once the record is gone, the event is decided
