"""Runs' pure facts: segment names, the run field, the checkpoint layout read from keys, and the decision."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from platform_spec import checkpoint_layout as layout
from platform_spec import health, runs
from platform_spec.capacity import CAPACITY_BLOCK_ENDED_REASON, STOP_MARGIN_S
from platform_spec.errors import FieldError

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
RUN = runs.RunSpec("r1")


def test_segment_names_are_training_job_names_and_round_trip():
    longest = "a" + "b" * 47
    assert runs.segment_job_name("r1", 1) == "r1-seg-001"
    assert runs.segment_job_name(longest, runs.MAX_SEGMENTS) == f"{longest}-seg-999"
    assert len(runs.segment_job_name(longest, 999)) == 56 <= 63
    assert runs.parse_segment_job_name("my-seg-run-seg-012") == ("my-seg-run", 12)
    for name in ("r1-seg-000", "r1-seg-12", "R1-seg-001", "r1-seg-0001", "job-1"):
        assert runs.parse_segment_job_name(name) is None, name
    assert runs.segment_client_token("a-seg-b", 3) == "run:a-seg-b:seg-003"
    for bad in ("", "1abc", "Abc", "a_b", "a" * 49):
        with pytest.raises(ValueError, match="run_id"):
            runs.segment_job_name(bad, 1)
    with pytest.raises(ValueError, match="segment index"):
        runs.segment_job_name("r1", 1000)
    assert runs.run_checkpoint_prefix("r1") == "run-checkpoints/r1/"
    assert not runs.run_checkpoint_prefix("r1").startswith("checkpoints/")


def test_parse_run_normalises_and_names_the_bad_key():
    spec, canonical = runs.parse_run({"run_id": "r1", "deadline": "2026-03-02T14:00:00+02:00", "max_segments": 3.0})
    assert spec == runs.RunSpec("r1", 3, NOW, None)
    assert canonical == {"run_id": "r1", "max_segments": 3, "deadline": "2026-03-02T12:00:00Z"}
    assert spec.min_segment_s == runs.DEFAULT_MIN_SEGMENT_MINUTES * 60
    short, canonical = runs.parse_run({"run_id": "r1", "min_segment_minutes": 2})
    assert short.min_segment_s == 120 and canonical == {"run_id": "r1", "min_segment_minutes": 2.0}
    cases = [
        ({}, "run.run_id"),
        ({"run_id": "R1"}, "run.run_id"),
        ({"run_id": "r1", "max_segments": 0}, "run.max_segments"),
        ({"run_id": "r1", "max_segments": True}, "run.max_segments"),
        ({"run_id": "r1", "deadline": "2026-03-02T12:00:00"}, "run.deadline"),  # no time zone
        ({"run_id": "r1", "deadline": "tomorrow"}, "run.deadline"),
        ({"run_id": "r1", "max_instance_hours": 0}, "run.max_instance_hours"),
        ({"run_id": "r1", "max_instance_hours": float("nan")}, "run.max_instance_hours"),
        ({"run_id": "r1", "segments": 3}, "run.segments"),
        ({"run_id": "r1", "min_segment_minutes": 0}, "run.min_segment_minutes"),
        ({"run_id": "r1", "min_segment_minutes": "5"}, "run.min_segment_minutes"),
        ({"run_id": "r1", "min_segment_minutes": float("inf")}, "run.min_segment_minutes"),
    ]
    for raw, field in cases:
        with pytest.raises(FieldError) as caught:
            runs.parse_run(raw)
        assert caught.value.field == field, raw


def test_newest_complete_step_counts_only_markers_of_checkpoint_folders():
    keys = [
        "step-10/.complete",
        "step-10/trainer_state.json",
        "step-30/trainer_state.json",  # no marker: a save cut short
        "step-020/.complete",  # not a name the trainer writes
        "step-25/sub/.complete",  # a marker deeper down
        "/step-20/.complete",
    ]
    assert layout.complete_steps_of_keys(keys) == [10, 20]
    assert layout.newest_complete_step(keys) == 20
    assert layout.newest_complete_step([]) is None


def test_read_trainer_state_refuses_foreign_and_damaged_files():
    good = {"step": 6, "data": {"step": 6, "samples_consumed": 48}, "run": {"hyperparameters": {"seq_length": "128"}}}
    state = layout.read_trainer_state(json.dumps(good).encode(), 6)
    assert state == layout.StepState(6, 48, 128) and state.tokens == 48 * 128
    assert "says step 5" in layout.read_trainer_state(b'{"step": 5}', 6)
    assert "not readable JSON" in layout.read_trainer_state(b'{"step": 6', 6)
    assert "expected an object" in layout.read_trainer_state(b"[6]", 6)
    assert "no integer 'step'" in layout.read_trainer_state(b'{"step": true}', 6)
    assert layout.read_trainer_state(b'{"step": 6}', 6) == layout.StepState(6)


def test_the_stop_margin_has_one_home():
    import training.environment as environment

    assert environment.STOP_MARGIN_S is STOP_MARGIN_S
    reason = environment.capacity_block_ended_reason(1_000.0, 900.0, STOP_MARGIN_S)
    assert reason.startswith(CAPACITY_BLOCK_ENDED_REASON)


def _decide(outcome: runs.SegmentOutcome, **overrides):
    values = {
        "spec": RUN,
        "newest_segment": outcome.index,
        "already_decided": False,
        "stop_requested": False,
        "newest_step": 50,
        "start_step": None,
        "capacity_failures_before": 0,
        "max_steps": 100,
        "instance_hours": 1.0,
        "now": NOW,
    }
    values.update(overrides)
    return runs.decide(outcome, **values)


@pytest.mark.parametrize(
    ("outcome", "overrides", "decision"),
    [
        (runs.SegmentOutcome(1, "Completed"), {}, runs.CONTINUE),
        (runs.SegmentOutcome(1, "Completed"), {"newest_step": 100}, runs.FINISHED),
        (runs.SegmentOutcome(1, "Stopped", "Stopped"), {"newest_step": 120}, runs.FINISHED),
        (runs.SegmentOutcome(1, "Failed", "Failed", "AlgorithmError: exporting"), {"newest_step": 100}, runs.FAILED),
        (runs.SegmentOutcome(1, "Completed"), {"stop_requested": True}, runs.STOPPED),
        (runs.SegmentOutcome(1, "Stopped", "Stopped"), {}, runs.STOPPED),
        (runs.SegmentOutcome(1, "Stopped", "MaxWaitTimeExceeded"), {}, runs.CONTINUE),
        (runs.SegmentOutcome(1, "Stopped", "MaxRuntimeExceeded"), {}, runs.CONTINUE),
        (runs.SegmentOutcome(1, "Stopped", "Interrupted"), {}, runs.CONTINUE),
        (runs.SegmentOutcome(1, "Failed", "Failed", "AlgorithmError: ZeroDivisionError"), {}, runs.FAILED),
        (runs.SegmentOutcome(1, "Failed", "Failed", "InsufficientCapacityError: pending 2 days"), {}, runs.CONTINUE),
        (
            runs.SegmentOutcome(
                1, "Failed", "Failed", "CapacityError: Unable to provision requested ML compute capacity"
            ),
            {},
            runs.CONTINUE,
        ),
        # SageMaker's failure type heads the reason: a code failure that mentions capacity is a code failure
        (
            runs.SegmentOutcome(1, "Failed", "Failed", "AlgorithmError: raise InsufficientCapacityError()"),
            {},
            runs.FAILED,
        ),
        (runs.SegmentOutcome(1, "Failed", "Failed", "ClientError: no CapacityError here"), {}, runs.FAILED),
        (runs.SegmentOutcome(1, "Failed", "Failed", "AlgorithmError: CapacityError: from user code"), {}, runs.FAILED),
        # never got to train: no progress is not held against it
        (
            runs.SegmentOutcome(2, "Failed", "Failed", f"{CAPACITY_BLOCK_ENDED_REASON}: reclaimed"),
            {"newest_step": 50, "start_step": 50},
            runs.CONTINUE,
        ),
        (  # the trainer's report as SageMaker carries it
            runs.SegmentOutcome(2, "Failed", "Failed", f"AlgorithmError: {CAPACITY_BLOCK_ENDED_REASON}: reclaimed"),
            {"newest_step": 50, "start_step": 50},
            runs.CONTINUE,
        ),
        (runs.SegmentOutcome(2, "Completed"), {"newest_step": 50, "start_step": 50}, runs.NO_PROGRESS),
        (runs.SegmentOutcome(1, "Completed"), {"newest_step": None}, runs.NO_PROGRESS),
        (runs.SegmentOutcome(2, "Completed"), {"spec": runs.RunSpec("r1", max_segments=2)}, runs.BUDGET_SEGMENTS),
        (runs.SegmentOutcome(1, "Completed"), {"spec": runs.RunSpec("r1", deadline=NOW)}, runs.BUDGET_DEADLINE),
        (
            runs.SegmentOutcome(1, "Completed"),
            {"spec": runs.RunSpec("r1", max_instance_hours=1.0)},
            runs.BUDGET_INSTANCE_HOURS,
        ),
        (runs.SegmentOutcome(1, "Completed"), {"spec": runs.RunSpec("r1", deadline=NOW + timedelta(1))}, runs.CONTINUE),
        (runs.SegmentOutcome(1, "Completed"), {"newest_segment": 2}, runs.STALE_EVENT),
        (runs.SegmentOutcome(1, "Completed"), {"already_decided": True}, runs.STALE_EVENT),
        (runs.SegmentOutcome(1, "InProgress", "Training"), {}, runs.STALE_EVENT),
        (runs.SegmentOutcome(999, "Completed"), {}, runs.BUDGET_SEGMENTS),  # no segment 1000
    ],
)
def test_decide(outcome, overrides, decision):
    got = _decide(outcome, **overrides)
    assert got.decision == decision, got.reason
    assert got.reason


STATUSES = st.sampled_from(["InProgress", "Stopping", "Completed", "Failed", "Stopped"])
SECONDARY = st.sampled_from([None, "Stopped", "MaxRuntimeExceeded", "MaxWaitTimeExceeded", "Interrupted", "Failed"])
REASONS = st.sampled_from([None, "AlgorithmError: boom", "InsufficientCapacityError", CAPACITY_BLOCK_ENDED_REASON])
STEPS = st.one_of(st.none(), st.integers(0, 300))


@given(
    status=STATUSES,
    secondary=SECONDARY,
    reason=REASONS,
    newest=STEPS,
    start=STEPS,
    max_steps=st.integers(1, 200),
    stop=st.booleans(),
    segments=st.integers(1, 20),
    failures=st.integers(0, 2 * runs.MAX_CAPACITY_FAILURES),
)
def test_never_continue_at_or_past_max_steps(
    status, secondary, reason, newest, start, max_steps, stop, segments, failures
):
    outcome = runs.SegmentOutcome(segments, status, secondary, reason)
    got = _decide(
        outcome,
        newest_step=newest,
        start_step=start,
        max_steps=max_steps,
        stop_requested=stop,
        capacity_failures_before=failures,
    )
    assert got.decision in runs.DECISIONS
    if newest is not None and newest >= max_steps:
        assert got.decision != runs.CONTINUE
    if got.decision == runs.CONTINUE:
        assert outcome.ended and not stop
        assert got.capacity_failures < runs.MAX_CAPACITY_FAILURES
        assert got.capacity_failures in (0, failures + 1)  # reset by a segment that trained, else one more


@given(
    events=st.lists(
        st.tuples(st.integers(1, 6), st.sampled_from(["Completed", "InProgress", "Stopped"])), min_size=1, max_size=30
    ),
    steps=st.lists(st.integers(0, 40), min_size=7, max_size=7),
)
def test_never_two_segments(events, steps):
    """Events of any segment, in any order, duplicated: each decided against the recorded decisions (as
    the store does) continues a segment at most once, so segment ``i + 1`` is started at most once."""
    newest, decided, started = 1, set(), []
    for index, status in events:
        if index > newest:
            continue  # no event for a segment that does not exist
        got = _decide(
            runs.SegmentOutcome(index, status),
            newest_segment=newest,
            already_decided=index in decided,
            newest_step=steps[index],
            start_step=steps[index - 1] if index > 1 else None,
            max_steps=35,
        )
        if got.decision != runs.STALE_EVENT:
            decided.add(index)
        if got.decision == runs.CONTINUE:
            started.append(index + 1)
            newest = index + 1
    assert len(started) == len(set(started))
    assert started == sorted(started)


CAPACITY_FAILURE = runs.SegmentOutcome(
    3, "Failed", "Failed", runs.failure_reason(runs.CAPACITY_ERROR, "Unable to provision requested ML compute capacity")
)


def test_capacity_backoff_doubles_from_its_base_to_its_ceiling():
    waits = [runs.capacity_backoff_s(n) for n in range(8)]
    assert waits == [0, 300, 600, 1200, 2400, 3600, 3600, 3600]
    assert runs.capacity_backoff_s(10**6) == runs.CAPACITY_BACKOFF_CEILING_S  # no overflow
    with pytest.raises(ValueError, match="failures -1"):
        runs.capacity_backoff_s(-1)


def test_consecutive_capacity_failures_count_and_back_off_until_the_cap_ends_the_run():
    before, waits = 0, []
    for _ in range(runs.MAX_CAPACITY_FAILURES - 1):
        got = _decide(CAPACITY_FAILURE, capacity_failures_before=before, newest_step=40, start_step=40)
        assert got.decision == runs.CONTINUE and got.capacity_failures == before + 1, got
        assert runs.format_time(NOW + timedelta(seconds=got.backoff_s)) in got.reason
        waits.append(got.backoff_s)
        before = got.capacity_failures
    assert waits == [300, 600, 1200, 2400, 3600]
    ended = _decide(CAPACITY_FAILURE, capacity_failures_before=before, newest_step=40, start_step=40)
    assert ended.decision == runs.NO_PROGRESS and ended.terminal
    assert ended.capacity_failures == runs.MAX_CAPACITY_FAILURES and ended.backoff_s == 0
    assert f"the {runs.MAX_CAPACITY_FAILURES}th segment in a row that never trained" in ended.reason
    assert "CapacityError: Unable to provision" in ended.reason  # the last failure


def test_a_segment_that_trained_resets_the_count():
    got = _decide(runs.SegmentOutcome(3, "Completed"), capacity_failures_before=4, newest_step=60, start_step=40)
    assert (got.decision, got.capacity_failures, got.backoff_s) == (runs.CONTINUE, 0, 0)
    assert "no earlier than" not in got.reason


def test_a_backoff_past_the_deadline_ends_the_run_now():
    spec = runs.RunSpec("r1", deadline=NOW + timedelta(seconds=599))
    got = _decide(CAPACITY_FAILURE, spec=spec, capacity_failures_before=1)  # the wait would be 600 s
    assert got.decision == runs.BUDGET_DEADLINE and "not before the run's deadline" in got.reason, got
    roomy = runs.RunSpec("r1", deadline=NOW + timedelta(seconds=601))
    assert _decide(CAPACITY_FAILURE, spec=roomy, capacity_failures_before=1).decision == runs.CONTINUE


def test_the_budget_and_the_cap_still_apply_to_capacity_failures():
    spent = _decide(CAPACITY_FAILURE, spec=runs.RunSpec("r1", max_segments=3))
    assert spent.decision == runs.BUDGET_SEGMENTS and spent.capacity_failures == 1
    # a code failure is not a capacity failure, whatever its message says: it ends the run without counting
    code = runs.SegmentOutcome(3, "Failed", "Failed", runs.failure_reason(runs.ALGORITHM_ERROR, "CapacityError: x"))
    got = _decide(code, capacity_failures_before=runs.MAX_CAPACITY_FAILURES - 1)
    assert got.decision == runs.FAILED and got.capacity_failures == 0


def _runtime(spec: runs.RunSpec, *, count: int = 1, used: float = 0.0, starts: datetime = NOW, max_s: int = 86400):
    return runs.segment_runtime(
        spec, max_runtime_s=max_s, instance_count=count, instance_hours=used, starts=starts, least_runtime_s=1
    )


def test_the_issues_dry_run_is_refused_by_the_budget_it_breaks():
    """Issue 24: 8 instances, max_runtime_hours 24, a deadline 10 minutes away and max_instance_hours 1 was validated
    with MaxRuntimeInSeconds 86400. 1 instance-hour over 8 instances is 7.5 min, below the deadline's 10."""
    spec = runs.RunSpec("r1", deadline=NOW + timedelta(minutes=10), max_instance_hours=1.0)
    got = _runtime(spec, count=8)
    assert got.seconds == 0 and got.bound_by == "run.max_instance_hours"
    assert got.ended is not None and got.ended.decision == runs.BUDGET_INSTANCE_HOURS
    assert "7.5 min" in got.reason and "35 min" in got.reason
    deadline_only = _runtime(runs.RunSpec("r1", deadline=NOW + timedelta(minutes=10)), count=8)
    assert deadline_only.ended is not None and deadline_only.ended.decision == runs.BUDGET_DEADLINE


