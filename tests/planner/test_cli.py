"""``trainctl plan``: JSON keys, the rich table, bad-argument messages."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from planner import estimate
from trainctl.cli import main
from trainctl.plans import render_plan


def run_json(capsys, *argv):
    assert main(["plan", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_has_the_documented_keys(capsys):
    d = run_json(
        capsys,
        "--model",
        "gpt-8b",
        "--precision",
        "fp8",
        "--seq-length",
        "8192",
        "--batch-size",
        "4",
        "--activation-checkpointing",
        "off",
        "--instance-type",
        "ml.p6-b200.48xlarge",
        "--instance-count",
        "1",
        "--price-per-hour",
        "100",
        "--tokens",
        "1e12",
    )
    for key in (
        "fits",
        "memory_gb",
        "tokens_per_second",
        "tokens_per_second_per_gpu",
        "mfu",
        "step_time_s",
        "recommendations",
        "cost",
        "input",
        "model",
        "hardware",
        "notes",
    ):
        assert key in d
    assert isinstance(d["memory_gb"]["total"], float) and isinstance(d["fits"], bool)
    assert d["input"]["model"] == "gpt-8b" and d["input"]["batch_size"] == 4
    assert d["cost"]["cost_usd"] == pytest.approx(d["cost"]["instance_hours"] * 100, rel=1e-3)
    for rec in d["recommendations"]:
        assert set(rec) == {"title", "reason", "kind", "changes", "after"}
    assert 0 < d["mfu"] < 100


def test_defaults_are_the_guide_request(capsys):
    d = run_json(capsys)
    assert (d["input"]["model"], d["input"]["num_layers"], d["input"]["precision"]) == ("gpt-1b", 10, "mxfp8")
    assert (d["input"]["batch_size"], d["input"]["seq_length"]) == (8, 2048)
    assert d["hardware"]["instance_type"] == "ml.p6-b200.48xlarge" and d["hardware"]["world_size"] == 8


def test_blocks_only_reproduces_the_guide(capsys):
    d = run_json(
        capsys,
        "--model",
        "gpt-1b",
        "--blocks-only",
        "--precision",
        "mxfp8",
        "--seq-length",
        "8192",
        "--batch-size",
        "16",
        "--activation-checkpointing",
        "full",
    )
    assert d["memory_gb"]["total"] == pytest.approx(22.8, rel=0.15)
    assert d["tokens_per_second_per_gpu"] == pytest.approx(51000, rel=0.15)


@pytest.mark.parametrize(
    ("argv", "flag", "allowed"),
    [
        (["--precision", "int8"], "--precision", "mxfp8"),
        (["--instance-type", "ml.p4d.24xlarge"], "--instance-type", "ml.p6-b200.48xlarge"),
        (["--model", "gpt-2t"], "--model", "gpt-8b"),
        (["--activation-checkpointing", "selective"], "--activation-checkpointing", "full"),
        (["--batch-size", "0"], "--batch-size", "integer >= 1"),
        (["--tokens", "lots"], "--tokens", "positive number"),
        (["--precision", "mxfp8", "--instance-type", "ml.p5.48xlarge"], "--precision", "fp8"),
        (["--precision", "bf16", "--quantized-model-init"], "--quantized-model-init", "fp8, mxfp8 or nvfp4"),
    ],
)
def test_bad_arguments_name_the_flag_and_allowed_values(capsys, argv, flag, allowed):
    try:
        code = main(["plan", *argv])
    except SystemExit as exc:  # argparse
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert flag in err and allowed in err


def test_render_plan_shows_breakdown_and_recommendations(make_input):
    plan = estimate(make_input(price_per_hour=100.0, tokens=1e10))
    console = Console(file=io.StringIO(), width=160, record=True)
    render_plan(plan, console)
    text = console.export_text()
    for needle in (
        "Memory per GPU",
        "quantized weight copies",
        "activations",
        "total (peak allocated)",
        "fits",
        "tokens/s per GPU",
        "MFU",
        "Recommendations",
        "Turn on activation checkpointing",
        "Cost",
    ):
        assert needle in text


def test_table_output_runs(capsys):
    assert main(["plan", "--model", "gpt-14b", "--precision", "fp8", "--seq-length", "8192", "--batch-size", "4"]) == 0
    out = capsys.readouterr().out
    assert "OUT OF MEMORY" in out and "Make it fit" in out
