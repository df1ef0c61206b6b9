"""``trainctl synth-summary``: counts, outputs, nag and cfn-lint verdicts, exit status."""

from __future__ import annotations

import argparse
import io
import json
import re
import shutil

import pytest

from trainctl import synth_summary
from trainctl.commands import synth_summary as synth_summary_command

pytestmark = pytest.mark.xdist_group("cdk")


def copy_assembly(synth, destination):
    """The assembly's JSON files only (templates, manifest, metadata, reports): no assets."""
    destination.mkdir()
    for path in synth.outdir.glob("*.json"):
        shutil.copy2(path, destination / path.name)
    return destination


def parse(argv):
    parser = argparse.ArgumentParser()
    synth_summary_command.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture(scope="module")
def default_summary(default_synth):
    """The default assembly's summary without cfn-lint: the command lints this template in
    test_exit_status_zero_when_clean (one cfn-lint run of it, ~3.5 s here, not two)."""
    return synth_summary.summarize(default_synth.outdir, synthesize=False, lint=False)


def test_summary_of_an_existing_assembly(default_synth, default_summary):
    summary = default_summary
    (stack,) = summary.stacks
    assert stack.name == "TrainingPlatform"
    expected = {}
    for resource in default_synth.resources.values():
        expected[resource["Type"]] = expected.get(resource["Type"], 0) + 1
    assert dict(stack.resource_counts) == expected
    assert stack.resource_counts["AWS::S3::Bucket"] == 4
    assert set(stack.outputs) == set(default_synth.template_json["Outputs"])
    _description, value = stack.outputs["ExecutionRoleArn"]
    assert value == f"<{default_synth.logical_id(default_synth.stack.execution_role.role)}.Arn>"
    image = default_synth.stack.trainer_image
    assert stack.outputs["TrainerImageUri"][1] == (
        f"<AWS::AccountId>.dkr.ecr.<AWS::Region>.<AWS::URLSuffix>/<{default_synth.logical_id(image.repository)}>:{image.image_tag}"
    )
    assert summary.findings == []  # cfn-lint's verdict: test_exit_status_zero_when_clean
    rules = {a.rule_id for a in summary.acknowledgements}
    assert "AwsSolutions-S1" in rules and "AwsSolutions-IAM5[Resource::*]" in rules
    assert all(a.reason for a in summary.acknowledgements)
    assert summary.ok


def test_outputs_of_any_template_are_written_readably(default_synth, tmp_path):
    """Outputs are rendered by the one renderer (platform_constructs.intrinsics) in cdk-nag's notation; what
    it does not know (e.g. a condition's Fn::If) is written as compact JSON, never dropped or fatal."""
    assembly = copy_assembly(default_synth, tmp_path / "assembly")
    template_path = assembly / f"{default_synth.stack.stack_name}.template.json"
    template = json.loads(template_path.read_text())
    template["Outputs"] = {
        "Sub": {"Value": {"Fn::Sub": ["${AWS::Region}/${Name}/${!Literal}", {"Name": {"Ref": "Queue1"}}]}},
        "Picked": {"Value": {"Fn::Select": [1, {"Fn::Split": [",", {"Ref": "List1"}]}]}},
        "Conditional": {"Value": {"Fn::If": ["IsProd", "a", {"Ref": "B"}]}, "Description": "kept"},
    }
    template_path.write_text(json.dumps(template))
    (stack,) = synth_summary.summarize(assembly, synthesize=False, lint=False).stacks
    assert stack.outputs == {
        "Sub": ("", "<AWS::Region>/<Queue1>/${Literal}"),
        "Picked": ("", "<select 1 of <split <List1> on ','>>"),
        "Conditional": ("kept", '{"Fn::If":["IsProd","a",{"Ref":"B"}]}'),
    }


def test_render_prints_counts_outputs_and_verdict(default_summary):
    from rich.console import Console

    summary = default_summary
    buffer = io.StringIO()
    synth_summary.render(summary, Console(file=buffer, width=200, color_system=None))
    text = buffer.getvalue()
    assert "AWS::S3::Bucket" in text and "ExecutionRoleArn" in text
    assert "0 unacknowledged" in text and f"{len(summary.acknowledgements)} acknowledged" in text
    assert "cfn-lint: 0 errors" in text
    assert "Synth checks: OK" in text


