"""`trainctl local-aws`: training-job lifecycle, the stack it creates (with the stack's defaults), the CLI with
`trainctl submit --local`. Jobs are created through the submitter (its fixtures, tests/submitter/conftest.py)."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys

import botocore.exceptions
import pytest

from devtools.local_aws.client import LocalAws
from devtools.local_aws.stack import StackResources, function_environment
from platform_constructs.submitter.runtime import config as runtime_config
from platform_constructs.submitter.runtime import sagemaker_rules as runtime_sagemaker_rules
from platform_constructs.submitter.runtime.settings import ENV_ALLOWED_INSTANCE_TYPES
from platform_spec import catalogue
from platform_spec.metric_lines import format_line

from ..submitter.conftest import PLANS, clients, config, env, make_request, runtime, submit
from .conftest import REPO

pytestmark = pytest.mark.xdist_group("devtools-emulator")

__all__ = ["clients", "config", "env", "make_request", "runtime", "submit"]  # the submitter's fixtures, used here

GB200 = "ml.p6e-gb200.36xlarge"


@pytest.fixture(scope="session")
def aws():
    """The emulator seeded with the submitter tests' plans."""
    with LocalAws(plans=PLANS) as emulator:
        yield emulator


def _job(submit, make_request) -> str:
    response = submit(make_request(capacity="on-demand"))
    assert response["status"] == "submitted", response
    return response["training_job_name"]


def test_a_job_completes_with_final_metrics_from_its_own_metric_definitions(
    aws, runtime, clients, config, submit, make_request
):
    name = _job(submit, make_request)
    sm = aws.client("sagemaker")
    assert sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "InProgress"
    aws.set_job_status(name, "InProgress", secondary_status="Training")
    lines = [
        format_line({"step": 10, "loss": 4.5, "tokens_per_sec": 50000.0, "mfu": 30.0}),
        "some other log line",
        format_line({"step": 20, "loss": 3.25, "tokens_per_sec": 51234.5, "mfu": 31.5}),
        format_line({"step": 20, "validation_loss": 3.5}),  # eval_interval's line: its own, after the step's
    ]
    aws.set_job_status(name, "Completed", log_lines=lines, final_metrics={"custom:score": 0.5})
    job = sm.describe_training_job(TrainingJobName=name)
    assert job["TrainingJobStatus"] == "Completed" and job["SecondaryStatus"] == "Completed"
    final = {m["MetricName"]: m["Value"] for m in job["FinalMetricDataList"]}
    assert final == {
        "train:step": 20.0,
        "train:loss": 3.25,
        "train:tokens_per_sec": 51234.5,
        "train:mfu": 31.5,
        "validation:loss": 3.5,
        "custom:score": 0.5,
    }
    # the submitter's describe answers with the metric-line fields of the final metrics, validation loss too
    described = runtime.actions.dispatch({"action": "describe", "job_name": name}, clients=clients, config=config)
    assert described["job"]["metrics"] == {
        "step": 20,
        "loss": 3.25,
        "tokens_per_sec": 51234.5,
        "mfu": 31.5,
        "validation_loss": 3.5,
    }
    assert [t["Status"] for t in job["SecondaryStatusTransitions"]] == ["Starting", "Training", "Completed"]
    assert job["TrainingEndTime"] >= job["TrainingStartTime"]
    listed = sm.list_training_jobs(NameContains=name)["TrainingJobSummaries"]
    assert listed[0]["TrainingJobStatus"] == "Completed"
    # the log lines went where SageMaker puts them
    logs = aws.client("logs")
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix=name)[
        "logStreams"
    ]
    events = logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=streams[0]["logStreamName"])
    assert [e["message"] for e in events["events"]] == lines
    metrics = aws.client("cloudwatch").list_metrics(
        Namespace="/aws/sagemaker/TrainingJobs", Dimensions=[{"Name": "TrainingJobName", "Value": name}]
    )["Metrics"]
    assert {m["MetricName"] for m in metrics} == {
        "train:step",
        "train:loss",
        "train:tokens_per_sec",
        "train:mfu",
        "validation:loss",
    }
    with pytest.raises(RuntimeError, match="terminal"):
        aws.set_job_status(name, "Failed")


