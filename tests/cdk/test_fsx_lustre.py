"""FsxLustre on a small test stack: a VPC, the jobs' security group, the platform's buckets and key; cdk-nag and
cfn-lint on it, and the properties that matter (encryption, the one subnet, Lustre's ports, the association)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3

from platform_constructs.buckets import TrainingBuckets
from platform_constructs.fsx_lustre import (
    LUSTRE_TCP_PORTS,
    SLR_KEY_STATEMENT_SID,
    FsxLustre,
    FsxLustreOptions,
    FsxLustreProps,
)
from platform_constructs.submitter.runtime import settings
from platform_spec.errors import FieldError

pytestmark = pytest.mark.xdist_group("cdk")

ACCOUNT = "123456789012"
REGION = "us-west-2"


@dataclass
class FsxStack:
    stack: cdk.Stack
    fs: FsxLustre
    vpc: ec2.Vpc
    jobs: ec2.SecurityGroup
    buckets: TrainingBuckets
    template: dict[str, Any]
    outdir: Path

    def ref(self, construct) -> str:
        return self.stack.resolve(construct.node.default_child.logical_id)

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == resource_type}


def build(outdir: Path | None, options: FsxLustreOptions, removal: cdk.RemovalPolicy, *, nag: bool) -> FsxStack:
    from cdk_nag import AwsSolutionsChecks

    app = cdk.App(outdir=str(outdir) if outdir else None, stack_traces=False)
    stack = cdk.Stack(app, "FsxTest", env=cdk.Environment(account=ACCOUNT, region=REGION))
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        max_azs=2,
        nat_gateways=0,
        subnet_configuration=[ec2.SubnetConfiguration(name="Jobs", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
        flow_logs={"All": ec2.FlowLogOptions()},
    )
    jobs = ec2.SecurityGroup(stack, "Jobs", vpc=vpc, allow_all_outbound=False, description="training jobs (EFA)")
    jobs.add_ingress_rule(jobs, ec2.Port.all_traffic(), "EFA: all traffic between the jobs' instances")
    jobs.add_egress_rule(jobs, ec2.Port.all_traffic(), "EFA: all traffic between the jobs' instances")
    buckets = TrainingBuckets(stack, "Buckets")
    fs = FsxLustre(
        stack,
        "FsxLustre",
        FsxLustreProps(
            vpc=vpc,
            subnet=vpc.isolated_subnets[1],
            encryption_key=buckets.encryption_key,
            data_bucket=buckets.data,
            client_security_group=jobs,
            options=options,
            removal_policy=removal,
        ),
    )
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    assembly = app.synth()  # with nag: raises on an unacknowledged finding
    template = assembly.get_stack_by_name("FsxTest").template
    return FsxStack(stack, fs, vpc, jobs, buckets, template, Path(assembly.directory))


@pytest.fixture(scope="module")
def synth(tmp_path_factory) -> FsxStack:
    """Defaults but a prefix, kept (the stack's default removal policy), cdk-nag on."""
    outdir = tmp_path_factory.mktemp("cdk-fsx")
    return build(outdir, FsxLustreOptions(data_repository_prefix="datasets/"), cdk.RemovalPolicy.RETAIN, nag=True)


def the_file_system(synth: FsxStack) -> dict[str, Any]:
    (fs,) = synth.of_type("AWS::FSx::FileSystem").values()
    return fs


def test_nag_and_cdk_validation_find_nothing(synth):
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    violations = [v for plugin in report["pluginReports"] for v in plugin.get("violations", [])]
    assert violations == []


def test_cfn_lint_has_no_errors(synth):
    from trainctl.synth_summary import lint_template

    matches = lint_template(synth.outdir / "FsxTest.template.json", REGION)
    assert [(m.rule_id, m.message) for m in matches if m.severity == "error"] == []


def test_the_file_system_is_persistent_encrypted_with_the_platform_key_in_one_subnet(synth):
    fs = the_file_system(synth)
    props = fs["Properties"]
    assert props["FileSystemType"] == "LUSTRE"
    assert props["FileSystemTypeVersion"] == "2.15"
    assert props["KmsKeyId"] == {"Ref": synth.ref(synth.buckets.encryption_key)}
    assert props["StorageCapacity"] == 1200
    assert props["LustreConfiguration"] == {
        "DeploymentType": "PERSISTENT_2",
        "PerUnitStorageThroughput": 250,
        "AutomaticBackupRetentionDays": 0,
    }
    assert props["SubnetIds"] == [{"Ref": synth.stack.resolve(synth.vpc.isolated_subnets[1].subnet_id)["Ref"]}]
    assert props["SecurityGroupIds"] == [synth.stack.resolve(synth.fs.security_group.security_group_id)]
    assert fs["DeletionPolicy"] == fs["UpdateReplacePolicy"] == "Retain"


def _rules(synth: FsxStack, kind: str, group: ec2.ISecurityGroup) -> set[tuple[str, int, int, str]]:
    """``(protocol, from, to, peer)`` of the standalone ingress or egress rules of ``group``; the peer is the
    logical ID of the other group, or the CIDR."""
    group_id = synth.stack.resolve(group.security_group_id)
    peer_key = "SourceSecurityGroupId" if kind == "Ingress" else "DestinationSecurityGroupId"
    found = set()
    for resource in synth.of_type(f"AWS::EC2::SecurityGroup{kind}").values():
        props = resource["Properties"]
        if props["GroupId"] != group_id:
            continue
        peer = props.get(peer_key, {}).get("Fn::GetAtt", [props.get("CidrIp")])[0]
        found.add((props["IpProtocol"], props.get("FromPort", -1), props.get("ToPort", -1), peer))
    return found


def test_the_file_systems_group_allows_lustre_ports_from_the_jobs_and_itself_only(synth):
    fs_group = synth.stack.resolve(synth.fs.security_group.security_group_id)["Fn::GetAtt"][0]
    jobs_group = synth.ref(synth.jobs)
    lustre = {("tcp", first, last) for first, last in LUSTRE_TCP_PORTS}
    assert lustre == {("tcp", 988, 988), ("tcp", 1018, 1023)}
    assert _rules(synth, "Ingress", synth.fs.security_group) == {
        (*ports, peer) for ports in lustre for peer in (fs_group, jobs_group)
    }
    assert _rules(synth, "Egress", synth.fs.security_group) == {(*ports, fs_group) for ports in lustre}
    group = synth.template["Resources"][fs_group]
    # no inline rule: not the L2's TCP 988-1023 to itself, and no egress to anywhere (CloudFormation drops the
    # default allow-all egress once a standalone egress rule is added, aws/aws-cdk#998)
    assert "SecurityGroupIngress" not in group["Properties"]
    assert "SecurityGroupEgress" not in group["Properties"]
    assert group["DeletionPolicy"] == "Retain"  # it holds the retained file system's interfaces


def test_the_jobs_group_exchanges_lustre_with_the_file_servers_only(synth):
    fs_group = synth.stack.resolve(synth.fs.security_group.security_group_id)["Fn::GetAtt"][0]
    jobs_group = synth.ref(synth.jobs)
    # EFA's rule, and Lustre's ports from the file servers (LNet connects both ways): nothing else inbound
    assert _rules(synth, "Ingress", synth.jobs) == {
        ("-1", -1, -1, jobs_group),
        ("tcp", 988, 988, fs_group),
        ("tcp", 1018, 1023, fs_group),
    }
    assert _rules(synth, "Egress", synth.jobs) == {
        ("-1", -1, -1, jobs_group),
        ("tcp", 988, 988, fs_group),
        ("tcp", 1018, 1023, fs_group),
    }


def test_the_association_imports_the_data_prefix_and_exports_nothing(synth):
    (dra,) = synth.of_type("AWS::FSx::DataRepositoryAssociation").values()
    props = dra["Properties"]
    assert props["FileSystemId"] == {"Ref": synth.ref(synth.fs.file_system)}
    assert props["FileSystemPath"] == "/"
    assert props["DataRepositoryPath"] == {
        "Fn::Join": ["", ["s3://", {"Ref": synth.ref(synth.buckets.data)}, "/datasets/"]]
    }
    assert props["BatchImportMetaDataOnCreate"] is True
    assert props["S3"] == {"AutoImportPolicy": {"Events": ["NEW", "CHANGED", "DELETED"]}}
    assert dra["DeletionPolicy"] == "Retain"
    assert synth.ref(synth.buckets.encryption_key) in dra["DependsOn"]


def test_fsx_service_linked_roles_may_decrypt_through_s3_only(synth):
    key = synth.template["Resources"][synth.ref(synth.buckets.encryption_key)]
    (statement,) = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == SLR_KEY_STATEMENT_SID]
    assert statement["Effect"] == "Allow"
    assert statement["Action"] == "kms:Decrypt"  # import only: nothing is written back to the bucket
    conditions = statement["Condition"]
    assert conditions["ArnLike"]["aws:PrincipalArn"] == {
        "Fn::Join": [
            "",
            [
                "arn:",
                {"Ref": "AWS::Partition"},
                f":iam::{ACCOUNT}:role/aws-service-role/s3.data-source.lustre.fsx.amazonaws.com/"
                "AWSServiceRoleForFSxS3Access_fs-*",
            ],
        ]
    }
    assert conditions["StringEquals"] == {
        "kms:CallerAccount": ACCOUNT,
        "kms:ViaService": {"Fn::Join": ["", [f"s3.{REGION}.", {"Ref": "AWS::URLSuffix"}]]},
    }


