"""VPC mode and FSx for Lustre in the submitter's runtime, without an emulator: the function environment read
strictly (``VPC_SUBNETS``, ``VPC_SECURITY_GROUP_IDS``, ``FSX_LUSTRE``, written by ``settings.function_environment``),
the request's FSx channels, ``network_isolation`` and ``inter_container_encryption``, and the ``CreateTrainingJob``
parameters they make, checked against botocore's model of SageMaker (the choice between plans in two zones runs
against the emulator, ``test_capacity.py``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from devtools.local_aws.shapes import validate_input
from platform_constructs.submitter.runtime import network

SUBNETS = [
    {"subnet_id": "subnet-0aaa0000000000001", "availability_zone": "us-east-1a"},
    {"subnet_id": "subnet-0aaa0000000000002", "availability_zone": "us-east-1a"},
    {"subnet_id": "subnet-0bbb0000000000001", "availability_zone": "us-east-1b"},
]
GROUP = "sg-0123456789abcdef0"
FSX = {
    "file_system_id": "fs-0123456789abcdef0",
    "mount_name": "x1ab2cdf",
    "subnet_id": "subnet-0aaa0000000000002",
    "availability_zone": "us-east-1a",
}
ROOT = "/x1ab2cdf"


def environment(runtime, **network: Any) -> dict[str, str]:
    """The function's environment as the construct writes it (``settings.function_environment``), plus
    ``AWS_REGION``, which Lambda sets."""
    env = runtime.settings.function_environment(
        trainer_image_uris={"amd64": "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1"},
        execution_role_arn="arn:aws:iam::123456789012:role/exec",
        data_bucket="data",
        checkpoint_bucket="ckpt",
        output_bucket="out",
        output_kms_key_arn="arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f",
        plan_arns_parameter="/plans",
        account_id="123456789012",
        default_instance_type="ml.p6-b200.48xlarge",
        allowed_instance_types=(),
        capacity_fallback=("training-plan", "spot", "on-demand"),
        **network,
    )
    return {**env, "AWS_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def vpc_config(runtime):
    env = environment(runtime, vpc_subnets=SUBNETS, vpc_security_group_ids=[GROUP], fsx_lustre=FSX)
    return runtime.config.SubmitterConfig.from_environ(env)


@pytest.fixture(scope="module")
def plain_config(runtime):
    return runtime.config.SubmitterConfig.from_environ(environment(runtime))


# --- the configuration ------------------------------------------------------------------------------------


def test_the_function_environment_is_read_into_the_configuration(runtime, vpc_config, plain_config):
    config = runtime.config
    assert vpc_config.vpc_mode and not plain_config.vpc_mode
    assert vpc_config.vpc_subnets == tuple(config.VpcSubnet(**s) for s in SUBNETS)
    assert vpc_config.vpc_security_group_ids == (GROUP,)
    assert vpc_config.fsx_lustre == config.FsxLustre(**FSX) and vpc_config.fsx_lustre.root == ROOT
    assert (plain_config.vpc_subnets, plain_config.vpc_security_group_ids, plain_config.fsx_lustre) == ((), (), None)


def _subnets(*entries: Any) -> str:
    return json.dumps(list(entries))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"VPC_SUBNETS": "[{"}, "VPC_SUBNETS is not JSON"),
        ({"VPC_SUBNETS": "{}"}, "VPC_SUBNETS: expected a JSON list of 1-16 subnets"),
        ({"VPC_SUBNETS": "[]"}, "VPC_SUBNETS: expected a JSON list of 1-16 subnets"),
        (
            {
                "VPC_SUBNETS": _subnets(
                    *({"subnet_id": f"subnet-{i}", "availability_zone": "us-east-1a"} for i in range(17))
                )
            },
            "VPC_SUBNETS: expected a JSON list of 1-16 subnets",
        ),
        (
            {"VPC_SUBNETS": _subnets({"subnet_id": "subnet-1"})},
            "VPC_SUBNETS: subnet {'subnet_id': 'subnet-1'}: expected",
        ),
        (
            {"VPC_SUBNETS": _subnets({**SUBNETS[0], "cidr": "10.0.0.0/24"})},
            'expected an object {"subnet_id": "...", "availability_zone": "..."} of strings',
        ),
        (
            {"VPC_SUBNETS": _subnets({**SUBNETS[0], "subnet_id": "subnet_1"})},
            "VPC_SUBNETS: subnet_id 'subnet_1': expected",
        ),
        (
            {"VPC_SUBNETS": _subnets({**SUBNETS[0], "availability_zone": "US-EAST-1A"})},
            "availability_zone 'US-EAST-1A'",
        ),
        ({"VPC_SUBNETS": _subnets(SUBNETS[0], SUBNETS[0])}, "subnet 'subnet-0aaa0000000000001' is listed twice"),
        (
            {"VPC_SUBNETS": _subnets({**SUBNETS[0], "availability_zone": "us-west-2a"}), "FSX_LUSTRE": None},
            "VPC_SUBNETS: availability_zone 'us-west-2a': expected a zone of us-east-1 (AWS_REGION)",
        ),
        ({"VPC_SECURITY_GROUP_IDS": f"{GROUP},{GROUP}"}, f"security group {GROUP!r} is listed twice"),
        ({"VPC_SUBNETS": None}, "VPC_SECURITY_GROUP_IDS is set without VPC_SUBNETS"),
        ({"VPC_SECURITY_GROUP_IDS": None}, "VPC_SECURITY_GROUP_IDS='': expected 1-5 security group IDs"),
        ({"VPC_SECURITY_GROUP_IDS": ",".join(f"sg-{i}" for i in range(6))}, "expected 1-5 security group IDs"),
        ({"VPC_SECURITY_GROUP_IDS": "sg 1"}, "VPC_SECURITY_GROUP_IDS: security group 'sg 1': expected"),
        ({"FSX_LUSTRE": "[]"}, "FSX_LUSTRE: file system []: expected an object"),
        (
            {"FSX_LUSTRE": json.dumps({**FSX, "file_system_id": "fs-12"})},
            "FSX_LUSTRE: file_system_id 'fs-12': expected",
        ),
        ({"FSX_LUSTRE": json.dumps({**FSX, "mount_name": "fsx/data"})}, "FSX_LUSTRE: mount_name 'fsx/data': expected"),
        ({"FSX_LUSTRE": json.dumps({**FSX, "mount_name": "x1ab2cdfg"})}, "LustreFileSystemMountName"),
        (
            {"FSX_LUSTRE": json.dumps({**FSX, "subnet_id": "subnet-9"})},
            "FSX_LUSTRE: subnet_id 'subnet-9': expected one of",
        ),
        (
            {"FSX_LUSTRE": json.dumps({**FSX, "availability_zone": "us-east-1b"})},
            "FSX_LUSTRE: availability_zone 'us-east-1b': expected 'us-east-1a'",
        ),
        (
            {"VPC_SUBNETS": None, "VPC_SECURITY_GROUP_IDS": None},
            "FSX_LUSTRE is set without VPC_SUBNETS",
        ),
    ],
)
def test_a_malformed_network_variable_is_a_configuration_error_naming_it(runtime, changes, message):
    env = environment(runtime, vpc_subnets=SUBNETS, vpc_security_group_ids=[GROUP], fsx_lustre=FSX)
    for name, value in changes.items():
        if value is None:
            env.pop(name)
        else:
            env[name] = value
    with pytest.raises(runtime.errors.ConfigurationError) as refused:
        runtime.config.SubmitterConfig.from_environ(env)
    assert message in str(refused.value)


# --- the request ------------------------------------------------------------------------------------------


def parse(runtime, config, **fields: Any):
    return runtime.request.parse_request({"hyperparameters": {"synthetic_data": True}, **fields}, config)


def test_an_fsx_channel_is_parsed_normalised_and_fingerprinted_as_sent(runtime, vpc_config):
    channel = {"file_system_id": FSX["file_system_id"], "directory_path": f"{ROOT}/datasets/guide/train/"}
    request = parse(runtime, vpc_config, inputs={"train": channel, "validation": "datasets/val/"})
    assert request.inputs["train"] == runtime.request.FsxChannel(FSX["file_system_id"], f"{ROOT}/datasets/guide/train")
    assert request.inputs["validation"] == "s3://data/datasets/val/" and request.reads_fsx
    assert request.sent["inputs"]["train"] == {
        "file_system_id": FSX["file_system_id"],
        "directory_path": f"{ROOT}/datasets/guide/train",
    }
    without_slash = {**channel, "directory_path": f"{ROOT}/datasets/guide/train"}
    same = parse(runtime, vpc_config, inputs={"validation": "s3://data/datasets/val/", "train": without_slash})
    assert same.fingerprint() == request.fingerprint()
    whole = parse(runtime, vpc_config, inputs={"train": {**channel, "directory_path": ROOT}})
    assert whole.inputs["train"].directory_path == ROOT


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("x1ab2cdf/data", "relative"),
        ("/x1ab2cdfz/data", "another directory whose name starts with the mount name"),
        ("/other/data", "outside the mount"),
        ("/x1ab2cdf/../etc", "a .. segment"),
        ("/x1ab2cdf/./data", "a . segment"),
        ("/x1ab2cdf//data", "an empty segment"),
        ("//x1ab2cdf/data", "a leading empty segment"),
        ("/x1ab2cdf/da\nta", "a control character"),
        ("/", "the root"),
        ("", "empty"),
        (7, "not a string"),
        (f"/x1ab2cdf/{'d' * 4096}", "longer than SageMaker's DirectoryPath"),
    ],
)
def test_a_directory_path_outside_the_mount_is_refused_naming_it(runtime, vpc_config, path, why):
    channel = {"file_system_id": FSX["file_system_id"], "directory_path": path}
    with pytest.raises(runtime.errors.Refusal) as refused:
        parse(runtime, vpc_config, inputs={"train": channel})
    assert refused.value.field == "inputs.train.directory_path", why
    assert f"expected {ROOT} or a directory below it" in refused.value.message


def test_an_fsx_channel_names_the_platforms_file_system_and_only_its_keys(runtime, vpc_config, plain_config):
    path = f"{ROOT}/data"
    cases = [
        (vpc_config, {"file_system_id": "fs-0fedcba9876543210", "directory_path": path}, "inputs.train.file_system_id"),
        (vpc_config, {"directory_path": path}, "inputs.train.file_system_id"),
        (
            vpc_config,
            {"file_system_id": FSX["file_system_id"], "directory_path": path, "mode": "rw"},
            "inputs.train.mode",
        ),
        (plain_config, {"file_system_id": FSX["file_system_id"], "directory_path": path}, "inputs.train"),
    ]
    for config, channel, field in cases:
        with pytest.raises(runtime.errors.Refusal) as refused:
            parse(runtime, config, inputs={"train": channel})
        assert refused.value.field == field, channel
    assert f"expected {FSX['file_system_id']}, the platform's FSx for Lustre" in _message(
        runtime, vpc_config, {"file_system_id": "fs-0fedcba9876543210", "directory_path": path}
    )
    assert "this deployment has no FSx for Lustre file system (the fsxLustre setting)" in _message(
        runtime, plain_config, {"file_system_id": FSX["file_system_id"], "directory_path": path}
    )
    with pytest.raises(runtime.errors.Refusal) as refused:
        parse(runtime, vpc_config, inputs={"train": ["s3://data/x/"]})
    assert refused.value.field == "inputs.train" and "{file_system_id, directory_path}" in refused.value.message


def _message(runtime, config, channel) -> str:
    with pytest.raises(runtime.errors.Refusal) as refused:
        parse(runtime, config, inputs={"train": channel})
    return refused.value.message


@pytest.mark.parametrize("name", ["network_isolation", "inter_container_encryption"])
def test_the_network_options_are_booleans_off_by_default_and_part_of_the_job(runtime, plain_config, name):
    off, on = parse(runtime, plain_config), parse(runtime, plain_config, **{name: True})
    assert off.value(name) is False and on.value(name) is True
    assert on.fingerprint() != off.fingerprint() != parse(runtime, plain_config, **{name: False}).fingerprint()
    with pytest.raises(runtime.errors.Refusal) as refused:
        parse(runtime, plain_config, **{name: "yes"})
    assert refused.value.field == name and refused.value.message.endswith("expected true or false")


# --- CreateTrainingJob ------------------------------------------------------------------------------------


def params(runtime, config, zone: str | None = None, capacity: str = "on-demand", **fields: Any) -> dict[str, Any]:
    request = parse(runtime, config, **fields)
    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p" if capacity == "training-plan" else None
    choice = runtime.capacity.CapacityChoice(capacity, "test", training_plan_arn=arn, availability_zone=zone)
    built = runtime.job.build_create_training_job(request, job_name="j-1", capacity=choice, config=config)
    assert validate_input("sagemaker", "CreateTrainingJob", built) == []  # botocore's model, whole
    return built


def test_without_vpc_mode_jobs_are_as_before(runtime, plain_config):
    built = params(runtime, plain_config, inputs={"train": "datasets/t/"})
    assert not {"VpcConfig", "EnableNetworkIsolation", "EnableInterContainerTrafficEncryption"} & set(built)
    assert built["InputDataConfig"] == [
        {
            "ChannelName": "train",
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": "s3://data/datasets/t/",
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
        }
    ]


def test_in_vpc_mode_every_job_gets_the_platforms_network(runtime, vpc_config):
    every = [s["subnet_id"] for s in SUBNETS]
    assert params(runtime, vpc_config)["VpcConfig"] == {"SecurityGroupIds": [GROUP], "Subnets": every}
    assert params(runtime, vpc_config, capacity="spot")["VpcConfig"]["Subnets"] == every
    on_plan = params(runtime, vpc_config, zone="us-east-1a", capacity="training-plan")
    assert on_plan["VpcConfig"]["Subnets"] == every[:2]
    assert params(runtime, vpc_config, zone="us-east-1b", capacity="training-plan")["VpcConfig"]["Subnets"] == every[2:]
    with pytest.raises(ValueError, match="no platform subnet in availability zone 'us-east-1c'"):
        params(runtime, vpc_config, zone="us-east-1c", capacity="training-plan")


def test_an_fsx_job_reads_its_channel_read_only_in_the_file_systems_subnet(runtime, vpc_config):
    channel = {"file_system_id": FSX["file_system_id"], "directory_path": f"{ROOT}/datasets/train"}
    built = params(runtime, vpc_config, inputs={"train": channel, "val": "datasets/v/"})
    assert built["VpcConfig"]["Subnets"] == [FSX["subnet_id"]]
    assert built["InputDataConfig"][0] == {
        "ChannelName": "train",
        "DataSource": {
            "FileSystemDataSource": {
                "FileSystemId": FSX["file_system_id"],
                "FileSystemAccessMode": "ro",
                "FileSystemType": "FSxLustre",
                "DirectoryPath": f"{ROOT}/datasets/train",
            }
        },
        "InputMode": "File",
    }
    assert "InputMode" not in built["InputDataConfig"][1]  # the job's FastFile
    assert built["AlgorithmSpecification"]["TrainingInputMode"] == "FastFile"
    plan = params(runtime, vpc_config, zone="us-east-1a", capacity="training-plan", inputs={"train": channel})
    assert plan["VpcConfig"]["Subnets"] == [FSX["subnet_id"]]


def test_network_isolation_and_inter_container_encryption_map_to_sagemakers_flags(runtime, vpc_config):
    built = params(runtime, vpc_config, network_isolation=True, inter_container_encryption=True, instance_count=2)
    assert built["EnableNetworkIsolation"] is True and built["EnableInterContainerTrafficEncryption"] is True
    # SageMaker still syncs checkpoints and writes output with the execution role: both stay
    assert built["CheckpointConfig"]["LocalPath"] == "/opt/ml/checkpoints" and built["OutputDataConfig"]["S3OutputPath"]
    off = params(runtime, vpc_config, network_isolation=False, inter_container_encryption=False)
    assert "EnableNetworkIsolation" not in off and "EnableInterContainerTrafficEncryption" not in off


def test_the_zones_a_job_may_use(runtime, vpc_config, plain_config):
    plain = parse(runtime, vpc_config)
    fsx = parse(
        runtime, vpc_config, inputs={"train": {"file_system_id": FSX["file_system_id"], "directory_path": ROOT}}
    )
    assert network.allowed_zones(parse(runtime, plain_config), plain_config) is None
    assert network.allowed_zones(plain, vpc_config).zones == ("us-east-1a", "us-east-1b")
    zones = network.allowed_zones(fsx, vpc_config)
    assert zones.zones == ("us-east-1a",)
    assert zones.refusal("us-east-1b") == (
        "its block is in availability zone us-east-1b; the job can run only in us-east-1a (the zone of FSx for "
        f"Lustre file system {FSX['file_system_id']}, which an input channel reads)"
    )
    assert zones.refusal(None).startswith("its block reports no AvailabilityZone; the job can run only in us-east-1a")


def test_the_estimate_notes_what_inter_container_encryption_costs_a_multi_node_job(runtime, plain_config):
    """The submitter's answer (``estimate``, in a dry run's response too) carries the planner's note."""
    from planner.plan import INTER_CONTAINER_ENCRYPTION_NOTE

    def notes(**fields: Any) -> list[str]:
        request = parse(runtime, plain_config, **fields)
        runtime.request.check_instance(request, plain_config)
        return runtime.service.preflight(request)[1]["notes"]

    assert INTER_CONTAINER_ENCRYPTION_NOTE in notes(instance_count=2, inter_container_encryption=True)
    assert INTER_CONTAINER_ENCRYPTION_NOTE not in notes(instance_count=1, inter_container_encryption=True)
    assert INTER_CONTAINER_ENCRYPTION_NOTE not in notes(instance_count=2)
