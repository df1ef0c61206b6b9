"""The job-state handler against the ``trainctl local-aws`` emulator.

Events are built as EventBridge delivers them: the ``detail`` is the
emulator's ``DescribeTrainingJob`` answer for a job created through it and
moved to its terminal status. Outcomes are read back from the emulator's
CloudWatch; duplicates are suppressed by the DynamoDB idempotency table.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest

from platform_constructs.observability.runtime import job_events, settings
from platform_spec.runs import TERMINAL_JOB_STATUSES

from .conftest import IDEMPOTENCY_TABLE, JOB_EVENTS_HANDLER, LambdaContext, emulator_environ

pytestmark = [
    pytest.mark.xdist_group("observability"),
    pytest.mark.filterwarnings("ignore:Couldn't determine the remaining time left:UserWarning"),
]

_minutes = iter(range(45, 100000, 11))


def an_event_time() -> datetime:
    """A distinct whole minute in the past, so tests never read each other's datapoints."""
    return datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=next(_minutes))


def outcomes(cloudwatch, status: str, at: datetime) -> float:
    """Sum of ``TrainingJobOutcomes{TrainingJobStatus=status}`` in the minute ``at``."""
    response = cloudwatch.get_metric_statistics(
        Namespace=settings.JOB_METRICS_NAMESPACE,
        MetricName=settings.METRIC_JOB_OUTCOMES,
        Dimensions=[{"Name": settings.DIMENSION_TRAINING_JOB_STATUS, "Value": status}],
        StartTime=at - timedelta(seconds=30),
        EndTime=at + timedelta(seconds=30),
        Period=60,
        Statistics=["Sum"],
    )
    return sum(d["Sum"] for d in response["Datapoints"])


@pytest.fixture(scope="module")
def plan_arn(aws):
    (arn,) = aws.set_plans(
        [
            {
                "TrainingPlanName": f"events-plan-{uuid.uuid4().hex[:6]}",
                "InstanceType": "ml.p6-b200.48xlarge",
                "TotalInstanceCount": 8,
                "StartTime": "now-1d",
                "EndTime": "now+10d",
            }
        ]
    )
    return arn


@pytest.fixture(scope="module")
def record(aws):
    fn, _ = job_events.make_recorder(
        cloudwatch=aws.client("cloudwatch"), dynamodb=aws.client("dynamodb"), table_name=IDEMPOTENCY_TABLE
    )
    return fn


def create_job(aws, *, plan_arn: str | None = None, count: int = 2) -> str:
    name = f"obs-{uuid.uuid4().hex[:12]}"
    resources = {"InstanceType": "ml.p6-b200.48xlarge", "InstanceCount": count, "VolumeSizeInGB": 100}
    if plan_arn:
        resources["TrainingPlanArn"] = plan_arn
    aws.client("sagemaker").create_training_job(
        TrainingJobName=name,
        AlgorithmSpecification={
            "TrainingImage": json.loads(aws.env["TRAINER_IMAGE_URIS"])["amd64"],
            "TrainingInputMode": "File",
        },
        RoleArn=aws.env["EXECUTION_ROLE_ARN"],
        OutputDataConfig={"S3OutputPath": f"s3://{aws.env['OUTPUT_BUCKET']}/jobs/"},
        ResourceConfig=resources,
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
    )
    return name


def state_change(aws, name: str, at: datetime) -> dict:
    """The EventBridge event for the job as it is now (detail = DescribeTrainingJob)."""
    detail = aws.describe_training_job(name)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "SageMaker Training Job State Change",
        "source": "aws.sagemaker",
        "account": "123456789012",
        "time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": aws.region,
        "resources": [detail["TrainingJobArn"]],
        "detail": detail,
    }


def outcome_logs(caplog) -> list[dict]:
    """The handler's outcome log lines as Powertools formats them (JSON), then forgets them."""
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    formatter = LambdaPowertoolsFormatter()
    lines = [
        json.loads(formatter.format(r))
        for r in caplog.records
        if r.name == "job-events" and r.getMessage() == settings.OUTCOME_LOG_MESSAGE
    ]
    caplog.clear()
    return lines


