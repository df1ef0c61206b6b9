"""The emulator in VPC mode (:mod:`devtools.local_aws.network`): the template's network and FSx for Lustre file
system made in moto, their IDs in the submitter's environment and in the policies' conditions, a job's
``VpcConfig`` and file-system channels checked as SageMaker checks them, the execution role's EC2 permissions
decided when a job starts, and an FSx channel read from the folder that plays the file system.

The emulator runs the platform's own template synthesized with ``vpc: "create"`` and ``fsxLustre`` (a VPC of three
private subnets, the jobs' group, an FSx for Lustre file system in the first subnet, the submitter's
``VPC_SUBNETS`` / ``VPC_SECURITY_GROUP_IDS`` / ``FSX_LUSTRE`` and its ``CreateTrainingJob`` grant held to them),
with one role added that may not create network interfaces (:func:`vpc_template`). One emulator for the module;
no job here trains (``test_vpc_end_to_end`` trains one).
"""

from __future__ import annotations

import copy
import json
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from devtools.local_aws.client import LocalAws
from devtools.local_aws.stack import ACCOUNT_ID, DEFAULT_REGION
from devtools.local_aws.template import platform_template
from platform_constructs.submitter.runtime import settings

from .conftest import VPC_FSX_CONTEXT

pytestmark = pytest.mark.xdist_group("devtools-vpc-mode")

NO_NETWORK_ROLE = "JobRoleWithoutNetwork"


def vpc_template() -> dict[str, Any]:
    """The platform's template synthesized in VPC mode with a file system, and a role that may not create network
    interfaces (``NO_NETWORK_ROLE``)."""
    template = copy.deepcopy(platform_template(DEFAULT_REGION, context=VPC_FSX_CONTEXT))
    template["Resources"][NO_NETWORK_ROLE] = {"Type": "AWS::IAM::Role", "Properties": {"AssumeRolePolicyDocument": {}}}
    return template


@pytest.fixture(scope="module")
def fsx_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fsx")
    (root / "corpus" / "train" / "part").mkdir(parents=True)
    (root / "corpus" / "train" / "shard-000.bin").write_bytes(b"\x01\x02\x03")
    (root / "corpus" / "train" / "part" / "index.json").write_text('{"shards": 1}')
    return root


@pytest.fixture(scope="module")
def aws(tmp_path_factory: pytest.TempPathFactory, fsx_root: Path) -> Iterator[LocalAws]:
    path = tmp_path_factory.mktemp("vpc-template") / "template.json"
    path.write_text(json.dumps(vpc_template()))
    with LocalAws(template=path, context=VPC_FSX_CONTEXT, fsx_root=fsx_root, run_jobs=True) as emulator:
        yield emulator


def _network(aws: LocalAws) -> tuple[list[dict[str, str]], list[str], dict[str, str]]:
    env = aws.env
    return (
        json.loads(env[settings.ENV_VPC_SUBNETS]),
        env[settings.ENV_VPC_SECURITY_GROUP_IDS].split(","),
        json.loads(env[settings.ENV_FSX_LUSTRE]),
    )


def _job(aws: LocalAws, name: str, **changes: Any) -> dict[str, Any]:
    subnets, groups, _ = _network(aws)
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": aws.env[settings.ENV_EXECUTION_ROLE_ARN],
        "AlgorithmSpecification": {
            "TrainingImage": json.loads(aws.env[settings.ENV_TRAINER_IMAGE_URIS])["amd64"],
            "TrainingInputMode": "File",
        },
        "OutputDataConfig": {"S3OutputPath": f"s3://{aws.resources['output_bucket']}/training-jobs/"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "VpcConfig": {"Subnets": [s["subnet_id"] for s in subnets], "SecurityGroupIds": groups},
    }
    request.update(changes)
    return {k: v for k, v in request.items() if v is not None}


def _fsx_channel(aws: LocalAws, path: str, **changes: str) -> dict[str, Any]:
    _, _, fsx = _network(aws)
    source = {
        "FileSystemId": fsx["file_system_id"],
        "FileSystemType": "FSxLustre",
        "FileSystemAccessMode": "ro",
        "DirectoryPath": f"/{fsx['mount_name']}/{path}",
        **changes,
    }
    return {"ChannelName": "train", "InputMode": "File", "DataSource": {"FileSystemDataSource": source}}


