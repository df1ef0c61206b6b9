"""Configuration: every context key validated in one place, errors name key, value and expectation."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk import aws_logs as logs

from stacks.config import CONTEXT_KEYS, ConfigError, load_config
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


PLATFORM_SPEC_DEFAULTS = ("defaultInstanceType", "allowedInstanceTypes", "capacityFallback")
"""Context keys whose defaults are platform_spec facts (the default instance type, the catalogue's trainable
types, the capacity types' order): cdk.json lists them as null, so it restates none of them."""


def test_cdk_json_documents_every_key_with_its_default():
    context = cdk_json_context()
    for key, default in CONTEXT_KEYS.items():
        assert key in context, key
        if key in PLATFORM_SPEC_DEFAULTS:
            assert context[key] is None, f"{key}: cdk.json would be a second copy of a platform_spec fact"
        elif default is not None:
            assert context[key] == default, key
    assert json.loads(CDK_JSON.read_text())["app"].endswith("app.py")


def test_cdk_json_defaults_follow_the_catalogue_and_the_capacity_types(monkeypatch):
    """cdk.json's deployment takes the platform_spec defaults: every catalogue type CreateTrainingJob accepts and
    the image runs on (a type added to the catalogue is allowed with no other change), the default instance
    type, the capacity types' order."""
    from platform_constructs.submitter.runtime import config as runtime_config
    from platform_spec import catalogue
    from platform_spec.capacity import DEFAULT_CAPACITY_FALLBACK

    config = config_for()
    # every catalogue type but the GB200 UltraServers, which CreateTrainingJob does not accept, and the
    # arm64 GB200 host, for which cdk.json's deployment builds no image (imageArchitectures ["amd64"])
    ultraservers = ["ml.u-p6e-gb200x36", "ml.u-p6e-gb200x72", "ml.p6e-gb200.36xlarge"]
    assert set(ultraservers) <= set(catalogue.INSTANCE_TYPES)
    assert config.image_architectures == catalogue.DEFAULT_IMAGE_ARCHITECTURES
    assert config.allowed_instance_types == tuple(
        t for t in catalogue.TRAINABLE_INSTANCE_TYPES if t not in ultraservers
    )
    assert config.default_instance_type == catalogue.DEFAULT_INSTANCE_TYPE
    assert config.capacity_fallback == DEFAULT_CAPACITY_FALLBACK
    # a trainable type CreateTrainingJob accepts, newly in the catalogue, is allowed by cdk.json's deployment
    new = "ml.p4d.24xlarge"  # in botocore's TrainingInstanceType; not (yet) in the catalogue
    monkeypatch.setattr(catalogue, "TRAINABLE_INSTANCE_TYPES", (*catalogue.TRAINABLE_INSTANCE_TYPES, new))
    monkeypatch.setattr(catalogue, "INSTANCE_TYPES", (*catalogue.INSTANCE_TYPES, new))
    assert new in runtime_config.default_allowed_instance_types(("amd64",))
    assert new in config_for().allowed_instance_types


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


# -- whole-value, ASCII matching (review of issue 10) ---------------------------------------------

VALID_SAMPLES: dict[str, object] = {
    "stackName": "TrainingPlatform",
    "trainingPlanArns": [PLAN],
    "defaultInstanceType": "ml.p6-b200.48xlarge",
    "imageArchitectures": ["amd64", "arm64"],
    "allowedInstanceTypes": ["ml.p6-b200.48xlarge"],
    "capacityFallback": ["spot"],
    "allowedInputPrefixes": ["s3://shared-datasets/tokenized/"],
    "logRetentionDays": "30",
    "removalPolicy": "destroy",
    "projectTag": "llm-pretraining",
    "costCenter": "cc-1234",
    "invokerPrincipals": ["arn:aws:iam::123456789012:role/JobScheduler"],
    "alarmEmails": ["oncall@example.com"],
    "alarmHttpsEndpoints": ["https://hooks.example.com/sns"],
    "alarmSlackChannels": ["T0123ABCD/C0456EFGH"],
    "idleCapacityAlarmHours": "12",
    "imageRetainCount": "7",
    "submitterReservedConcurrency": "25",
    "readerPrincipals": ["arn:aws:iam::123456789012:role/Dashboards"],
    "runContinuationScheduleMinutes": "10",
    "runCapacityWaitAlarmMinutes": "30",
    "fsxLustre": '{"deploymentType": "PERSISTENT_2", "storageCapacityGiB": 2400, "dataRepositoryPrefix": "tokens/"}',
    "vpc": "create",
    "permissionsBoundaryArn": "arn:aws:iam::123456789012:policy/boundaries/Platform",
}
"""One valid value per context key, as `-c` or cdk.json gives it (every key must have one)."""
COMPANIONS = {"fsxLustre": {"vpc": "create"}}
"""What a key needs beside it (the file system lives in the VPC)."""
ENVIRON = {"CDK_DEFAULT_ACCOUNT": "123456789012", "CDK_DEFAULT_REGION": "us-west-2"}


def test_every_key_has_a_valid_sample_that_loads():
    assert set(VALID_SAMPLES) == set(CONTEXT_KEYS)  # a new key needs its sample, and so its trailing-newline test
    for key, value in VALID_SAMPLES.items():
        config_for({key: value, **COMPANIONS.get(key, {})}, ENVIRON)


def _spoiled(value: object, suffix: str) -> object:
    """``value`` with ``suffix`` after its (first) string."""
    return [value[0] + suffix, *value[1:]] if isinstance(value, list) else f"{value}{suffix}"


@pytest.mark.parametrize("suffix", ["\n", "\r\n", "\t", "\x00", "\u2028"], ids=["LF", "CRLF", "TAB", "NUL", "LS"])
@pytest.mark.parametrize("key", sorted(VALID_SAMPLES))
def test_a_trailing_newline_or_control_character_is_refused_naming_the_key(key, suffix):
    # Before: patterns ending in `$` used with `.match` accepted "TrainingPlatform\n" and the like.
    value = _spoiled(VALID_SAMPLES[key], suffix)
    if key in ("projectTag", "costCenter") and suffix == "\u2028":
        # a Unicode separator (Zl), which SageMaker's TagValue rule (\p{Z}) accepts: so does the config
        assert (
            config_for({key: value}, ENVIRON).tags[{"projectTag": "Project", "costCenter": "CostCenter"}[key]] == value
        )
        return
    error = error_for({key: value, **COMPANIONS.get(key, {})}, ENVIRON)
    assert error.key.split("[")[0] == key
    assert str(error).startswith(f"context key {error.key!r}: got ")
    if isinstance(value, list):  # the JSON list, and the same item as a `-c` comma-separated string
        assert error_for({key: ",".join(value)}, ENVIRON).key.split("[")[0] == key


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("CDK_DEFAULT_ACCOUNT", "123456789012\n"),
        ("CDK_DEFAULT_ACCOUNT", "١٢٣٤٥٦٧٨٩٠١٢"),  # Arabic-Indic digits: `\d` matched them
        ("CDK_DEFAULT_ACCOUNT", "１２３４５６７８９０１２"),  # fullwidth digits
        ("CDK_DEFAULT_REGION", "us-west-2\n"),
        ("CDK_DEFAULT_REGION", "us-west-٢"),
        ("CDK_DEPLOY_ACCOUNT", "123456789012\n"),
        ("CDK_DEPLOY_REGION", "us-west-2\n"),
    ],
)
def test_the_environment_account_and_region_are_matched_whole_in_ascii(variable, value):
    error = error_for({}, {**ENVIRON, variable: value})
    assert error.key == variable and error.value == value