@pytest.mark.parametrize(
    ("spec", "count", "used", "starts", "seconds", "bound_by"),
    [
        (runs.RunSpec("r1"), 8, 0.0, NOW, 86400, "max_runtime_hours"),
        (
            runs.RunSpec("r1", deadline=NOW + timedelta(hours=2), max_instance_hours=100),
            8,
            0.0,
            NOW,
            7200,
            "run.deadline",
        ),
        (runs.RunSpec("r1", max_instance_hours=10), 2, 6.0, NOW, 7200, "run.max_instance_hours"),  # 4 h left / 2
        (runs.RunSpec("r1", max_instance_hours=10), 2, 6.0001, NOW, 7199, "run.max_instance_hours"),  # rounded down
        # a plan block the segment waits for: the deadline counts from its start
        (runs.RunSpec("r1", deadline=NOW + timedelta(hours=3)), 1, 0.0, NOW + timedelta(hours=2), 3600, "run.deadline"),
        (runs.RunSpec("r1", deadline=NOW + timedelta(days=2)), 1, 0.0, NOW, 86400, "max_runtime_hours"),  # tie-free
        (runs.RunSpec("r1", deadline=NOW + timedelta(hours=24)), 1, 0.0, NOW, 86400, "max_runtime_hours"),  # a tie
    ],
)
def test_a_segment_runs_the_least_of_its_three_bounds(spec, count, used, starts, seconds, bound_by):
    got = _runtime(spec, count=count, used=used, starts=starts)
    assert (got.seconds, got.bound_by, got.ended) == (seconds, bound_by, None)