def test_the_network_and_file_system_are_in_moto_and_their_ids_in_the_environment(aws: LocalAws) -> None:
    subnets, groups, fsx = _network(aws)
    ec2 = aws.client("ec2")
    described = ec2.describe_subnets(SubnetIds=[s["subnet_id"] for s in subnets])["Subnets"]
    assert sorted((s["SubnetId"], s["AvailabilityZone"]) for s in described) == sorted(
        (s["subnet_id"], s["availability_zone"]) for s in subnets
    )
    assert [s["availability_zone"] for s in subnets] == [f"{DEFAULT_REGION}{zone}" for zone in "abc"]
    (group,) = ec2.describe_security_groups(GroupIds=groups)["SecurityGroups"]
    assert group["VpcId"] == described[0]["VpcId"] == described[1]["VpcId"]
    (system,) = aws.client("fsx").describe_file_systems(FileSystemIds=[fsx["file_system_id"]])["FileSystems"]
    assert system["LustreConfiguration"]["MountName"] == fsx["mount_name"] and len(fsx["mount_name"]) == 8
    assert system["SubnetIds"] == [fsx["subnet_id"]] == [subnets[0]["subnet_id"]]
    assert fsx["availability_zone"] == subnets[0]["availability_zone"]


@pytest.mark.parametrize(
    ("vpc_config", "says"),
    [
        (
            {"Subnets": ["subnet-0f0f0f0f0f0f0f0f0"]},
            "VpcConfig.Subnets: subnet subnet-0f0f0f0f0f0f0f0f0 does not exist",
        ),
        ({"SecurityGroupIds": ["sg-0f0f0f0f0f0f0f0f0"]}, "security group sg-0f0f0f0f0f0f0f0f0 does not exist"),
        ({"SecurityGroupIds": ["DEFAULT"]}, "must all be in one VPC"),
    ],
)
def test_a_vpc_config_is_checked_against_ec2(aws: LocalAws, vpc_config: dict[str, Any], says: str) -> None:
    request = _job(aws, f"bad-network-{len(says)}")
    if vpc_config.get("SecurityGroupIds") == ["DEFAULT"]:  # a group of another VPC: moto's default VPC's
        other = aws.client("ec2").describe_security_groups(Filters=[{"Name": "group-name", "Values": ["default"]}])
        vpc_config = {"SecurityGroupIds": [g["GroupId"] for g in other["SecurityGroups"]
                                           if g["VpcId"] != aws.client("ec2").describe_subnets(
                                               SubnetIds=request["VpcConfig"]["Subnets"])["Subnets"][0]["VpcId"]][:1]}  # fmt: skip
    request["VpcConfig"] = {**request["VpcConfig"], **vpc_config}
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        aws.client("sagemaker").create_training_job(**request)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert says in refused.value.response["Error"]["Message"]
    assert request["TrainingJobName"] not in {j["name"] for j in aws.training_jobs()}


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"FileSystemId": "fs-0123456789abcdef0"}, "file system fs-0123456789abcdef0 does not exist"),
        ({"FileSystemAccessMode": "rw"}, "FileSystemAccessMode: got rw; expected ro"),
        ({"DirectoryPath": "/elsewhere/corpus"}, "expected a path under the mount name"),
    ],
)
def test_a_file_system_channel_names_the_platforms_lustre_file_system_read_only(
    aws: LocalAws, changes: dict[str, str], says: str
) -> None:
    request = _job(aws, "bad-fsx", InputDataConfig=[_fsx_channel(aws, "corpus/train", **changes)])
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        aws.client("sagemaker").create_training_job(**request)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert says in refused.value.response["Error"]["Message"]


