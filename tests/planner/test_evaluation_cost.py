"""The validation loss's cost in the plan: eval_batches forward passes every eval_interval steps."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from planner import PlanInput
from planner.plan import evaluate
from trainctl.plans import render_plan


def _input(**changes) -> PlanInput:
    base = {
        "model": "gpt-1b",
        "num_layers": None,
        "precision": "bf16",
        "seq_length": 4096,
        "batch_size": 4,
        "instance_type": "ml.p6-b200.48xlarge",
        "instance_count": 2,
        "tokens": 1e10,
    }
    return PlanInput(**{**base, **changes})


def test_evaluation_off_by_default_costs_nothing_and_on_costs_a_share_of_the_wall_time() -> None:
    off = evaluate(_input()).throughput
    assert (off.eval_time_s, off.eval_overhead_pct) == (0.0, 0.0)
    on = evaluate(_input(eval_interval=200, eval_batches=20)).throughput
    # training throughput is the same (the trainer's metric lines leave evaluation out too) ...
    assert (on.step_time_s, on.tokens_per_second, on.mfu) == (off.step_time_s, off.tokens_per_second, off.mfu)
    # ... each evaluation is 20 forward passes: more than 20 thirds of the micro-batch's compute, less than 20 steps
    assert 20 * on.compute.total / 3 <= on.eval_time_s < 20 * on.step_time_s
    assert on.eval_overhead_pct == pytest.approx(100 * on.eval_time_s / (200 * on.step_time_s))
    # ... and the wall time of the token budget grows by that share
    assert on.cost.wall_time_hours == pytest.approx(off.cost.wall_time_hours * (1 + on.eval_overhead_pct / 100))
    # twice the batches cost twice; evaluating twice as often doubles the share
    twice = evaluate(_input(eval_interval=100, eval_batches=40)).throughput
    assert twice.eval_time_s == pytest.approx(2 * on.eval_time_s)
    assert twice.eval_overhead_pct == pytest.approx(4 * on.eval_overhead_pct)


def test_checkpointing_recomputes_nothing_in_an_evaluation() -> None:
    plain = evaluate(_input(eval_interval=100)).throughput
    full = evaluate(_input(eval_interval=100, activation_checkpointing="full")).throughput
    assert full.compute.recompute > 0 and full.eval_time_s == pytest.approx(plain.eval_time_s)


def test_the_plan_shows_and_reports_the_evaluation() -> None:
    plan = evaluate(_input(eval_interval=100, eval_batches=16))
    report = plan.to_dict()
    assert report["input"]["eval_interval"] == 100 and report["input"]["eval_batches"] == 16
    assert report["evaluation"]["seconds"] == round(plan.throughput.eval_time_s, 6) > 0
    console = Console(file=io.StringIO(), width=200, record=True)
    render_plan(plan, console)
    (row,) = [line for line in console.export_text().splitlines() if "validation loss" in line]
    t = plan.throughput
    assert f"{t.eval_time_s:.3f} s every 100 steps (+{t.eval_overhead_pct:.1f}% wall time)" in row
    assert evaluate(_input()).to_dict()["evaluation"] == {"seconds": 0.0, "overhead_pct": 0.0}
