"""Shared fixtures: one `trainctl local-aws` emulator per test session (per xdist worker).

Every module that uses it is in xdist group ``submitter`` so they share one
worker, hence one emulator. Tests give their jobs unique names / tokens; after
each test the emulator's running jobs are completed (to free training-plan
instances) and injected faults are cleared.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from devtools.local_aws.client import LocalAws
from platform_constructs.submitter.runtime import actions as _actions
from platform_constructs.submitter.runtime import aws as _aws
from platform_constructs.submitter.runtime import capacity as _capacity
from platform_constructs.submitter.runtime import config as _config
from platform_constructs.submitter.runtime import errors as _errors
from platform_constructs.submitter.runtime import handler as _handler
from platform_constructs.submitter.runtime import job as _job
from platform_constructs.submitter.runtime import ledger as _ledger
from platform_constructs.submitter.runtime import request as _request
from platform_constructs.submitter.runtime import request_schema as _request_schema
from platform_constructs.submitter.runtime import service as _service
from platform_constructs.submitter.runtime import settings as _settings

PLANS: list[dict[str, Any]] = [
    {   # eligible, expires last
        "TrainingPlanName": "b200-long", "Status": "Active", "InstanceType": "ml.p6-b200.48xlarge",
        "TotalInstanceCount": 4, "StartTime": "now-1d", "EndTime": "now+20d",
    },
    {   # eligible for <= 2 instances, expires first among the eligible: chosen for small jobs
        "TrainingPlanName": "b200-soon", "Status": "Active", "InstanceType": "ml.p6-b200.48xlarge",
        "TotalInstanceCount": 2, "StartTime": "now-2d", "EndTime": "now+5d",
    },
    {   # too short for a 24 h job
        "TrainingPlanName": "b200-short", "Status": "Active", "InstanceType": "ml.p6-b200.48xlarge",
        "TotalInstanceCount": 8, "StartTime": "now-6d", "EndTime": "now+3h",
    },
    {
        "TrainingPlanName": "b200-expired", "Status": "Expired", "InstanceType": "ml.p6-b200.48xlarge",
        "TotalInstanceCount": 8, "AvailableInstanceCount": 0, "StartTime": "now-30d", "EndTime": "now-1d",
    },
    {   # seeded Active, but its EndTime has passed: DescribeTrainingPlan reports Expired
        "TrainingPlanName": "b200-lapsed", "Status": "Active", "InstanceType": "ml.p6-b200.48xlarge",
        "TotalInstanceCount": 8, "StartTime": "now-10d", "EndTime": "now-1h",
    },
    {
        "TrainingPlanName": "b200-hyperpod", "Status": "Active", "InstanceType": "ml.p6-b200.48xlarge",
        "TotalInstanceCount": 8, "StartTime": "now-1d", "EndTime": "now+30d", "TargetResources": ["hyperpod-cluster"],
    },
    {
        "TrainingPlanName": "p5-scheduled", "Status": "Scheduled", "InstanceType": "ml.p5.48xlarge",
        "TotalInstanceCount": 2, "StartTime": "now+2d", "EndTime": "now+10d",
    },
]  # fmt: skip


def plan_arn(name: str) -> str:
    return f"arn:aws:sagemaker:us-east-1:123456789012:training-plan/{name}"


def _make_request(**overrides: Any) -> dict[str, Any]:
    """The guide's default request with a fresh client_token, plus ``overrides`` (None removes a key)."""
    request: dict[str, Any] = {
        "client_token": f"test-{uuid.uuid4()}",
        "instance_type": "ml.p6-b200.48xlarge",
        "instance_count": 1,
        "capacity": "training-plan",
        "hyperparameters": {
            "model": "gpt-1b",
            "precision": "mxfp8",
            "num_layers": 10,
            "batch_size": 8,
            "seq_length": 2048,
        },
        "inputs": {"train": "datasets/guide/train/"},
        "max_runtime_hours": 24,
    }
    for key, value in overrides.items():
        if value is None:
            request.pop(key, None)
        else:
            request[key] = value
    return request


