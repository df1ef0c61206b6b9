"""Capacity choice: plans that can start a job now first, blocks judged one by one, the reclaim
time, the 2-day Pending limit, and plan ARNs from another region or account refused.

Two halves: :func:`judge_plan`'s edges on hand-built ``DescribeTrainingPlan`` answers
(validated against botocore's model, at a fixed clock), then the issue's examples end
to end against an emulator of their own (``CAPACITY_PLANS``; each test lists the plans it
judges in that emulator's plan-ARN parameter, the stack's, which the submitter's role may read).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from devtools.local_aws.client import LocalAws
from devtools.local_aws.shapes import operation_model, validate_input, validate_shape
from devtools.local_aws.stack import ACCOUNT_ID
from platform_spec.capacity import CAPACITY_BLOCK_RECLAIM_S, PENDING_LIMIT_S

pytestmark = pytest.mark.xdist_group("capacity")

B200 = "ml.p6-b200.48xlarge"
P5 = "ml.p5.48xlarge"
REGION = "us-east-1"
OTHER_ACCOUNT = "999999999999"
NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def arn(name: str, *, region: str = REGION, account: str = ACCOUNT_ID) -> str:
    return f"arn:aws:sagemaker:{region}:{account}:training-plan/{name}"


# --- judge_plan on hand-built descriptions ------------------------------------------------------


def describe(
    name: str, *blocks: tuple, status: str = "Active", available: int | None = None, targets=("training-job",)
) -> dict[str, Any]:
    """A ``DescribeTrainingPlan`` answer at :data:`NOW`; ``blocks``: ``(start_h, end_h, total[, type[, status]])``."""
    summaries = []
    for number, (start_h, end_h, total, *rest) in enumerate(blocks):
        start, end = NOW + start_h * HOUR, NOW + end_h * HOUR
        summaries.append(
            {
                "ReservedCapacityArn": f"arn:aws:sagemaker:{REGION}:{ACCOUNT_ID}:reserved-capacity/rc-{name}-{number}",
                "ReservedCapacityType": "Instance",
                "InstanceType": rest[0] if rest else B200,
                "TotalInstanceCount": total,
                "Status": rest[1] if len(rest) > 1 else ("Active" if start <= NOW < end else "Scheduled"),
                "StartTime": start,
                "EndTime": end,
            }
        )
    total = max(b[2] for b in blocks)
    description = {
        "TrainingPlanArn": arn(name),
        "TrainingPlanName": name,
        "Status": status,
        "StartTime": min(s["StartTime"] for s in summaries),
        "EndTime": max(s["EndTime"] for s in summaries),
        "TotalInstanceCount": total,
        "AvailableInstanceCount": total if available is None else available,
        "InUseInstanceCount": 0,
        "TargetResources": list(targets),
        "ReservedCapacitySummaries": summaries,
    }
    shape = operation_model("sagemaker", "DescribeTrainingPlan").output_shape
    assert validate_shape(description, shape, name) == []  # the shape SageMaker answers with
    return description


@pytest.fixture(scope="module")
def unit_config(runtime):
    return runtime.config.SubmitterConfig(
        trainer_image_uris={"amd64": f"{ACCOUNT_ID}.dkr.ecr.{REGION}.amazonaws.com/trainer:1"},
        execution_role_arn=f"arn:aws:iam::{ACCOUNT_ID}:role/exec",
        data_bucket="data",
        checkpoint_bucket="ckpt",
        output_bucket="out",
        output_kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f",
        training_plan_arns_parameter="/plans",
        region=REGION,
        account_id=ACCOUNT_ID,
    )


@pytest.fixture(scope="module")
def request_for(runtime, unit_config):
    def _request(**fields: Any):
        event = {"hyperparameters": {"synthetic_data": True}, **fields}
        return runtime.request.parse_request(event, unit_config)

    return _request


def test_the_block_covering_the_job_is_judged_not_the_plans_outer_times(runtime, request_for):
    # active block ends in 6 h; the next starts in 2 d: the plan spans 9 days, the job's block 6 h
    gapped = describe("gapped", (-24, 6, 4), (48, 9 * 24, 4))
    verdict = runtime.capacity.judge_plan(arn("gapped"), gapped, request_for(max_runtime_hours=24), NOW)
    assert verdict.eligible is False
    block_end = (NOW + 6 * HOUR).isoformat()
    assert (
        f"to {block_end}: instances are reclaimed 30 min before it ends, 5.5 h after the job could start"
        in verdict.reason
    )
    assert "request needs max_runtime_hours=24" in verdict.reason
    assert f"its next block starts {(NOW + 48 * HOUR).isoformat()}" in verdict.reason

    short_job = runtime.capacity.judge_plan(arn("gapped"), gapped, request_for(max_runtime_hours=5), NOW)
    assert short_job.eligible and short_job.starts_now and short_job.start_time == NOW
    assert short_job.usable_end == NOW + 6 * HOUR - timedelta(seconds=CAPACITY_BLOCK_RECLAIM_S)


def test_between_blocks_the_job_waits_for_the_next_one(runtime, request_for):
    in_gap = describe("in-gap", (-72, -24, 4), (24, 8 * 24, 4), status="Scheduled")
    verdict = runtime.capacity.judge_plan(arn("in-gap"), in_gap, request_for(max_runtime_hours=24), NOW)
    assert verdict.eligible and not verdict.starts_now
    assert verdict.start_time == NOW + 24 * HOUR
    assert verdict.reason.startswith(f"scheduled: its block starts {(NOW + 24 * HOUR).isoformat()} (24.0 h from now")


def test_each_block_has_its_own_instance_count(runtime, request_for):
    # 1 instance now, 8 from the next block on: a 4-instance job cannot start in this block, and the
    # next one starts in 3 days, past the Pending limit (the reason names both; it named the first only)
    small_then_big = describe("small-then-big", (-24, 72, 1), (72, 10 * 24, 8), available=8)
    verdict = runtime.capacity.judge_plan(arn("small-then-big"), small_then_big, request_for(instance_count=4), NOW)
    assert verdict.eligible is False
    assert verdict.reason == (
        f"1 instance(s) available, request needs 4; its next {B200} block starts {(NOW + 72 * HOUR).isoformat()}, "
        "3.0 days from now; SageMaker ends a job that waits Pending on a plan for more than 2 days "
        "(InsufficientCapacityError)"
    )


def test_a_job_waits_for_the_first_block_with_its_instances(runtime, request_for):
    """Review finding: a Scheduled plan whose first block is too small was refused although its next
    block, within the Pending limit, fits. The job's block is the first with enough instances."""
    grow = describe("grow", (1, 30, 1), (31, 5 * 24, 4), status="Scheduled", available=4)
    verdict = runtime.capacity.judge_plan(arn("grow"), grow, request_for(instance_count=2, max_runtime_hours=24), NOW)
    assert verdict.eligible is True, verdict.reason
    assert not verdict.starts_now and verdict.start_time == NOW + 31 * HOUR
    assert verdict.usable_end == NOW + 5 * 24 * HOUR - timedelta(seconds=CAPACITY_BLOCK_RECLAIM_S)
    assert verdict.reason.startswith(f"scheduled: its block starts {(NOW + 31 * HOUR).isoformat()} (31.0 h from now")
    assert (
        f"it cannot start in an earlier block: 1 instance(s) available in its block {(NOW + HOUR).isoformat()}"
        in verdict.reason
    )
    # one instance fits the first block: the job starts there
    first = runtime.capacity.judge_plan(arn("grow"), grow, request_for(instance_count=1, max_runtime_hours=24), NOW)
    assert first.eligible and first.start_time == NOW + HOUR