def test_the_function_environment_and_the_grant_conditions_name_this_file_system(synth):
    stack, fs = synth.stack, synth.fs
    fs_ref = {"Ref": synth.ref(fs.file_system)}
    value = stack.resolve(fs.function_environment_value())
    assert value == {
        "file_system_id": fs_ref,
        "mount_name": {"Fn::GetAtt": [synth.ref(fs.file_system), "LustreMountName"]},
        "subnet_id": stack.resolve(synth.vpc.isolated_subnets[1].subnet_id),
        "availability_zone": synth.vpc.isolated_subnets[1].availability_zone,
    }
    env = settings.function_environment(
        trainer_image_uris={"amd64": "i"},
        execution_role_arn="r",
        data_bucket="d",
        checkpoint_bucket="c",
        output_bucket="o",
        output_kms_key_arn="k",
        plan_arns_parameter="p",
        account_id=ACCOUNT,
        default_instance_type="ml.p5.48xlarge",
        allowed_instance_types=["ml.p5.48xlarge"],
        capacity_fallback=["on-demand"],
        vpc_subnets=[{"subnet_id": "s", "availability_zone": "z"}],
        vpc_security_group_ids=["sg"],
        fsx_lustre=fs.function_environment_value(),
    )
    assert settings.ENV_FSX_LUSTRE in env  # the contract's function takes the value as it is
    assert stack.resolve(fs.create_training_job_conditions()) == {
        "ForAllValues:StringEquals": {
            "sagemaker:FileSystemId": [fs_ref],
            "sagemaker:FileSystemType": ["FSxLustre"],
            "sagemaker:FileSystemAccessMode": ["ro"],
        }
    }