def test_the_segment_floor_is_the_stop_margin_plus_min_segment_minutes_at_least_sagemakers_least():
    spec = runs.RunSpec("r1", deadline=NOW + timedelta(seconds=STOP_MARGIN_S + 60), min_segment_minutes=1)
    assert runs.segment_floor_s(spec, 1) == STOP_MARGIN_S + 60
    assert runs.segment_floor_s(spec, 10_000) == 10_000  # SageMaker's least, were it larger
    assert _runtime(spec).seconds == STOP_MARGIN_S + 60  # exactly the floor: allowed
    late = _runtime(spec, starts=NOW + timedelta(seconds=1))
    assert late.ended is not None and late.ended.decision == runs.BUDGET_DEADLINE and late.seconds == 0
    past = _runtime(runs.RunSpec("r1", deadline=NOW - timedelta(hours=1)))
    assert past.ended is not None and past.until_deadline_s == 0
    spent = _runtime(runs.RunSpec("r1", max_instance_hours=1), used=1.5)  # already over: negative left
    assert spent.ended is not None and spent.ended.decision == runs.BUDGET_INSTANCE_HOURS
    # the request's own max_runtime_hours is never refused here, however short
    assert _runtime(runs.RunSpec("r1", max_instance_hours=100), max_s=60).seconds == 60