@pytest.fixture(scope="session")
def make_request():
    """``make_request(**overrides)``: the guide's default request with a fresh client_token."""
    return _make_request


@pytest.fixture(scope="session")
def runtime() -> SimpleNamespace:
    """The submitter's runtime modules (``platform_constructs.submitter.runtime``, as Lambda imports them)."""
    return SimpleNamespace(
        actions=_actions,
        service=_service,
        handler=_handler,
        request=_request,
        request_schema=_request_schema,
        config=_config,
        aws=_aws,
        job=_job,
        ledger=_ledger,
        capacity=_capacity,
        errors=_errors,
        settings=_settings,
    )


@pytest.fixture(scope="session")
def local_config(runtime):
    """A submitter configuration for tests that need no emulator (request parsing, rules, properties)."""
    return runtime.config.SubmitterConfig(
        trainer_image_uris={"amd64": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1"},
        execution_role_arn="arn:aws:iam::123456789012:role/exec",
        data_bucket="data",
        checkpoint_bucket="ckpt",
        output_bucket="out",
        output_kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f",
        training_plan_arns_parameter="/plans",
        allowed_input_prefixes=("s3://shared-datasets/public/",),
        platform_tags={"platform": "tp"},
    )


@pytest.fixture(scope="session")
def aws():
    with LocalAws(plans=PLANS) as emulator:
        yield emulator


@pytest.fixture(scope="session")
def env(aws) -> dict[str, str]:
    # 3 attempts keep the persistent-fault tests short; the default is 5
    return {**aws.env, "AWS_MAX_ATTEMPTS": "3"}


CONTINUATION_HANDLER = "platform_constructs.submitter.runtime.continuation.lambda_handler"
"""The run continuation's handler: its code runs as its own role (:meth:`LocalAws.function_env`)."""


@pytest.fixture(scope="session")
def continuation_env(aws) -> dict[str, str]:
    """The run continuation's environment: :func:`env` with its role's credentials."""
    return {**aws.function_env(CONTINUATION_HANDLER), "AWS_MAX_ATTEMPTS": "3"}


@pytest.fixture(scope="session")
def continuation_clients(continuation_env, runtime):
    return runtime.aws.Clients.create(environ=continuation_env)


@pytest.fixture(scope="session")
def record_s3(aws):
    """An S3 client signing as the submitter's role, to seed or remove client-token and run records: the output
    bucket's policy lets only the submitter and the continuation write them, as in AWS."""
    return aws.client("s3", access_key=aws.env["AWS_ACCESS_KEY_ID"])


@pytest.fixture(scope="session")
def config(env, runtime):
    return runtime.config.SubmitterConfig.from_environ(env)


@pytest.fixture(scope="session")
def clients(env, runtime):
    return runtime.aws.Clients.create(environ=env)


@pytest.fixture(scope="session")
def submit(runtime, clients, config):
    """``submit(event)`` -> response, the plain function the handler adapts."""

    def _submit(event: Any) -> dict[str, Any]:
        return runtime.service.submit(event, clients=clients, config=config)

    return _submit


@pytest.fixture(scope="session")
def token_jobs(aws):
    """``token_jobs(client_token)`` -> sorted names of every job tagged with the token's SHA-256
    (SageMaker ``Search`` on ``platform:client-token-sha256``; the emulator's is consistent)."""
    import hashlib

    def _jobs(token: str) -> list[str]:
        digest = hashlib.sha256(token.encode()).hexdigest()
        found = aws.client("sagemaker").search(
            Resource="TrainingJob",
            SearchExpression={
                "Filters": [{"Name": "Tags.platform:client-token-sha256", "Operator": "Equals", "Value": digest}]
            },
            MaxResults=100,
        )["Results"]
        return sorted(r["TrainingJob"]["TrainingJobName"] for r in found)

    return _jobs


@pytest.fixture(autouse=True)
def _reset_emulator(request):
    if "aws" not in request.fixturenames:
        yield
        return
    emulator, bucket = request.getfixturevalue("aws"), request.getfixturevalue("config").output_bucket
    s3 = request.getfixturevalue("continuation_clients").s3
    yield
    emulator.clear_faults()
    emulator.complete_active_jobs()
    # the runs a test leaves are abandoned (their jobs were just ended by hand, with no event): the next
    # test's ticks would reconcile them, submitting segments on the plans that test counts on. Their markers
    # are removed as the tick removes them, as the continuation: the bucket policy lets no one else write there
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=_settings.RUN_ACTIVE_PREFIX):
        for item in page.get("Contents") or []:
            s3.delete_object(Bucket=bucket, Key=item["Key"])


