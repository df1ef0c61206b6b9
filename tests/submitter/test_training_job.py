"""The one reader of a training job (``runtime/training_job.py``): a job that exists but is not yet visible.

After ``CreateTrainingJob`` answers ``ResourceInUse`` the job exists, yet ``DescribeTrainingJob`` may miss it for a
moment; the emulator never lags, so botocore's ``Stubber`` plays SageMaker here (each stubbed call and answer is
checked against botocore's model of the service).
"""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from platform_constructs.lambda_runtime.deadline import deadline_scope
from platform_constructs.submitter.runtime import training_job
from platform_constructs.submitter.runtime.aws import Clients, Deadline
from platform_constructs.submitter.runtime.errors import DeadlineExceeded

NAME = "gpt-1b-settling"
ARN = f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{NAME}"
MISSING = {"service_error_code": "ValidationException", "service_message": "Requested resource not found."}


@pytest.fixture
def stubbed():
    """Clients whose SageMaker is a ``Stubber``; every queued answer must have been used."""
    clients = Clients.create(
        environ={"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    )
    with Stubber(clients.sagemaker) as stub:
        yield clients, stub
        stub.assert_no_pending_responses()


def _description() -> dict:
    return {
        "TrainingJobName": NAME,
        "TrainingJobArn": ARN,
        "TrainingJobStatus": "InProgress",
        "SecondaryStatus": "Starting",
        "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "trainer:1"},
        "ResourceConfig": {"VolumeSizeInGB": 100},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "CreationTime": "2026-12-01T00:00:00Z",
        "ModelArtifacts": {"S3ModelArtifacts": "s3://out/model.tar.gz"},
    }


def _miss(stub: Stubber, times: int) -> None:
    for _ in range(times):
        stub.add_client_error("describe_training_job", expected_params={"TrainingJobName": NAME}, **MISSING)


def test_a_settling_read_describes_again_until_the_job_shows(stubbed, monkeypatch):
    clients, stub = stubbed
    monkeypatch.setattr(training_job, "SETTLE_INTERVAL_S", 0.01)
    _miss(stub, training_job.SETTLE_ATTEMPTS - 1)
    stub.add_response("describe_training_job", _description(), {"TrainingJobName": NAME})
    stub.add_response("list_tags", {"Tags": [{"Key": training_job.TAG_SUBMITTER, "Value": "job-submitter"}]})
    job = training_job.existing_job(clients, NAME, settle=True)
    assert job is not None
    assert job["description"]["TrainingJobArn"] == ARN
    assert job["tags"] == {training_job.TAG_SUBMITTER: "job-submitter"}


def test_a_settling_read_gives_up_after_its_attempts_and_a_plain_read_after_one(stubbed, monkeypatch):
    clients, stub = stubbed
    monkeypatch.setattr(training_job, "SETTLE_INTERVAL_S", 0.01)
    _miss(stub, training_job.SETTLE_ATTEMPTS)
    assert training_job.existing_job(clients, NAME, settle=True) is None
    _miss(stub, 1)
    assert training_job.existing_job(clients, NAME) is None  # one describe, no wait


def test_a_settling_read_waits_only_within_the_deadline(stubbed):
    clients, stub = stubbed
    _miss(stub, 1)
    # 1.1 s left: the 1 s kept to answer leaves too little for a 0.2 s wait and another describe
    with deadline_scope(Deadline(1.1)), pytest.raises(DeadlineExceeded) as raised:
        training_job.existing_job(clients, NAME, settle=True)
    assert raised.value.operation == "sagemaker.DescribeTrainingJob"


def test_another_error_of_the_describe_is_raised_not_taken_for_a_missing_job(stubbed):
    clients, stub = stubbed
    stub.add_client_error("describe_training_job", service_error_code="AccessDeniedException", http_status_code=400)
    with pytest.raises(ClientError) as raised:
        training_job.existing_job(clients, NAME, settle=True)
    assert raised.value.response["Error"]["Code"] == "AccessDeniedException"
