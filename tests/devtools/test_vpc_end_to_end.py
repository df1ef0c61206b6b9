"""VPC mode end to end through the emulator with the platform's REAL template (``LocalAws(context=...)``: the app
synthesized with ``vpc`` and ``fsxLustre``, not a network added by hand as in ``test_vpc_mode``).

* A created VPC (3 zones, the emulator's account and region) with an FSx for Lustre file system: token shards
  prepared into the folder that plays the file system; a request submitted through the submitter's handler with
  ``inputs.train`` on the file system. The job runs in the file system's subnet with the jobs' group, the trainer
  reads the channel (the token count it trained on is the prepared one), completes, and its checkpoints reach S3.
  The same submitter refuses a channel naming another file system, and the template's grant denies the
  submitter's own credentials a job in a subnet or security group the platform does not own.
* A job on the file system and a training plan: the plan in another zone is skipped, the one in the file
  system's zone taken.
* An existing VPC named by IDs: the emulator makes moto's twins under those very IDs and a submitted job's
  ``VpcConfig`` names them (an emulator that runs no jobs).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from devtools.local_aws.client import LocalAws
from devtools.local_aws.stack import DEFAULT_REGION
from platform_constructs.submitter.runtime import settings
from trainctl.submitter_client import submit_local

from .conftest import VPC_FSX_CONTEXT

pytestmark = pytest.mark.xdist_group("devtools-vpc-end-to-end")

DATASET = "datasets/fsx-e2e/train"
"""Where the shards lie under the file system's mount (the data bucket's keys, as the file system links them)."""
TINY: dict[str, Any] = {
    "model": "gpt-tiny",
    "num_layers": 1,
    "precision": "fp32",
    "batch_size": 2,
    "seq_length": 32,
    "max_steps": 4,
    "warmup_steps": 1,
    "log_interval": 1,
    "checkpoint_interval": 2,
    "keep_checkpoints": 2,
}
EXISTING_VPC: dict[str, Any] = {
    "vpcId": "vpc-0a1b2c3d4e5f60718",
    "subnetIds": ["subnet-0a1b2c3d4e5f60718", "subnet-0f1e2d3c4b5a69788"],
    "availabilityZones": [f"{DEFAULT_REGION}a", f"{DEFAULT_REGION}b"],
    "routeTableIds": ["rtb-0a1b2c3d4e5f60718", "rtb-0f1e2d3c4b5a69788"],
}


@pytest.fixture(scope="module")
def fsx_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder that plays the file system: byte-level token shards under ``DATASET``."""
    from training.data import prepare_data

    text = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    text.write_text("Jobs in the platform's VPC read their tokens from FSx for Lustre. " * 300, encoding="utf-8")
    root = tmp_path_factory.mktemp("fsx")
    prepare_data(root / DATASET, [text])
    return root


def _plan(name: str, zone: str, ends: str) -> dict[str, Any]:
    """An active plan of one ``ml.p5.48xlarge`` whose one block is in availability zone ``zone``."""
    return {
        "TrainingPlanName": name,
        "Status": "Active",
        "InstanceType": "ml.p5.48xlarge",
        "TotalInstanceCount": 1,
        "TargetResources": ["training-job"],
        "ReservedCapacitySummaries": [{"StartTime": "now-1h", "EndTime": ends, "AvailabilityZone": zone}],
    }


PLANS = [_plan("zone-b", f"{DEFAULT_REGION}b", "now+2d"), _plan("zone-a", f"{DEFAULT_REGION}a", "now+5d")]
"""Two plans; the one ending first (which the submitter prefers) is in another zone than the file system."""


@pytest.fixture(scope="module")
def aws(fsx_root: Path) -> Iterator[LocalAws]:
    with LocalAws(context=VPC_FSX_CONTEXT, plans=PLANS, fsx_root=fsx_root, run_jobs=True) as emulator:
        yield emulator


def _fsx(aws: LocalAws) -> dict[str, str]:
    fsx: dict[str, str] = json.loads(aws.env[settings.ENV_FSX_LUSTRE])
    return fsx


def _request_without_fsx(job_name: str) -> dict[str, Any]:
    """A small on-demand job on synthetic tokens (its data changed by :func:`_request`)."""
    return {
        "job_name": job_name,
        "instance_type": "ml.p5.48xlarge",
        "capacity": "on-demand",
        "hyperparameters": {**TINY, "synthetic_data": True},
        "max_runtime_hours": 1,
    }


