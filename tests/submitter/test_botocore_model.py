"""Every AWS call checked against botocore's service model, and the emulator's answers too."""

from __future__ import annotations

import botocore.exceptions
import pytest
from botocore.config import Config

from devtools.local_aws.shapes import validate_input, validate_output

pytestmark = pytest.mark.xdist_group("submitter")


def test_the_submitters_clients_validate_parameters(clients):
    for client in (clients.sagemaker, clients.ssm):
        assert client.meta.config.parameter_validation is True
        assert client.meta.config.retries["mode"] in ("standard", "adaptive")


def test_a_misspelt_field_fails_before_it_is_sent(aws, clients, submit, make_request):
    params = submit(make_request(dry_run=True))["create_training_job"]
    typo = dict(params)
    typo["TrainingJobNme"] = typo.pop("TrainingJobName")
    aws.clear_calls()
    with pytest.raises(botocore.exceptions.ParamValidationError, match="TrainingJobNme"):
        clients.sagemaker.create_training_job(**typo)
    wrong_type = dict(params, ResourceConfig={**params["ResourceConfig"], "InstanceCount": "1"})
    with pytest.raises(botocore.exceptions.ParamValidationError, match="InstanceCount"):
        clients.sagemaker.create_training_job(**wrong_type)
    assert aws.calls("CreateTrainingJob") == []


@pytest.mark.parametrize("capacity", ["training-plan", "spot", "on-demand"])
def test_built_parameters_satisfy_the_whole_model(submit, make_request, capacity):
    """Beyond botocore's checks: max lengths and counts, enums and patterns."""
    params = submit(make_request(capacity=capacity, dry_run=True, tags={"team": "a b"}))["create_training_job"]
    assert validate_input("sagemaker", "CreateTrainingJob", params) == []
    assert "InfraCheckConfig" not in params  # one instance: off, SageMaker's default (not sent)
    answer = submit(make_request(capacity=capacity, dry_run=True, instance_count=2))
    assert answer["infra_check"] is True and answer["create_training_job"]["InfraCheckConfig"]["EnableInfraCheck"]
    assert validate_input("sagemaker", "CreateTrainingJob", answer["create_training_job"]) == []


def test_the_model_check_catches_what_botocore_does_not(submit, make_request):
    params = submit(make_request(dry_run=True))["create_training_job"]
    bad = dict(params, HyperParameters={"model": "x" * 2501}, RetryStrategy={"MaximumRetryAttempts": 31})
    problems = validate_input("sagemaker", "CreateTrainingJob", bad)
    assert any("HyperParameters" in p and "2501 > max 2500" in p for p in problems), problems
    assert any("MaximumRetryAttempts" in p and "31 > max 30" in p for p in problems), problems


def test_the_emulators_training_plan_answers_fit_the_model(aws):
    sm = aws.client("sagemaker")
    for name in ("b200-soon", "b200-lapsed", "p5-scheduled", "b200-hyperpod"):
        response = sm.describe_training_plan(TrainingPlanName=name)
        assert validate_output("sagemaker", "DescribeTrainingPlan", response) == []
    assert sm.describe_training_plan(TrainingPlanName="b200-lapsed")["Status"] == "Expired"
    assert sm.describe_training_plan(TrainingPlanName="p5-scheduled")["Status"] == "Scheduled"

    page = sm.list_training_plans(MaxResults=3, SortBy="TrainingPlanName")
    assert validate_output("sagemaker", "ListTrainingPlans", page) == []
    assert [p["TrainingPlanName"] for p in page["TrainingPlanSummaries"]] == [
        "b200-expired",
        "b200-hyperpod",
        "b200-lapsed",
    ]
    rest = sm.list_training_plans(MaxResults=10, SortBy="TrainingPlanName", NextToken=page["NextToken"])
    assert len(rest["TrainingPlanSummaries"]) == 4 and "NextToken" not in rest
    active = sm.list_training_plans(Filters=[{"Name": "Status", "Value": "Active"}])["TrainingPlanSummaries"]
    assert {p["TrainingPlanName"] for p in active} == {"b200-long", "b200-soon", "b200-short", "b200-hyperpod"}

    offerings = sm.search_training_plan_offerings(
        InstanceType="ml.p6-b200.48xlarge", InstanceCount=2, DurationHours=72, TargetResources=["training-job"]
    )
    assert validate_output("sagemaker", "SearchTrainingPlanOfferings", offerings) == []
    (offering,) = offerings["TrainingPlanOfferings"]
    (reserved,) = offering["ReservedCapacityOfferings"]
    assert reserved["InstanceCount"] == 2 and offering["DurationHours"] == 72
    assert (reserved["EndTime"] - reserved["StartTime"]).total_seconds() == 72 * 3600

    with pytest.raises(sm.exceptions.ResourceNotFound):
        sm.describe_training_plan(TrainingPlanName="no-such-plan")


