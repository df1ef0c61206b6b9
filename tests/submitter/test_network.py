"""VPC mode and FSx for Lustre in the submitter's runtime, without an emulator: the function environment read
strictly (``VPC_SUBNETS``, ``VPC_SECURITY_GROUP_IDS``, ``FSX_LUSTRE``, written by ``settings.function_environment``)."""

from __future__ import annotations

import json
from typing import Any

import pytest

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
        trainer_image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1",
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
