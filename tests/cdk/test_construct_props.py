"""Constructs validate their props early, with the prop, the value and what was expected."""

from __future__ import annotations

import aws_cdk as cdk
import pytest
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from platform_constructs import acknowledgements
from platform_constructs.buckets import TrainingBuckets, TrainingBucketsProps
from platform_constructs.execution_role import TrainingExecutionRole, TrainingExecutionRoleProps
from platform_constructs.trainer_image import TrainerImage, TrainerImageProps, build_context_excludes
from platform_constructs.training_plans import TrainingPlans, TrainingPlansProps
from platform_spec.training_plans import parse_training_plan_arn

pytestmark = pytest.mark.xdist_group("cdk")

PLAN = "arn:aws:sagemaker:us-west-2:123456789012:training-plan/plan-a"


@pytest.fixture
def stack():
    return cdk.Stack(cdk.App(), "Test")


def test_training_plans_rejects_a_bad_arn(stack):
    with pytest.raises(
        ValueError,
        match=r"TrainingPlansProps.plan_arns\[1\]: got 'arn:aws:s3:::bucket'; expected a SageMaker training-plan ARN",
    ):
        TrainingPlans(stack, "Plans", TrainingPlansProps(plan_arns=[PLAN, "arn:aws:s3:::bucket"]))


def test_training_plans_rejects_too_many_for_the_standard_tier(stack):
    arns = [f"arn:aws:sagemaker:us-west-2:123456789012:training-plan/plan-{i:03d}" for i in range(70)]
    with pytest.raises(ValueError, match="expected at most 4096"):
        TrainingPlans(stack, "Plans", TrainingPlansProps(plan_arns=arns))


def test_parse_training_plan_arn():
    assert parse_training_plan_arn(PLAN) == {
        "partition": "aws",
        "region": "us-west-2",
        "account": "123456789012",
        "name": "plan-a",
    }


def test_buckets_reject_bad_props(stack):
    with pytest.raises(ValueError, match="noncurrent_versions_to_retain: got 500"):
        TrainingBuckets(stack, "B", TrainingBucketsProps(noncurrent_versions_to_retain=500))
    with pytest.raises(ValueError, match=r"removal_policy: got .*SNAPSHOT.*; expected RETAIN or DESTROY"):
        TrainingBuckets(stack, "C", TrainingBucketsProps(removal_policy=cdk.RemovalPolicy.SNAPSHOT))


def test_buckets_accept_an_existing_key(stack):
    from aws_cdk import aws_kms as kms

    key = kms.Key(stack, "SharedKey")
    buckets = TrainingBuckets(stack, "Buckets", TrainingBucketsProps(encryption_key=key))
    assert buckets.encryption_key is key
    assert buckets.node.try_find_child("Key") is None


def test_trainer_image_rejects_bad_props(stack, tmp_path):
    with pytest.raises(ValueError, match="image_retain_count: got 0; expected an integer from 1 to 10000"):
        TrainerImage(stack, "A", TrainerImageProps(image_retain_count=0))
    with pytest.raises(ValueError, match="does not exist; expected the trainer's Dockerfile"):
        TrainerImage(stack, "B", TrainerImageProps(build_context=tmp_path))
    with pytest.raises(ValueError, match="lies outside context_paths"):
        TrainerImage(stack, "C", TrainerImageProps(context_paths=("planner",)))


def test_build_context_excludes_keep_only_the_named_folders():
    patterns = build_context_excludes(["training", "planner"])
    assert patterns[:2] == ["*", "**/*"]
    assert {"!training", "!training/**", "!planner", "!planner/**"} <= set(patterns)
    assert patterns[-3:] == ["**/__pycache__", "**/*.pyc", "**/.pytest_cache"]


def test_execution_role_rejects_wildcard_prefixes(stack):
    from platform_constructs.execution_role import InputLocation

    bucket = s3.Bucket(stack, "Data")
    repo = ecr.Repository(stack, "Repo")
    with pytest.raises(ValueError, match="prefix 'data/\\*'; expected a key prefix without a leading '/' or wildcards"):
        TrainingExecutionRole(
            stack,
            "Role",
            TrainingExecutionRoleProps(
                data_bucket=bucket,
                checkpoint_bucket=bucket,
                output_bucket=bucket,
                repository=repo,
                extra_inputs=[InputLocation(bucket=bucket, prefix="data/*")],
            ),
        )


def test_execution_role_grant_pass_role_carries_the_service_condition(stack):
    bucket = s3.Bucket(stack, "Data")
    role = TrainingExecutionRole(
        stack,
        "Role",
        TrainingExecutionRoleProps(
            data_bucket=bucket, checkpoint_bucket=bucket, output_bucket=bucket, repository=ecr.Repository(stack, "Repo")
        ),
    )
    caller = iam.Role(stack, "Caller", assumed_by=iam.AccountRootPrincipal())
    role.grant_pass_role(caller)
    document = stack.resolve(caller.node.find_child("DefaultPolicy").document.to_json())
    (statement,) = document["Statement"]
    assert statement["Action"] == "iam:PassRole"
    assert statement["Condition"] == {"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}}


def test_acknowledgement_needs_a_reason_and_renders_intrinsics(stack):
    bucket = s3.Bucket(stack, "Data")
    with pytest.raises(ValueError, match="empty reason"):
        acknowledgements.acknowledge(bucket, "AwsSolutions-S1", "  ")
    logical_id = stack.resolve(bucket.node.default_child.logical_id)
    assert acknowledgements.resource(bucket, f"{bucket.bucket_arn}/*") == f"Resource::<{logical_id}.Arn>/*"
    arn = stack.format_arn(service="sagemaker", resource="training-job", resource_name="*")
    assert acknowledgements.resource(stack, arn) == (
        "Resource::arn:<AWS::Partition>:sagemaker:<AWS::Region>:<AWS::AccountId>:training-job/*"
    )