def test_available_instances_bound_the_active_block_only(runtime, request_for):
    """AvailableInstanceCount describes the plan now: 0 free in the active block does not make the
    next block (which starts with all 4 of its instances) look full."""
    busy = describe("busy-now", (-24, 12, 4), (20, 4 * 24, 4), available=0)
    verdict = runtime.capacity.judge_plan(
        arn("busy-now"), busy, request_for(instance_count=2, max_runtime_hours=24), NOW
    )
    assert verdict.eligible and not verdict.starts_now and verdict.start_time == NOW + 20 * HOUR, verdict.reason
    assert "it cannot start in an earlier block: 0 instance(s) available, request needs 2" in verdict.reason


def test_a_block_with_the_instances_but_too_little_time_is_not_skipped_for_a_later_one(runtime, request_for):
    """SageMaker starts a waiting job as soon as a block has its instances: the job would start in the
    short block and be reclaimed, so the plan is refused rather than assumed to wait for the long one."""
    short_then_long = describe("short-then-long", (2, 8, 2), (12, 5 * 24, 2), status="Scheduled")
    verdict = runtime.capacity.judge_plan(
        arn("short-then-long"), short_then_long, request_for(max_runtime_hours=24), NOW
    )
    assert verdict.eligible is False
    assert verdict.reason.startswith(
        f"block {(NOW + 2 * HOUR).isoformat()} to {(NOW + 8 * HOUR).isoformat()}: instances are reclaimed"
    )
    assert f"its next block starts {(NOW + 12 * HOUR).isoformat()}" in verdict.reason


def test_blocks_of_other_types_and_expired_blocks_are_not_used(runtime, request_for):
    mixed = describe("mixed", (-24, 48, 4, P5), (-48, 96, 2, B200, "Expired"))
    verdict = runtime.capacity.judge_plan(arn("mixed"), mixed, request_for(), NOW)
    assert verdict.eligible is False
    assert verdict.reason == f"no {B200} block is Active or Scheduled"
    p5 = runtime.capacity.judge_plan(
        arn("mixed"),
        mixed,
        request_for(instance_type=P5, hyperparameters={"synthetic_data": True, "precision": "bf16"}),
        NOW,
    )
    assert p5.eligible and p5.starts_now


@pytest.mark.parametrize(
    ("runtime_s", "eligible"),
    [
        (24 * 3600 - CAPACITY_BLOCK_RECLAIM_S, True),  # exactly the usable time
        (24 * 3600 - CAPACITY_BLOCK_RECLAIM_S + 1, False),  # one second into the reclaim window
        (24 * 3600, False),  # the block's whole length: the old rule accepted this
    ],
)
def test_usable_time_ends_when_instances_are_reclaimed(runtime, request_for, runtime_s, eligible):
    plan = describe("one-day", (0, 24, 2))
    verdict = runtime.capacity.judge_plan(arn("one-day"), plan, request_for(max_runtime_hours=runtime_s / 3600), NOW)
    assert verdict.eligible is eligible, verdict.reason


