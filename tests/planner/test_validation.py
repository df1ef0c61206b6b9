"""benchmarks/planner_validation.py: reads trainer metric lines and fsdp.py output, computes ratios."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "planner_validation.py"
spec = importlib.util.spec_from_file_location("planner_validation", SCRIPT)
validation = importlib.util.module_from_spec(spec)
spec.loader.exec_module(validation)

FSDP_LOG = """[GPU-0] WORLD_SIZE = 8
[GPU-0] Training Time: 12.85s
[GPU-0] Avg. Iter. Time: 2.57s
[GPU-0] Peak Memory Use: 22800.0MBs
"""

TRAINER_LOG = "\n".join(
    [
        "[metrics] step=10 loss=9.1 tokens_per_sec_per_gpu=100.0 mfu=1.0 peak_mem_allocated_gb=10.0",
        "some other line",
        "[metrics] step=20 loss=8.1 tokens_per_sec_per_gpu=90000.0 mfu=20.0 peak_mem_allocated_gb=12.5",
        "[metrics] step=30 loss=7.9 tokens_per_sec_per_gpu=94000.0 mfu=21.0 peak_mem_allocated_gb=12.0",
    ]
)


def test_fsdp_log_ratios(tmp_path, capsys, make_input):
    log = tmp_path / "run.log"
    log.write_text(FSDP_LOG)
    argv = [
        "--log",
        str(log),
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
        "--json",
    ]
    assert validation.main(argv) == 0
    rows = {r["quantity"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["peak_memory_gb"]["measured"] == pytest.approx(22.8)
    assert rows["tokens_per_second_per_gpu"]["measured"] == pytest.approx(16 * 8192 / 2.57)
    for r in rows.values():  # the guide's own run: the calibration holds
        assert r["ratio"] == pytest.approx(1.0, rel=0.15)


def test_trainer_log_uses_steady_state():
    figures = validation.measured_figures(TRAINER_LOG, tokens_per_microbatch=1)
    assert figures == {"peak_memory_gb": 12.5, "tokens_per_second_per_gpu": 92000.0, "mfu": 20.5}


def test_empty_log_is_an_error(tmp_path, capsys):
    log = tmp_path / "empty.log"
    log.write_text("nothing here\n")
    assert validation.main(["--log", str(log)]) == 2
    assert "no [metrics] lines" in capsys.readouterr().err


def test_a_one_gpu_run_is_compared_with_the_one_gpu_plan(tmp_path, capsys):
    """A run on one GPU of an 8-GPU type (the lent H200) is judged against one GPU's plan, not eight's."""
    from planner import PlanInput
    from planner.plan import evaluate, evaluate_on_gpus

    inp = PlanInput(
        model="gpt-1b",
        num_layers=None,
        precision="bf16",
        seq_length=8192,
        batch_size=2,
        activation_checkpointing="off",
        instance_type="ml.p5e.48xlarge",
    )
    one, eight = evaluate_on_gpus(inp, 1), evaluate(inp)
    log = tmp_path / "run.log"
    log.write_text(
        f"[metrics] step=1 tokens_per_sec_per_gpu=1.0 peak_mem_allocated_gb={one.memory_gb.total}\n"
        f"[metrics] step=2 tokens_per_sec_per_gpu={one.tokens_per_second_per_gpu} "
        f"peak_mem_allocated_gb={one.memory_gb.total}\n"
    )
    argv = [
        "--log",
        str(log),
        "--gpus",
        "1",
        "--model",
        "gpt-1b",
        "--precision",
        "bf16",
        "--seq-length",
        "8192",
        "--batch-size",
        "2",
        "--instance-type",
        "ml.p5e.48xlarge",
        "--json",
    ]
    assert validation.main(argv) == 0
    rows = {r["quantity"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["peak_memory_gb"]["ratio"] == pytest.approx(1.0) and rows["tokens_per_second_per_gpu"][
        "ratio"
    ] == pytest.approx(1.0)
    # against the whole instance's plan the same run would look 1.x too big: sharding over 8 divides the state
    assert one.memory_gb.total / eight.memory_gb.total > 1.3
    assert validation.main([*argv[:2], "--gpus", "9", *argv[4:]]) == 2
    assert "gpus" in capsys.readouterr().err