def _request(aws: LocalAws, job_name: str, **changes: Any) -> dict[str, Any]:
    """The job reading ``DATASET`` on the platform's file system."""
    fsx = _fsx(aws)
    channel = {"file_system_id": fsx["file_system_id"], "directory_path": f"/{fsx['mount_name']}/{DATASET}"}
    return {**_request_without_fsx(job_name), "hyperparameters": TINY, "inputs": {"train": channel}, **changes}


@pytest.mark.slow
def test_a_job_reads_its_fsx_channel_in_the_file_systems_subnet_and_trains(aws: LocalAws, fsx_root: Path) -> None:
    from training.data import TokenDataset

    fsx = _fsx(aws)
    subnets = json.loads(aws.env[settings.ENV_VPC_SUBNETS])
    assert sorted(s["availability_zone"] for s in subnets) == [f"{DEFAULT_REGION}{z}" for z in "abc"]
    (system,) = aws.client("fsx").describe_file_systems(FileSystemIds=[fsx["file_system_id"]])["FileSystems"]
    assert system["SubnetIds"] == [fsx["subnet_id"]]

    answer = submit_local(_request(aws, "fsx-e2e"), aws.env)
    assert answer["status"] == "submitted", answer
    job = aws.wait_for_job("fsx-e2e", timeout=180)
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")

    # VpcConfig: the file system's subnet only, the jobs' group (the twin of the stack's JobSecurityGroup)
    (group,) = aws.env[settings.ENV_VPC_SECURITY_GROUP_IDS].split(",")
    assert job["VpcConfig"] == {"Subnets": [fsx["subnet_id"]], "SecurityGroupIds": [group]}
    ec2 = aws.client("ec2")
    (described,) = ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"]
    assert described["Description"].startswith("Training jobs: all traffic among themselves")
    assert described["VpcId"] == ec2.describe_subnets(SubnetIds=[fsx["subnet_id"]])["Subnets"][0]["VpcId"]
    (channel,) = job["InputDataConfig"]
    assert channel["InputMode"] == "File"
    assert channel["DataSource"] == {
        "FileSystemDataSource": {
            "FileSystemId": fsx["file_system_id"],
            "FileSystemType": "FSxLustre",
            "FileSystemAccessMode": "ro",
            "DirectoryPath": f"/{fsx['mount_name']}/{DATASET}",
        }
    }

    # the trainer read the channel: its checkpoint, synced to S3, records the prepared tokens it trained on
    prepared = TokenDataset(fsx_root / DATASET).fingerprint()
    bucket, prefix = job["CheckpointConfig"]["S3Uri"].removeprefix("s3://").split("/", 1)
    s3 = aws.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents") or []]
    assert f"{prefix}step-4/.complete" in keys, keys
    state = json.loads(s3.get_object(Bucket=bucket, Key=f"{prefix}step-4/trainer_state.json")["Body"].read())
    assert state["step"] == 4
    assert state["run"]["data"] == prepared and prepared["num_tokens"] > 0
    assert {m["MetricName"] for m in job["FinalMetricDataList"]} >= {"train:loss"}


def test_the_submitter_refuses_a_channel_on_another_file_system(aws: LocalAws) -> None:
    fsx = _fsx(aws)
    foreign = {"file_system_id": "fs-0123456789abcdef0", "directory_path": f"/{fsx['mount_name']}/{DATASET}"}
    answer = submit_local(_request(aws, "fsx-foreign", inputs={"train": foreign}), aws.env)
    assert answer["status"] == "rejected" and answer["error"]["code"] == "InvalidRequest", answer
    assert answer["error"]["field"] == "inputs.train.file_system_id"
    assert fsx["file_system_id"] in answer["error"]["message"]
    assert "fsx-foreign" not in {j["name"] for j in aws.training_jobs()}


@pytest.mark.parametrize("field", ["Subnets", "SecurityGroupIds"])
def test_the_grant_denies_the_submitter_a_job_outside_the_platforms_network(aws: LocalAws, field: str) -> None:
    """A subnet or a group of the platform's own VPC, made after deployment: it exists, so only the template's
    conditions on ``sagemaker:VpcSubnets`` / ``sagemaker:VpcSecurityGroupIds`` can refuse it, and they do, to the
    submitter's own credentials, which may create the very same job in the platform's subnet and group."""
    fsx = _fsx(aws)
    ec2 = aws.client("ec2")
    vpc_id = ec2.describe_subnets(SubnetIds=[fsx["subnet_id"]])["Subnets"][0]["VpcId"]
    if field == "Subnets":
        made = ec2.create_subnet(VpcId=vpc_id, CidrBlock="10.0.255.0/24", AvailabilityZone=fsx["availability_zone"])
        stray = made["Subnet"]["SubnetId"]
    else:
        stray = ec2.create_security_group(GroupName="stray", Description="not the platform's", VpcId=vpc_id)["GroupId"]
    name = f"stray-{field.lower()}"
    request = _create_request(aws, name)
    submitter = aws.client("sagemaker", access_key=aws.env["AWS_ACCESS_KEY_ID"])
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        submitter.create_training_job(**{**request, "VpcConfig": {**request["VpcConfig"], field: [stray]}})
    assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
    assert "sagemaker:CreateTrainingJob" in refused.value.response["Error"]["Message"]
    assert name not in {j["name"] for j in aws.training_jobs()}

    aws.set_run_jobs(False)
    try:
        submitter.create_training_job(**request)
        submitter.stop_training_job(TrainingJobName=name)
    finally:
        aws.set_run_jobs(True)


