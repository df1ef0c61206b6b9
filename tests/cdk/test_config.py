"""Configuration: every context key validated in one place, errors name key, value and expectation."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest

from stacks.config import CONTEXT_KEYS, ConfigError, load_config
from aws_cdk import aws_logs as logs

from stacks.platform_app import CDK_JSON, cdk_json_context, create_app

pytestmark = pytest.mark.xdist_group("cdk")

PLAN = "arn:aws:sagemaker:us-west-2:123456789012:training-plan/p6-plan"


def config_for(context: dict | None = None, environ: dict | None = None):
    merged = cdk_json_context()
    merged.update(context or {})
    return load_config(cdk.App(context=merged).node, environ or {})


def error_for(context: dict, environ: dict | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        config_for(context, environ)
    return info.value


def test_cdk_json_documents_every_key_with_its_default():
    context = cdk_json_context()
    for key, default in CONTEXT_KEYS.items():
        assert key in context, key
        if default is not None:
            assert context[key] == default, key
    from planner.catalogue import INSTANCE_TYPES

    assert context["allowedInstanceTypes"] == list(INSTANCE_TYPES)
    assert json.loads(CDK_JSON.read_text())["app"].endswith("app.py")


def test_defaults():
    config = config_for()
    assert config.default_instance_type == "ml.p6-b200.48xlarge"
    assert config.removal_policy == "retain" and config.cdk_removal_policy == cdk.RemovalPolicy.RETAIN
    assert config.training_plan_arns == ()
    assert config.log_retention_days == 90
    assert config.account is None and config.region is None and config.env is None
    assert config.tags == {"Project": "blackwell-training-platform", "CostCenter": "ml-platform"}


def test_account_and_region_come_from_the_cdk_environment():
    config = config_for(environ={"CDK_DEFAULT_ACCOUNT": "123456789012", "CDK_DEFAULT_REGION": "eu-west-1"})
    assert (config.account, config.region) == ("123456789012", "eu-west-1")
    deploy = config_for(
        environ={"CDK_DEFAULT_REGION": "eu-west-1", "CDK_DEPLOY_REGION": "us-east-2"},
    )
    assert deploy.region == "us-east-2"
    error = error_for({}, environ={"CDK_DEFAULT_ACCOUNT": "12345"})
    assert error.key == "CDK_DEFAULT_ACCOUNT" and "12-digit" in str(error)


def test_bad_training_plan_arn_names_key_value_and_format():
    bad = "arn:aws:sagemaker:us-west-2:123456789012:training-job/not-a-plan"
    error = error_for({"trainingPlanArns": [PLAN, bad]})
    assert error.key == "trainingPlanArns[1]"
    assert error.value == bad
    message = str(error)
    assert "'trainingPlanArns[1]'" in message and bad in message
    assert "arn:aws[-partition]:sagemaker:<region>:<12-digit account>:training-plan/<name>" in message


@pytest.mark.parametrize(
    "bad",
    [
        "arn:aws:sagemaker:us-west-2:12345678901:training-plan/p",  # 11-digit account
        "arn:aws:sagemaker:us-west-2:123456789012:training-plan/",  # no name
        "arn:aws:ec2:us-west-2:123456789012:training-plan/p",  # wrong service
        "arn:aws:sagemaker:us-west-2:123456789012:training-plan/bad_name",  # underscore not allowed
        "arn:aws:sagemaker::123456789012:training-plan/p",  # no region
    ],
)
def test_malformed_plan_arns_are_rejected(bad):
    assert error_for({"trainingPlanArns": [bad]}).key == "trainingPlanArns[0]"


def test_partition_variants_are_accepted():
    arn = "arn:aws-us-gov:sagemaker:us-gov-west-1:123456789012:training-plan/gov-plan"
    assert config_for({"trainingPlanArns": [arn]}).training_plan_arns == (arn,)


def test_plan_in_another_region_than_the_deployment_is_rejected():
    error = error_for({"trainingPlanArns": [PLAN]}, environ={"CDK_DEFAULT_REGION": "us-east-1"})
    assert error.key == "trainingPlanArns[0]" and "us-east-1" in str(error) and "us-west-2" in str(error)


def test_cli_string_values_are_parsed():
    # `cdk synth -c key=value` passes strings
    config = config_for(
        {
            "trainingPlanArns": json.dumps([PLAN]),
            "allowedInstanceTypes": "ml.p5.48xlarge, ml.p6-b200.48xlarge",
            "logRetentionDays": "30",
            "removalPolicy": "DESTROY",
        }
    )
    assert config.training_plan_arns == (PLAN,)
    assert config.allowed_instance_types == ("ml.p5.48xlarge", "ml.p6-b200.48xlarge")
    assert config.log_retention_days == 30 and config.log_retention == logs.RetentionDays.ONE_MONTH
    assert config.cdk_removal_policy == cdk.RemovalPolicy.DESTROY


def test_unknown_instance_type_names_the_catalogue():
    error = error_for({"allowedInstanceTypes": ["ml.p6-b200.48xlarge", "ml.p4d.24xlarge"]})
    assert error.key == "allowedInstanceTypes[1]" and error.value == "ml.p4d.24xlarge"
    assert "planner catalogue" in str(error) and "ml.p6-b300.48xlarge" in str(error)


def test_default_instance_type_must_be_allowed():
    error = error_for({"allowedInstanceTypes": ["ml.p5.48xlarge"], "defaultInstanceType": "ml.p6-b200.48xlarge"})
    assert error.key == "defaultInstanceType" and "ml.p5.48xlarge" in error.expected


def test_bad_removal_policy():
    error = error_for({"removalPolicy": "delete"})
    assert str(error) == (
        "context key 'removalPolicy': got 'delete'; expected 'retain' (keep data, the default) or 'destroy' (test accounts)"
    )


@pytest.mark.parametrize(
    ("key", "value", "expected_fragment"),
    [
        ("logRetentionDays", 42, "CloudWatch Logs retention period"),
        ("logRetentionDays", "ninety", "an integer"),
        ("imageRetainCount", 0, "from 1 to 10000"),
        ("capacityFallback", ["spot", "reserved"], "one of training-plan, spot, on-demand"),
        ("invokerPrincipals", ["JobScheduler"], "IAM principal ARN"),
        ("alarmEmails", ["not-an-address"], "e-mail address"),
        ("allowedInputPrefixes", ["https://bucket/key"], "s3://bucket/prefix"),
        ("projectTag", "", "1-256 characters"),
        ("stackName", "1-bad", "stack name"),
        ("trainingPlanArns", {"arn": PLAN}, "a list"),
    ],
)
def test_other_bad_values(key, value, expected_fragment):
    error = error_for({key: value})
    assert error.key.split("[")[0] == key
    assert expected_fragment in str(error)
    assert f"'{error.key}'" in str(error)


def test_duplicates_are_rejected():
    error = error_for({"trainingPlanArns": [PLAN, PLAN]})
    assert error.key == "trainingPlanArns" and "more than once" in str(error)


def test_misspelled_key_is_caught():
    error = error_for({"trainingPlanArn": [PLAN]})
    assert error.key == "trainingPlanArn" and "did you mean 'trainingPlanArns'" in str(error)


def test_bad_value_fails_the_app_before_anything_is_built():
    with pytest.raises(ConfigError, match="'removalPolicy'"):
        create_app(context={"removalPolicy": "snapshot"}, environ={})