def test_a_block_inside_its_reclaim_window_is_over_for_new_jobs(runtime, request_for):
    # 20 minutes left in the current block: SageMaker is already reclaiming it, so the job waits for the next
    plan = describe("closing", (-24, 1 / 3, 2), (12, 60, 2))
    verdict = runtime.capacity.judge_plan(arn("closing"), plan, request_for(max_runtime_hours=24), NOW)
    assert verdict.eligible and not verdict.starts_now and verdict.start_time == NOW + 12 * HOUR


@pytest.mark.parametrize(("start", "eligible"), [(timedelta(days=2), True), (timedelta(days=2, seconds=1), False)])
def test_a_scheduled_block_must_start_within_the_pending_limit(runtime, request_for, start, eligible):
    hours = start.total_seconds() / 3600
    plan = describe("later", (hours, hours + 72, 2), status="Scheduled")
    verdict = runtime.capacity.judge_plan(arn("later"), plan, request_for(), NOW)
    assert verdict.eligible is eligible, verdict.reason
    if not eligible:
        assert (
            "SageMaker ends a job that waits Pending on a plan for more than 2 days (InsufficientCapacityError)"
            in verdict.reason
        )
    assert PENDING_LIMIT_S == 2 * 24 * 3600  # platform_spec.capacity, the submitter's limit


def test_an_answer_for_another_plan_is_not_judged_as_this_one(runtime, request_for):
    ours = describe("same-name", (-24, 240, 4))
    verdict = runtime.capacity.judge_plan(arn("same-name", account=OTHER_ACCOUNT), ours, request_for(), NOW)
    assert verdict.eligible is False and "a different plan" in verdict.reason


# a property over many plan sets: whatever the blocks, the choice keeps the rules' promises

_block = st.tuples(st.integers(-72, 96), st.integers(1, 120), st.integers(0, 4))  # start h, length h, instances
_plan = st.lists(_block, min_size=1, max_size=3)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plans=st.lists(_plan, min_size=1, max_size=4), runtime_h=st.integers(1, 48), count=st.integers(1, 3))
def test_choice_prefers_plans_that_start_now_and_never_breaks_a_rule(runtime, request_for, plans, runtime_h, count):
    capacity = runtime.capacity
    request = request_for(max_runtime_hours=runtime_h, instance_count=count)
    verdicts = []
    descriptions = {}
    for index, raw in enumerate(plans):
        blocks, cursor = [], None
        for start_h, length_h, total in sorted(raw):
            start_h = start_h if cursor is None else max(start_h, cursor)  # blocks of one type never overlap
            blocks.append((start_h, start_h + length_h, total))
            cursor = start_h + length_h
        name = f"p{index}"
        descriptions[arn(name)] = describe(name, *blocks)
        verdicts.append(capacity.judge_plan(arn(name), descriptions[arn(name)], request, NOW))
    choice = capacity._best_plan(request, verdicts)
    eligible = [v for v in verdicts if v.eligible]
    if not eligible:
        assert choice is None
        return
    chosen = next(v for v in verdicts if v.training_plan_arn == choice.training_plan_arn)
    # every verdict agrees with the rule recomputed from its description: the job's block is the first
    # usable one with `count` instances; it must start within the limit and fit the job
    for verdict in verdicts:
        job_block = _job_block(descriptions[verdict.training_plan_arn], count)
        fits = job_block is not None and (
            max(NOW, job_block[0]) - NOW <= timedelta(days=2)
            and job_block[1] - max(NOW, job_block[0]) >= timedelta(hours=runtime_h)
        )
        assert verdict.eligible is fits, (verdict.reason, job_block)
        if fits:
            assert verdict.start_time == max(NOW, job_block[0]) and verdict.usable_end == job_block[1]
    if any(v.starts_now for v in eligible):
        assert chosen.starts_now and choice.rule == capacity.RULE_STARTS_NOW_EXPIRES_FIRST
        assert chosen.usable_end == min(v.usable_end for v in eligible if v.starts_now)
    else:
        assert choice.rule == capacity.RULE_STARTS_SOONEST
        assert chosen.start_time == min(v.start_time for v in eligible)
    assert len(choice.skipped) == len(verdicts) - 1


def _job_block(description: dict[str, Any], count: int) -> tuple[datetime, datetime] | None:
    """(start, usable end) of the first block, by start, still usable at NOW with ``count`` instances
    (``min(AvailableInstanceCount, total)`` for the block active at NOW, its total for a later one)."""
    reclaim = timedelta(seconds=CAPACITY_BLOCK_RECLAIM_S)
    available = description["AvailableInstanceCount"]
    for summary in sorted(description["ReservedCapacitySummaries"], key=lambda s: (s["StartTime"], s["EndTime"])):
        start, usable_end = summary["StartTime"], summary["EndTime"] - reclaim
        if usable_end <= NOW:
            continue
        total = summary["TotalInstanceCount"]
        if (min(available, total) if start <= NOW else total) >= count:
            return start, usable_end
    return None