def test_a_failed_job_is_counted_once_and_its_failure_reason_logged(aws, cloudwatch, record, plan_arn, caplog):
    name = create_job(aws, plan_arn=plan_arn)
    reason = "CUDA out of memory on rank 3 (NVIDIA B200, 179 GB) at step 12 with model=gpt-8b: set activation_checkpointing=full"
    aws.set_job_status(name, "Failed", failure_reason=reason)
    at = an_event_time()
    event = state_change(aws, name, at)

    first = job_events.handle(event, record)
    assert first == {"counted": True, "training_job_name": name, "training_job_status": "Failed"}
    assert outcomes(cloudwatch, "Failed", at) == 1

    (line,) = outcome_logs(caplog)
    assert line["level"] == "WARNING" and line["training_job_name"] == name and line["failure_reason"] == reason
    assert (line["capacity_type"], line["training_plan_arn"], line["instance_count"]) == ("training-plan", plan_arn, 2)
    assert line["instance_type"] == "ml.p6-b200.48xlarge" and line["training_job_status"] == "Failed"

    duplicate = dict(event, id=str(uuid.uuid4()))  # SageMaker may send a state change more than once
    assert job_events.handle(duplicate, record) == first
    assert outcomes(cloudwatch, "Failed", at) == 1
    assert outcome_logs(caplog) == []


def test_completed_and_stopped_jobs_are_counted_under_their_status(aws, cloudwatch, record):
    done, stopped = create_job(aws, count=1), create_job(aws, count=4)
    aws.set_job_status(done, "Completed", final_metrics={"train:loss": 2.1})
    aws.set_job_status(stopped, "Stopped", secondary_status="MaxRuntimeExceeded")
    at = an_event_time()
    assert job_events.handle(state_change(aws, done, at), record)["counted"] is True
    assert job_events.handle(state_change(aws, stopped, at), record)["counted"] is True
    assert (
        outcomes(cloudwatch, "Completed", at),
        outcomes(cloudwatch, "Stopped", at),
        outcomes(cloudwatch, "Failed", at),
    ) == (1, 1, 0)
    outcome = job_events.TrainingJobOutcome.from_event(state_change(aws, stopped, at))
    assert (outcome.secondary_status, outcome.capacity_type, outcome.failure_reason) == (
        "MaxRuntimeExceeded",
        "on-demand",
        None,
    )


def test_each_status_of_a_job_is_its_own_outcome_key(aws, cloudwatch, record):
    name = create_job(aws)
    aws.set_job_status(name, "Stopping")
    aws.set_job_status(name, "Failed", failure_reason="ClientError: stopped while uploading")
    at = an_event_time()
    event = state_change(aws, name, at)
    assert job_events.handle(event, record)["counted"] is True
    stopped = dict(event, detail=dict(event["detail"], TrainingJobStatus="Stopped"))
    assert job_events.handle(stopped, record)["counted"] is True
    assert (outcomes(cloudwatch, "Failed", at), outcomes(cloudwatch, "Stopped", at)) == (1, 1)


def test_a_non_terminal_status_is_not_counted(aws, cloudwatch, record):
    name = create_job(aws)
    at = an_event_time()
    assert job_events.handle(state_change(aws, name, at), record) == {
        "counted": False,
        "training_job_name": name,
        "training_job_status": "InProgress",
    }
    assert sum(outcomes(cloudwatch, s, at) for s in TERMINAL_JOB_STATUSES) == 0


def test_idempotency_records_expire_after_the_configured_ttl(aws, record):
    table = aws.client("dynamodb")
    before = {item["id"]["S"] for item in table.scan(TableName=IDEMPOTENCY_TABLE)["Items"]}
    name = create_job(aws)
    aws.set_job_status(name, "Completed")
    job_events.handle(state_change(aws, name, an_event_time()), record)
    (new,) = [i for i in table.scan(TableName=IDEMPOTENCY_TABLE)["Items"] if i["id"]["S"] not in before]
    assert new["status"]["S"] == "COMPLETED"
    assert int(new["expiration"]["N"]) == pytest.approx(
        time.time() + job_events.DEFAULT_IDEMPOTENCY_TTL_SECONDS, abs=60
    )