@pytest.mark.parametrize(
    "key",
    [
        "submitterReservedConcurrency",
        "idleCapacityAlarmHours",
        "imageRetainCount",
        "logRetentionDays",
        "runContinuationScheduleMinutes",
        "runCapacityWaitAlarmMinutes",
    ],
)
@pytest.mark.parametrize("digits", ["١٠", "３０", "۳۰"], ids=["arabic-indic", "fullwidth", "extended-arabic"])
def test_numbers_take_ascii_digits_only(key, digits):
    # Before: `\d` let "١٠" through and int() read it as 10.
    error = error_for({key: digits}, ENVIRON)
    assert error.key == key and error.value == digits


def test_spaces_around_values_given_with_c_are_still_accepted():
    config = config_for({"submitterReservedConcurrency": " 25 ", "alarmEmails": " a@example.com , b@example.com ",
                         "idleCapacityAlarmHours": "12 "}, ENVIRON)  # fmt: skip
    assert config.submitter_reserved_concurrency == 25 and config.idle_capacity_alarm_hours == 12
    assert config.alarm_emails == ("a@example.com", "b@example.com")
    assert config_for({"submitterReservedConcurrency": " none "}, ENVIRON).submitter_reserved_concurrency is None
    assert error_for({"submitterReservedConcurrency": "none\n"}, ENVIRON).key == "submitterReservedConcurrency"