# --- end to end against the emulator ------------------------------------------------------------------

CAPACITY_PLANS: list[dict[str, Any]] = [
    {   # active, idle instances, expires late
        "TrainingPlanName": "idle-now", "InstanceType": B200, "TotalInstanceCount": 4,
        "StartTime": "now-1d", "EndTime": "now+20d",
    },
    {   # starts in two days and expires first: the old rule sent jobs here
        "TrainingPlanName": "starts-in-2d", "Status": "Scheduled", "InstanceType": B200, "TotalInstanceCount": 4,
        "StartTime": "now+47h", "EndTime": "now+4d",
    },
    {
        "TrainingPlanName": "starts-in-1d", "Status": "Scheduled", "InstanceType": B200, "TotalInstanceCount": 4,
        "StartTime": "now+1d", "EndTime": "now+6d",
    },
    {
        "TrainingPlanName": "starts-in-3d", "Status": "Scheduled", "InstanceType": B200, "TotalInstanceCount": 4,
        "StartTime": "now+3d", "EndTime": "now+10d",
    },
    {   # two blocks with a gap: the current one ends in 6 h
        "TrainingPlanName": "gapped", "InstanceType": B200,
        "ReservedCapacitySummaries": [
            {"StartTime": "now-1d", "EndTime": "now+6h", "TotalInstanceCount": 4},
            {"StartTime": "now+2d", "EndTime": "now+9d", "TotalInstanceCount": 4},
        ],
    },
    {   # between its blocks now: SageMaker reports it Scheduled until the next block
        "TrainingPlanName": "in-gap", "InstanceType": B200,
        "ReservedCapacitySummaries": [
            {"StartTime": "now-3d", "EndTime": "now-1d", "TotalInstanceCount": 2},
            {"StartTime": "now+1d", "EndTime": "now+8d", "TotalInstanceCount": 2},
        ],
    },
    {   # 24 h 15 min left: a 24 h job would be reclaimed 15 min before it ends
        "TrainingPlanName": "ends-in-24h15m", "InstanceType": B200, "TotalInstanceCount": 2,
        "StartTime": "now-2d", "EndTime": "now+1455m",
    },
    {   # another account's plan of the same name as ours
        "TrainingPlanArn": arn("idle-now", account=OTHER_ACCOUNT), "InstanceType": B200, "TotalInstanceCount": 8,
        "StartTime": "now-1d", "EndTime": "now+2d",
    },
    {
        "TrainingPlanArn": arn("idle-elsewhere", region="eu-west-1"), "InstanceType": B200, "TotalInstanceCount": 8,
        "StartTime": "now-1d", "EndTime": "now+30d",
    },
    {   # active in us-east-1b and expires before idle-now (the emulator's other plans are in us-east-1a)
        "TrainingPlanName": "zone-b", "InstanceType": B200,
        "ReservedCapacitySummaries": [
            {"StartTime": "now-1d", "EndTime": "now+5d", "TotalInstanceCount": 4, "AvailabilityZone": "us-east-1b"},
        ],
    },
]  # fmt: skip


@pytest.fixture(scope="module")
def capacity_aws():
    with LocalAws(plans=CAPACITY_PLANS) as emulator:
        yield emulator


@pytest.fixture(scope="module")
def capacity_env(capacity_aws) -> dict[str, str]:
    return {**capacity_aws.env, "AWS_MAX_ATTEMPTS": "3"}


@pytest.fixture(scope="module")
def capacity_clients(runtime, capacity_env):
    return runtime.aws.Clients.create(environ=capacity_env)


@pytest.fixture(autouse=True)
def _free_plans(request):
    yield
    if "capacity_aws" in request.fixturenames:
        request.getfixturevalue("capacity_aws").complete_active_jobs()


@pytest.fixture
def submit_with(runtime, capacity_aws, capacity_env, capacity_clients, make_request):
    """``submit_with(plan_arns, *, config=None, **request_overrides)``: submit with exactly these plans configured
    (``config``: the submitter's configuration, default the emulator's)."""

    default = runtime.config.SubmitterConfig.from_environ(capacity_env)

    def _submit(plan_arns: list[str], *, config: Any = None, **overrides: Any) -> dict[str, Any]:
        config = config or default
        # the stack's parameter, the one the submitter's role may read: this module's emulator is its own
        capacity_aws.client("ssm").put_parameter(
            Name=config.training_plan_arns_parameter, Type="String", Value=json.dumps(plan_arns), Overwrite=True
        )
        capacity_clients.parameters.clear_cache()  # as a cold start reads it
        return runtime.service.submit(make_request(**overrides), clients=capacity_clients, config=config)

    return _submit


def _skipped(response: dict[str, Any]) -> dict[str, str]:
    capacity = response.get("capacity") or {}
    plans = capacity.get("skipped_plans") or (response.get("error", {}).get("details") or {}).get("plans", [])
    return {p["training_plan_arn"]: p["reason"] for p in plans}


