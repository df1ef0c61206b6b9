"""The plan-metrics publisher against the ``trainctl local-aws`` emulator (SSM, SageMaker plans, CloudWatch).

Each test seeds its own uniquely named plans and publishes at its own minute
(``now``), then reads the datapoints back with ``GetMetricStatistics`` /
``ListMetrics``.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from platform_constructs.lambda_runtime.deadline import deadline_scope
from platform_constructs.observability.runtime import plan_metrics, settings

from .conftest import PLAN_METRICS_HANDLER, LambdaContext, emulator_environ

pytestmark = pytest.mark.xdist_group("observability")

_minutes = iter(range(30, 100000, 7))


def a_minute() -> datetime:
    """A distinct whole minute in the past for one publication (so tests never read each other's points)."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    return now - timedelta(minutes=next(_minutes))


def point(cloudwatch, name: str, plan: str, at: datetime) -> dict:
    """The single datapoint of ``name`` for ``plan`` published at ``at``."""
    response = cloudwatch.get_metric_statistics(
        Namespace=settings.PLAN_METRICS_NAMESPACE,
        MetricName=name,
        Dimensions=[{"Name": settings.DIMENSION_TRAINING_PLAN_NAME, "Value": plan}],
        StartTime=at - timedelta(seconds=30),
        EndTime=at + timedelta(seconds=30),
        Period=60,
        Statistics=["Maximum", "SampleCount"],
    )
    (datapoint,) = response["Datapoints"]
    assert datapoint["SampleCount"] == 1
    return datapoint


def publish(aws, now: datetime):
    return plan_metrics.publish_plan_metrics(
        ssm=aws.client("ssm"),
        sagemaker=aws.client("sagemaker"),
        cloudwatch=aws.client("cloudwatch"),
        parameter_name=aws.resources["plan_arns_parameter"],
        now=now,
    )


@pytest.fixture
def names():
    suffix = uuid.uuid4().hex[:8]
    return SimpleNamespace(
        idle=f"b200-idle-{suffix}", busy=f"b200-busy-{suffix}", later=f"p5-later-{suffix}", gone=f"b200-gone-{suffix}"
    )


@pytest.fixture
def seeded(aws, names):
    plans = [
        {"TrainingPlanName": names.idle, "InstanceType": "ml.p6-b200.48xlarge", "TotalInstanceCount": 4,
         "StartTime": "now-2d", "EndTime": "now+10h"},
        {"TrainingPlanName": names.busy, "InstanceType": "ml.p6-b200.48xlarge", "TotalInstanceCount": 8,
         "InUseInstanceCount": 6, "StartTime": "now-1d", "EndTime": "now+20d"},
        {"TrainingPlanName": names.later, "Status": "Scheduled", "InstanceType": "ml.p5.48xlarge", "TotalInstanceCount": 2,
         "StartTime": "now+2d", "EndTime": "now+9d"},
        {"TrainingPlanName": names.gone, "Status": "Expired", "InstanceType": "ml.p6-b200.48xlarge", "TotalInstanceCount": 8,
         "AvailableInstanceCount": 0, "StartTime": "now-30d", "EndTime": "now-2d"},
    ]  # fmt: skip
    return aws.set_plans(plans)


def test_publishes_each_plans_capacity_as_describe_training_plan_reports_it(aws, cloudwatch, names, seeded):
    now = a_minute()
    report = publish(aws, now)
    assert report.problems == [] and report.datums == 4 * 4 + 3
    by_name = {p.training_plan_name: p for p in report.plans}
    real_end = {
        n: aws.client("sagemaker").describe_training_plan(TrainingPlanName=n)["EndTime"] for n in vars(names).values()
    }

    expected = {
        names.idle: (4, 0, 4),
        names.busy: (2, 6, 8),
        names.later: (2, 0, 2),
        names.gone: (0, 0, 8),
    }
    for plan, (available, in_use, total) in expected.items():
        assert point(cloudwatch, "AvailableInstanceCount", plan, now)["Maximum"] == available
        assert point(cloudwatch, "InUseInstanceCount", plan, now)["Maximum"] == in_use
        assert point(cloudwatch, "TotalInstanceCount", plan, now)["Maximum"] == total
        hours = point(cloudwatch, "HoursUntilEnd", plan, now)["Maximum"]
        assert hours == pytest.approx(max(0.0, (real_end[plan] - now).total_seconds() / 3600), abs=0.01)
        assert by_name[plan].hours_until_end == pytest.approx(hours, abs=0.001)
    assert point(cloudwatch, "HoursUntilEnd", names.gone, now)["Maximum"] == 0  # ended: 0, never negative
    assert point(cloudwatch, "AvailableInstanceCount", names.idle, now)["Maximum"] == 4


def test_metric_identity_is_exactly_namespace_name_and_dimension(aws, cloudwatch, names, seeded):
    publish(aws, a_minute())
    metrics = cloudwatch.list_metrics(Namespace=settings.PLAN_METRICS_NAMESPACE)["Metrics"]
    for name in settings.PLAN_METRICS:
        assert {"Namespace": "TrainingPlatform/TrainingPlans", "MetricName": name,
                "Dimensions": [{"Name": "TrainingPlanName", "Value": names.idle}]} in metrics  # fmt: skip
    totals = {m["MetricName"] for m in metrics if m["Dimensions"] == []}
    assert totals == {"AvailableInstanceCount", "InUseInstanceCount", "TotalInstanceCount"}
    units = {(d["MetricName"], d["Unit"]) for d in plan_metrics.metric_data(publish(aws, a_minute()).plans, a_minute())}
    assert units == {
        ("AvailableInstanceCount", "Count"),
        ("InUseInstanceCount", "Count"),
        ("TotalInstanceCount", "Count"),
        ("HoursUntilEnd", "None"),
    }


def test_all_plans_totals_count_only_plans_jobs_may_use(aws, names, seeded):
    report = publish(aws, a_minute())
    totals = {
        d["MetricName"]: d["Value"]
        for d in plan_metrics.metric_data(report.plans, report.observed_at)
        if not d["Dimensions"]
    }
    # idle (Active) + busy (Active) + later (Scheduled); the Expired plan's 8 instances are not counted
    assert totals == {"AvailableInstanceCount": 4 + 2 + 2, "InUseInstanceCount": 6, "TotalInstanceCount": 4 + 8 + 2}


def test_no_plans_publishes_zero_totals_not_nothing(aws):
    aws.set_plans([])
    report = publish(aws, a_minute())
    assert report.plans == [] and report.datums == 3
    assert {d["MetricName"]: d["Value"] for d in plan_metrics.metric_data([], report.observed_at)} == {
        "AvailableInstanceCount": 0.0,
        "InUseInstanceCount": 0.0,
        "TotalInstanceCount": 0.0,
    }


def test_a_plan_that_cannot_be_described_is_reported_and_the_others_published(aws, cloudwatch, names, seeded):
    missing = seeded[0].rsplit("/", 1)[0] + f"/deleted-{uuid.uuid4().hex[:6]}"
    aws.client("ssm").put_parameter(
        Name=aws.resources["plan_arns_parameter"], Value=json.dumps([missing, *seeded]), Overwrite=True
    )
    now = a_minute()
    report = publish(aws, now)
    (problem,) = report.problems
    assert problem.training_plan_arn == missing and problem.error_code in ("ResourceNotFound", "ValidationException")
    assert len(report.plans) == 4
    assert point(cloudwatch, "TotalInstanceCount", names.busy, now)["Maximum"] == 8


def test_handler_raises_after_publishing_when_a_plan_is_missing(aws, names, seeded, monkeypatch):
    monkeypatch.setattr(
        plan_metrics,
        "_clients",
        plan_metrics.PlanMetricsClients(
            ssm=aws.client("ssm"), sagemaker=aws.client("sagemaker"), cloudwatch=aws.client("cloudwatch")
        ),
    )
    monkeypatch.setenv(settings.ENV_TRAINING_PLAN_ARNS_PARAMETER, aws.resources["plan_arns_parameter"])
    context = SimpleNamespace(function_name="plan-metrics", memory_limit_in_mb=256, aws_request_id="req-1",
                              invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:plan-metrics")  # fmt: skip
    result = plan_metrics.lambda_handler({"source": "aws.events", "detail-type": "Scheduled Event"}, context)
    assert {p["training_plan_name"] for p in result["plans"]} == set(vars(names).values())

    missing = seeded[0].rsplit("/", 1)[0] + "/deleted-plan"
    aws.client("ssm").put_parameter(
        Name=aws.resources["plan_arns_parameter"], Value=json.dumps([*seeded, missing]), Overwrite=True
    )
    with pytest.raises(
        plan_metrics.PlanMetricsError, match=r"1 training plan\(s\) could not be described: .*deleted-plan"
    ):
        plan_metrics.lambda_handler({}, context)


def test_throttled_describe_is_retried_by_botocore(aws, names, seeded):
    aws.clear_calls()
    aws.inject_fault("DescribeTrainingPlan", "ThrottlingException", count=1)
    report = publish(aws, a_minute())
    assert report.problems == [] and len(report.plans) == 4
    assert len(aws.calls("DescribeTrainingPlan")) == 4 + 1


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not json", r"got 'not json'; expected a JSON list of training-plan ARNs"),
        ('{"arn": 1}', r"expected a JSON list"),
        (
            '["arn:aws:s3:::bucket"]',
            r"\[0\]: got 'arn:aws:s3:::bucket'; expected a SageMaker training-plan ARN arn:aws\[-partition\]:sagemaker:",
        ),
    ],
)
def test_a_malformed_parameter_names_the_parameter_and_value(aws, value, message):
    name = f"/training-platform/test/{uuid.uuid4().hex[:8]}"
    aws.client("ssm").put_parameter(Name=name, Value=value, Type="String")
    with pytest.raises(plan_metrics.PlanMetricsError, match=f"SSM parameter {name}.*{message}"):
        plan_metrics.read_plan_arns(aws.client("ssm"), name)


