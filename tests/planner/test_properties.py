"""Monotonicity and range properties of the memory and throughput models (hypothesis)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from planner import PlanInput
from planner.memory import AT_RISK_FRACTION
from planner.plan import evaluate
from platform_spec.catalogue import INSTANCES, TRAINABLE_INSTANCE_TYPES, supported_precisions

MODELS = ("gpt-tiny", "gpt-1b", "gpt-3b", "gpt-8b", "gpt-14b", "gpt-32b")

configs = st.fixed_dictionaries(
    {
        "model": st.sampled_from(MODELS),
        "instance_type": st.sampled_from(sorted(TRAINABLE_INSTANCE_TYPES)),  # the types the planner plans
        "precision_index": st.integers(0, 5),
        "seq_length": st.sampled_from((512, 1024, 2048, 4096, 8192, 32768)),
        "batch_size": st.integers(1, 64),
        "activation_checkpointing": st.sampled_from(("off", "full")),
        "instance_count": st.integers(1, 4),
        "sharding_strategy": st.sampled_from(("full", "hybrid")),
        "reshard_after_forward": st.booleans(),
        "gradient_accumulation_steps": st.integers(1, 4),
        "blocks_only": st.booleans(),
    }
)


def make(c: dict, **changes) -> PlanInput:
    c = {**c, **changes}
    precisions = supported_precisions(INSTANCES[c["instance_type"]].gpu)
    precision = c.get("precision") or precisions[c["precision_index"] % len(precisions)]
    return PlanInput(
        model=c["model"],
        num_layers=None,
        precision=precision,
        seq_length=c["seq_length"],
        batch_size=c["batch_size"],
        activation_checkpointing=c["activation_checkpointing"],
        instance_type=c["instance_type"],
        instance_count=c["instance_count"],
        sharding_strategy=c["sharding_strategy"],
        reshard_after_forward=c["reshard_after_forward"],
        gradient_accumulation_steps=c["gradient_accumulation_steps"],
        blocks_only=c["blocks_only"],
    )


@settings(max_examples=60, deadline=None)
@given(configs, st.integers(1, 64))
def test_memory_grows_with_batch(c, extra):
    small = evaluate(make(c))
    big = evaluate(make(c, batch_size=c["batch_size"] + extra))
    assert big.memory_gb.total >= small.memory_gb.total
    assert big.memory_gb.activations >= small.memory_gb.activations


@settings(max_examples=60, deadline=None)
@given(configs)
def test_memory_grows_with_sequence(c):
    small = evaluate(make(c))
    big = evaluate(make(c, seq_length=c["seq_length"] * 2))
    assert big.memory_gb.total >= small.memory_gb.total


@settings(max_examples=60, deadline=None)
@given(configs)
def test_checkpointing_never_increases_activation_memory(c):
    off = evaluate(make(c, activation_checkpointing="off"))
    on = evaluate(make(c, activation_checkpointing="full"))
    assert on.memory_gb.activations <= off.memory_gb.activations
    assert on.memory_gb.total <= off.memory_gb.total
    assert on.tokens_per_second <= off.tokens_per_second * (1 + 1e-9)  # recompute is never free
    assert on.throughput.recompute_overhead_pct >= -1e-9


@settings(max_examples=60, deadline=None)
@given(configs, st.integers(1, 8))
def test_more_gpus_never_increase_per_gpu_parameter_memory(c, more):
    few = evaluate(make(c, sharding_strategy="full"))
    many = evaluate(make(c, sharding_strategy="full", instance_count=c["instance_count"] + more))
    for term in ("parameters", "optimizer_state"):
        assert many.memory_gb.terms[term] <= few.memory_gb.terms[term]


@settings(max_examples=60, deadline=None)
@given(configs)
def test_outputs_are_in_range(c):
    plan = evaluate(make(c))
    assert 0 < plan.mfu < 100
    assert plan.tokens_per_second > 0 and plan.step_time_s > 0
    assert (
        abs(plan.tokens_per_second - plan.tokens_per_second_per_gpu * plan.resolved.world_size)
        < 1e-6 * plan.tokens_per_second
    )
    assert abs(sum(plan.memory_gb.terms.values()) - plan.memory_gb.total) < 1e-9
    # the verdict: out of memory past usable memory, at-risk within the model's stated error of it, else fits
    mem = plan.memory_gb
    assert (mem.status == "out-of-memory") == (mem.required > mem.usable)
    assert plan.fits == (mem.required * (1 + AT_RISK_FRACTION) <= mem.usable)
    json.dumps(plan.to_dict(), allow_nan=False)


@settings(max_examples=40, deadline=None)
@given(configs)
def test_hybrid_never_shards_more_than_full(c):
    full = evaluate(make(c, sharding_strategy="full"))
    hybrid = evaluate(make(c, sharding_strategy="hybrid"))
    assert hybrid.resolved.shard_degree <= full.resolved.shard_degree
    assert hybrid.memory_gb.parameters >= full.memory_gb.parameters