@pytest.mark.parametrize(
    "prefix", ["s3://shared-datasets/tok?ens/", "s3://shared-datasets/tokens*", "s3://shared-datasets/a\x01b/"]
)
def test_an_input_prefix_with_an_iam_wildcard_or_a_control_character_is_refused(prefix):
    # the prefix becomes the execution role's resource ARN, where '?' is a wildcard too
    error = error_for({"allowedInputPrefixes": [prefix]}, ENVIRON)
    assert error.key == "allowedInputPrefixes[0]" and "without wildcards ('*', '?')" in str(error)


def test_tag_values_follow_sagemakers_rule():
    assert (
        config_for({"projectTag": "Größe 1b/8k"}, ENVIRON).project_tag == "Größe 1b/8k"
    )  # \p{L}: letters of any script
    for bad in ("a" * 257, "semi;colon", "tab\there"):
        assert error_for({"costCenter": bad}, ENVIRON).key == "costCenter"


# --- fsxLustre -------------------------------------------------------------------------------------------------


def test_fsx_lustre_is_off_by_default_and_an_empty_object_takes_every_default():
    from platform_constructs.fsx_lustre import FsxLustreOptions

    assert config_for().fsx_lustre is None
    options = config_for({"fsxLustre": {}, "vpc": "create"}, ENVIRON).fsx_lustre
    assert options == FsxLustreOptions()
    assert (options.deployment_type, options.storage_capacity_gib, options.throughput) == ("PERSISTENT_2", 1200, 250)
    assert options.data_repository_prefix == ""


@pytest.mark.parametrize(
    "raw",
    [
        {
            "deploymentType": "PERSISTENT_1",
            "storageCapacityGiB": 4800,
            "perUnitStorageThroughput": 100,
            "dataRepositoryPrefix": "tokenized/",
        },
        # as `cdk synth -c fsxLustre='{...}'` gives it: a string, numbers maybe as digits
        '{"deploymentType": "PERSISTENT_1", "storageCapacityGiB": "4800", "perUnitStorageThroughput": 100, '
        '"dataRepositoryPrefix": "tokenized/"}',
    ],
)
def test_fsx_lustre_reads_every_option(raw):
    options = config_for({"fsxLustre": raw, "vpc": "create"}, ENVIRON).fsx_lustre
    assert (options.deployment_type, options.storage_capacity_gib, options.throughput) == ("PERSISTENT_1", 4800, 100)
    assert options.data_repository_prefix == "tokenized/"


@pytest.mark.parametrize(
    ("raw", "key", "expected"),
    [
        ({"deploymentType": "SCRATCH_2"}, "fsxLustre.deploymentType", "FSx manages and take no KMS key"),
        ({"storageCapacityGiB": 1000}, "fsxLustre.storageCapacityGiB", "1200, 2400 or a multiple of 2400"),
        ({"storageCapacityGiB": "big"}, "fsxLustre.storageCapacityGiB", "an integer"),
        ({"storageCapacityGiB": True}, "fsxLustre.storageCapacityGiB", "an integer"),
        ({"perUnitStorageThroughput": 200}, "fsxLustre.perUnitStorageThroughput", "for PERSISTENT_2, one of 125"),
        ({"dataRepositoryPrefix": "s3://bucket/data/"}, "fsxLustre.dataRepositoryPrefix", "a key prefix"),
        ({"storageCapacity": 2400}, "fsxLustre.storageCapacity", "did you mean 'storageCapacityGiB'"),
        ({"kmsKey": "alias/x"}, "fsxLustre.kmsKey", "one of the keys deploymentType, storageCapacityGiB"),
        (True, "fsxLustre", "null or an object of the keys"),
        ("PERSISTENT_2", "fsxLustre", "null or an object of the keys"),
        ('{"deploymentType": ', "fsxLustre", "null or an object of the keys"),
    ],
)
def test_fsx_lustre_refuses_what_fsx_does_not_create_naming_the_key(raw, key, expected):
    error = error_for({"fsxLustre": raw, "vpc": "create"}, ENVIRON)
    assert error.key == key
    assert expected in str(error)


