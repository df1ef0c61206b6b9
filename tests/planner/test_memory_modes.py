"""The planner models every memory mode the trainer implements (platform_spec.training_modes): selective
activation checkpointing between off and full, gradient synchronisation every micro-batch or on the last one;
TransformerEngine's MLP inputs in both layouts; the fits / at-risk / out-of-memory verdict and what a plan
that would not run shows."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from model_families.gpt import PRESETS, block_activation_terms
from planner import PlanInput, auto_tune, estimate
from planner.memory import (
    AT_RISK_FRACTION,
    GB,
    block_activation_bytes_per_token,
    memory_status,
)
from planner.plan import evaluate
from planner.recommend import checkpointing_modes
from planner.throughput import compute_time
from trainctl.cli import main
from trainctl.plans import render_plan


def full_input(**changes) -> PlanInput:
    base = {
        "model": "gpt-1b",
        "num_layers": None,
        "precision": "bf16",
        "seq_length": 4096,
        "batch_size": 4,
        "activation_checkpointing": "off",
        "instance_type": "ml.p6-b200.48xlarge",
    }
    base.update(changes)
    return PlanInput(**base)


# --- activation checkpointing -------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "recomputing"), [("off", 0), ("selective:2", 12), ("selective:5", 4), ("full", 24)])
def test_saved_activations_are_the_recomputing_blocks_inputs_and_the_others_tensors(mode, recomputing):
    """When backward starts: k recomputing blocks hold their input (a*h), the other L-k their S, plus the
    output and final-norm output; while any block recomputes, one block's tensors less its input on top."""
    plan = evaluate(full_input(activation_checkpointing=mode))
    r = plan.resolved
    assert r.checkpointed_blocks == recomputing
    L, h, T, a = 24, 2048, 4 * 4096, 2.0
    S = block_activation_bytes_per_token(r)
    saved = (recomputing * a * h + (L - recomputing) * S + 2 * a * h) * T
    recomputed = (S - a * h) * T if recomputing else 0.0
    assert plan.memory_gb.phase_terms["backward"]["activations"] == pytest.approx((saved + recomputed) / GB)


def test_selective_modes_lie_between_off_and_full_in_memory_and_in_recompute_time():
    plans = {mode: evaluate(full_input(activation_checkpointing=mode)) for mode in checkpointing_modes(24)}
    assert list(plans) == ["off", "selective:8", "selective:4", "selective:3", "selective:2", "full"]
    totals = [p.memory_gb.total for p in plans.values()]
    speeds = [p.tokens_per_second for p in plans.values()]
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == len(totals)
    assert speeds == sorted(speeds, reverse=True)
    # the recompute is the recomputing blocks' share of full's: selective:2 recomputes 12 of 24 blocks
    full = compute_time(plans["full"].resolved).recompute
    assert compute_time(plans["selective:2"].resolved).recompute == pytest.approx(full / 2)
    assert compute_time(plans["selective:8"].resolved).recompute == pytest.approx(full * 3 / 24)
    assert plans["off"].throughput.recompute_overhead_pct == 0


def test_a_selective_mode_that_recomputes_no_block_is_refused_naming_the_field():
    with pytest.raises(ValueError) as refused:
        evaluate(full_input(activation_checkpointing="selective:25"))
    assert refused.value.field == "activation_checkpointing" and "num_layers" in refused.value.expected


def test_the_recommendations_weigh_selective_modes_between_off_and_full():
    """gpt-14b at batch 4 does not fit without checkpointing on a B200; every 8th block is enough, and
    faster than recomputing every block."""
    plan = estimate(full_input(model="gpt-14b", precision="fp8", seq_length=8192))
    fit = plan.recommendations[0]
    assert fit.kind == "fit" and fit.changes["activation_checkpointing"] == "selective:8"
    tuned, _ = auto_tune(plan.input)
    assert (
        evaluate(tuned).tokens_per_second > evaluate(tuned.replace(activation_checkpointing="full")).tokens_per_second
    )
    # a fitting plan with full checkpointing is told a selective mode runs faster
    small = estimate(full_input(model="gpt-3b", seq_length=8192, batch_size=8, activation_checkpointing="full"))
    rec = next(r for r in small.recommendations if r.kind == "checkpointing")
    assert rec.changes["activation_checkpointing"] in (
        "off",
        "selective:2",
        "selective:3",
        "selective:4",
        "selective:8",
    )
    assert rec.after.fits and rec.after.tokens_per_second > small.tokens_per_second


