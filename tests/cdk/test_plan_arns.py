"""Plan ARNs from another region or account are refused at synth time, and, where synth does not
know the deployment's region and account, by the template itself (a CloudFormation rule), through
every entry point that synthesizes: ``cdk synth`` (``load_config``), ``trainctl synth-summary`` and
``trainctl dashboard``."""

from __future__ import annotations

import json

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Template

from platform_constructs.submitter.runtime import settings
from platform_constructs.training_plans import TrainingPlans, TrainingPlansProps
from platform_spec.training_plans import TRAINING_PLAN_ARN_PATTERN, foreign_reason, shared_home
from stacks.config import ConfigError, load_config

pytestmark = pytest.mark.xdist_group("cdk")

ACCOUNT, OTHER_ACCOUNT = "123456789012", "999999999999"
OURS = f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:training-plan/b200-week"
OURS_TOO = f"arn:aws:sagemaker:us-west-2:{ACCOUNT}:training-plan/b200-month"
OTHER_REGION = f"arn:aws:sagemaker:eu-west-1:{ACCOUNT}:training-plan/b200-week"
OTHER_ACCOUNTS = f"arn:aws:sagemaker:us-west-2:{OTHER_ACCOUNT}:training-plan/b200-week"


def config_error(plans: list[str], environ: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        load_config(cdk.App(context={"trainingPlanArns": plans}).node, environ)
    return raised.value


# --- cdk.json / -c, as load_config reads it -----------------------------------------------------


def test_a_plan_of_another_account_fails_synth_naming_it():
    error = config_error([OURS, OTHER_ACCOUNTS], {"CDK_DEFAULT_ACCOUNT": ACCOUNT, "CDK_DEFAULT_REGION": "us-west-2"})
    assert error.key == "trainingPlanArns[1]" and error.value == OTHER_ACCOUNTS
    assert f"account {OTHER_ACCOUNT} (not {ACCOUNT})" in str(error)


def test_a_plan_of_another_account_fails_synth_when_only_the_account_is_known():
    error = config_error([OTHER_ACCOUNTS], {"CDK_DEFAULT_ACCOUNT": ACCOUNT})
    assert error.key == "trainingPlanArns[0]" and OTHER_ACCOUNTS in str(error)


@pytest.mark.parametrize(
    ("plans", "part"),
    [([OURS, OTHER_REGION], "region"), ([OURS, OTHER_ACCOUNTS], "account")],
)
def test_without_a_deployment_environment_plans_must_share_one_region_and_account(plans, part):
    error = config_error(plans, {})
    assert error.key == "trainingPlanArns"
    message = str(error)
    assert f"plans in 2 {part}s" in message and plans[0] in message and plans[1] in message
    assert f"CDK_DEFAULT_{part.upper()}" in message


def test_a_known_region_with_an_unknown_account_still_needs_one_account():
    error = config_error([OURS, OTHER_ACCOUNTS], {"CDK_DEFAULT_REGION": "us-west-2"})
    assert error.key == "trainingPlanArns" and "plans in 2 accounts" in str(error)
    # and the reverse: one account known, plans in two regions
    error = config_error([OURS, OTHER_REGION], {"CDK_DEFAULT_ACCOUNT": ACCOUNT})
    assert error.key == "trainingPlanArns" and "plans in 2 regions" in str(error)


def test_plans_of_one_home_pass_without_an_environment():
    config = load_config(cdk.App(context={"trainingPlanArns": [OURS, OURS_TOO]}).node, {})
    assert config.training_plan_arns == (OURS, OURS_TOO)


def test_the_arn_pattern_has_one_home_and_is_a_json_schema_pattern():
    from platform_constructs import training_plans

    # platform_spec.training_plans is its only home: the construct uses it and re-exports nothing
    assert not hasattr(training_plans, "TRAINING_PLAN_ARN_PATTERN") and "parse_training_plan_arn" not in (
        training_plans.__all__
    )
    assert "(?P<" not in TRAINING_PLAN_ARN_PATTERN.pattern  # ECMA-262 (JSON Schema) has no named groups
    assert foreign_reason(OURS, region="us-west-2", account=None) is None
    assert shared_home([OURS, OURS_TOO]) == ({"region": "us-west-2", "account": ACCOUNT}, {})


# --- the construct: refuses what it can see, asserts in the template what it cannot -----------------


def _plans_template(env: cdk.Environment | None, plans: list[str]) -> dict:
    stack = cdk.Stack(cdk.App(), "Plans", env=env)
    TrainingPlans(stack, "TrainingPlans", TrainingPlansProps(plan_arns=plans))
    return Template.from_stack(stack).to_json()


def _our_rule(template: dict) -> dict:
    rules = {k: v for k, v in template.get("Rules", {}).items() if k != "CheckBootstrapVersion"}
    assert len(rules) == 1, rules
    (rule,) = rules.values()
    return rule


def test_an_environment_agnostic_template_asserts_the_plans_region_and_account(tmp_path):
    template = _plans_template(None, [OURS, OURS_TOO])
    assertions = _our_rule(template)["Assertions"]
    assert [a["Assert"] for a in assertions] == [
        {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-west-2"]},
        {"Fn::Equals": [{"Ref": "AWS::AccountId"}, ACCOUNT]},
    ]
    assert (
        OURS in assertions[0]["AssertDescription"]
        and "deploy this stack to us-west-2" in assertions[0]["AssertDescription"]
    )
    assert f"belong to account {ACCOUNT}" in assertions[1]["AssertDescription"]
    # cfn-lint accepts the rule (a Ref to a pseudo parameter inside a rule-specific Fn::Equals)
    from cfnlint.api import lint_file
    from cfnlint.config import ManualArgs

    path = tmp_path / "plans.template.json"
    path.write_text(json.dumps(template))
    assert [str(m) for m in lint_file(path, config=ManualArgs(regions=["us-west-2"]))] == []


def test_a_known_region_leaves_only_the_account_to_the_template():
    template = _plans_template(cdk.Environment(region="us-west-2"), [OURS])
    assert [a["Assert"] for a in _our_rule(template)["Assertions"]] == [
        {"Fn::Equals": [{"Ref": "AWS::AccountId"}, ACCOUNT]},
    ]


def test_a_known_environment_needs_no_rule_and_no_plans_need_none():
    assert "PlansDeploymentEnvironment" not in json.dumps(
        _plans_template(cdk.Environment(account=ACCOUNT, region="us-west-2"), [OURS])
    )
    assert len(_plans_template(None, []).get("Rules", {})) <= 1  # CDK's own CheckBootstrapVersion only


@pytest.mark.parametrize(
    ("env", "plans", "message"),
    [
        (cdk.Environment(account=ACCOUNT, region="us-west-2"), [OURS, OTHER_REGION], r"plan_arns\[1\]: plan .*eu-west-1.* is in region eu-west-1 \(not us-west-2\)"),
        (cdk.Environment(account=ACCOUNT, region="us-west-2"), [OTHER_ACCOUNTS], rf"plan_arns\[0\]: plan .* is in account {OTHER_ACCOUNT} \(not {ACCOUNT}\)"),
        (None, [OURS, OTHER_REGION], r"plan_arns: plans in 2 regions: eu-west-1 \(arn:aws:sagemaker:eu-west-1"),
    ],
)  # fmt: skip
def test_the_construct_refuses_plans_from_elsewhere(env, plans, message):
    with pytest.raises(ValueError, match=message):
        _plans_template(env, plans)


# --- the whole app, through the trainctl commands -----------------------------------------------------


@pytest.fixture
def no_deployment_environment(monkeypatch):
    for name in ("CDK_DEFAULT_REGION", "CDK_DEFAULT_ACCOUNT", "CDK_DEPLOY_REGION", "CDK_DEPLOY_ACCOUNT"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    "command", [["synth-summary", "--out", "{tmp}/cdk.out"], ["dashboard", "--out", "{tmp}/d.json"]]
)
def test_trainctl_commands_refuse_a_plan_outside_the_region_cdk_synth_would_use(command, tmp_path, capsys, monkeypatch,
                                                                                no_deployment_environment):  # fmt: skip
    # The CDK CLI always gives the app a region (AWS_REGION, ..., else us-east-1; trainctl.cdk_context), so
    # these commands never synthesize region-agnostic: two regions' plans fail on the one not deployed to.
    from trainctl.cli import main

    monkeypatch.setenv("AWS_REGION", "us-west-2")
    argv = [part.format(tmp=tmp_path) for part in command] + [
        "-c",
        f"trainingPlanArns={json.dumps([OURS, OTHER_REGION])}",
    ]
    assert main(argv) == 2
    printed = "".join(capsys.readouterr().out.split())  # rich may fold long lines
    assert (
        "trainingPlanArns[1]" in printed and OTHER_REGION in printed and "isinregioneu-west-1(notus-west-2)" in printed
    )
    assert not (tmp_path / "cdk.out" / "manifest.json").exists() and not (tmp_path / "d.json").exists()


@pytest.mark.parametrize("command", ["synth-summary", "dashboard"])
def test_trainctl_commands_refuse_a_plan_of_another_account(command, tmp_path, capsys, monkeypatch):
    from trainctl.cli import main

    monkeypatch.setenv("CDK_DEFAULT_ACCOUNT", ACCOUNT)
    monkeypatch.setenv("CDK_DEFAULT_REGION", "us-west-2")
    assert (
        main([command, "--out", str(tmp_path / "out"), "-c", f"trainingPlanArns={json.dumps([OTHER_ACCOUNTS])}"]) == 2
    )
    printed = "".join(capsys.readouterr().out.split())
    assert "trainingPlanArns[0]" in printed and OTHER_ACCOUNTS in printed


@pytest.mark.parametrize(
    ("environ", "asserted"),
    [
        ({}, ["region", "account"]),  # `python app.py` without the CLI: neither known
        ({"AWS_REGION": "us-west-2"}, ["account"]),  # as the CDK CLI runs the app without credentials (no STS)
    ],
    ids=["agnostic", "cli-region-only"],
)
def test_the_platform_template_asserts_what_synth_does_not_know_of_the_plans_home(environ, asserted, tmp_path):
    from trainctl.cdk_context import synth_environment
    from trainctl.dashboard.export import synthesize_template

    if environ:  # no profile file of this machine may name a region
        environ = synth_environment({**environ, "AWS_CONFIG_FILE": str(tmp_path / "none"),
                                     "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none")})  # fmt: skip
    template, _ = synthesize_template({"trainingPlanArns": [OURS]}, environ=environ)
    rules = {k: v for k, v in template["Rules"].items() if k.startswith("TrainingPlansDeploymentEnvironment")}
    ((_, rule),) = rules.items()
    expected = {"region": {"Fn::Equals": [{"Ref": "AWS::Region"}, "us-west-2"]},
                "account": {"Fn::Equals": [{"Ref": "AWS::AccountId"}, ACCOUNT]}}  # fmt: skip
    assert [a["Assert"] for a in rule["Assertions"]] == [expected[part] for part in asserted]


def test_the_submitter_knows_its_account(default_synth):
    fn_id = default_synth.logical_id(default_synth.stack.submitter.function)
    env = default_synth.resources[fn_id]["Properties"]["Environment"]["Variables"]
    assert env[settings.ENV_ACCOUNT_ID] == {"Ref": "AWS::AccountId"}
    assert settings.ENV_REGION not in env  # Lambda sets AWS_REGION itself (a reserved variable)