def test_lambda_handler_end_to_end(aws, cloudwatch, monkeypatch):
    emulator_environ(monkeypatch, aws, JOB_EVENTS_HANDLER)
    monkeypatch.setenv(settings.ENV_IDEMPOTENCY_TABLE, IDEMPOTENCY_TABLE)
    monkeypatch.setenv(settings.ENV_IDEMPOTENCY_TTL_SECONDS, "3600")
    monkeypatch.setattr(job_events, "_recorder", None)
    name = create_job(aws)
    aws.set_job_status(name, "Failed", failure_reason="AlgorithmError: NCCL error: unhandled system error")
    at = an_event_time()
    context = SimpleNamespace(function_name="job-events", memory_limit_in_mb=256, aws_request_id="req-2",
                              invoked_function_arn="arn:aws:lambda:us-east-1:123456789012:function:job-events",
                              get_remaining_time_in_millis=lambda: 25_000)  # fmt: skip
    assert job_events.lambda_handler(state_change(aws, name, at), context)["counted"] is True
    assert outcomes(cloudwatch, "Failed", at) == 1


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda e: e.update(source="aws.batch"), "source"),
        (lambda e: e.update({"detail-type": "SageMaker Endpoint State Change"}), "detail-type"),
        (lambda e: e.update(detail=None), "detail"),
        (lambda e: e["detail"].pop("TrainingJobName"), "detail.TrainingJobName"),
        (lambda e: e["detail"].update(TrainingJobStatus=""), "detail.TrainingJobStatus"),
        (lambda e: e["detail"].update(ResourceConfig=[1]), "detail.ResourceConfig"),
        (lambda e: e.update(time="yesterday"), "time"),
    ],
)
def test_a_malformed_event_names_the_field(change, field):
    event = {
        "id": "e",
        "source": "aws.sagemaker",
        "detail-type": "SageMaker Training Job State Change",
        "time": "2026-03-01T12:00:00Z",
        "detail": {"TrainingJobName": "j", "TrainingJobStatus": "Failed"},
    }
    change(event)
    with pytest.raises(job_events.EventError) as info:
        job_events.TrainingJobOutcome.from_event(event)
    assert info.value.field == field
    assert str(info.value).startswith(f"event field {field}: got ")


def test_capacity_type_and_fallbacks_from_a_minimal_event():
    outcome = job_events.TrainingJobOutcome.from_event(
        {
            "id": "e",
            "source": "aws.sagemaker",
            "detail-type": "SageMaker Training Job State Change",
            "time": "2026-03-01T12:00:00Z",
            "resources": ["arn:aws:sagemaker:us-east-1:123456789012:training-job/j"],
            "detail": {
                "TrainingJobName": "j",
                "TrainingJobStatus": "Completed",
                "EnableManagedSpotTraining": True,
                "BillableTimeInSeconds": 1234,
            },
        }
    )
    assert outcome.training_job_arn == "arn:aws:sagemaker:us-east-1:123456789012:training-job/j"
    assert (outcome.capacity_type, outcome.billable_time_s) == ("spot", 1234)
    assert outcome.event_time == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    datum = job_events.outcome_datum(outcome)
    assert datum == {
        "MetricName": "TrainingJobOutcomes",
        "Dimensions": [{"Name": "TrainingJobStatus", "Value": "Completed"}],
        "Timestamp": outcome.event_time,
        "Value": 1.0,
        "Unit": "Count",
    }


# -- the invocation's deadline: every AWS call ends inside the function's timeout ----------------------------


def test_a_stalled_endpoint_ends_the_handler_inside_its_time_with_deadline_exceeded(
    aws, monkeypatch, stalled_endpoint, caplog
):
    """Every client of the handler (DynamoDB for the idempotency record, CloudWatch) at a socket that accepts and
    never answers: the invocation answers DeadlineExceeded (not Powertools' wrapper) before Lambda would kill it."""
    emulator_environ(monkeypatch, aws, JOB_EVENTS_HANDLER, AWS_ENDPOINT_URL=stalled_endpoint)
    monkeypatch.setenv(settings.ENV_IDEMPOTENCY_TABLE, IDEMPOTENCY_TABLE)
    monkeypatch.setattr(job_events, "_recorder", None)
    name = create_job(aws)
    aws.set_job_status(name, "Completed")
    event = state_change(aws, name, an_event_time())
    # the clients and Powertools' idempotency are made inside the invocation: 2 s of margin on a loaded machine
    context = LambdaContext("job-events", 6.0)
    started = time.monotonic()
    with pytest.raises(job_events.DeadlineExceeded) as raised:
        job_events.lambda_handler(event, context)
    assert time.monotonic() - started < 6.0
    error = raised.value
    assert type(error).__name__ == "DeadlineExceeded" and error.retriable is True  # Lambda's errorType
    assert error.operation == "dynamodb.PutItem"  # Powertools claims the event first
    assert "attempt 1 was sent and its answer was not received in time (ReadTimeoutError)" in str(error)
    assert f"Lambda runs the event again (up to {settings.JOB_EVENTS_RETRY_ATTEMPTS} times" in str(error)
    (logged,) = [r for r in caplog.records if r.name == "job-events" and r.getMessage() == "deadline exceeded"]
    assert (logged.operation, logged.training_job_name) == ("dynamodb.PutItem", name)


