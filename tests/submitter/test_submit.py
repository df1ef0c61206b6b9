"""The submitter against the `trainctl local-aws` emulator over HTTP: capacity, refusals, idempotency."""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import uuid

import botocore.exceptions
import pytest

from platform_spec.hyperparameters import parse
from platform_spec.metric_lines import METRIC_DEFINITIONS

pytestmark = pytest.mark.xdist_group("submitter")


def plan_arn(name: str) -> str:
    return f"arn:aws:sagemaker:us-east-1:123456789012:training-plan/{name}"


def _job_names(aws) -> set[str]:
    return {j["name"] for j in aws.training_jobs()}


def _tags(aws, arn: str) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in aws.client("sagemaker").list_tags(ResourceArn=arn)["Tags"]}


# --- capacity ------------------------------------------------------------------------------


def test_submission_on_a_plan_creates_the_job_as_specified(aws, submit, runtime, make_request):
    sm = aws.client("sagemaker")
    before = sm.describe_training_plan(TrainingPlanName="b200-soon")["AvailableInstanceCount"]
    request = make_request(tags={"team": "research"})
    response = submit(request)

    assert response["status"] == "submitted", response
    assert response["replayed"] is False
    capacity = response["capacity"]
    # b200-soon and b200-long are eligible; b200-soon expires first, so it is used first
    assert capacity["type"] == "training-plan"
    assert capacity["training_plan_arn"] == plan_arn("b200-soon")
    assert "expires first" in capacity["reason"]
    skipped = {p["training_plan_arn"].rsplit("/", 1)[-1]: p["reason"] for p in capacity["skipped_plans"]}
    assert set(skipped) == {"b200-long", "b200-short", "b200-expired", "b200-lapsed", "b200-hyperpod", "p5-scheduled"}
    assert skipped["b200-long"].startswith("eligible, but expires after b200-soon")
    assert "max_runtime_hours=24" in skipped["b200-short"]
    assert skipped["b200-expired"] == "status is Expired (needs Active or Scheduled)"
    assert skipped["b200-lapsed"] == "status is Expired (needs Active or Scheduled)"
    assert "hyperpod-cluster, not training-job" in skipped["b200-hyperpod"]
    assert "reserves ml.p5.48xlarge, request needs ml.p6-b200.48xlarge" in skipped["p5-scheduled"]
    assert response["estimate"]["fits"] is True and response["estimate"]["mfu"] > 0

    job = sm.describe_training_job(TrainingJobName=response["training_job_name"])
    name = job["TrainingJobName"]
    assert job["TrainingJobArn"] == response["training_job_arn"]
    assert job["TrainingJobStatus"] == "InProgress"
    assert job["AlgorithmSpecification"]["MetricDefinitions"] == METRIC_DEFINITIONS
    assert job["AlgorithmSpecification"]["TrainingImage"] == json.loads(aws.env["TRAINER_IMAGE_URIS"])["amd64"]
    expected_hp = parse(request["hyperparameters"]).to_strings()
    assert job["HyperParameters"] == expected_hp and job["HyperParameters"]["num_layers"] == "10"
    assert job["ResourceConfig"] == {
        "InstanceType": "ml.p6-b200.48xlarge",
        "InstanceCount": 1,
        "VolumeSizeInGB": 500,
        "TrainingPlanArn": plan_arn("b200-soon"),
    }
    assert job["CheckpointConfig"] == {
        "S3Uri": f"s3://{aws.env['CHECKPOINT_BUCKET']}/checkpoints/{name}/",
        "LocalPath": "/opt/ml/checkpoints",
    }
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 24 * 3600}
    assert job["EnableManagedSpotTraining"] is False
    assert job["RetryStrategy"] == {"MaximumRetryAttempts": 3}
    # NCCL/EFA settings are the image's (training/Dockerfile): a job never pins its own over them
    assert "Environment" not in job or not any(k.startswith(("FI_", "NCCL_", "GLOO_")) for k in job["Environment"])
    assert job["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == (
        f"s3://{aws.env['DATA_BUCKET']}/datasets/guide/train/"
    )
    assert job["RoleArn"] == aws.env["EXECUTION_ROLE_ARN"]
    tags = _tags(aws, job["TrainingJobArn"])
    assert tags["team"] == "research"
    assert tags["platform"] == "training-platform" and tags["environment"] == "local"
    assert tags["platform:capacity-type"] == "training-plan"
    config = runtime.config.SubmitterConfig.from_environ(aws.env)
    assert tags["platform:request-sha256-v2"] == runtime.request.parse_request(request, config).fingerprint()
    assert "platform:request-sha256" not in tags  # the previous version's tag is read, never written
    assert tags["platform:client-token-sha256"] == hashlib.sha256(request["client_token"].encode()).hexdigest()

    # the job now holds one of the plan's instances
    assert sm.describe_training_plan(TrainingPlanName="b200-soon")["AvailableInstanceCount"] == before - 1


