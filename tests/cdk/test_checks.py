"""cdk-nag (AwsSolutions, cdk-nag 3) and cfn-lint on every synthesized template."""

from __future__ import annotations

import json
import re

import pytest

pytestmark = pytest.mark.xdist_group("cdk")


def acknowledgements(synth) -> dict[tuple[str, str], str]:
    """``(construct path, rule id) -> reason`` from the assembly's metadata."""
    metadata = json.loads((synth.outdir / f"{synth.stack.stack_name}.metadata.json").read_text())
    found = {}
    for path, entries in metadata.items():
        for entry in entries:
            if entry["type"] == "aws:cdk:acknowledged-rules":
                for rule, reason in entry["data"].items():
                    found[(path, rule)] = reason
    return found


@pytest.mark.parametrize("fixture", ["default_synth", "variant_synth", "vpc_created_synth", "vpc_imported_synth"])
def test_no_unacknowledged_nag_findings(request, fixture):
    synth = request.getfixturevalue(fixture)  # synth itself raises on an unacknowledged finding
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    violations = [v for plugin in report["pluginReports"] for v in plugin.get("violations", [])]
    assert violations == []


def test_every_acknowledgement_names_a_rule_and_gives_a_reason(default_synth):
    found = acknowledgements(default_synth)
    assert len(found) >= 10
    for (path, rule), reason in found.items():
        assert re.fullmatch(r"Annotation::AwsSolutions-[A-Z]+\d+(\[.+\])?", rule), rule
        assert len(reason) > 40 and not reason.lower().startswith("todo"), (path, rule)


def test_wildcard_acknowledgements_are_per_finding(default_synth):
    rules = {rule for _, rule in acknowledgements(default_synth)}
    # cdk-nag 3 has no rule-wide IAM5 suppression: each wildcard is acknowledged on its own
    assert "Annotation::AwsSolutions-IAM5" not in rules
    assert "Annotation::AwsSolutions-IAM5[Resource::*]" in rules
    data_id = default_synth.logical_id(default_synth.stack.buckets.data)
    assert f"Annotation::AwsSolutions-IAM5[Resource::<{data_id}.Arn>/*]" in rules


def test_nag_is_active_and_fails_synth_on_a_new_finding(tmp_path):
    from aws_cdk import aws_iam as iam

    from stacks.platform_app import create_app

    app, stack = create_app(outdir=tmp_path, environ={}, stack_traces=False)
    careless = iam.Role(stack, "Careless", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    careless.add_to_policy(iam.PolicyStatement(actions=["s3:*"], resources=["*"]))
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    (plugin,) = report["pluginReports"]
    assert plugin["pluginName"] == "AwsSolutions"
    found = {(v["ruleName"], c["constructPath"]) for v in plugin["violations"] for c in v["violatingConstructs"]}
    assert found == {
        ("AwsSolutions-IAM5[Action::s3:*]", "TrainingPlatform/Careless/DefaultPolicy/Resource"),
        ("AwsSolutions-IAM5[Resource::*]", "TrainingPlatform/Careless/DefaultPolicy/Resource"),
    }


# The default (environment-agnostic) template is linted for us-east-1 by test_synth_summary's
# test_exit_status_zero_when_clean (``trainctl synth-summary`` prints "cfn-lint: 0 errors"): the same template,
# region and call.
@pytest.mark.parametrize(
    ("fixture", "region"),
    [
        ("variant_synth", "us-west-2"),
        ("vpc_created_synth", "us-west-2"),
        ("vpc_imported_synth", "us-west-2"),
    ],
)
def test_cfn_lint_has_no_errors(request, fixture, region):
    from trainctl.synth_summary import lint_template

    synth = request.getfixturevalue(fixture)
    matches = lint_template(synth.outdir / f"{synth.stack.stack_name}.template.json", region)
    assert [m for m in matches if m.severity == "error"] == []


def test_cfn_lint_catches_a_broken_template(tmp_path, default_synth):
    from trainctl.synth_summary import lint_template

    template = json.loads(json.dumps(default_synth.template_json))
    fn_id = default_synth.logical_id(default_synth.stack.submitter.function)
    template["Resources"][fn_id]["Properties"]["Runtime"] = "python2.9"
    path = tmp_path / "broken.template.json"
    path.write_text(json.dumps(template))
    assert any(m.severity == "error" for m in lint_template(path))