def test_a_file_system_job_runs_in_the_file_systems_subnet(aws: LocalAws) -> None:
    subnets, groups, _ = _network(aws)
    elsewhere = {"Subnets": [subnets[1]["subnet_id"]], "SecurityGroupIds": groups}
    request = _job(aws, "fsx-wrong-zone", InputDataConfig=[_fsx_channel(aws, "corpus/train")], VpcConfig=elsewhere)
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        aws.client("sagemaker").create_training_job(**request)
    assert f"is in subnet {subnets[0]['subnet_id']}" in refused.value.response["Error"]["Message"]
    without = _job(aws, "fsx-no-vpc", InputDataConfig=[_fsx_channel(aws, "corpus/train")], VpcConfig=None)
    with pytest.raises(botocore.exceptions.ClientError, match="needs a VpcConfig"):
        aws.client("sagemaker").create_training_job(**without)


def test_the_submitters_grant_held_to_the_subnets_resolves_to_moto_ids(aws: LocalAws) -> None:
    """The template's ``Ref`` to each subnet in the grant's condition is the twin's ID: the submitter may create a
    job in the platform's subnets and not one outside any VPC."""
    aws.set_run_jobs(False)
    try:
        submitter = aws.client("sagemaker", access_key=aws.env["AWS_ACCESS_KEY_ID"])
        submitter.create_training_job(**_job(aws, "submitter-in-vpc"))
        with pytest.raises(botocore.exceptions.ClientError) as refused:
            submitter.create_training_job(**_job(aws, "submitter-no-vpc", VpcConfig=None))
        assert refused.value.response["Error"]["Code"] == "AccessDeniedException"
        assert "sagemaker:CreateTrainingJob" in refused.value.response["Error"]["Message"]
    finally:
        aws.set_run_jobs(True)


def test_a_job_whose_role_may_not_create_network_interfaces_fails_naming_the_action(aws: LocalAws) -> None:
    role = f"arn:aws:iam::{ACCOUNT_ID}:role/TrainingPlatform-{NO_NETWORK_ROLE}"
    aws.client("sagemaker").create_training_job(**_job(aws, "no-eni-permission", RoleArn=role))
    failed = aws.wait_for_job("no-eni-permission", timeout=60)
    assert failed["TrainingJobStatus"] == "Failed"
    assert failed["FailureReason"].startswith(f"ClientError: The execution role {role} is not authorized to perform: ")
    assert "ec2:CreateNetworkInterface" in failed["FailureReason"]


def test_a_missing_directory_fails_the_job_as_a_mount_failure(aws: LocalAws) -> None:
    request = _job(aws, "fsx-missing-dir", InputDataConfig=[_fsx_channel(aws, "corpus/absent")])
    aws.client("sagemaker").create_training_job(**request)
    failed = aws.wait_for_job("fsx-missing-dir", timeout=60)
    assert failed["TrainingJobStatus"] == "Failed"
    assert failed["FailureReason"].startswith("ClientError: Failed to mount the file system")
    assert "/corpus/absent does not exist" in failed["FailureReason"]