def test_continuable_decisions_are_terminal_and_exclude_finished_and_failed():
    assert set(runs.CONTINUABLE_DECISIONS) <= set(runs.TERMINAL_DECISIONS)
    assert set(runs.TERMINAL_DECISIONS) - set(runs.CONTINUABLE_DECISIONS) == {runs.FINISHED, runs.FAILED}


# -- hangs (issue 27): the trainer's failure reports and the platform's stall stop ----------------------------

STALL = "its newest step (40) was logged at 2026-03-02T11:20:00Z, 40.0 min before 2026-03-02T12:00:00Z, over stall_minutes 30"


def _failed_with(report: str) -> runs.SegmentOutcome:
    return runs.SegmentOutcome(2, "Failed", "Failed", runs.failure_reason(runs.ALGORITHM_ERROR, report))


def test_a_segment_stopped_for_a_stall_continues_and_says_how_old_its_step_was():
    decision = _decide(runs.SegmentOutcome(2, "Stopped", "Stopped"), stalled=STALL, start_step=20)
    assert decision.decision == runs.CONTINUE and decision.capacity_failures == 0
    assert decision.reason.startswith(health.STALL_STOP_REASON) and "40.0 min" in decision.reason
    # the same end without the platform's record is a caller's stop
    assert _decide(runs.SegmentOutcome(2, "Stopped", "Stopped"), start_step=20).decision == runs.STOPPED
    # a stop requested for the run wins over the stall; so does max_steps reached
    assert _decide(runs.SegmentOutcome(2, "Stopped", "Stopped"), stalled=STALL, stop_requested=True).decision == (
        runs.STOPPED
    )
    assert _decide(runs.SegmentOutcome(2, "Stopped", "Stopped"), stalled=STALL, newest_step=100).decision == (
        runs.FINISHED
    )