def test_a_job_fails_with_its_reason(aws, submit, make_request):
    name = _job(submit, make_request)
    aws.set_job_status(name, "Failed", failure_reason="AlgorithmError: CUDA out of memory")
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=name)
    assert (job["TrainingJobStatus"], job["FailureReason"]) == ("Failed", "AlgorithmError: CUDA out of memory")


def test_stop_training_job_goes_through_stopping(aws, submit, make_request):
    name = _job(submit, make_request)
    sm = aws.client("sagemaker")
    sm.stop_training_job(TrainingJobName=name)
    assert sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "Stopping"
    aws.set_job_status(name, "Stopped")
    assert sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"] == "Stopped"
    with pytest.raises(botocore.exceptions.ClientError, match="cannot be stopped"):
        sm.stop_training_job(TrainingJobName=name)


def test_a_job_on_a_plan_must_match_the_plans_instance_type(aws, submit, make_request):
    params = submit(make_request(dry_run=True))["create_training_job"]
    params["ResourceConfig"]["InstanceType"] = "ml.p5.48xlarge"
    with pytest.raises(botocore.exceptions.ClientError, match="does not match training plan"):
        aws.client("sagemaker").create_training_job(**params)


def test_the_stack_exists(aws):
    s3 = aws.client("s3")
    buckets = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    assert {aws.env["DATA_BUCKET"], aws.env["CHECKPOINT_BUCKET"], aws.env["OUTPUT_BUCKET"]} <= buckets
    parameter = aws.client("ssm").get_parameter(Name=aws.env["TRAINING_PLAN_ARNS_PARAMETER"])["Parameter"]
    assert json.loads(parameter["Value"]) == aws.training_plan_arns and len(aws.training_plan_arns) == 7
    role = aws.client("iam").get_role(RoleName=aws.env["EXECUTION_ROLE_ARN"].rsplit("/", 1)[-1])["Role"]
    assert role["Arn"] == aws.env["EXECUTION_ROLE_ARN"]