# --- gradient accumulation -------------------------------------------------------------------------


def test_accumulation_keeps_sharded_gradients_every_micro_batch_and_unsharded_fp32_ones_on_the_last():
    """every_micro_batch (the default): the sharded fp32 gradients, 4N/D, live through later micro-batches;
    last_micro_batch: FSDP2's unsharded gradients accumulated in fp32, 4N. One micro-batch: neither. In every
    case the LM head's unsharded bf16 gradient (2Vh) is live through backward: the root unit (embedding, final
    norm, head) reduce-scatters only at its end."""
    one = evaluate(full_input(model="gpt-3b", batch_size=2, seq_length=2048))
    every = evaluate(full_input(model="gpt-3b", batch_size=2, seq_length=2048, gradient_accumulation_steps=4))
    last = evaluate(every.input.replace(gradient_sync="last_micro_batch"))
    assert every.input.gradient_sync == "every_micro_batch"
    m, d = one.resolved.model, one.resolved.shard_degree
    n, head = m.num_params, 2 * m.vocab_size * m.hidden_size
    assert one.memory_gb.phase_terms["backward"]["gradients"] == pytest.approx(head / GB)
    assert every.memory_gb.phase_terms["backward"]["gradients"] == pytest.approx((4 * n / d + head) / GB)
    assert last.memory_gb.phase_terms["backward"]["gradients"] == pytest.approx((4 * n + head) / GB)
    assert last.memory_gb.total - every.memory_gb.total == pytest.approx(4 * n * (1 - 1 / d) / GB, rel=1e-6)


def test_the_root_unit_reduce_scatters_last_so_its_gradients_meet_every_sharded_one_at_the_end_of_backward():
    """FSDP2 reduce-scatters the root unit (embedding, final norm, LM head) from its final callback, after every
    block: at that moment every block's sharded fp32 gradient (4N/D) is live with the root's unsharded bf16
    gradients and their fp32 reduce-scatter input. Llama 3 70B with full checkpointing on 16 H100s peaks there
    (~83 GB allocated of 81.6 GB usable): the planner once called it at-risk at 76.8 GB."""
    plan = evaluate(full_input(model="llama3-70b", seq_length=8192, batch_size=1, activation_checkpointing="full",
                               instance_type="ml.p5.48xlarge", instance_count=2))  # fmt: skip
    m, d = plan.resolved.model, plan.resolved.shard_degree
    n, root = m.num_params, m.num_params - m.block_params
    assert root == 2 * m.vocab_size * m.hidden_size + m.hidden_size  # untied head + embedding + final norm
    end = plan.memory_gb.phase_terms["end_of_backward"]
    assert end["gradients"] == pytest.approx((4 * n / d + 2 * root) / GB)
    assert end["transient"] == pytest.approx(4 * root / GB)
    assert plan.memory_gb.peak_phase == "end_of_backward" and plan.status == "out-of-memory"
    assert not plan.ran and plan.to_dict()["tokens_per_second"] is None  # it would not run: no speed shown
    # under last_micro_batch the root's gradients are accumulated in fp32 until that reduce-scatter
    last = evaluate(plan.input.replace(gradient_accumulation_steps=2, gradient_sync="last_micro_batch"))
    assert last.memory_gb.phase_terms["end_of_backward"]["gradients"] == pytest.approx((4 * n / d + 4 * root) / GB)
    # tied embeddings: one root matrix; the TransformerEngine example the guide measured has no root at all
    tied = evaluate(full_input(model="llama-tiny", seq_length=512, batch_size=1, instance_type="ml.p5.48xlarge"))
    t = tied.resolved.model
    assert t.tied_embeddings and t.num_params - t.block_params == t.vocab_size * t.hidden_size + t.hidden_size
    blocks = evaluate(full_input(blocks_only=True, precision="mxfp8"))
    assert "end_of_backward" not in blocks.memory_gb.phase_terms


