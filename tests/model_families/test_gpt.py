"""The GPT family: FLOPs per token (6N + causal attention), MFU, and its registration by name."""

from __future__ import annotations

import pytest

from model_families.gpt import FAMILY, PRESETS, ModelConfig, flops_per_token
from platform_spec import models
from platform_spec.models import mfu_percent, model_tflops_per_second

GPT1B = PRESETS["gpt-1b"]


def test_blocks_only_is_6n_plus_causal_attention():
    s = 8192
    expected = 6 * GPT1B.block_params + 6 * GPT1B.num_layers * GPT1B.hidden_size * s
    assert flops_per_token(GPT1B, s, include_embedding=False) == expected
    assert expected == pytest.approx(8.459e9, rel=1e-3)


def test_full_square_attention_and_head():
    s = 2048
    causal = flops_per_token(GPT1B, s, include_embedding=False)
    full = flops_per_token(GPT1B, s, include_embedding=False, causal=False)
    assert full - causal == 6 * GPT1B.num_layers * GPT1B.hidden_size * s
    with_head = flops_per_token(GPT1B, s)
    assert with_head - causal == 6 * GPT1B.hidden_size * GPT1B.vocab_size


def test_tflops_and_mfu():
    fpt = flops_per_token(GPT1B, 8192, include_embedding=False)
    assert model_tflops_per_second(51000, fpt) == pytest.approx(51000 * fpt / 1e12)
    assert mfu_percent(51000, fpt, 4500) == pytest.approx(100 * 51000 * fpt / 1e12 / 4500)
    with pytest.raises(ValueError):
        mfu_percent(1, fpt, 0)
    with pytest.raises(ValueError):
        flops_per_token(GPT1B, 0)


def test_the_family_is_registered_by_name_with_its_presets_and_flops():
    assert "gpt" in models.family_names() and models.get_family("gpt") is FAMILY
    assert models.preset_names()[: len(PRESETS)] == tuple(PRESETS)
    assert models.get_preset("gpt-1b") is GPT1B and models.family_of("gpt-8b") is FAMILY
    assert FAMILY.flops_per_token is flops_per_token and FAMILY.shape_type is ModelConfig
    assert isinstance(GPT1B, models.ModelShape)  # the shape offers what the registry promises
    # the guide's 1B shape: 24 blocks of 41.97M parameters
    assert (GPT1B.num_layers, GPT1B.hidden_size, GPT1B.num_attention_heads, GPT1B.ffn_hidden_size) == (
        24,
        2048,
        16,
        6144,
    )
    assert GPT1B.block_params == pytest.approx(1.007e9, rel=1e-3)


# ---------------------------------------------------------------------------
# The planner's per-block terms (moved here from planner/memory.py and planner/throughput.py)

MXFP8 = {"activation_bytes": 2.0, "quantized_bytes": 1.0 + 1.0 / 32}
BF16 = {"activation_bytes": 2.0, "quantized_bytes": None}


def test_the_family_gives_the_planner_its_terms():
    terms = FAMILY.terms
    assert terms.matmul_weights_per_block(GPT1B) == 4 * 2048**2 + 2 * 2048 * 6144
    assert terms.attention_flops_per_token(GPT1B, 8192) == 6 * 24 * 2048 * 8192  # causal half
    assert terms.kernels_per_block == 60


def test_block_activations_of_the_guides_benchmark():
    """gpt-1b in mxfp8 with the benchmark's dropout masks: ~26.2h bytes (53.6 KB) per token per block."""
    h = GPT1B.hidden_size
    terms = FAMILY.terms.block_activation_terms(GPT1B, **MXFP8, dropout=True)
    assert sum(terms.values()) == pytest.approx(53_696) and sum(terms.values()) / h == pytest.approx(26.22, abs=0.01)
    assert terms["dropout_masks"] == 2 * h and terms["softmax_lse"] == 4 * 16
    trainer = FAMILY.terms.block_activation_terms(GPT1B, **MXFP8)  # no dropout in the trainer's blocks
    assert trainer["dropout_masks"] == 0.0 and sum(terms.values()) - sum(trainer.values()) == 2 * h
    bf16 = FAMILY.terms.block_activation_terms(GPT1B, **BF16)
    assert bf16["proj_gemm_input"] == 0.0 and bf16["qkv_gemm_input"] == 2 * h  # bf16 saves the GEMM inputs as they are


def test_backward_transient_and_elementwise_traffic():
    h, f = GPT1B.hidden_size, GPT1B.ffn_hidden_size
    q = MXFP8["quantized_bytes"]
    assert FAMILY.terms.block_backward_transient_bytes_per_token(GPT1B, **BF16) == 2 * h + 2 * f
    assert FAMILY.terms.block_backward_transient_bytes_per_token(GPT1B, **MXFP8) == 2 * h + 2 * f + q * f
    fwd, bwd = FAMILY.terms.block_elementwise_bytes_per_token(GPT1B, **BF16)
    assert (fwd, bwd) == (8 * h + 12 * h + 4 * f, 2 * (8 * h + 12 * h + 4 * f))
    fwd_q, bwd_q = FAMILY.terms.block_elementwise_bytes_per_token(GPT1B, **MXFP8, dropout=True)
    assert fwd_q == fwd + 2 * h + (2 + 2 * q) * (3 * h + f)  # dropout masks, then the quantizing casts
    assert bwd_q == 2 * (fwd + 2 * h) + (2 + 2 * q) * (5 * h + f)