def test_a_larger_job_goes_to_the_plan_with_enough_instances(submit, make_request):
    response = submit(make_request(instance_count=3, dry_run=True))
    assert response["status"] == "validated", response
    assert response["capacity"]["training_plan_arn"] == plan_arn("b200-long")


def test_a_named_plan_is_used_even_if_another_expires_first(submit, make_request):
    response = submit(make_request(training_plan_arn=plan_arn("b200-long")))
    assert response["status"] == "submitted", response
    assert response["capacity"]["training_plan_arn"] == plan_arn("b200-long")


def test_spot_submission(aws, submit, make_request):
    response = submit(make_request(capacity="spot", max_runtime_hours=10))
    assert response["status"] == "submitted", response
    assert response["capacity"]["type"] == "spot" and "training_plan_arn" not in response["capacity"]
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    assert job["EnableManagedSpotTraining"] is True
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 36000, "MaxWaitTimeInSeconds": 72000}
    assert "TrainingPlanArn" not in job["ResourceConfig"]


def test_on_demand_submission(aws, submit, make_request):
    response = submit(make_request(capacity="on-demand"))
    assert response["status"] == "submitted", response
    assert response["capacity"] == {"type": "on-demand", "rule": "requested", "reason": "on-demand capacity requested"}
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    assert job["EnableManagedSpotTraining"] is False
    assert "TrainingPlanArn" not in job["ResourceConfig"]
    assert "MaxWaitTimeInSeconds" not in job["StoppingCondition"]


def test_auto_uses_a_plan_when_one_is_eligible(submit, make_request):
    response = submit(make_request(capacity="auto", dry_run=True))
    assert response["capacity"]["type"] == "training-plan", response


def test_auto_falls_through_to_spot_when_no_plan_is_eligible(aws, submit, make_request):
    response = submit(make_request(capacity="auto", instance_count=5))
    assert response["status"] == "submitted", response
    assert response["capacity"]["type"] == "spot"
    assert "no configured training plan is eligible" in response["capacity"]["reason"]
    assert len(response["capacity"]["skipped_plans"]) == 7
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    assert job["EnableManagedSpotTraining"] is True and job["ResourceConfig"]["InstanceCount"] == 5


def test_auto_falls_through_to_on_demand_when_the_spot_quota_is_exhausted(aws, submit, make_request):
    aws.inject_fault("CreateTrainingJob", "ResourceLimitExceeded", match={"EnableManagedSpotTraining": True})
    aws.clear_calls()
    response = submit(make_request(capacity="auto", instance_count=5))
    assert response["status"] == "submitted", response
    assert response["capacity"]["type"] == "on-demand"
    attempts = aws.calls("CreateTrainingJob")
    assert [c["params"].get("EnableManagedSpotTraining", False) for c in attempts] == [True, False]


# --- refusals ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field", "expected"),
    [
        ({"instance_count": 0}, "instance_count", "an integer from 1 to 256"),
        ({"capacity": "cheap"}, "capacity", "one of training-plan, spot, on-demand, auto"),
        ({"instance_typ": "ml.p5.48xlarge"}, "instance_typ", "a known request field"),
        ({"instance_type": "ml.g5.xlarge"}, "instance_type", "one of the allowed types"),
        ({"hyperparameters": {"batch_size": "eight"}}, "hyperparameters.batch_size", "an integer >= 1"),
        ({"hyperparameters": {"model": "gpt-2t"}}, "hyperparameters.model", "one of gpt-tiny"),
        ({"hyperparameters": {"nope": 1}}, "hyperparameters.nope", "a known hyperparameter"),
        (
            {"instance_type": "ml.p5.48xlarge", "hyperparameters": {"precision": "mxfp8"}},
            "hyperparameters.precision",
            "a precision H100 on ml.p5.48xlarge supports",
        ),
        (
            {"inputs": {"train": "s3://someone-elses-bucket/data/"}},
            "inputs.train",
            "a URI under s3://training-platform-data-local/",
        ),
        ({"inputs": {}}, "inputs.train", "an s3:// URI for the train channel"),
        ({"tags": {"platform:capacity-type": "x"}}, "tags.platform:capacity-type", "reserved"),
        ({"tags": {"platform": "mine"}}, "tags.platform", "the platform sets tag 'platform'"),
        ({"job_name": "-bad-"}, "job_name", "1-63 letters, digits and hyphens"),
        ({"max_runtime_hours": 0}, "max_runtime_hours", "a number of hours > 0"),
        ({"capacity": "spot", "max_wait_hours": 1}, "max_wait_hours", ">= max_runtime_hours (24)"),
        ({"training_plan_arn": plan_arn("not-ours")}, "training_plan_arn", "one of the configured plans"),
        (
            {"capacity": "spot", "training_plan_arn": plan_arn("b200-soon")},
            "training_plan_arn",
            "no plan with capacity 'spot'",
        ),
    ],
)
def test_invalid_request_names_the_field_and_creates_nothing(aws, submit, overrides, field, expected, make_request):
    aws.clear_calls()
    response = submit(make_request(**overrides))
    assert response["status"] == "rejected", response
    error = response["error"]
    assert error["code"] == "InvalidRequest"
    assert error["field"] == field
    assert expected in error["message"]
    assert aws.calls("CreateTrainingJob") == []


