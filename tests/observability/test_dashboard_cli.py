"""``trainctl dashboard``: synthesizes the app and writes the body JSON, the layout PNG and the alarm list."""

from __future__ import annotations

import json

import pytest

from trainctl.cli import main
from trainctl.dashboard.template import render_intrinsic

pytestmark = pytest.mark.xdist_group("observability")

PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/b200-week"


def test_cli_writes_json_and_png_and_lists_alarms_as_json(tmp_path, capsys, monkeypatch):
    # the synth gets the region `cdk synth` would (trainctl.cdk_context): the plan's, whatever the shell says
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    out = tmp_path / "dash" / "platform.json"
    assert (
        main(
            [
                "dashboard",
                "--out",
                str(out),
                "-c",
                f'trainingPlanArns=["{PLAN}"]',
                "-c",
                "idleCapacityAlarmHours=12",
                "--json-alarms",
            ]
        )
        == 0
    )
    body = json.loads(out.read_text())
    titles = {w["properties"].get("title") for w in body["widgets"]}
    assert "Plan b200-week" in titles and "Loss" in titles
    assert "${AWS::Region}" in json.dumps(body)  # environment-agnostic: the region is rendered as a placeholder
    assert out.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    alarms = {a["name"]: a for a in json.loads(capsys.readouterr().out)}
    idle = alarms["TrainingPlatform/PlanIdleNearEnd-b200-week"]
    assert idle["kind"] == "math" and "hours <= 12" in idle["watches"]
    assert idle["threshold"] == ">= 1 for 2 of 2 x 900 s (missing data: notBreaching)"
    assert idle["actions"] == [
        "ALARM -> SNS topic 'TrainingPlatform alarms'",
        "OK -> SNS topic 'TrainingPlatform alarms'",
    ]


def test_cli_reports_a_bad_context_value(tmp_path, capsys):
    assert main(["dashboard", "--out", str(tmp_path / "d.json"), "-c", "idleCapacityAlarmHours=0"]) == 2
    assert "idleCapacityAlarmHours" in capsys.readouterr().out
    assert not (tmp_path / "d.json").exists()


def test_render_intrinsic():
    assert render_intrinsic({"Ref": "AWS::Region"}) == "${AWS::Region}"
    assert render_intrinsic({"Fn::GetAtt": ["Fn1", "Arn"]}) == "${Fn1.Arn}"
    assert render_intrinsic({"Fn::GetAtt": ["Alarm1", "Arn"]}, {"Alarm1": "P-Errors"}) == (
        "arn:aws:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:P-Errors"
    )
    assert render_intrinsic({"Fn::Join": ["", ["a-", {"Ref": "X"}]]}) == "a-${X}"
    assert render_intrinsic({"Fn::Sub": ["${A}-${!B}-${Alarm1.Arn}", {"A": {"Ref": "X"}}]}, {"Alarm1": "P-Errors"}) == (
        "${X}-${B}-arn:aws:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:P-Errors"
    )
    for value in ({"Fn::If": ["c", "a", "b"]}, {"Fn::Select": [0, ["a"]]}):  # what the body holds is never guessed
        with pytest.raises(ValueError, match="cannot render"):
            render_intrinsic(value)
