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
    from training.prepare import prepare_data

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


CONTINUATION_HANDLER = "platform_constructs.submitter.runtime.continuation.lambda_handler"


def _plans_with_zone_a_in(zone: str) -> list[dict[str, Any]]:
    """:data:`PLANS` with plan ``zone-a``'s block moved to ``zone`` (the same names, so the same ARNs: the
    submitter's cached list of plan ARNs still holds), of 4 instances (the module's other jobs hold some)."""
    return [PLANS[0], {**_plan("zone-a", zone, "now+5d"), "TotalInstanceCount": 4}]


def test_a_runs_segments_on_a_file_system_follow_the_file_systems_zone(aws: LocalAws) -> None:
    """A run reading the file system: each segment runs in its subnet; a next segment whose plan's block is in
    another zone is not created (the run waits for capacity, the reason naming both zones) and starts in the
    file system's subnet once a block in its zone is there; ``continue_run`` of the ended run alike."""
    from datetime import UTC, datetime

    from platform_constructs.submitter.runtime import actions, continuation
    from platform_constructs.submitter.runtime.aws import Clients
    from platform_constructs.submitter.runtime.config import SubmitterConfig
    from platform_spec import runs as spec

    fsx = _fsx(aws)
    zone_a, zone_b = f"{DEFAULT_REGION}a", f"{DEFAULT_REGION}b"
    assert fsx["availability_zone"] == zone_a
    env = aws.function_env(CONTINUATION_HANDLER)
    clients, config = Clients.create(environ=env), SubmitterConfig.from_environ(env)
    events = aws.client("events", access_key=env["AWS_ACCESS_KEY_ID"])
    submitter_clients = Clients.create(environ=aws.env)
    submitter_config = SubmitterConfig.from_environ(aws.env)
    s3 = aws.client("s3")
    run_id = "fsx-two-zones"
    seg = {i: spec.segment_job_name(run_id, i) for i in range(1, 4)}

    def checkpoint(step: int) -> None:
        prefix = f"run-checkpoints/{run_id}/step-{step}/"
        state = {"step": step, "data": {"step": step}, "run": {"hyperparameters": {}}}
        s3.put_object(Bucket=config.checkpoint_bucket, Key=prefix + "trainer_state.json", Body=json.dumps(state))
        s3.put_object(Bucket=config.checkpoint_bucket, Key=prefix + ".complete", Body=b"{}")

    def end(name: str, status: str = "Completed") -> dict[str, Any]:
        if aws.describe_training_job(name)["TrainingJobStatus"] != "Stopping":
            aws.set_job_status(name, "InProgress")
        aws.set_job_status(name, status)
        detail = aws.describe_training_job(name)
        tags = aws.client("sagemaker").list_tags(ResourceArn=detail["TrainingJobArn"])["Tags"]
        detail["Tags"] = {t["Key"]: t["Value"] for t in tags}
        return {
            "version": "0", "id": name, "source": "aws.sagemaker", "region": aws.region,
            "detail-type": "SageMaker Training Job State Change", "account": "123456789012",
            "time": detail.get("LastModifiedTime"), "resources": [detail["TrainingJobArn"]], "detail": detail,
        }  # fmt: skip

    def handle(body: Any) -> dict[str, Any]:
        return continuation.handle(body, clients=clients, config=config, events=events, now=datetime.now(UTC))

    def subnets(name: str) -> list[str]:
        return list(aws.describe_training_job(name)["VpcConfig"]["Subnets"])

    aws.set_run_jobs(False)
    try:
        arn = aws.set_plans(_plans_with_zone_a_in(zone_a))[1]
        body = _request(aws, "unused", capacity="training-plan", run={"run_id": run_id, "max_segments": 4})
        del body["job_name"]
        body["hyperparameters"] = {**TINY, "max_steps": 100}
        answer = submit_local(body, aws.env)
        assert answer["status"] == "submitted", answer
        assert subnets(seg[1]) == [fsx["subnet_id"]]

        # the plan's next block is in zone b: segment 2 is not created; the run waits, naming both zones
        aws.set_plans(_plans_with_zone_a_in(zone_b))
        checkpoint(20)
        waited = handle(end(seg[1]))
        assert waited["decision"]["decision"] == spec.WAITING_FOR_CAPACITY, waited
        reason = waited["decision"]["reason"]
        assert "NoCapacity" in reason and f"availability zone {zone_b}" in reason and zone_a in reason, reason
        assert seg[2] not in {j["name"] for j in aws.training_jobs()}

        # a block in the file system's zone: the tick starts segment 2 in its subnet
        aws.set_plans(_plans_with_zone_a_in(zone_a))
        ticked = handle({"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}})
        assert seg[2] in {j["name"] for j in aws.training_jobs()}, ticked
        assert subnets(seg[2]) == [fsx["subnet_id"]]
        assert aws.describe_training_job(seg[2])["ResourceConfig"]["TrainingPlanArn"] == arn

        # the run is stopped; continue_run places its next segment by the same rule
        stop = actions.dispatch(
            {"action": "stop", "run_id": run_id}, clients=submitter_clients, config=submitter_config
        )
        assert stop["changed"] is True, stop
        checkpoint(40)
        assert handle(end(seg[2], "Stopped"))["decision"]["decision"] == spec.STOPPED
        aws.set_plans(_plans_with_zone_a_in(zone_b))
        again = {"action": "continue_run", "run_id": run_id, "client_token": f"{run_id}-continue"}
        refused = actions.dispatch(again, clients=submitter_clients, config=submitter_config)
        assert refused["status"] == "rejected" and refused["error"]["code"] == "NoCapacity", refused
        assert zone_a in json.dumps(refused["error"]), refused
        assert seg[3] not in {j["name"] for j in aws.training_jobs()}
        aws.set_plans(_plans_with_zone_a_in(zone_a))
        continued = actions.dispatch(again, clients=submitter_clients, config=submitter_config)
        assert continued["status"] == "continued" and continued["training_job_name"] == seg[3], continued
        assert subnets(seg[3]) == [fsx["subnet_id"]]
        aws.client("sagemaker").stop_training_job(TrainingJobName=seg[3])
    finally:
        aws.set_plans(PLANS)
        aws.set_run_jobs(True)


def test_a_restarted_emulator_keeps_its_network_ids_so_an_env_file_written_before_still_works(aws: LocalAws) -> None:
    """An emulator started again with the same context (a restart: moto keeps nothing) makes the same VPC, subnets,
    security groups and file system IDs and mount name, derived from the template's logical IDs as bucket names and
    access keys are: a submitter environment sourced before the restart creates its job in the platform's network,
    instead of every job being refused ``AccessDeniedException`` by the grant held to the old IDs."""
    names = (settings.ENV_VPC_SUBNETS, settings.ENV_VPC_SECURITY_GROUP_IDS, settings.ENV_FSX_LUSTRE)
    with LocalAws(context=VPC_FSX_CONTEXT) as again:
        assert {n: again.env[n] for n in names} == {n: aws.env[n] for n in names}
        written_before = {**aws.env, "AWS_ENDPOINT_URL": again.endpoint}
        answer = submit_local(_request(aws, "after-restart"), written_before)
        assert answer["status"] == "submitted", answer
        assert again.describe_training_job("after-restart")["VpcConfig"]["Subnets"] == [_fsx(aws)["subnet_id"]]


def test_one_client_token_with_an_fsx_channel_is_one_job(aws: LocalAws) -> None:
    """The same request with one ``client_token`` and an FSx channel, four times at once: one job, in the file
    system's subnet; the token with another directory is a ``Conflict`` naming ``client_token``. A first attempt
    that SageMaker refused on its ``VpcConfig`` (``ValidationException``) leaves the token free: the retry creates
    the job."""
    import concurrent.futures

    fsx = _fsx(aws)
    aws.set_run_jobs(False)
    try:
        body = {**_request(aws, "unused"), "client_token": "fsx-once"}
        del body["job_name"]
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            answers = list(pool.map(lambda _: submit_local(dict(body), aws.env), range(4)))
        assert {a["status"] for a in answers} == {"submitted"}, answers
        (name,) = {a["training_job_name"] for a in answers}
        assert sorted(a["replayed"] for a in answers) == [False, True, True, True]
        assert aws.describe_training_job(name)["VpcConfig"]["Subnets"] == [fsx["subnet_id"]]
        other = {**body, "inputs": {"train": {**body["inputs"]["train"], "directory_path": f"/{fsx['mount_name']}/x"}}}
        conflict = submit_local(other, aws.env)
        assert conflict["error"]["code"] == "Conflict" and conflict["error"]["field"] == "client_token", conflict
        aws.client("sagemaker").stop_training_job(TrainingJobName=name)

        retried = {**body, "client_token": "fsx-retried"}
        says = "The subnet ID 'subnet-0' does not exist"
        aws.inject_fault("CreateTrainingJob", "ValidationException", message=says)
        refused = submit_local(retried, aws.env)
        assert refused["error"]["code"] == "InvalidRequest" and says in refused["error"]["message"], refused
        again = submit_local(retried, aws.env)
        assert again["status"] == "submitted" and again["replayed"] is False, again
        assert aws.describe_training_job(again["training_job_name"])["VpcConfig"]["Subnets"] == [fsx["subnet_id"]]
        aws.client("sagemaker").stop_training_job(TrainingJobName=again["training_job_name"])
    finally:
        aws.clear_faults()
        aws.set_run_jobs(True)