def test_reduce_scattering_once_per_step_moves_less_and_is_never_slower():
    every = evaluate(full_input(model="gpt-8b", seq_length=2048, batch_size=1, gradient_accumulation_steps=8,
                                instance_type="ml.p5.48xlarge", instance_count=8))  # fmt: skip
    last = evaluate(every.input.replace(gradient_sync="last_micro_batch"))
    assert (every.throughput.gradient_reductions, last.throughput.gradient_reductions) == (8, 1)
    assert last.step_time_s < every.step_time_s
    assert every.to_dict()["time_breakdown_s"]["gradient_reductions"] == 8


def test_the_recommender_picks_last_micro_batch_when_it_fits_with_margin_and_saves_time():
    plan = estimate(full_input(model="gpt-8b", seq_length=2048, batch_size=1, gradient_accumulation_steps=8,
                               instance_type="ml.p5.48xlarge", instance_count=8))  # fmt: skip
    rec = next(r for r in plan.recommendations if r.changes == {"gradient_sync": "last_micro_batch"})
    assert rec.after.status == "fits" and rec.after.tokens_per_second > plan.tokens_per_second * 1.05
    # and never when the unsharded gradients would not leave the margin: gpt-32b on 8 H100s
    big = estimate(full_input(model="gpt-32b", seq_length=2048, batch_size=1, gradient_accumulation_steps=8,
                              activation_checkpointing="full", instance_type="ml.p5.48xlarge"))  # fmt: skip
    assert big.fits
    assert not any(r.changes.get("gradient_sync") == "last_micro_batch" for r in big.recommendations)


def test_a_30b_run_with_accumulation_that_ran_on_80_gb_h100s_fits_with_sharded_accumulation():
    """llm-foundry's MPT-30B, 8 x H100 80 GB, micro-batch 3 x 21 accumulation, full checkpointing (published
    2,002 tokens/s per GPU): the planner called it out of memory while it kept unsharded gradients through
    accumulation; FSDP reduce-scatters every micro-batch there, as the trainer now does by default."""
    shape = {"model": "gpt", "num_layers": 48, "hidden_size": 7168, "num_heads": 56, "ffn_hidden_size": 28672}
    inp = full_input(**shape, vocab_size=50368, seq_length=2048, batch_size=3, gradient_accumulation_steps=21,
                     activation_checkpointing="full", instance_type="ml.p5.48xlarge")  # fmt: skip
    assert evaluate(inp).status == "fits"
    assert evaluate(inp.replace(gradient_sync="last_micro_batch")).status == "out-of-memory"


# --- TransformerEngine's saved MLP inputs -----------------------------------------------------------------


def test_the_mlp_inputs_are_counted_in_both_layouts_where_transformer_engine_keeps_them():
    """TE 2.10's LayerNormMLP saves its FC1 input and GELU output quantized rowwise and columnwise (its linear
    layers keep the columnwise copy only): the guide's 15.5 GB point was under-predicted by 10% without it."""
    m = PRESETS["gpt-1b"]
    q = 1 + 1 / 32
    one = block_activation_terms(m, activation_bytes=2, quantized_bytes=q)
    both = block_activation_terms(m, activation_bytes=2, quantized_bytes=q, quantized_copy_bytes=2 * q)
    assert sum(both.values()) - sum(one.values()) == pytest.approx(q * (m.hidden_size + m.ffn_hidden_size))
    assert both["qkv_gemm_input"] == one["qkv_gemm_input"] and both["proj_gemm_input"] == one["proj_gemm_input"]
    # bf16 keeps one copy; per-tensor fp8 on Blackwell reads either layout from one copy
    assert block_activation_terms(m, activation_bytes=2, quantized_bytes=None, quantized_copy_bytes=4.0) == (
        block_activation_terms(m, activation_bytes=2, quantized_bytes=None)
    )
    b200 = evaluate(full_input(precision="fp8")).resolved
    h100 = evaluate(full_input(precision="fp8", instance_type="ml.p5.48xlarge")).resolved
    assert block_activation_bytes_per_token(h100) - block_activation_bytes_per_token(b200) == pytest.approx(
        1.0 * (m.hidden_size + m.ffn_hidden_size)
    )


# --- the verdict ------------------------------------------------------------------------------------


def test_memory_status_has_an_at_risk_band_of_the_stated_margin():
    usable = 100.0
    assert memory_status(100.0 / (1 + AT_RISK_FRACTION) - 0.01, usable) == "fits"
    assert memory_status(100.0 / (1 + AT_RISK_FRACTION) + 0.01, usable) == "at-risk"
    assert memory_status(100.0, usable) == "at-risk"
    assert memory_status(100.01, usable) == "out-of-memory"