def test_a_hang_that_made_no_progress_ends_the_run_no_progress_and_the_budget_still_bounds_it():
    stalled = _decide(runs.SegmentOutcome(2, "Stopped", "Stopped"), stalled=STALL, start_step=50)
    assert stalled.decision == runs.NO_PROGRESS and stalled.reason.startswith(health.STALL_STOP_REASON)
    hang = _failed_with(f"{health.HANG_REASON}: waited 900 s after step 50")
    assert _decide(hang, start_step=50).decision == runs.NO_PROGRESS
    assert _decide(hang, start_step=None, newest_step=None).decision == runs.NO_PROGRESS  # nothing saved
    spent = _decide(hang, start_step=20, spec=runs.RunSpec("r1", max_segments=2))
    assert spent.decision == runs.BUDGET_SEGMENTS


def test_the_trainers_hang_report_continues_its_non_finite_and_preflight_reports_fail_naming_which():
    hang = _decide(_failed_with(f"{health.HANG_REASON}: waited 900 s after step 40"), start_step=20)
    assert hang.decision == runs.CONTINUE and "watchdog" in hang.reason and hang.capacity_failures == 0
    long = _decide(_failed_with(f"{health.HANG_REASON}: " + "slowest " * 40 + "steps"), start_step=20)
    assert "slowest slowest...)" in long.reason and "slowe...)" not in long.reason  # a long report is cut after a word
    for report, named in (
        (f"{health.NON_FINITE_REASON}: step 41 loss nan", "non-finite values"),
        (f"{health.PREFLIGHT_REASON}: NCCL uses Socket, not EFA", "pre-flight check failed"),
    ):
        decision = _decide(_failed_with(report), start_step=20)
        assert decision.decision == runs.FAILED and named in decision.reason and report in decision.reason
    # the phrase counts only as the trainer's report (after AlgorithmError:), at its head
    assert _decide(runs.SegmentOutcome(2, "Failed", None, f"InternalServerError: {health.HANG_REASON}")).decision == (
        runs.FAILED
    )
    assert _decide(_failed_with(f"oops: {health.HANG_REASON}"), start_step=20).decision == runs.FAILED
    assert runs.trainer_report("AlgorithmError:  boom ") == "boom" and runs.trainer_report("CapacityError: x") == ""