def test_an_active_plan_with_idle_instances_wins_over_one_that_starts_in_two_days(submit_with, capacity_aws):
    capacity_aws.clear_calls()
    response = submit_with([arn("starts-in-2d"), arn("idle-now")])
    assert response["status"] == "submitted", response
    capacity = response["capacity"]
    assert capacity["training_plan_arn"] == arn("idle-now")
    assert capacity["rule"] == "starts-now-expires-first"
    assert (
        "rule starts-now-expires-first" in capacity["reason"]
        and "1 scheduled plan(s) would make it wait" in capacity["reason"]
    )
    assert _skipped(response)[arn("starts-in-2d")].startswith("eligible, but the job would wait Pending until ")
    job = capacity_aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    assert job["ResourceConfig"]["TrainingPlanArn"] == arn("idle-now")
    assert job["SecondaryStatus"] == "Starting"  # not Pending: it runs now
    # plans are described by their full ARN, never by their name alone
    names = [c["params"]["TrainingPlanName"] for c in capacity_aws.calls("DescribeTrainingPlan")]
    assert sorted(names) == sorted([arn("starts-in-2d"), arn("idle-now")])


def test_with_no_plan_able_to_start_now_the_soonest_scheduled_plan_is_taken(submit_with, capacity_aws):
    # starts-in-2d expires first (4 d) but starts-in-1d makes the job wait least
    response = submit_with([arn("starts-in-2d"), arn("starts-in-1d"), arn("starts-in-3d")])
    assert response["status"] == "submitted", response
    capacity = response["capacity"]
    assert (capacity["training_plan_arn"], capacity["rule"]) == (arn("starts-in-1d"), "starts-soonest")
    skipped = _skipped(response)
    assert skipped[arn("starts-in-2d")].startswith("eligible, but starts after starts-in-1d")
    assert (
        "days from now; SageMaker ends a job that waits Pending on a plan for more than 2 days"
        in skipped[arn("starts-in-3d")]
    )
    job = capacity_aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    assert job["SecondaryStatus"] == "Pending"  # SageMaker holds it until the plan starts


def test_a_plan_starting_after_the_pending_limit_is_no_capacity(submit_with, capacity_aws):
    capacity_aws.clear_calls()
    response = submit_with([arn("starts-in-3d")])
    assert response["error"]["code"] == "NoCapacity", response
    assert "InsufficientCapacityError" in response["error"]["message"]
    auto = submit_with([arn("starts-in-3d")], capacity="auto", dry_run=True)
    assert (auto["capacity"]["type"], auto["capacity"]["rule"]) == ("spot", "fallback-order")
    assert capacity_aws.calls("CreateTrainingJob") == []


def test_a_plan_whose_current_block_ends_before_the_job_is_skipped(submit_with):
    response = submit_with([arn("gapped")])
    assert response["error"]["code"] == "NoCapacity", response
    reason = _skipped(response)[arn("gapped")]
    assert "instances are reclaimed 30 min before it ends, 5.5 h after the job could start" in reason
    assert "request needs max_runtime_hours=24" in reason and "its next block starts" in reason
    short = submit_with([arn("gapped")], max_runtime_hours=5, dry_run=True)
    assert short["status"] == "validated" and short["capacity"]["training_plan_arn"] == arn("gapped")


def test_a_plan_between_blocks_is_scheduled_and_its_job_waits_pending(submit_with, capacity_aws):
    sm = capacity_aws.client("sagemaker")
    plan = sm.describe_training_plan(TrainingPlanName="in-gap")
    assert plan["Status"] == "Scheduled"  # "the status reverts to Scheduled between active periods"
    assert [b["Status"] for b in plan["ReservedCapacitySummaries"]] == ["Expired", "Scheduled"]
    assert plan["AvailableInstanceCount"] == 2
    response = submit_with([arn("in-gap")])
    assert response["status"] == "submitted", response
    assert response["capacity"]["rule"] == "starts-soonest"
    job = sm.describe_training_job(TrainingJobName=response["training_job_name"])
    assert job["SecondaryStatus"] == "Pending"


def test_a_24_hour_job_does_not_go_to_a_block_reclaimed_15_minutes_before_it_ends(submit_with):
    response = submit_with([arn("ends-in-24h15m")])
    assert response["error"]["code"] == "NoCapacity", response
    reason = _skipped(response)[arn("ends-in-24h15m")]
    assert "instances are reclaimed 30 min before it ends, 23.7 h after the job could start" in reason
    fits = submit_with([arn("ends-in-24h15m")], max_runtime_hours=23.5, dry_run=True)
    assert fits["capacity"]["training_plan_arn"] == arn("ends-in-24h15m")


def test_plans_of_another_account_or_region_in_the_parameter_are_skipped_and_never_described(submit_with, capacity_aws):
    foreign_account, foreign_region = arn("idle-now", account=OTHER_ACCOUNT), arn("idle-elsewhere", region="eu-west-1")
    capacity_aws.clear_calls()
    response = submit_with([foreign_account, foreign_region])
    assert response["error"]["code"] == "NoCapacity", response
    skipped = _skipped(response)
    assert skipped[foreign_account] == (
        f"refused without describing it: plan {foreign_account} is in account {OTHER_ACCOUNT} (not {ACCOUNT_ID}); "
        "a training plan is usable only in its own region and account"
    )
    assert f"plan {foreign_region} is in region eu-west-1 (not {REGION})" in skipped[foreign_region]
    assert capacity_aws.calls("DescribeTrainingPlan") == []  # the same-named plan of ours was not taken for it

    mixed = submit_with([foreign_account, arn("idle-now")], dry_run=True)
    assert mixed["capacity"]["training_plan_arn"] == arn("idle-now")
    assert _skipped(mixed)[foreign_account].startswith("refused without describing it: plan " + foreign_account)