def test_plan_capacity_from_a_description():
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    plan = plan_metrics.PlanCapacity.from_description(
        {
            "TrainingPlanName": "p",
            "TrainingPlanArn": "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p",
            "Status": "Active",
            "TotalInstanceCount": 4,
            "InUseInstanceCount": 1,
            "AvailableInstanceCount": 3,
            "EndTime": datetime(2026, 3, 2, 0, 30),  # naive: UTC
        },
        now,
    )
    assert (plan.hours_until_end, plan.available_instances, plan.usable) == (12.5, 3, True)


# -- the invocation's deadline: every AWS call ends inside the function's timeout ----------------------------


def the_functions_clients(monkeypatch, aws, **environ: str) -> plan_metrics.PlanMetricsClients:
    """The clients the function makes (its deadline hooks included), for the emulator's environment."""
    emulator_environ(monkeypatch, aws, PLAN_METRICS_HANDLER, **environ)
    monkeypatch.setenv(settings.ENV_TRAINING_PLAN_ARNS_PARAMETER, aws.resources["plan_arns_parameter"])
    monkeypatch.setattr(plan_metrics, "_clients", None)
    return plan_metrics._default_clients()


def test_a_stalled_describe_publishes_what_was_described_and_names_the_plans_skipped(
    aws, cloudwatch, names, seeded, monkeypatch, stalled_endpoint, caplog
):
    """The first plan is described; then SageMaker never answers. The plans are described while the publish's
    reserve is left: the first plan's metrics are published (not the all-plans totals, which would count too
    few), the others are logged as skipped, and the run fails naming them, all inside the function's time."""
    clients = the_functions_clients(monkeypatch, aws)
    sent: list[str] = []

    def stall_after_the_first(request, **_):
        sent.append(request.url)
        if len(sent) > 1:
            request.url = stalled_endpoint + "/"

    clients.sagemaker.meta.events.register("before-send.sagemaker.DescribeTrainingPlan", stall_after_the_first)
    timeout_s = plan_metrics.PUBLISH_RESERVE_S + 5.0  # 5 s to describe: one stalled attempt, no time for a retry
    before = datetime.now(UTC)
    started = time.monotonic()
    with pytest.raises(plan_metrics.PlanMetricsError) as raised:
        plan_metrics.lambda_handler({}, LambdaContext("plan-metrics", timeout_s))
    assert time.monotonic() - started < timeout_s
    message = str(raised.value)
    skipped = seeded[1:]
    assert message.startswith(
        "3 training plan(s) not described before the invocation's deadline (their metrics and the all-plans "
        f"totals were not published): {', '.join(skipped)}; "
    )
    assert "sagemaker.DescribeTrainingPlan" in message and "not received in time (ReadTimeoutError)" in message
    assert message.endswith("Retriable: the next scheduled run describes the plans and publishes again")
    assert len(sent) == 2  # the stalled call was not retried past the deadline
    published = cloudwatch.get_metric_statistics(
        Namespace=settings.PLAN_METRICS_NAMESPACE, MetricName=settings.METRIC_TOTAL_INSTANCES,
        Dimensions=[{"Name": settings.DIMENSION_TRAINING_PLAN_NAME, "Value": names.idle}],
        StartTime=before - timedelta(minutes=1), EndTime=datetime.now(UTC) + timedelta(minutes=1),
        Period=60, Statistics=["Maximum"],
    )["Datapoints"]  # fmt: skip
    assert [p["Maximum"] for p in published] == [4]
    logged = [r for r in caplog.records if r.getMessage() == "training plan skipped: the deadline came first"]
    assert [r.training_plan_arn for r in logged] == skipped