def test_destroy_removes_the_file_system_its_association_and_group():
    built = build(None, FsxLustreOptions(deployment_type="PERSISTENT_1"), cdk.RemovalPolicy.DESTROY, nag=False)
    fs = the_file_system(built)
    assert fs["Properties"]["LustreConfiguration"]["DeploymentType"] == "PERSISTENT_1"
    assert fs["Properties"]["LustreConfiguration"]["PerUnitStorageThroughput"] == 200  # PERSISTENT_1's default
    mine = {
        built.stack.resolve(child.logical_id): child.cfn_resource_type
        for child in built.fs.node.find_all()
        if isinstance(child, cdk.CfnResource)
    }
    assert sorted(set(mine.values())) == [
        "AWS::EC2::SecurityGroup",
        "AWS::EC2::SecurityGroupEgress",
        "AWS::EC2::SecurityGroupIngress",
        "AWS::FSx::DataRepositoryAssociation",
        "AWS::FSx::FileSystem",
    ]
    assert {built.template["Resources"][logical_id].get("DeletionPolicy", "Delete") for logical_id in mine} == {
        "Delete"
    }


@pytest.mark.parametrize(
    ("options", "field", "expected"),
    [
        ({"deployment_type": "SCRATCH_2"}, "deployment_type", "take no KMS key"),
        ({"deployment_type": "SCRATCH_1"}, "deployment_type", "take no KMS key"),
        ({"deployment_type": "PERSISTENT_3"}, "deployment_type", "one of PERSISTENT_2, PERSISTENT_1"),
        ({"storage_capacity_gib": 1300}, "storage_capacity_gib", "1200, 2400 or a multiple of 2400"),
        ({"storage_capacity_gib": 3600}, "storage_capacity_gib", "multiple of 2400"),  # SCRATCH_1's step only
        ({"storage_capacity_gib": 0}, "storage_capacity_gib", "multiple of 2400"),
        ({"storage_capacity_gib": -2400}, "storage_capacity_gib", "multiple of 2400"),
        ({"storage_capacity_gib": True}, "storage_capacity_gib", "multiple of 2400"),
        ({"per_unit_storage_throughput": 200}, "per_unit_storage_throughput", "125, 250, 500, 1000"),
        (
            {"deployment_type": "PERSISTENT_1", "per_unit_storage_throughput": 250},
            "per_unit_storage_throughput",
            "for PERSISTENT_1, one of 50, 100, 200",
        ),
        (
            {"deployment_type": "PERSISTENT_1", "per_unit_storage_throughput": 12},  # HDD's tier: SSD only here
            "per_unit_storage_throughput",
            "50, 100, 200",
        ),
        ({"data_repository_prefix": "/datasets/"}, "data_repository_prefix", "ending in '/'"),
        ({"data_repository_prefix": "datasets"}, "data_repository_prefix", "ending in '/'"),
        ({"data_repository_prefix": "data*/"}, "data_repository_prefix", "wildcards"),
        ({"data_repository_prefix": "s3://shared/data/"}, "data_repository_prefix", "give the key prefix only"),
        ({"data_repository_prefix": "a\nb/"}, "data_repository_prefix", "control characters"),
        ({"data_repository_prefix": "../x/"}, "data_repository_prefix", "'..' segment"),
        ({"data_repository_prefix": "./a/"}, "data_repository_prefix", "'..' segment"),
        ({"data_repository_prefix": "a//b/"}, "data_repository_prefix", "empty, '.' or '..' segment"),
        ({"data_repository_prefix": "a" * 1024 + "/"}, "data_repository_prefix", "at most 1024 bytes"),
    ],
)
def test_options_refuse_what_fsx_does_not_create(options, field, expected):
    with pytest.raises(FieldError, match=expected) as info:
        FsxLustreOptions(**options)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("options", "throughput"),
    [
        ({}, 250),
        ({"storage_capacity_gib": 2400, "per_unit_storage_throughput": 1000}, 1000),
        ({"storage_capacity_gib": 9600, "deployment_type": "PERSISTENT_1"}, 200),
        ({"deployment_type": "PERSISTENT_1", "per_unit_storage_throughput": 50, "data_repository_prefix": "a/b/"}, 50),
    ],
)
def test_options_accept_fsx_s_persistent_ssd_rules(options, throughput):
    assert FsxLustreOptions(**options).throughput == throughput