def test_a_malformed_entry_in_the_parameter_is_skipped_not_fatal(submit_with, capacity_aws, runtime, caplog):
    """Review finding: one entry with a trailing newline turned every plan and auto request into a
    ConfigurationError, blocking auto's spot/on-demand fallback. It is skipped, naming the entry."""
    broken, bare = arn("idle-now") + "\n", "idle-now"
    with caplog.at_level(logging.WARNING):
        response = submit_with([broken, bare, 7, arn("idle-now")], dry_run=True)
    assert response["status"] == "validated", response
    assert response["capacity"]["training_plan_arn"] == arn("idle-now")
    skipped = _skipped(response)
    assert skipped[broken].startswith(f"not a training-plan ARN: {broken!r} (expected arn:aws")
    assert f"correct it in SSM parameter {capacity_aws.resources['plan_arns_parameter']}" in skipped[broken]
    assert skipped[bare].startswith("not a training-plan ARN: 'idle-now'") and skipped["7"].startswith(
        "not a training-plan ARN: 7"
    )
    assert any(r.getMessage() == "malformed entry in the training plan list skipped" for r in caplog.records)

    only_broken = submit_with([broken], capacity="auto", dry_run=True)  # auto still falls back
    assert only_broken["status"] == "validated" and only_broken["capacity"]["type"] == "spot", only_broken
    assert list(_skipped(only_broken)) == [broken]
    refused = submit_with([broken])
    assert refused["error"]["code"] == "NoCapacity" and list(_skipped(refused)) == [broken]
    assert "\n" not in refused["error"]["message"] and repr(broken) in refused["error"]["message"]
    named = submit_with([broken], training_plan_arn=arn("idle-now"), dry_run=True)
    assert (named["error"]["code"], named["error"]["field"]) == ("InvalidRequest", "training_plan_arn")
    assert "(none configured)" in named["error"]["message"]
    # a parameter that is not a JSON list at all is still the deployment's fault
    with pytest.raises(runtime.errors.ConfigurationError, match="expected a JSON list of training plan ARNs"):
        submit_with({"plans": [arn("idle-now")]}, dry_run=True)


@pytest.mark.parametrize(
    ("plan", "where"),
    [
        (arn("idle-now", account=OTHER_ACCOUNT), f"account {OTHER_ACCOUNT}"),
        (arn("idle-elsewhere", region="eu-west-1"), "region eu-west-1"),
    ],
)
def test_a_requested_plan_of_another_account_or_region_is_an_invalid_request(submit_with, capacity_aws, plan, where):
    capacity_aws.clear_calls()
    response = submit_with([arn("idle-now"), plan], training_plan_arn=plan)
    assert response["status"] == "rejected", response
    error = response["error"]
    assert (error["code"], error["field"]) == ("InvalidRequest", "training_plan_arn")
    assert plan in error["message"] and where in error["message"]
    assert f"a plan of this platform's region {REGION} and account {ACCOUNT_ID}" in error["message"]
    assert capacity_aws.calls("CreateTrainingJob") == [] and capacity_aws.calls("DescribeTrainingPlan") == []


def test_a_named_scheduled_plan_is_used_with_the_named_plan_rule(submit_with):
    response = submit_with([arn("idle-now"), arn("starts-in-1d")], training_plan_arn=arn("starts-in-1d"), dry_run=True)
    assert response["capacity"]["rule"] == "named-plan", response
    assert response["capacity"]["training_plan_arn"] == arn("starts-in-1d")


def test_the_rule_is_in_the_capacity_chosen_log_line(submit_with, runtime):
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    keep = Keep()
    service_logger = logging.getLogger(runtime.service.logger.name)
    service_logger.addHandler(keep)
    try:
        response = submit_with([arn("starts-in-2d"), arn("idle-now")], dry_run=True)
    finally:
        service_logger.removeHandler(keep)
    chosen = [r for r in records if r.getMessage() == "capacity chosen"]
    assert chosen, [r.getMessage() for r in records]
    assert chosen[0].capacity["rule"] == response["capacity"]["rule"] == "starts-now-expires-first"
    assert chosen[0].capacity["reason"] == response["capacity"]["reason"]


def test_an_unknown_region_or_account_is_a_configuration_error_not_a_guess(
    runtime, capacity_env, capacity_clients, make_request
):
    for missing in ("AWS_REGION", runtime.settings.ENV_ACCOUNT_ID):
        env = {k: v for k, v in capacity_env.items() if k != missing}
        with pytest.raises(runtime.errors.ConfigurationError, match=missing):
            runtime.config.SubmitterConfig.from_environ(env)
    blind = dataclasses.replace(runtime.config.SubmitterConfig.from_environ(capacity_env), account_id="")
    with pytest.raises(runtime.errors.ConfigurationError, match="cannot tell its own training plans"):
        runtime.service.submit(make_request(), clients=capacity_clients, config=blind)