def test_skipped_plans_leave_out_the_all_plans_totals(aws, cloudwatch, seeded, monkeypatch, stalled_endpoint):
    clients = the_functions_clients(monkeypatch, aws, AWS_ENDPOINT_URL=stalled_endpoint)
    emulator = aws.client("ssm"), aws.client("cloudwatch")  # SageMaker alone never answers
    now = a_minute()
    with deadline_scope(plan_metrics.Deadline(plan_metrics.PUBLISH_RESERVE_S + 4.0)):
        report = plan_metrics.publish_plan_metrics(
            ssm=emulator[0], sagemaker=clients.sagemaker, cloudwatch=emulator[1],
            parameter_name=aws.resources["plan_arns_parameter"], now=now,
        )  # fmt: skip
    assert (report.plans, report.skipped, report.datums) == ([], seeded, 0)
    assert "DescribeTrainingPlan" in (report.skipped_because or "")
    totals = cloudwatch.get_metric_statistics(
        Namespace=settings.PLAN_METRICS_NAMESPACE, MetricName=settings.METRIC_AVAILABLE_INSTANCES,
        StartTime=now - timedelta(seconds=30), EndTime=now + timedelta(seconds=30), Period=60, Statistics=["Maximum"],
    )["Datapoints"]  # fmt: skip
    assert totals == []  # missing, not a 0 that would raise the no-capacity alarm