def test_exit_status_zero_when_clean(default_synth, capsys):
    assert synth_summary_command.run(parse(["--out", str(default_synth.outdir), "--no-synth"])) == 0
    # the default (environment-agnostic) template, linted for us-east-1: no cfn-lint error, no nag finding
    printed = capsys.readouterr().out
    assert re.search(r"^cfn-lint: 0 errors", printed, re.MULTILINE) and "Synth checks: OK" in printed, printed


def test_exit_status_one_on_an_unacknowledged_finding(default_synth, tmp_path):
    assembly = copy_assembly(default_synth, tmp_path / "assembly")
    report = {
        "version": "55.0.0",
        "title": "Validation Report",
        "pluginReports": [
            {
                "pluginName": "AwsSolutions",
                "conclusion": "failure",
                "violations": [
                    {
                        "ruleName": "AwsSolutions-S10",
                        "description": "The S3 Bucket or bucket policy does not require requests to use SSL.",
                        "severity": "error",
                        "violatingConstructs": [{"constructPath": "TrainingPlatform/Buckets/Data/Resource"}],
                    }
                ],
            }
        ],
    }
    (assembly / "validation-report.json").write_text(json.dumps(report))
    summary = synth_summary.summarize(assembly, synthesize=False, lint=False)
    assert [(f.rule_id, f.paths) for f in summary.nag_findings] == [
        ("AwsSolutions-S10", ("TrainingPlatform/Buckets/Data/Resource",))
    ]
    assert not summary.ok
    assert synth_summary_command.run(parse(["--out", str(assembly), "--no-synth"])) == 1


def test_exit_status_one_on_a_cfn_lint_error(default_synth, tmp_path, capsys):
    assembly = copy_assembly(default_synth, tmp_path / "assembly")
    template_path = assembly / "TrainingPlatform.template.json"
    template = json.loads(template_path.read_text())
    template["Resources"]["Broken"] = {"Type": "AWS::S3::Bucket", "Properties": {"VersioningConfiguration": "yes"}}
    template_path.write_text(json.dumps(template))
    assert synth_summary_command.run(parse(["--out", str(assembly), "--no-synth"])) == 1
    # the command's own summary, as it prints it (cfn-lint runs once, ~3.5 s here): lint errors, checks failed
    printed = capsys.readouterr().out
    errors = re.search(r"^cfn-lint: (\d+) errors", printed, re.MULTILINE)
    assert errors and int(errors.group(1)) > 0, printed
    assert "Synth checks: FAILED" in printed, printed


def test_bad_context_exits_two_without_synthesizing(tmp_path):
    args = parse(["--out", str(tmp_path / "out"), "-c", "removalPolicy=snapshot"])
    assert synth_summary_command.run(args) == 2
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_missing_assembly_exits_two(tmp_path):
    assert synth_summary_command.run(parse(["--out", str(tmp_path), "--no-synth"])) == 2


def test_render_prints_names_and_messages_as_they_are(tmp_path):
    # rich read dynamic text as markup ("[/x]" raised MarkupError) and emoji codes (":x:" became an emoji)
    from rich.console import Console

    text = "a [/bold] closing tag, [red]markup[/red] and tags.aws:x: as written"
    summary = synth_summary.SynthSummary(
        assembly=tmp_path,
        findings=[synth_summary.Finding("AwsSolutions", "AwsSolutions-S1", "error", text, (f"Stack/{text}",))],
        acknowledgements=[synth_summary.Acknowledgement("/Stack/Bucket", "AwsSolutions-S10", text)],
        lint=[synth_summary.LintResult("t.json", "E3012", "error", text, 7)],
    )
    buffer = io.StringIO()
    synth_summary.render(summary, Console(file=buffer, width=400, color_system=None))
    printed = buffer.getvalue()
    assert printed.count(text) == 4 and "\N{CROSS MARK}" not in printed
    assert "Synth checks: FAILED" in printed