AT_RISK = {"model": "llama3-8b", "precision": "mxfp8", "seq_length": 4096, "batch_size": 8}


def test_an_at_risk_plan_is_not_called_fits_and_says_so():
    plan = estimate(full_input(**AT_RISK))
    mem = plan.memory_gb
    assert plan.status == "at-risk" and not plan.fits and mem.required <= mem.usable
    d = plan.to_dict()
    assert d["status"] == d["memory_gb"]["status"] == "at-risk" and d["fits"] is False
    assert d["tokens_per_second"] > 0 and d["not_run"] is None  # it may run: its speed is shown
    assert plan.recommendations[0].kind == "fit" and "at risk" in plan.recommendations[0].reason
    assert plan.recommendations[0].after.status == "fits"
    console = Console(file=io.StringIO(), width=200, record=True)
    render_plan(plan, console)
    assert "AT RISK" in console.export_text()


def test_the_table_states_the_margins_the_verdict_used(monkeypatch):
    """The table's "less 0.5%" and "within the model's 5% error" are planner.memory's SAFETY_FRACTION and
    AT_RISK_FRACTION (once typed into trainctl/plans.py, they would not follow a change of the model)."""
    import planner.memory as memory

    monkeypatch.setattr(memory, "SAFETY_FRACTION", 0.03)
    monkeypatch.setattr(memory, "AT_RISK_FRACTION", 0.09)
    plan = estimate(full_input(**AT_RISK))
    assert plan.status == "at-risk"
    console = Console(file=io.StringIO(), width=200, record=True)
    render_plan(plan, console)
    text = " ".join(console.export_text().split())  # the caption wraps
    assert "less 3.0%)" in text and "within the model's 9% error of usable memory" in text


def test_a_plan_that_does_not_fit_shows_no_speed_as_if_it_had_run(capsys):
    argv = ["plan", "--model", "llama3-8b", "--precision", "fp8", "--seq-length", "8192", "--batch-size", "2",
            "--instance-type", "ml.p5.48xlarge", "--price-per-hour", "98", "--tokens", "1e12"]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["status"] == "out-of-memory"
    for key in ("tokens_per_second", "tokens_per_second_per_gpu", "tflops_per_gpu", "mfu", "step_time_s", "cost"):
        assert d[key] is None, key
    assert d["not_run"].startswith("not run: out of memory (")
    after = d["recommendations"][0]["after"]
    assert after["status"] == "fits" and after["tokens_per_second"] > 0 and after["not_run"] is None
    assert main(argv) == 0
    table = capsys.readouterr().out
    assert "OUT OF MEMORY" in table and "not run: out of memory" in table
    assert "tokens/s — ->" in table  # the recommendation's before figure
    throughput = table.split("Throughput", 1)[1].split("Recommendations", 1)[0]
    assert "—" in throughput and "%" not in throughput


@pytest.mark.parametrize(("instance_type", "precision"), [("ml.p5.48xlarge", "fp8"), ("ml.p6-b200.48xlarge", "mxfp8")])
def test_trainctl_plan_plans_a_llama_3_8b_request_on_hopper_and_blackwell(capsys, instance_type, precision):
    argv = ["plan", "--model", "llama3-8b", "--precision", precision, "--seq-length", "8192", "--batch-size", "1",
            "--activation-checkpointing", "selective:2", "--instance-type", instance_type]  # fmt: skip
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["model"]["num_params"] == 8_030_261_248 and d["model"]["num_kv_heads"] == 8
    assert d["status"] == "fits" and d["memory_gb"]["total"] > 0
    assert d["tokens_per_second_per_gpu"] > 0 and 0 < d["mfu"] < 100
    assert d["activation_checkpointing"] == {"mode": "selective:2", "checkpointed_blocks": 16, "num_layers": 32}
    assert d["recommendations"]
    assert main(argv) == 0
    table = capsys.readouterr().out
    for needle in ("llama3-8b", "Memory per GPU", "activations", "tokens/s per GPU", "MFU", "Recommendations",
                   "checkpointing selective:2 (16 of 32 blocks)"):  # fmt: skip
        assert needle in table, needle