def test_the_emulator_checks_requests_that_bypass_client_validation(aws):
    raw = aws.client("sagemaker", parameter_validation=False)
    with pytest.raises(botocore.exceptions.ClientError, match="InstanceCount") as raised:
        raw.search_training_plan_offerings(InstanceType="ml.p6-b200.48xlarge", InstanceCount=1000)
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    with pytest.raises(botocore.exceptions.ClientError, match="SortBy"):
        raw.list_training_plans(SortBy="Price")


def test_the_emulator_refuses_a_create_that_bypasses_client_validation(aws, submit, make_request):
    params = submit(make_request(dry_run=True))["create_training_job"]
    raw = aws.client("sagemaker", parameter_validation=False)
    with pytest.raises(botocore.exceptions.ClientError, match="MaximumRetryAttempts") as raised:
        raw.create_training_job(**dict(params, RetryStrategy={"MaximumRetryAttempts": 31}))
    assert raised.value.response["Error"]["Code"] == "ValidationException"
    assert params["TrainingJobName"] not in {j["name"] for j in aws.training_jobs()}


def test_describe_training_job_answers_fit_the_model(aws, submit, make_request, runtime, clients, config):
    response = submit(make_request(capacity="spot", instance_count=2))
    assert response["infra_check"] is True
    described = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    assert validate_output("sagemaker", "DescribeTrainingJob", described) == []
    assert described["InfraCheckConfig"] == {"EnableInfraCheck": True}  # kept as sent
    view = runtime.actions.dispatch(
        {"action": "describe", "job_name": response["training_job_name"]}, clients=clients, config=config
    )
    assert view["job"]["infra_check"] is True


def test_adaptive_retry_mode_is_accepted(runtime, env):
    clients = runtime.aws.Clients.create(environ={**env, "AWS_RETRY_MODE": "adaptive"})
    assert clients.sagemaker.meta.config.retries["mode"] == "adaptive"
    assert isinstance(runtime.aws.client_config({}), Config)


def test_the_emulators_search_finds_jobs_by_their_token_tag_and_fits_the_model(aws, submit, make_request):
    """moto's Search (TrainingJob) handles the tag filter the submitter sends, so the emulator needs no
    extension for it; its answers are checked against botocore's model here."""
    import hashlib

    request = make_request(capacity="on-demand")
    response = submit(request)
    digest = hashlib.sha256(request["client_token"].encode()).hexdigest()
    params = {
        "Resource": "TrainingJob",
        "SearchExpression": {
            "Filters": [{"Name": "Tags.platform:client-token-sha256", "Operator": "Equals", "Value": digest}]
        },
        "SortBy": "CreationTime",
        "SortOrder": "Ascending",
        "MaxResults": 10,
    }
    assert validate_input("sagemaker", "Search", params) == []
    found = aws.client("sagemaker").search(**params)
    assert validate_output("sagemaker", "Search", found) == []
    (result,) = found["Results"]
    job = result["TrainingJob"]
    assert job["TrainingJobName"] == response["training_job_name"]
    assert {"Key": "platform:client-token-sha256", "Value": digest} in job["Tags"]
    other = dict(
        params, SearchExpression={"Filters": [{**params["SearchExpression"]["Filters"][0], "Value": "0" * 64}]}
    )
    assert aws.client("sagemaker").search(**other)["Results"] == []