def test_a_file_system_channel_is_a_read_only_copy_of_the_directory(aws: LocalAws, fsx_root: Path) -> None:
    """The job's ``input/data/train`` holds the directory's files, read-only; the "file system" is untouched. The
    trainer is given a model that does not exist, so it fails fast once the channel is laid out."""
    request = _job(
        aws, "fsx-read", InputDataConfig=[_fsx_channel(aws, "corpus/train")], HyperParameters={"model": "no-such"}
    )
    aws.client("sagemaker").create_training_job(**request)
    # the job's folder stays after it ends: read it then, when the layout is surely complete
    assert aws.wait_for_job("fsx-read", timeout=120)["FailureReason"].startswith("AlgorithmError")
    channel = aws.job_dir("fsx-read") / "input" / "data" / "train"
    assert (channel / "part" / "index.json").exists()
    assert (channel / "shard-000.bin").read_bytes() == b"\x01\x02\x03"
    assert stat.S_IMODE((channel / "shard-000.bin").stat().st_mode) == 0o444
    config = json.loads((aws.job_dir("fsx-read") / "input" / "config" / "inputdataconfig.json").read_text())
    assert config["train"]["TrainingInputMode"] == "File"
    assert (fsx_root / "corpus" / "train" / "shard-000.bin").read_bytes() == b"\x01\x02\x03"


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("fsx-link-out", lambda outside, root: outside / "secret.txt"),  # an absolute link out of the root
        ("fsx-link-up", lambda outside, root: Path("..") / ".." / ".." / outside.name / "secret.txt"),  # relative
        ("fsx-link-dir", lambda outside, root: outside),  # a directory out of the root
        ("fsx-link-dangling", lambda outside, root: root / "corpus" / "absent.bin"),
        ("fsx-link-loop", lambda outside, root: root / "corpus"),  # copied, it would hold itself forever
    ],
)
def test_a_link_leaving_the_file_system_fails_the_job_and_copies_nothing(
    aws: LocalAws, fsx_root: Path, tmp_path: Path, name: str, target: Any
) -> None:
    """A symbolic link in the channel's directory that leads out of the folder playing the file system (or
    nowhere) fails the job with ``ClientError`` naming it: the emulator never copies a file of this machine
    that is not on the "file system" into a job (a real job would see its own container's path there)."""
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not on the file system")
    directory = fsx_root / "corpus" / name
    directory.mkdir()
    (directory / "shard-000.bin").write_bytes(b"\x01")
    (directory / "leak").symlink_to(target(outside, fsx_root))
    request = _job(aws, name, InputDataConfig=[_fsx_channel(aws, f"corpus/{name}")], HyperParameters={"model": "x"})
    aws.client("sagemaker").create_training_job(**request)
    failed = aws.wait_for_job(name, timeout=60)
    assert failed["TrainingJobStatus"] == "Failed"
    assert failed["FailureReason"].startswith("ClientError: channel 'train': ")
    assert f"/corpus/{name}/leak is a symbolic link" in failed["FailureReason"]
    data = aws.job_dir(name) / "input" / "data"
    assert not [p for p in data.rglob("*") if p.is_file() and p.read_bytes() == b"not on the file system"]


def test_a_link_within_the_file_system_is_followed(aws: LocalAws, fsx_root: Path) -> None:
    """A link to another file or directory on the "file system" reads as that file, as on a Lustre mount."""
    directory = fsx_root / "corpus" / "fsx-link-in"
    directory.mkdir()
    (directory / "alias.bin").symlink_to(Path("..") / "train" / "shard-000.bin")
    (directory / "part").symlink_to(fsx_root / "corpus" / "train" / "part")
    request = _job(
        aws, "fsx-link-in", InputDataConfig=[_fsx_channel(aws, "corpus/fsx-link-in")], HyperParameters={"model": "x"}
    )
    aws.client("sagemaker").create_training_job(**request)
    assert aws.wait_for_job("fsx-link-in", timeout=120)["FailureReason"].startswith("AlgorithmError")
    channel = aws.job_dir("fsx-link-in") / "input" / "data" / "train"
    assert (channel / "alias.bin").read_bytes() == b"\x01\x02\x03" and not (channel / "alias.bin").is_symlink()
    assert (channel / "part" / "index.json").read_text() == '{"shards": 1}'


def test_a_template_that_leaves_zones_to_fn_getazs_gets_the_regions_zones_by_index() -> None:
    """A template synthesized without the zones looked up (``Fn::Select`` of ``Fn::GetAZs``, or CDK's ``dummy1b``):
    its subnets are in the emulator's zones by the index each names, which are not always ``a``, ``b``, ``c`` (moto's
    ap-northeast-1 has ``a``, ``c``, ``d``, as the region does for most accounts)."""
    from moto import mock_aws

    from devtools.local_aws.network import create_twins

    select = {"Fn::Select": [1, {"Fn::GetAZs": ""}]}
    resources: dict[str, Any] = {"Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.0.0.0/16"}}}
    for index, zone in enumerate((select, "dummy1a", "ap-northeast-1d", "dummy1b")):
        resources[f"Subnet{index}"] = {
            "Type": "AWS::EC2::Subnet",
            "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": f"10.0.{index}.0/24", "AvailabilityZone": zone},
        }
    with mock_aws():
        twins = create_twins({"Resources": resources}, {}, region="ap-northeast-1")
    zones = [twins.attrs[(f"Subnet{index}", "AvailabilityZone")] for index in range(4)]
    assert zones == ["ap-northeast-1c", "ap-northeast-1a", "ap-northeast-1d", "ap-northeast-1c"]