@pytest.mark.parametrize("event", [None, [], "a string", 42, {"hyperparameters": "gpt-1b"}, {1: 2}])
def test_malformed_events_are_refused_not_raised(submit, event):
    response = submit(event)
    assert response["status"] == "rejected"
    assert response["error"]["code"] == "InvalidRequest"


def test_no_capacity_lists_every_plan_and_why(aws, submit, make_request):
    aws.clear_calls()
    response = submit(make_request(instance_count=5))
    assert response["status"] == "rejected", response
    error = response["error"]
    assert error["code"] == "NoCapacity"
    reasons = {p["training_plan_arn"].rsplit("/", 1)[-1]: p["reason"] for p in error["details"]["plans"]}
    assert len(reasons) == 7
    assert reasons["b200-long"] == "4 instance(s) available, request needs 5"
    assert reasons["b200-soon"] == "2 instance(s) available, request needs 5"
    assert "b200-long: 4 instance(s) available, request needs 5" in error["message"]
    assert aws.calls("CreateTrainingJob") == []


def test_no_capacity_on_a_named_expired_plan(submit, make_request):
    response = submit(make_request(training_plan_arn=plan_arn("b200-expired")))
    assert response["error"]["code"] == "NoCapacity"
    assert response["error"]["details"]["plans"] == [
        {"training_plan_arn": plan_arn("b200-expired"), "reason": "status is Expired (needs Active or Scheduled)"}
    ]


BIG = {"model": "gpt-32b", "precision": "mxfp8", "batch_size": 16, "seq_length": 8192}


def test_predicted_out_of_memory_gives_the_estimate_and_the_fix(aws, submit, make_request):
    aws.clear_calls()
    response = submit(make_request(hyperparameters=BIG))
    assert response["status"] == "rejected", response
    error = response["error"]
    assert error["code"] == "PredictedOutOfMemory"
    assert error["details"]["estimate"]["fits"] is False
    assert error["details"]["estimate"]["memory_gb"]["total"] > 180
    suggestion = error["details"]["suggestion"]
    # a checkpointing mode (selective every Nth block, or full) is part of the fix at ~14B+
    assert suggestion["changes"] and suggestion["hyperparameters"]["activation_checkpointing"] != "off"
    assert aws.calls("CreateTrainingJob") == []


def test_auto_tune_applies_the_planners_change(aws, submit, make_request):
    response = submit(make_request(hyperparameters=BIG, auto_tune=True))
    assert response["status"] == "submitted", response
    assert response["estimate"]["fits"] is True
    changed = response["auto_tune"]["hyperparameters"]
    assert changed["activation_checkpointing"] in ("full", "selective:2", "selective:3", "selective:4", "selective:8")
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    for name, value in changed.items():
        assert job["HyperParameters"][name] == value
    assert job["HyperParameters"]["model"] == "gpt-32b" and job["HyperParameters"]["seq_length"] == "8192"


def test_quota_exceeded_names_the_quota_and_creates_nothing(aws, submit, make_request):
    aws.inject_fault("CreateTrainingJob", "ResourceLimitExceeded")
    before = _job_names(aws)
    response = submit(make_request(capacity="on-demand"))
    assert response["status"] == "rejected", response
    error = response["error"]
    assert error["code"] == "QuotaExceeded"
    assert error["details"]["quota"] == "ml.p6-b200.48xlarge for training job usage"
    assert "ml.p6-b200.48xlarge for training job usage" in error["message"]
    assert _job_names(aws) == before


def test_conflict_when_a_token_is_reused_for_another_request(submit, make_request):
    token = f"conflict-{uuid.uuid4()}"
    first = submit(make_request(client_token=token))
    assert first["status"] == "submitted", first
    second = submit(make_request(client_token=token, max_runtime_hours=12))
    assert second["status"] == "rejected"
    assert second["error"]["code"] == "Conflict"
    assert second["error"]["field"] == "client_token"
    assert second["error"]["details"]["training_job_arn"] == first["training_job_arn"]