def test_a_stalled_endpoint_ends_the_publisher_inside_its_time(aws, monkeypatch, stalled_endpoint, caplog):
    the_functions_clients(monkeypatch, aws, AWS_ENDPOINT_URL=stalled_endpoint)
    started = time.monotonic()
    with pytest.raises(plan_metrics.DeadlineExceeded) as raised:
        plan_metrics.lambda_handler({}, LambdaContext("plan-metrics", 5.5))
    assert time.monotonic() - started < 5.5
    assert raised.value.operation == "ssm.GetParameter" and type(raised.value).__name__ == "DeadlineExceeded"
    assert "attempt 1 was sent and its answer was not received in time (ReadTimeoutError)" in str(raised.value)
    (logged,) = [r for r in caplog.records if r.getMessage() == "deadline exceeded"]
    assert logged.operation == "ssm.GetParameter"


def test_an_earlier_deadline_keeps_the_clock_and_the_error_type():
    def clock() -> float:
        return 100.0

    invocation = plan_metrics.Deadline(30.0, clock=clock)
    describing = invocation.earlier(plan_metrics.PUBLISH_RESERVE_S)
    assert describing.at == pytest.approx(invocation.at - plan_metrics.PUBLISH_RESERVE_S)
    assert type(describing) is plan_metrics.Deadline and describing.clock is clock
    error = describing.exceeded("cloudwatch.PutMetricData", 4.0, attempts_sent=1, may_have_taken_effect=True)
    assert type(error) is plan_metrics.DeadlineExceeded and "its datapoints may have been published" in str(error)
    assert invocation.error is None  # the earlier deadline's trip is its own