@pytest.fixture(scope="session")
def run_kit(aws, continuation_clients, continuation_env, config, make_request):
    """Helpers for runs (tests/submitter/test_runs.py, test_continuation.py): ``request(run_id, **run)``,
    ``checkpoint(run_id, step, state=...)``, ``event(job_name)`` (a SageMaker state-change event built
    from DescribeTrainingJob, as EventBridge delivers it), ``handle(event, now=None)`` (the continuation, as its
    role), ``clients`` (the continuation's)."""
    import json as _json

    from platform_constructs.submitter.runtime import continuation as _continuation
    from platform_spec.runs import run_checkpoint_prefix

    s3 = aws.client("s3")
    events = aws.client("events", access_key=continuation_env["AWS_ACCESS_KEY_ID"])

    def request(run_id: str, *, max_steps: int = 100, **run: Any) -> dict[str, Any]:
        body = _make_request(client_token=None, run={"run_id": run_id, **run})
        body["hyperparameters"] = {**body["hyperparameters"], "max_steps": max_steps}
        return body

    def checkpoint(run_id: str, step: int, *, complete: bool = True, state: Any = None) -> None:
        prefix = f"{run_checkpoint_prefix(run_id)}step-{step}/"
        if state is None:
            state = {
                "step": step,
                "data": {"step": step, "samples_consumed": step * 8},
                "run": {"hyperparameters": {"seq_length": "2048"}},
            }
        raw = state if isinstance(state, bytes) else _json.dumps(state).encode()
        s3.put_object(Bucket=config.checkpoint_bucket, Key=prefix + "trainer_state.json", Body=raw)
        s3.put_object(Bucket=config.checkpoint_bucket, Key=prefix + ".metadata", Body=b"dcp")  # DCP's index
        if complete:
            s3.put_object(Bucket=config.checkpoint_bucket, Key=prefix + ".complete", Body=b"{}")

    def event(job_name: str) -> dict[str, Any]:
        detail = aws.describe_training_job(job_name)
        tags = aws.client("sagemaker").list_tags(ResourceArn=detail["TrainingJobArn"])["Tags"]
        detail["Tags"] = {t["Key"]: t["Value"] for t in tags}
        return {
            "version": "0", "id": str(uuid.uuid4()), "source": "aws.sagemaker",
            "detail-type": "SageMaker Training Job State Change", "account": "123456789012", "region": aws.region,
            "time": detail.get("LastModifiedTime"), "resources": [detail["TrainingJobArn"]], "detail": detail,
        }  # fmt: skip

    def handle(body: Any, now: Any = None) -> dict[str, Any]:
        return _continuation.handle(body, clients=continuation_clients, config=config, events=events, now=now)

    def jobs(run_id: str) -> list[str]:
        return sorted(j["name"] for j in aws.training_jobs() if j["name"].startswith(f"{run_id}-seg-"))

    return SimpleNamespace(
        request=request, checkpoint=checkpoint, event=event, handle=handle, jobs=jobs, clients=continuation_clients
    )
