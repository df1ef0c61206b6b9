"""In-process synths get the default environment ``cdk synth`` gives the app, so `trainctl synth-summary` and
`trainctl dashboard` refuse what `npx cdk synth` refuses.

The CDK CLI's behaviour these tests hold (aws-cdk 2.1148, checked by running ``cdk synth --app`` with an app
that printed its ``CDK_DEFAULT_*`` variables): ``AWS_REGION`` wins over ``AWS_DEFAULT_REGION`` and over a
``CDK_DEFAULT_REGION`` already set; a named profile's region, else the ``default`` profile's; ``us-east-1``
when nothing names one; ``CDK_DEFAULT_ACCOUNT`` kept when STS cannot be asked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainctl.cdk_context import CDK_CLI_FALLBACK_REGION, CdkEnvironmentError, cli_default_region, synth_environment
from trainctl.cli import main

from .conftest import AWS_VARIABLES

WEST_PLAN = "arn:aws:sagemaker:us-west-2:123456789012:training-plan/a"
CDK_VARIABLES = ("CDK_DEFAULT_REGION", "CDK_DEFAULT_ACCOUNT", "CDK_DEPLOY_REGION", "CDK_DEPLOY_ACCOUNT", "AMAZON_REGION",
                 "AMAZON_DEFAULT_REGION")  # fmt: skip


@pytest.fixture
def no_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, str]:
    """A process environment with no AWS or CDK settings and shared config files under ``tmp_path``."""
    for name in (*AWS_VARIABLES, *CDK_VARIABLES):
        monkeypatch.delenv(name, raising=False)
    files = {"AWS_CONFIG_FILE": str(tmp_path / "config"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "credentials")}
    for name, value in files.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return files


def test_the_region_variables_come_first_in_the_clis_order(no_aws) -> None:
    assert cli_default_region({**no_aws, "AWS_DEFAULT_REGION": "eu-west-1", "AWS_REGION": "us-east-2"}) == "us-east-2"
    assert cli_default_region({**no_aws, "AWS_DEFAULT_REGION": "eu-west-1"}) == "eu-west-1"
    assert (
        cli_default_region({**no_aws, "AMAZON_REGION": "ap-south-1", "AWS_DEFAULT_REGION": "eu-west-1"}) == "ap-south-1"
    )
    assert cli_default_region(no_aws) == CDK_CLI_FALLBACK_REGION == "us-east-1"  # nothing names one


def test_the_profile_region_is_read_from_the_shared_files(no_aws) -> None:
    Path(no_aws["AWS_CONFIG_FILE"]).write_text("[profile dev]\nregion = ca-central-1\n[profile bare]\noutput = json\n"
                                               "[default]\nregion = sa-east-1\n")  # fmt: skip
    assert cli_default_region({**no_aws, "AWS_PROFILE": "dev"}) == "ca-central-1"
    assert cli_default_region({**no_aws, "AWS_DEFAULT_PROFILE": "dev"}) == "ca-central-1"
    assert cli_default_region({**no_aws, "AWS_PROFILE": "bare"}) == "sa-east-1"  # no region: the default profile's
    assert cli_default_region(no_aws) == "sa-east-1"
    assert cli_default_region({**no_aws, "AWS_PROFILE": "dev", "AWS_REGION": "eu-north-1"}) == "eu-north-1"
    Path(no_aws["AWS_SHARED_CREDENTIALS_FILE"]).write_text("[dev]\naws_access_key_id = x\nregion = me-south-1\n")
    assert cli_default_region({**no_aws, "AWS_PROFILE": "dev"}) == "me-south-1"  # the credentials file first


def test_a_broken_config_file_is_named(no_aws) -> None:
    Path(no_aws["AWS_CONFIG_FILE"]).write_text("[default\nregion = x\n")
    with pytest.raises(CdkEnvironmentError, match="cannot read the AWS region from the shared config files"):
        cli_default_region(no_aws)


def test_the_cli_region_replaces_cdk_default_region_and_the_account_is_never_looked_up(no_aws) -> None:
    env = synth_environment({**no_aws, "CDK_DEFAULT_REGION": "ap-south-1", "AWS_REGION": "eu-west-3",
                             "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "x"})  # fmt: skip
    assert env["CDK_DEFAULT_REGION"] == "eu-west-3" and "CDK_DEFAULT_ACCOUNT" not in env  # no STS call
    kept = synth_environment({**no_aws, "CDK_DEFAULT_ACCOUNT": "999988887777"})
    assert kept["CDK_DEFAULT_ACCOUNT"] == "999988887777" and kept["CDK_DEFAULT_REGION"] == "us-east-1"


def _one_line(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines


@pytest.mark.parametrize("command", ["synth-summary", "dashboard"])
@pytest.mark.parametrize("region", [{"AWS_REGION": "us-east-1"}, {"AWS_DEFAULT_REGION": "us-east-1"}, {}],
                         ids=["AWS_REGION", "AWS_DEFAULT_REGION", "nothing-set"])  # fmt: skip
def test_a_plan_of_another_region_is_refused_as_cdk_synth_refuses_it(
    no_aws, monkeypatch, tmp_path, capsys, command, region
) -> None:
    # Before: with only AWS_REGION=us-east-1, `npx cdk synth` refused the us-west-2 plan and these commands passed.
    for name, value in region.items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "out"
    target = ["--out", str(out)] if command == "synth-summary" else ["--out", str(out / "dashboard.json")]
    assert main([command, *target, "-c", f'trainingPlanArns=["{WEST_PLAN}"]']) == 2
    printed = _one_line(capsys.readouterr().out)
    assert printed.startswith(f"configuration error: context key 'trainingPlanArns[0]': got '{WEST_PLAN}'; "
                              "expected a plan in the deployment region us-east-1")  # fmt: skip
    assert not (out / "manifest.json").exists() and not (out / "dashboard.json").exists()  # nothing synthesized


@pytest.mark.parametrize("command", ["synth-summary", "dashboard"])
def test_an_unreadable_config_file_is_one_line_and_exit_2(no_aws, tmp_path, capsys, command) -> None:
    Path(no_aws["AWS_CONFIG_FILE"]).write_text("[default\n")
    assert main([command, "--out", str(tmp_path / "out.json")]) == 2
    assert _one_line(capsys.readouterr().out).startswith(
        "configuration error: cannot read the AWS region from the shared config files: Unable to parse config file"
    )