def test_fsx_lustre_needs_a_vpc():
    error = error_for({"fsxLustre": {}})
    assert error.key == "fsxLustre" and "expected a 'vpc' setting as well" in str(error)
    assert config_for({"fsxLustre": {}, "vpc": "create"}, ENVIRON).fsx_lustre is not None


# -- vpc and permissionsBoundaryArn (issue 25) ------------------------------------------------------

HERE = {"CDK_DEFAULT_ACCOUNT": "123456789012", "CDK_DEFAULT_REGION": "us-west-2"}
EXISTING = {
    "vpcId": "vpc-0123456789abcdef0",
    "subnetIds": ["subnet-0123456789abcdef0", "subnet-89abcdef"],
    "availabilityZones": ["us-west-2a", "us-west-2b"],
    "routeTableIds": ["rtb-0123456789abcdef0", "rtb-89abcdef"],
}


def test_vpc_is_absent_by_default_and_create_takes_the_defaults():
    from platform_constructs.network import CreatedVpc

    assert config_for().vpc is None and config_for().permissions_boundary_arn is None
    assert config_for({"vpc": "create"}, HERE).vpc == CreatedVpc(cidr="10.0.0.0/16", max_azs=3, internet_access=False)
    assert config_for({"vpc": '{"create": true, "maxAzs": 2}'}).vpc == CreatedVpc(max_azs=2)  # -c gives a string


@pytest.mark.parametrize(
    ("vpc", "key", "expected"),
    [
        ({"create": True, "cidr": "10.0.0.0/8"}, "vpc.cidr", "from /16 to /24"),
        ({"create": True, "cidr": "10.0.0.1/16"}, "vpc.cidr", "IPv4 CIDR"),  # host bits set
        ({"create": True, "cidr": "fd00::/56"}, "vpc.cidr", "IPv4 CIDR"),
        ({"create": True, "cidr": "10.0.0.0/24", "maxAzs": 6, "internetAccess": True}, "vpc.cidr", "EFA"),
        ({"create": True, "maxAzs": 7}, "vpc.maxAzs", "from 1 to 6"),
        ({"create": True, "internetAccess": "yes"}, "vpc.internetAccess", "true or false"),
        ({"create": False}, "vpc.create", "true (leave vpc out"),
        ({"create": True, "vpcId": "vpc-01234567"}, "vpc.vpcId", "create, cidr, maxAzs, internetAccess"),
        ({**EXISTING, "subnetId": "subnet-01234567"}, "vpc.subnetId", "vpcId, subnetIds, availabilityZones"),
        ({**EXISTING, "vpcId": "vpc-XYZ"}, "vpc.vpcId", "vpc- and 8 to 17 hex digits"),
        ({**EXISTING, "subnetIds": ["subnet-0123456789abcdef0", "sg-01234567"]}, "vpc.subnetIds[1]", "subnet ID"),
        ({**EXISTING, "subnetIds": []}, "vpc.subnetIds", "at least one"),
        ({**EXISTING, "availabilityZones": ["us-west-2a"]}, "vpc.availabilityZones", "each of the 2 subnetIds"),
        ({**EXISTING, "availabilityZones": ["us-west-2a", "us-east-1b"]}, "vpc.availabilityZones[1]", "us-west-2"),
        ({**EXISTING, "routeTableIds": []}, "vpc.routeTableIds", "createEndpoints false"),
        ("yes", "vpc", '"create"'),
        ({}, "vpc", '"create"'),
    ],
)
def test_a_bad_vpc_is_refused_naming_the_key_and_the_expected_form(vpc, key, expected):
    error = error_for({"vpc": vpc}, HERE)
    assert error.key == key and expected in str(error), str(error)


