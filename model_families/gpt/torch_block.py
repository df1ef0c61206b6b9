"""The GPT family's torch-native block (the trainer's ``torch`` backend: CPU, or CUDA without TransformerEngine).

Imported only when the trainer asks :data:`model_families.gpt.FAMILY` for it
(:meth:`platform_spec.models.ModelFamily.block_module`); TransformerEngine is
never imported here.

Block (pre-LayerNorm, ``te.TransformerLayer``'s structure, so both backends
have the same parameters, shapes and math)::

    x = x + proj(causal_attention(rope(qkv(LayerNorm(x)))))
    x = x + fc2(gelu_tanh(fc1(LayerNorm(x))))

QKV has a bias and is laid out ``[q; k; v]`` (TE ``qkv_weight_interleaved=False``),
GELU is the tanh approximation (TE's ``gelu``), LayerNorm eps
:data:`~model_families.gpt.LAYERNORM_EPS`, no dropout. Positions: rotary
embeddings (RoPE, base :data:`~model_families.gpt.ROPE_BASE`, rotate-half
layout, TE's default), which add no parameters. The block's parameter names
are the family's canonical names.

Rotary angles reach every block in fp32 (:func:`block_input`, computed once
per sequence length by the trainer's model and passed to each block): at
position 8191 bf16's spacing is 32, so a rounded angle could move by up to 16
radians. :func:`apply_rope` rotates in fp32 too.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from model_families.gpt import LAYERNORM_EPS, ROPE_BASE, ModelConfig
from model_families.rotary import apply_rope, rope_angles


class Attention(nn.Module):
    """Causal multi-head self-attention: fused QKV (with bias) + SDPA + output projection."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        h = config.hidden_size
        self.qkv = nn.Linear(h, 3 * h, bias=True)
        self.proj = nn.Linear(h, h, bias=True)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=-1)
        q, k, v = (t.view(b, s, self.num_heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(out.transpose(1, 2).reshape(b, s, h))


class FeedForward(nn.Module):
    """``fc2(gelu_tanh(fc1(x)))`` with biases."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.fc1 = nn.Linear(config.hidden_size, config.ffn_hidden_size, bias=True)
        self.fc2 = nn.Linear(config.ffn_hidden_size, config.hidden_size, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class TransformerBlock(nn.Module):
    """Pre-LayerNorm decoder block (torch-native).

    ``forward(x [batch, seq, hidden], rope (cos, sin) [seq, head_dim] fp32) -> [batch, seq, hidden]``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(config.hidden_size, eps=LAYERNORM_EPS)
        self.attention = Attention(config)
        self.ffn_norm = nn.LayerNorm(config.hidden_size, eps=LAYERNORM_EPS)
        self.feed_forward = FeedForward(config)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))


def build_block(config: ModelConfig, layer_number: int, *, device: str | torch.device = "cpu") -> TransformerBlock:
    """Block ``layer_number`` (1-based; all blocks are alike here) on ``device`` (``"meta"``: no memory),
    fp32 parameters (FSDP2 keeps them as the master shards)."""
    with torch.device(device):
        return TransformerBlock(config)


def build_final_norm(config: ModelConfig) -> nn.Module:
    """The norm between the last block and the LM head: LayerNorm over ``hidden_size``."""
    return nn.LayerNorm(config.hidden_size, eps=LAYERNORM_EPS)


def block_input(config: ModelConfig, seq_length: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """What every block receives besides the hidden state: ``(cos, sin)`` of the rotary angles,
    ``[seq_length, head_dim]`` each, fp32."""
    angles = rope_angles(seq_length, config.head_dim, ROPE_BASE, device)
    return angles.cos(), angles.sin()


__all__ = [
    "Attention",
    "FeedForward",
    "TransformerBlock",
    "block_input",
    "build_block",
    "build_final_norm",
]