def test_the_stall_rule_counts_from_the_newest_step_else_from_training():
    began, step_at = NOW - timedelta(minutes=50), NOW - timedelta(minutes=12)
    assert health.stall_age_s(newest_step_at=step_at, training_since=began, now=NOW) == 12 * 60
    assert health.stall_age_s(newest_step_at=None, training_since=began, now=NOW) == 50 * 60
    assert health.stall_age_s(newest_step_at=None, training_since=None, now=NOW) is None
    assert health.stall_age_s(newest_step_at=NOW + timedelta(seconds=5), training_since=began, now=NOW) == 0.0
    assert health.is_stalled(12 * 60 + 1, 12) and not health.is_stalled(12 * 60, 12)
    assert not health.is_stalled(10**9, 0) and not health.is_stalled(None, 10)  # 0: off


def test_a_failed_infrastructure_health_check_is_a_capacity_failure_that_never_trained():
    """SageMaker's check (``InfraCheckConfig``) failed the instances before the trainer started: the next segment,
    on new instances, waits out the capacity backoff; the count of segments that never trained grows and caps the
    run; the segment is not held to ``no-progress`` (it started from step 40 and left it there)."""
    failed = runs.SegmentOutcome(
        2, "Failed", "Failed", runs.failure_reason(health.INFRA_CHECK_ERROR, "instance i-0abc failed the check")
    )
    assert runs.never_trained(failed.failure_reason or "")
    got = _decide(failed, newest_step=40, start_step=40, capacity_failures_before=1)
    assert (got.decision, got.capacity_failures, got.backoff_s) == (runs.CONTINUE, 2, 600), got
    assert "InfraCheckError: instance i-0abc failed the check" in got.reason
    capped = _decide(failed, newest_step=40, start_step=40, capacity_failures_before=runs.MAX_CAPACITY_FAILURES - 1)
    assert capped.decision == runs.NO_PROGRESS and capped.capacity_failures == runs.MAX_CAPACITY_FAILURES
    # the type heads the reason: a trainer's report that names it is the code's failure
    code = runs.SegmentOutcome(2, "Failed", "Failed", f"AlgorithmError: {health.INFRA_CHECK_ERROR}: from user code")
    assert _decide(code).decision == runs.FAILED