def test_conflict_when_a_job_name_is_taken_by_another_request(submit, make_request):
    name = f"named-{uuid.uuid4().hex[:12]}"
    first = submit(make_request(client_token=None, job_name=name, capacity="on-demand"))
    assert first["status"] == "submitted" and first["training_job_name"] == name
    second = submit(make_request(client_token=None, job_name=name, capacity="spot"))
    assert second["error"]["code"] == "Conflict" and second["error"]["field"] == "job_name"


# --- dry run and idempotency -----------------------------------------------------------------


@pytest.mark.parametrize("capacity", ["training-plan", "spot", "on-demand", "auto"])
def test_dry_run_creates_nothing(aws, submit, capacity, make_request):
    aws.clear_calls()
    before = _job_names(aws)
    response = submit(make_request(capacity=capacity, dry_run=True))
    assert response["status"] == "validated", response
    assert "training_job_arn" not in response
    params = response["create_training_job"]
    assert params["TrainingJobName"] == response["training_job_name"]
    assert params["AlgorithmSpecification"]["MetricDefinitions"] == METRIC_DEFINITIONS
    assert response["estimate"]["fits"] is True
    assert aws.calls("CreateTrainingJob") == []
    assert _job_names(aws) == before


def test_same_token_returns_the_first_job(aws, submit, make_request):
    request = make_request(capacity="training-plan")
    first = submit(request)
    assert first["status"] == "submitted" and first["replayed"] is False
    # even when the plan's instances are now taken by that very job
    second = submit(dict(request))
    assert second["status"] == "submitted" and second["replayed"] is True
    assert second["training_job_arn"] == first["training_job_arn"]
    assert second["capacity"]["type"] == "training-plan"
    assert second["capacity"]["training_plan_arn"] == first["capacity"]["training_plan_arn"]
    # equivalent spellings of the same request are the same request
    third = submit(dict(request, hyperparameters={k.upper(): str(v) for k, v in request["hyperparameters"].items()}))
    assert third["training_job_arn"] == first["training_job_arn"] and third["replayed"] is True
    assert sum(1 for n in _job_names(aws) if n == first["training_job_name"]) == 1


def test_same_job_name_and_request_returns_the_first_job(submit, make_request):
    name = f"same-{uuid.uuid4().hex[:12]}"
    request = make_request(client_token=None, job_name=name, capacity="on-demand")
    first, second = submit(request), submit(dict(request))
    assert first["training_job_arn"] == second["training_job_arn"]
    assert (first["replayed"], second["replayed"]) == (False, True)


def test_eight_concurrent_duplicates_create_one_job(aws, submit, make_request):
    request = make_request(capacity="on-demand")
    aws.clear_calls()
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(lambda _: submit(dict(request)), range(8)))
    assert all(r["status"] == "submitted" for r in responses), responses
    assert len({r["training_job_arn"] for r in responses}) == 1
    assert sum(not r["replayed"] for r in responses) == 1
    name = responses[0]["training_job_name"]
    listed = aws.client("sagemaker").list_training_jobs(NameContains=name)["TrainingJobSummaries"]
    assert [j["TrainingJobName"] for j in listed] == [name]


# --- transient faults ----------------------------------------------------------------------


def test_throttling_is_retried(aws, submit, make_request):
    aws.inject_fault("CreateTrainingJob", "ThrottlingException", count=2)
    aws.clear_calls()
    response = submit(make_request(capacity="on-demand"))
    assert response["status"] == "submitted", response
    assert len(aws.calls("CreateTrainingJob")) == 3


@pytest.mark.parametrize(
    ("operation", "code"), [("DescribeTrainingPlan", "ThrottlingException"), ("CreateTrainingJob", "InternalFailure")]
)
def test_persistent_faults_raise_and_create_nothing(aws, submit, operation, code, make_request):
    aws.inject_fault(operation, code, count=-1)
    before = _job_names(aws)
    with pytest.raises(botocore.exceptions.ClientError) as raised:
        submit(make_request())
    assert raised.value.response["Error"]["Code"] == code
    assert raised.value.response["ResponseMetadata"]["RetryAttempts"] == 2  # AWS_MAX_ATTEMPTS=3
    assert _job_names(aws) == before


def test_submit_local_leaves_no_closed_stream_behind(env, tmp_path):
    """A caller may close the stderr it called with; the next call must not touch that stream."""
    import contextlib

    from trainctl.submitter_client import submit_local

    request = {"dry_run": True, "capacity": "on-demand", "inputs": {"train": "datasets/x/"}}
    log_path = tmp_path / "first.log"
    with open(log_path, "w", encoding="utf-8") as log, contextlib.redirect_stderr(log):
        assert submit_local(request, env)["status"] == "validated"
    # `log` is closed now: a log handler still holding it would raise ValueError on the next call
    assert submit_local(request, env)["status"] == "validated"
    assert '"submission answered"' in log_path.read_text()
