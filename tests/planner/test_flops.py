"""FLOPs per token: 6N + causal attention, and MFU (one definition for trainer and planner)."""

from __future__ import annotations

import pytest

from planner.flops import flops_per_token, mfu_percent, model_tflops_per_second
from training.presets import PRESETS

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