def test_a_file_system_job_on_a_plan_skips_the_plan_in_another_zone(aws: LocalAws) -> None:
    """Placed on the plan in the file system's zone through the template's grant for jobs on plans (created, not
    run); the plan that ends first is in another zone and is skipped, naming both zones."""
    fsx = _fsx(aws)
    assert fsx["availability_zone"] == f"{DEFAULT_REGION}a"
    aws.set_run_jobs(False)
    try:
        answer = submit_local(_request(aws, "fsx-on-plan", capacity="training-plan"), aws.env)
        assert answer["status"] == "submitted", answer
        job = aws.describe_training_job("fsx-on-plan")
        aws.client("sagemaker").stop_training_job(TrainingJobName="fsx-on-plan")
    finally:
        aws.set_run_jobs(True)
    zone_a, zone_b = (next(a for a in aws.training_plan_arns if a.endswith(f"/{n}")) for n in ("zone-a", "zone-b"))
    assert job["ResourceConfig"]["TrainingPlanArn"] == zone_a
    assert job["VpcConfig"]["Subnets"] == [fsx["subnet_id"]]
    (skipped,) = answer["capacity"]["skipped_plans"]
    assert skipped["training_plan_arn"] == zone_b
    assert (
        f"its block is in availability zone {DEFAULT_REGION}b; the job can run only in {DEFAULT_REGION}a"
        in (skipped["reason"])
    )


def _create_request(aws: LocalAws, name: str) -> dict[str, Any]:
    """A ``CreateTrainingJob`` request as the submitter makes one (its dry run), under ``name``."""
    answer = submit_local({**_request(aws, name), "dry_run": True}, aws.env)
    assert answer["status"] == "validated", answer
    request: dict[str, Any] = answer["create_training_job"]
    return request


def test_an_existing_vpc_keeps_its_ids_and_jobs_run_in_its_subnets() -> None:
    """The ``vpc`` context names an existing VPC: moto's twins carry those very IDs and zones, and a job the
    submitter creates (jobs are not run: no training needed) gets ``VpcConfig`` with them and the jobs' group."""
    with LocalAws(context={"vpc": EXISTING_VPC}) as aws:
        subnets = json.loads(aws.env[settings.ENV_VPC_SUBNETS])
        pairs = list(zip(EXISTING_VPC["subnetIds"], EXISTING_VPC["availabilityZones"], strict=True))
        assert [(s["subnet_id"], s["availability_zone"]) for s in subnets] == pairs
        ec2 = aws.client("ec2")
        described = ec2.describe_subnets(SubnetIds=EXISTING_VPC["subnetIds"])["Subnets"]
        assert sorted((s["SubnetId"], s["AvailabilityZone"], s["VpcId"]) for s in described) == sorted(
            (subnet, zone, EXISTING_VPC["vpcId"]) for subnet, zone in pairs
        )
        (group,) = aws.env[settings.ENV_VPC_SECURITY_GROUP_IDS].split(",")
        (found,) = ec2.describe_security_groups(GroupIds=[group])["SecurityGroups"]
        assert found["VpcId"] == EXISTING_VPC["vpcId"]
        assert settings.ENV_FSX_LUSTRE not in aws.env

        request = {**_request_without_fsx("existing-vpc"), "client_token": "existing-vpc-once"}
        answer = submit_local(request, aws.env)
        assert answer["status"] == "submitted", answer
        expected = {"Subnets": EXISTING_VPC["subnetIds"], "SecurityGroupIds": [group]}
        assert aws.describe_training_job("existing-vpc")["VpcConfig"] == expected
        again = submit_local(request, aws.env)  # a retry finds the first job, in the same network
        assert again["replayed"] is True and again["training_job_name"] == "existing-vpc"
        assert [j["name"] for j in aws.training_jobs()] == ["existing-vpc"]
