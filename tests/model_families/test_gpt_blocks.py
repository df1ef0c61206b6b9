"""The GPT family's blocks: the TransformerEngine block's parameter names map onto the torch-native block's,
both blocks compute the same function with the same weights, the rotary table must stay fp32, and the
initialisation rule.

The TE block runs on ``tests/training/fake_transformer_engine.py``, a CPU stand-in with TransformerEngine
2.19's names: these tests check our mapping and layouts, never TE itself (``benchmarks/gpu_check.py`` runs
the real one on a GPU).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from model_families import gpt
from model_families.gpt import (
    FAMILY,
    INIT_STD,
    ROPE_BASE,
    TE_PARAMETER_NAMES,
    ModelConfig,
    init_rule,
    residual_init_std,
    te_block,
    torch_block,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
import fake_transformer_engine as fake_te

CONFIG = ModelConfig("small", num_layers=2, hidden_size=64, num_attention_heads=2, ffn_hidden_size=128, vocab_size=256)


def test_the_family_record_finds_its_blocks_lazily() -> None:
    assert dict(FAMILY.blocks) == {"torch": ".torch_block", "te": ".te_block"}
    assert FAMILY.block_module("torch") is torch_block and FAMILY.block_module("te") is te_block
    with pytest.raises(ValueError, match=r"backend: got 'tpu'; expected one of torch, te \(model family 'gpt'\)"):
        FAMILY.block_module("tpu")


def test_te_parameter_names_cover_both_blocks_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every TE block parameter (the image's TE names, the stand-in's) has a canonical name, and the canonical
    names are exactly the torch-native block's."""
    fake_te.install(monkeypatch)
    te_names = {n for n, _ in te_block.build_block(CONFIG, 1, device="cpu").named_parameters()}
    torch_names = {n for n, _ in torch_block.build_block(CONFIG, 1).named_parameters()}
    assert te_names == set(TE_PARAMETER_NAMES)
    assert set(TE_PARAMETER_NAMES.values()) == torch_names and len(torch_names) == len(te_names) == 12
    assert dict(FAMILY.parameter_names) == {"te": TE_PARAMETER_NAMES}


def test_the_te_block_computes_the_torch_block_with_its_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights copied through TE_PARAMETER_NAMES and each backend's own block input (TE's [s, 1, 1, d] angles,
    torch's (cos, sin)): the same outputs and input gradients (the stand-in's math is the torch block's, so a
    wrong name mapping -- fc1 for fc2, k for v -- or rotary layout is what would differ)."""
    fake_te.install(monkeypatch)
    torch.manual_seed(0)
    reference = torch_block.build_block(CONFIG, 1)
    te = te_block.build_block(CONFIG, 1, device="cpu")
    weights = dict(reference.named_parameters())
    with torch.no_grad():
        for param in reference.parameters():
            param.normal_(0.0, 0.5)  # LayerNorm and biases too, so every mapped pair matters
        for name, param in te.named_parameters():
            param.copy_(weights[TE_PARAMETER_NAMES[name]])
    x = torch.randn(2, 16, CONFIG.hidden_size)
    outputs = {}
    for label, block, module in (("torch", reference, torch_block), ("te", te, te_block)):
        inp = x.clone().requires_grad_(True)
        y = block(inp, module.block_input(CONFIG, 16, "cpu"))
        y.square().sum().backward()
        outputs[label] = (y.detach(), inp.grad)
    torch.testing.assert_close(outputs["te"][0], outputs["torch"][0])
    torch.testing.assert_close(outputs["te"][1], outputs["torch"][1])


def test_bf16_rounding_would_move_long_context_angles_by_radians() -> None:
    """Why the rotary table must stay fp32: at 8K positions bf16's spacing is 32, an error up to 16 radians."""
    angles = torch_block.rope_angles(8192, 128, ROPE_BASE, "cpu")
    error = (angles.to(torch.bfloat16).float() - angles).abs().max().item()
    assert 8.0 < error <= 16.0
    cos, sin = torch_block.block_input(CONFIG, 8, "cpu")
    assert cos.dtype == sin.dtype == torch.float32 and cos.shape == (8, CONFIG.head_dim)
    te_angles = te_block.block_input(CONFIG, 8, "cpu")
    assert te_angles.dtype == torch.float32 and te_angles.shape == (8, 1, 1, CONFIG.head_dim)


def test_the_init_rule_by_canonical_name() -> None:
    std_out = residual_init_std(CONFIG)
    assert std_out == pytest.approx(0.02 / 2.0)  # 0.02 / sqrt(2 * 2 blocks)
    expected = {
        "tok_embeddings.weight": INIT_STD,
        "output.weight": INIT_STD,
        "norm.weight": "ones",
        "norm.bias": "zeros",
        "layers.0.attention_norm.weight": "ones",
        "layers.1.ffn_norm.bias": "zeros",
        "layers.0.attention.qkv.weight": INIT_STD,
        "layers.0.attention.qkv.bias": "zeros",
        "layers.1.attention.proj.weight": std_out,
        "layers.1.feed_forward.fc1.weight": INIT_STD,
        "layers.1.feed_forward.fc2.weight": std_out,
        "layers.1.feed_forward.fc2.bias": "zeros",
    }
    assert {name: init_rule(name, CONFIG) for name in expected} == expected
    assert FAMILY.init_rule is gpt.init_rule