def test_a_stalled_put_metric_data_ends_in_time_and_the_retry_counts_the_outcome_once(
    aws, cloudwatch, monkeypatch, stalled_endpoint
):
    """The event is claimed (its idempotency record written), then CloudWatch never answers: the invocation ends
    in time saying the outcome may have been counted; Lambda's retry, after the claim lapsed with the
    invocation, counts it once."""
    from platform_constructs.observability.runtime import aws as runtime_aws

    emulator_environ(monkeypatch, aws, JOB_EVENTS_HANDLER)
    stalled = runtime_aws.cloudwatch_client()

    def to_the_stalled_endpoint(request, **_):
        request.url = stalled_endpoint + "/"

    stalled.meta.events.register("before-send.cloudwatch.PutMetricData", to_the_stalled_endpoint)
    dynamodb = runtime_aws.dynamodb_client()
    record, config = job_events.make_recorder(cloudwatch=stalled, dynamodb=dynamodb, table_name=IDEMPOTENCY_TABLE)
    name = create_job(aws)
    aws.set_job_status(name, "Failed", failure_reason="AlgorithmError: NCCL timeout")
    at = an_event_time()
    event = state_change(aws, name, at)

    context = LambdaContext("job-events", 5.0)
    config.register_lambda_context(context)
    started = time.monotonic()
    with pytest.raises(job_events.DeadlineExceeded) as raised:
        job_events.handle(event, record, deadline=job_events.Deadline.from_lambda_context(context))
    assert time.monotonic() - started < 5.0
    assert raised.value.operation == "cloudwatch.PutMetricData" and raised.value.may_have_taken_effect
    assert "the outcome may have been counted, and a retry counts it again" in str(raised.value)
    assert outcomes(cloudwatch, "Failed", at) == 0

    time.sleep(context.get_remaining_time_in_millis() / 1000 + 0.2)  # Lambda retries a minute later
    retry_record, retry_config = job_events.make_recorder(
        cloudwatch=runtime_aws.cloudwatch_client(), dynamodb=dynamodb, table_name=IDEMPOTENCY_TABLE
    )
    retry = LambdaContext("job-events", settings.JOB_EVENTS_TIMEOUT_S)
    retry_config.register_lambda_context(retry)
    answer = job_events.handle(event, retry_record, deadline=job_events.Deadline.from_lambda_context(retry))
    assert answer["counted"] is True
    assert job_events.handle(event, retry_record)["counted"] is True  # a duplicate: the first answer again
    assert outcomes(cloudwatch, "Failed", at) == 1


def test_a_deadline_already_past_sends_nothing_and_the_retry_counts_once(aws, cloudwatch, monkeypatch):
    from platform_constructs.observability.runtime import aws as runtime_aws

    emulator_environ(monkeypatch, aws, JOB_EVENTS_HANDLER)
    record, _ = job_events.make_recorder(
        cloudwatch=runtime_aws.cloudwatch_client(), dynamodb=runtime_aws.dynamodb_client(), table_name=IDEMPOTENCY_TABLE
    )
    name = create_job(aws)
    aws.set_job_status(name, "Stopped")
    at = an_event_time()
    event = state_change(aws, name, at)
    # the emulator puts the job's own state-change events on the bus from a thread: let them land before the
    # call record is cleared, or one lands after it as a call the handler never made (seen under load)
    deadline = time.monotonic() + 30.0
    while any(e["bus"]["status"] == "pending" for e in aws.events(name)) and time.monotonic() < deadline:
        time.sleep(0.1)
    aws.clear_calls()
    with pytest.raises(job_events.DeadlineExceeded) as raised:
        job_events.handle(event, record, deadline=job_events.Deadline(-1.0))
    assert (raised.value.attempts_sent, raised.value.operation) == (0, "dynamodb.PutItem")
    assert "so PutItem was not sent" in str(raised.value)
    assert aws.calls() == []
    assert job_events.handle(event, record)["counted"] is True
    assert outcomes(cloudwatch, "Stopped", at) == 1