def test_a_bucket_under_an_imported_key_is_refused_before_anything_is_half_built():
    stack = cdk.Stack(cdk.App(), "Imported", env=cdk.Environment(account=ACCOUNT, region=REGION))
    vpc = ec2.Vpc(
        stack,
        "Vpc",
        max_azs=1,
        nat_gateways=0,
        subnet_configuration=[ec2.SubnetConfiguration(name="Jobs", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)],
    )
    key = kms.Key.from_key_arn(stack, "Key", f"arn:aws:kms:{REGION}:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab")
    bucket = s3.Bucket.from_bucket_attributes(stack, "Data", bucket_name="shared-data", encryption_key=key)
    props = FsxLustreProps(
        vpc=vpc,
        subnet=vpc.isolated_subnets[0],
        encryption_key=key,
        data_bucket=bucket,
        client_security_group=ec2.SecurityGroup(stack, "Jobs", vpc=vpc),
    )
    with pytest.raises(ValueError, match=r"FsxLustreProps.data_bucket: its KMS key is imported"):
        FsxLustre(stack, "FsxLustre", props)


@pytest.mark.parametrize(
    ("channels", "allowed"),
    [
        ([], True),  # a job reading S3 only carries none of the keys
        ([("fs-0123456789abcdef0", "FSxLustre", "ro")], True),
        ([("fs-0123456789abcdef0", "FSxLustre", "rw")], False),  # writing the file system
        ([("fs-0fedcba9876543210", "FSxLustre", "ro")], False),  # a foreign file system
        ([("fs-0123456789abcdef0", "EFS", "ro")], False),
        ([("fs-0123456789abcdef0", "FSxLustre", "ro"), ("fs-0fedcba9876543210", "FSxLustre", "ro")], False),
    ],
)
def test_the_grant_conditions_allow_this_file_system_read_only_and_jobs_without_one(synth, channels, allowed):
    """The conditions, the file system's ID put in, evaluated as IAM documents ``ForAllValues`` (the emulator's
    evaluator, which follows the IAM User Guide's "Condition operators")."""
    from devtools.local_aws.policy import Policy, Request, evaluate

    fs_token = synth.stack.resolve(synth.fs.file_system_id)
    conditions = json.loads(
        json.dumps(synth.stack.resolve(synth.fs.create_training_job_conditions())).replace(
            json.dumps(fs_token), json.dumps("fs-0123456789abcdef0")
        )
    )
    job = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/j"
    policy = Policy.compile(
        "Submitter",
        {
            "Statement": [
                {"Effect": "Allow", "Action": "sagemaker:CreateTrainingJob", "Resource": job, "Condition": conditions}
            ]
        },
    )
    context = {
        key: [channel[index] for channel in channels]
        for index, key in enumerate(
            ("sagemaker:filesystemid", "sagemaker:filesystemtype", "sagemaker:filesystemaccessmode")
        )
        if channels
    }
    request = Request(f"arn:aws:iam::{ACCOUNT}:role/Submitter", ACCOUNT, "sagemaker:CreateTrainingJob", job, context)
    assert evaluate(request, [policy]).allowed is allowed