def test_cli_env_file_drives_trainctl_submit_local(runtime, tmp_path):
    """`trainctl local-aws --env-file` then `trainctl submit --local` in that environment, as a person would."""
    env_file = tmp_path / "local-aws.env"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    server = subprocess.Popen(
        [sys.executable, "-m", "trainctl.cli", "local-aws", "--port", "0", "--quiet",
         "--plans", str(REPO / "examples" / "plans.json"), "--env-file", str(env_file)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=child_env,
    )  # fmt: skip
    try:
        assert select.select([server.stdout], [], [], 90)[0], "local-aws did not start"
        assert server.stdout.readline().startswith("LOCAL_AWS_READY ")
        exports = dict(
            line[len("export ") :].split("=", 1)
            for line in env_file.read_text().splitlines()
            if line.startswith("export ")
        )
        settings = runtime.settings
        names = {getattr(settings, n) for n in dir(settings) if n.startswith("ENV_")}
        # the deployed function's variables (one function sets both; the optional ones are left out unless
        # configured, as the stack leaves them out by default), plus the emulator's endpoint and credentials
        optional = {settings.ENV_ALLOWED_INPUT_PREFIXES, settings.ENV_VOLUME_SIZE_GB, settings.ENV_ALLOWED_ACTIONS,
                    settings.ENV_VPC_SUBNETS, settings.ENV_VPC_SECURITY_GROUP_IDS, settings.ENV_FSX_LUSTRE}  # fmt: skip
        function_env = function_environment("us-east-1", StackResources())
        emulator = {
            "AWS_ENDPOINT_URL",
            "AWS_REGION",
            "AWS_DEFAULT_REGION",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
        }
        assert set(exports) == emulator | set(function_env)
        assert names - optional <= set(exports) and not optional & set(exports)

        sourced = subprocess.run(
            ["bash", "-c", f"source {env_file} && {sys.executable} -m trainctl.cli submit --local {REPO / 'examples' / 'guide-default-request.json'}"
             f" && {sys.executable} -m trainctl.cli submit --local -"],
            input=json.dumps({"hyperparameters": {"precision": "fp9"}}),
            capture_output=True, text=True, env=child_env, timeout=120,
        )  # fmt: skip
        assert sourced.returncode == 1, sourced.stderr
        first_end = sourced.stdout.index("\n}\n") + 2
        submitted, rejected = json.loads(sourced.stdout[:first_end]), json.loads(sourced.stdout[first_end:])
        assert submitted["status"] == "submitted" and submitted["training_job_name"] == "guide-default-gpt-1b-mxfp8"
        assert submitted["capacity"]["training_plan_arn"].endswith("/p6-b200-active")
        assert rejected["error"]["field"] == "hyperparameters.precision"
        assert '"level":"INFO"' in sourced.stderr  # the handler's JSON logs go to stderr
    finally:
        server.terminate()
        server.wait(timeout=15)
        server.stdout.close()
    assert server.returncode == 0


def test_the_emulator_allows_what_the_stack_allows_by_default() -> None:
    allowed = function_environment("us-east-1", StackResources())[ENV_ALLOWED_INSTANCE_TYPES].split(",")
    enum = set(runtime_sagemaker_rules.training_instance_types())
    amd64 = catalogue.DEFAULT_IMAGE_ARCHITECTURES
    assert allowed == [
        t for t in catalogue.INSTANCE_TYPES if t in enum and not catalogue.host_architecture_problem(t, amd64)
    ]
    assert allowed == list(runtime_config.default_allowed_instance_types(amd64))  # the stack's default, one home
    assert "ml.p6-b200.48xlarge" in allowed
    assert GB200 in enum and GB200 not in allowed  # training jobs accept it; the default deployment builds no arm64


def test_a_gb200_job_runs_the_arm64_image_and_without_one_is_refused_before_anything_is_created(
    aws, clients, config, runtime, make_request
):
    """The same emulator as a deployment with imageArchitectures ["amd64", "arm64"] (the submitter's environment
    from the emulator's own stack resources with both images), then as the default one (amd64 only)."""
    both = StackResources(image_architectures=("amd64", "arm64"))
    arm = runtime_config.SubmitterConfig.from_environ({**aws.env, **function_environment(aws.region, both)})
    assert arm.image_architectures == ("amd64", "arm64") and GB200 in runtime.request.allowed_instance_types(arm)
    request = make_request(instance_type=GB200, capacity="on-demand")
    response = runtime.service.submit(request, clients=clients, config=arm)
    assert response["status"] == "submitted", response
    job = aws.client("sagemaker").describe_training_job(TrainingJobName=response["training_job_name"])
    assert job["AlgorithmSpecification"]["TrainingImage"] == both.trainer_image_uris(aws.region)["arm64"]
    assert job["ResourceConfig"]["InstanceType"] == GB200
    aws.set_job_status(response["training_job_name"], "Stopped")
    # the default deployment: refused naming the type and the architectures built, no job created
    aws.clear_calls()
    refused = runtime.service.submit(
        make_request(instance_type=GB200, capacity="on-demand"), clients=clients, config=config
    )
    assert refused["status"] == "rejected" and refused["error"]["code"] == "InvalidRequest", refused
    assert f"{GB200} runs arm64 host CPUs" in refused["error"]["message"]
    assert "built for amd64 only (imageArchitectures)" in refused["error"]["message"]
    assert aws.calls("CreateTrainingJob") == []