# --- VPC mode: a plan's block is in one availability zone ------------------------------------------------

FILE_SYSTEM_ID = "fs-0123456789abcdef0"


def vpc_mode(runtime, config: Any, *, zones: tuple[str, ...] = ("us-east-1a", "us-east-1b")) -> Any:
    """``config`` in VPC mode: two subnets in us-east-1a (the file system in the second), one in us-east-1b."""
    subnet = runtime.config.VpcSubnet
    subnets = (subnet("subnet-a1", "us-east-1a"), subnet("subnet-a2", "us-east-1a"), subnet("subnet-b1", "us-east-1b"))
    return dataclasses.replace(
        config,
        vpc_subnets=tuple(s for s in subnets if s.availability_zone in zones),
        vpc_security_group_ids=("sg-0123456789abcdef0",),
        fsx_lustre=runtime.config.FsxLustre(FILE_SYSTEM_ID, "fsx", "subnet-a2", "us-east-1a"),
    )


@pytest.fixture
def vpc_config(runtime, capacity_env):
    return vpc_mode(runtime, runtime.config.SubmitterConfig.from_environ(capacity_env))


FSX_INPUTS = {"train": {"file_system_id": FILE_SYSTEM_ID, "directory_path": "/fsx/datasets/train"}}


def test_a_job_on_a_plan_runs_in_the_subnets_of_its_blocks_zone(submit_with, vpc_config):
    response = submit_with([arn("idle-now"), arn("zone-b")], config=vpc_config, dry_run=True)
    assert response["status"] == "validated", response
    assert response["capacity"]["training_plan_arn"] == arn("zone-b")  # expires first
    assert (
        response["capacity"]["availability_zone"] == "us-east-1b" and " in us-east-1b" in response["capacity"]["reason"]
    )
    params = response["create_training_job"]
    assert params["VpcConfig"] == {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-b1"]}
    assert validate_input("sagemaker", "CreateTrainingJob", params) == []
    on_a = submit_with([arn("idle-now")], config=vpc_config, dry_run=True)["create_training_job"]
    assert on_a["VpcConfig"]["Subnets"] == ["subnet-a1", "subnet-a2"]


def test_a_plan_in_another_zone_than_the_file_system_is_skipped_naming_both(submit_with, vpc_config):
    response = submit_with([arn("idle-now"), arn("zone-b")], config=vpc_config, dry_run=True, inputs=FSX_INPUTS)
    assert response["status"] == "validated", response
    assert response["capacity"]["training_plan_arn"] == arn("idle-now")
    assert response["create_training_job"]["VpcConfig"]["Subnets"] == ["subnet-a2"]
    why = _skipped(response)[arn("zone-b")]
    assert "its block is in availability zone us-east-1b; the job can run only in us-east-1a" in why
    assert f"the zone of FSx for Lustre file system {FILE_SYSTEM_ID}" in why


def test_no_plan_in_the_file_systems_zone_is_no_capacity(submit_with, vpc_config):
    response = submit_with([arn("zone-b")], config=vpc_config, inputs=FSX_INPUTS)
    assert response["status"] == "rejected" and response["error"]["code"] == "NoCapacity", response
    assert "zone-b: block " in response["error"]["message"]
    assert "availability zone us-east-1b; the job can run only in us-east-1a" in response["error"]["message"]
    # capacity auto moves on to spot, in the file system's subnet
    spot = submit_with([arn("zone-b")], config=vpc_config, inputs=FSX_INPUTS, capacity="auto", dry_run=True)
    assert spot["capacity"]["type"] == "spot" and spot["create_training_job"]["VpcConfig"]["Subnets"] == ["subnet-a2"]


def test_a_plan_in_a_zone_without_platform_subnets_is_skipped(runtime, submit_with, capacity_env):
    only_a = vpc_mode(runtime, runtime.config.SubmitterConfig.from_environ(capacity_env), zones=("us-east-1a",))
    response = submit_with([arn("zone-b")], config=only_a)
    assert response["error"]["code"] == "NoCapacity", response
    assert "the job can run only in us-east-1a (the zones of the platform's subnets)" in response["error"]["message"]


def test_judge_plan_refuses_a_block_without_a_zone_in_vpc_mode(runtime, request_for, vpc_config):
    from platform_constructs.submitter.runtime.network import allowed_zones

    request = request_for()
    zones = allowed_zones(request, vpc_config)
    unzoned = describe("unzoned", (-1, 48, 4))  # describe() reports no AvailabilityZone
    assert runtime.capacity.judge_plan(arn("unzoned"), unzoned, request, NOW).eligible  # no VPC mode: any zone
    verdict = runtime.capacity.judge_plan(arn("unzoned"), unzoned, request, NOW, zones)
    assert not verdict.eligible and "its block reports no AvailabilityZone" in verdict.reason
    for summary in unzoned["ReservedCapacitySummaries"]:
        summary["AvailabilityZone"] = "us-east-1b"
    verdict = runtime.capacity.judge_plan(arn("unzoned"), unzoned, request, NOW, zones)
    assert verdict.eligible and verdict.availability_zone == "us-east-1b"


# --- the emulator describes plans faithfully ------------------------------------------------------


def test_emulator_serves_several_blocks_per_plan_as_botocore_describes_them(capacity_aws):
    sm = capacity_aws.client("sagemaker")  # botocore parses (and so checks) the answers
    gapped = sm.describe_training_plan(TrainingPlanName=arn("gapped"))
    blocks = gapped["ReservedCapacitySummaries"]
    assert [b["Status"] for b in blocks] == ["Active", "Scheduled"]
    assert [b["TotalInstanceCount"] for b in blocks] == [4, 4]
    assert len({b["ReservedCapacityArn"] for b in blocks}) == 2
    assert gapped["StartTime"] == blocks[0]["StartTime"] and gapped["EndTime"] == blocks[1]["EndTime"]
    assert (gapped["DurationHours"], gapped["DurationMinutes"]) == (30 + 7 * 24, 0)  # the blocks' hours, not the span's
    assert gapped["Status"] == "Active"


def test_emulator_keeps_plans_by_arn_and_shares_none_across_accounts(capacity_aws):
    from botocore.exceptions import ClientError

    sm = capacity_aws.client("sagemaker")
    ours = sm.describe_training_plan(TrainingPlanName="idle-now")
    assert ours["TrainingPlanArn"] == arn("idle-now") and ours["TotalInstanceCount"] == 4
    assert sm.describe_training_plan(TrainingPlanName=arn("idle-now"))["TrainingPlanArn"] == arn("idle-now")
    with pytest.raises(ClientError) as raised:
        sm.describe_training_plan(TrainingPlanName=arn("idle-now", account=OTHER_ACCOUNT))
    assert raised.value.response["Error"]["Code"] == "ResourceNotFound"
    listed = {p["TrainingPlanArn"] for p in sm.list_training_plans()["TrainingPlanSummaries"]}
    assert arn("idle-now") in listed and arn("idle-now", account=OTHER_ACCOUNT) not in listed
    assert arn("idle-elsewhere", region="eu-west-1") not in listed


def test_emulator_refuses_a_job_on_another_accounts_plan(capacity_aws, capacity_env):
    from botocore.exceptions import ClientError

    sm = capacity_aws.client("sagemaker")
    foreign = arn("idle-now", account=OTHER_ACCOUNT)
    with pytest.raises(ClientError) as raised:
        sm.create_training_job(
            TrainingJobName=f"foreign-{uuid.uuid4().hex[:8]}",
            AlgorithmSpecification={
                "TrainingImage": json.loads(capacity_env["TRAINER_IMAGE_URIS"])["amd64"],
                "TrainingInputMode": "File",
            },
            RoleArn=capacity_env["EXECUTION_ROLE_ARN"],
            OutputDataConfig={"S3OutputPath": f"s3://{capacity_env['OUTPUT_BUCKET']}/"},
            ResourceConfig={
                "InstanceType": B200,
                "InstanceCount": 1,
                "VolumeSizeInGB": 100,
                "TrainingPlanArn": foreign,
            },
            StoppingCondition={"MaxRuntimeInSeconds": 3600},
        )
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert foreign in raised.value.response["Error"]["Message"]


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (
            {"TrainingPlanName": "x", "InstanceType": B200, "ReservedCapacitySummaries": [
                {"StartTime": "now", "EndTime": "now+2d", "TotalInstanceCount": 2},
                {"StartTime": "now+1d", "EndTime": "now+3d", "TotalInstanceCount": 2}]},
            "plan[0].ReservedCapacitySummaries: ml.p6-b200.48xlarge blocks overlap",
        ),
        (
            {"TrainingPlanName": "x", "ReservedCapacitySummaries": [{"StartTime": "now", "EndTime": "now+1d", "TotalInstanceCount": 2}]},
            "plan[0].ReservedCapacitySummaries[0].InstanceType: required",
        ),
        (
            {"TrainingPlanName": "x", "InstanceType": B200, "ReservedCapacitySummaries": [{"StartTime": "now+1d", "EndTime": "now", "TotalInstanceCount": 1}]},
            "plan[0].ReservedCapacitySummaries[0].EndTime: must be after StartTime",
        ),
        (
            {"TrainingPlanName": "x", "InstanceType": B200, "StartTime": "now+1d", "ReservedCapacitySummaries": [
                {"StartTime": "now", "EndTime": "now+2d", "TotalInstanceCount": 1}]},
            "plan[0]: StartTime..EndTime must cover every block",
        ),
        (
            {"TrainingPlanName": "x", "TrainingPlanArn": arn("y"), "InstanceType": B200, "TotalInstanceCount": 1, "StartTime": "now", "EndTime": "now+1d"},
            "plan[0].TrainingPlanName: 'x' is not the name in TrainingPlanArn",
        ),
    ],
)  # fmt: skip
def test_emulator_refuses_bad_block_seeds_naming_the_field(seed, message):
    from devtools.local_aws.sagemaker import SageMakerExtension

    extension = SageMakerExtension()
    with pytest.raises(ValueError) as raised:
        extension.seed_plans([seed], account=ACCOUNT_ID, region=REGION)
    assert message in str(raised.value)
    assert extension.plans == {}  # nothing half-loaded
