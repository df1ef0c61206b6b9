"""`trainctl sweep --function` fails like a command: nothing written or sent without a region or
credentials, one invocation per configuration, a stop at the first fault that would answer every
configuration, and a non-zero exit when no configuration got through. (The in-process path's
refusal without the emulator is in tests/sweep/test_aws_sweep.py.)"""

from __future__ import annotations

import json
from pathlib import Path

from trainctl.cli import main
from trainctl.sweeps.grid import client_token_for
from trainctl.sweeps.state import load_sweep

from .conftest import Reply, error_reply

FUNCTION = "training-platform-submitter"
BASE = {  # gpt-1b, 10 layers, 2K tokens on one p5: batch 1 and 2 fit in bf16 and fp8
    "instance_type": "ml.p5.48xlarge",
    "capacity": "on-demand",
    "hyperparameters": {"model": "gpt-1b", "num_layers": 10, "precision": "bf16", "seq_length": 2048, "max_steps": 100},
    "inputs": {"train": "datasets/guide/train/"},
    "max_runtime_hours": 2,
}


def _args(tmp_path: Path, name: str, *extra: str) -> list[str]:
    base = tmp_path / "base.json"
    base.write_text(json.dumps(BASE))
    return [
        "sweep",
        "--name",
        name,
        "--grid",
        "precision=bf16,fp8",
        "--grid",
        "batch_size=1,2",
        "--base",
        str(base),
        "--dir",
        str(tmp_path),
        "--no-progress",
        "--no-wait",
        "--function",
        FUNCTION,
        *extra,
    ]


def test_every_configuration_refused_exits_non_zero(lambda_env, tmp_path, capsys) -> None:
    lambda_env.answer = lambda invocation: Reply(
        body={"status": "rejected", "error": {"code": "NoCapacity", "message": "no plan"}}
    )
    assert main(_args(tmp_path, "refused")) == 1
    sweep = load_sweep("refused", tmp_path)
    assert [c.status for c in sweep.configs] == ["Rejected"] * 4
    # one invocation per configuration, each with the configuration's own deterministic token
    assert [i["payload"]["client_token"] for i in lambda_env.invocations] == [
        client_token_for("refused", c) for c in sweep.configs
    ]
    capsys.readouterr()


def test_a_fault_that_answers_every_configuration_stops_the_sweep(lambda_env, tmp_path, capsys) -> None:
    lambda_env.answer = lambda invocation: error_reply(
        404, "ResourceNotFoundException", f"Function not found: {FUNCTION}"
    )
    assert main(_args(tmp_path, "missing")) == 1
    err = capsys.readouterr().err
    assert len(lambda_env.invocations) == 1
    assert [c.status for c in load_sweep("missing", tmp_path).configs] == [
        "SubmitError",
        "Pending",
        "Pending",
        "Pending",
    ]
    assert err.splitlines()[-1] == (
        f"trainctl sweep: 1 configuration(s) could not be submitted and 3 were not sent: function {FUNCTION} (us-west-2) "
        f"not found (ResourceNotFoundException: Function not found: {FUNCTION}); expected the stack output "
        "SubmitterFunctionName, in its region; run the same command again to retry"
    )
    # fixed, the same command resumes: every configuration is sent once more
    lambda_env.answer = lambda invocation: Reply(
        body={"status": "submitted", "training_job_name": invocation["payload"]["job_name"]}
    )
    assert main(_args(tmp_path, "missing")) == 0
    assert len(lambda_env.invocations) == 5
    assert {c.status for c in load_sweep("missing", tmp_path).configs} == {"InProgress"}


def test_no_region_writes_and_sends_nothing(lambda_env, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("AWS_REGION")
    assert main(_args(tmp_path, "nowhere")) == 2
    assert capsys.readouterr().err == (
        "trainctl sweep: no AWS region: pass --region, set AWS_REGION, or give the function's ARN\n"
    )
    assert not (tmp_path / "nowhere").exists() and lambda_env.invocations == []


def test_reasons_are_printed_as_they_are_never_as_markup_or_emoji(lambda_env, tmp_path, capsys, monkeypatch) -> None:
    # `tags.aws:x:` in a refusal was printed as "tags.aws❌" (rich's emoji codes), and [bold] vanished as markup
    monkeypatch.setenv("COLUMNS", "400")  # one line per row
    reason = "tags.aws:x: got 'v', expected a key without the reserved prefix aws: [bold]or[/bold] platform: :smile:"
    lambda_env.answer = lambda invocation: Reply(
        body={"status": "rejected", "error": {"code": "InvalidRequest", "message": reason}}
    )
    assert main(_args(tmp_path, "markup")) == 1
    out = capsys.readouterr().out
    assert reason in out
    assert "\N{CROSS MARK}" not in out
