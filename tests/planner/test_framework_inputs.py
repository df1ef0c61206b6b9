"""What the planner models of the trainer's TransformerEngine release and of other frameworks' choices: TE's
quantized weight copies by release (TE #2805, 2.16), the loss implementation (chunked or unchunked fp32) and the
attention kernel (TE's fused attention or FlashAttention-2) as plan inputs, and ``trainctl plan``'s flags for them.
Pure functions of the planner; the published points they reproduce are tests/planner/test_published.py's."""

from __future__ import annotations

import dataclasses

import pytest

from planner import PlanInput
from planner.errors import PlanInputError
from planner.inputs import ATTENTION_KERNELS, LOSS_IMPLEMENTATIONS, resolve
from planner.memory import (
    GB,
    TE_FSDP2_DROPS_WEIGHT_WORKSPACE,
    UNCHUNKED_LOSS_BYTES_PER_LOGIT,
    UNCHUNKED_LOSS_CACHED_BYTES_PER_LOGIT,
    estimate_memory,
    keeps_weight_copies,
    weight_casts_per_microbatch,
    weight_copy_bytes,
)
from planner.plan import evaluate
from planner.throughput import EFFICIENCY, FLASH_ATTENTION_2_PEAK_FRACTION, compute_time
from platform_spec.trainer_image import TRANSFORMER_ENGINE_VERSION


def _llama(**changes) -> PlanInput:
    base = {
        "model": "llama3-8b",
        "num_layers": None,
        "precision": "fp8",
        "seq_length": 8192,
        "batch_size": 1,
        "activation_checkpointing": "off",
        "instance_type": "ml.p5.48xlarge",
    }
    return PlanInput(**{**base, **changes})


def test_te_keeps_weight_copies_under_fsdp2_only_before_2_16():
    r = resolve(_llama())
    assert keeps_weight_copies(r, (2, 10)) and not keeps_weight_copies(r, TE_FSDP2_DROPS_WEIGHT_WORKSPACE)
    assert keeps_weight_copies(r) is (TRANSFORMER_ENGINE_VERSION < (2, 16))
    # the blocks-only example is FSDP1: TE keeps them at every release
    assert keeps_weight_copies(resolve(_llama(blocks_only=True)), (2, 19))


def test_the_image_s_te_holds_one_block_s_weight_copy_and_casts_each_weight_twice():
    r = resolve(_llama())
    assert TRANSFORMER_ENGINE_VERSION >= TE_FSDP2_DROPS_WEIGHT_WORKSPACE  # the image this models
    mem = estimate_memory(r)
    one_block = weight_copy_bytes("fp8", r.gpu) * r.family.terms.matmul_weights_per_block(r.model) / GB
    assert mem.phase_terms["backward"]["quantized_weight_copies"] == pytest.approx(one_block)
    assert mem.phase_terms["loss"]["quantized_weight_copies"] == 0.0
    assert weight_casts_per_microbatch(r) == 2
    assert weight_casts_per_microbatch(resolve(_llama(precision="bf16"))) == 2  # no copy bytes: no cast cost
    assert compute_time(resolve(_llama(precision="bf16"))).elementwise < compute_time(r).elementwise


def test_an_unchunked_fp32_loss_holds_12_bytes_per_logit_and_reserves_the_freed_bf16_logits():
    chunked = evaluate(_llama(seq_length=32768, activation_checkpointing="full"))
    unchunked = evaluate(_llama(seq_length=32768, activation_checkpointing="full", loss="unchunked-fp32"))
    logits = 128256 * 32768
    assert unchunked.memory_gb.phase_terms["loss"]["logits_and_loss"] == pytest.approx(
        UNCHUNKED_LOSS_BYTES_PER_LOGIT * logits / GB
    )
    assert unchunked.memory_gb.phase_terms["loss"]["logits_and_loss"] > 45  # tens of GB the chunked loss avoids
    assert chunked.memory_gb.phase_terms["loss"]["logits_and_loss"] < 1.1
    assert unchunked.memory_gb.peak_phase == "loss"
    frag = 0.10 * (unchunked.memory_gb.activations + unchunked.memory_gb.logits_and_loss)
    assert unchunked.memory_gb.fragmentation_margin == pytest.approx(
        frag + UNCHUNKED_LOSS_CACHED_BYTES_PER_LOGIT * logits / GB
    )
    # the chunked loss recomputes the head's forward; an unchunked one does not
    assert compute_time(resolve(unchunked.input)).gemm < compute_time(resolve(chunked.input)).gemm


def test_flash_attention_2_runs_the_attention_at_its_measured_fraction_of_the_peak():
    te = compute_time(resolve(_llama(seq_length=32768)))
    fa2 = compute_time(resolve(_llama(seq_length=32768, attention="flash-attention-2")))
    assert fa2.attention / te.attention == pytest.approx(EFFICIENCY / FLASH_ATTENTION_2_PEAK_FRACTION)
    assert (fa2.gemm, fa2.elementwise) == (te.gemm, te.elementwise)


@pytest.mark.parametrize(("field", "value"), [("loss", "full"), ("attention", "sdpa")])
def test_an_unknown_loss_or_attention_is_refused_naming_the_field(field, value):
    with pytest.raises(PlanInputError) as info:
        resolve(dataclasses.replace(_llama(), **{field: value}))
    assert info.value.field == field
    assert all(v in str(info.value) for v in (LOSS_IMPLEMENTATIONS if field == "loss" else ATTENTION_KERNELS))


def test_trainctl_plan_takes_the_loss_and_the_attention_and_shows_the_band(capsys):
    import json

    from trainctl.cli import main

    args = ["plan", "--model", "llama3-8b", "--precision", "fp8", "--seq-length", "32768", "--batch-size", "1"]
    args += ["--activation-checkpointing", "full", "--instance-type", "ml.p5.48xlarge", "--json"]
    assert main([*args, "--loss", "unchunked-fp32", "--attention", "flash-attention-2"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["input"]["loss"], plan["input"]["attention"]) == ("unchunked-fp32", "flash-attention-2")
    low, high = plan["memory_gb"]["required_band"]
    assert low < plan["memory_gb"]["required"] < high
    assert main(args) == 0
    default = json.loads(capsys.readouterr().out)
    assert (default["input"]["loss"], default["input"]["attention"]) == ("chunked", "te-fused")
    assert default["memory_gb"]["logits_and_loss"] < plan["memory_gb"]["logits_and_loss"]