def test_an_existing_vpcs_zones_are_of_one_region_when_synth_knows_none():
    """Without CDK_DEFAULT_REGION the zones cannot be held to the deployment's region, but a VPC is in one region
    all the same: zones of two regions are refused, naming the first one of another region than the first."""
    error = error_for({"vpc": {**EXISTING, "availabilityZones": ["us-west-2a", "eu-west-1b"]}})
    assert error.key == "vpc.availabilityZones[1]" and "a zone of us-west-2 (as availabilityZones[0])" in str(error)
    assert config_for({"vpc": EXISTING}).vpc.availability_zones == ("us-west-2a", "us-west-2b")


def test_more_than_two_zones_need_the_account_and_region():
    error = error_for({"vpc": {"create": True, "maxAzs": 3}})
    assert error.key == "vpc.maxAzs" and "CDK_DEFAULT_ACCOUNT" in str(error)


def test_create_without_the_account_says_its_zones_are_the_default_and_how_to_ask_for_two():
    """``cdk synth -c vpc=create`` with no AWS account: the user wrote no maxAzs, so the refusal says the 3 is the
    default and gives the setting that synthesizes."""
    error = error_for({"vpc": "create"})
    assert error.key == "vpc.maxAzs" and "got 3; expected (3 is maxAzs' default) at most 2" in str(error)
    assert """-c vpc='{"create": true, "maxAzs": 2}'""" in str(error)


def test_an_existing_vpc_without_endpoints_needs_no_route_tables():
    from platform_constructs.network import ExistingVpc

    raw = {key: value for key, value in EXISTING.items() if key != "routeTableIds"}
    vpc = config_for({"vpc": {**raw, "createEndpoints": False}}, HERE).vpc
    assert vpc == ExistingVpc(
        vpc_id=EXISTING["vpcId"],
        subnet_ids=tuple(EXISTING["subnetIds"]),
        availability_zones=("us-west-2a", "us-west-2b"),
        create_endpoints=False,
    )


@pytest.mark.parametrize(
    "arn",
    [
        "arn:aws:iam::123456789012:policy/Boundary",
        "arn:aws:iam::123456789012:policy/org/boundaries/Platform-1",
        "arn:aws:iam::aws:policy/PowerUserAccess",
    ],
)
def test_a_permissions_boundary_of_the_account_or_aws_is_accepted(arn):
    assert config_for({"permissionsBoundaryArn": arn}, HERE).permissions_boundary_arn == arn


@pytest.mark.parametrize(
    ("arn", "expected"),
    [
        ("arn:aws:iam::210987654321:policy/Boundary", "deployment's account 123456789012"),
        ("arn:aws:iam::123456789012:role/Boundary", "policy/<path/name>"),
        ("Boundary", "policy/<path/name>"),
        (["arn:aws:iam::123456789012:policy/Boundary"], "policy/<path/name>"),
        ("arn:aws:iam::123456789012:policy/Boundary\n", "policy/<path/name>"),
        ("arn:aws-cn:iam::123456789012:policy/Boundary", "partition aws (us-west-2's)"),  # IAM is per partition
        ("arn:aws-us-gov:iam::aws:policy/PowerUserAccess", "partition aws (us-west-2's)"),
    ],
)
def test_a_bad_permissions_boundary_is_refused(arn, expected):
    error = error_for({"permissionsBoundaryArn": arn}, HERE)
    assert error.key == "permissionsBoundaryArn" and expected in str(error), str(error)


def test_a_permissions_boundary_names_a_partition_aws_has():
    """Without a region the partition is unknown, but it is one of botocore's (``aws``, ``aws-cn``, ...)."""
    error = error_for({"permissionsBoundaryArn": "arn:aws-moon:iam::123456789012:policy/Boundary"})
    assert error.key == "permissionsBoundaryArn" and "a partition of aws, aws-cn, aws-us-gov" in str(error)
    china = "arn:aws-cn:iam::123456789012:policy/Boundary"
    assert config_for({"permissionsBoundaryArn": china}).permissions_boundary_arn == china
    beijing = {"CDK_DEFAULT_ACCOUNT": "123456789012", "CDK_DEFAULT_REGION": "cn-north-1"}
    assert config_for({"permissionsBoundaryArn": china}, beijing).permissions_boundary_arn == china
