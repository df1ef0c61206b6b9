"""The Llama family's torch-native block (the trainer's ``torch`` backend: CPU, or CUDA without TransformerEngine).

Imported only when the trainer asks :data:`model_families.llama.FAMILY` for it
(:meth:`platform_spec.models.ModelFamily.block_module`); TransformerEngine is
never imported here.

Block (pre-RMSNorm, the structure ``te.TransformerLayer`` builds with
``normalization="RMSNorm"``, ``activation="swiglu"``, ``num_gqa_groups``,
``bias=False``, so both backends have the same parameters, shapes and math)::

    x = x + proj(causal_gqa_attention(rope(qkv(RMSNorm(x)))))
    x = x + fc2(silu(gate) * up),  [gate; up] = fc1(RMSNorm(x))

QKV is one weight laid out ``[q; k; v]`` (``h``, ``k``, ``k`` rows; TE's
``qkv_weight_interleaved=False``), FC1 one weight ``[gate; up]`` (TE's
``swiglu`` gates the first half), no biases, RMSNorm eps from the shape (computed
in fp32, as TE's kernels do). Grouped-query attention: query head ``j`` reads
KV head ``j // (num_heads / num_kv_heads)`` (``scaled_dot_product_attention``'s
``enable_gqa``, Hugging Face's ``repeat_kv``). Positions: RoPE with the shape's
``rope_base`` (and its ``llama3`` frequency scaling, where set) in the rotate-half
layout (Hugging Face's and TE's), which adds no parameters. Qwen2's Q/K/V biases
(``qkv_bias``: ``attention.qkv.bias``, ``[q; k; v]``) and Qwen3's per-head query
and key RMSNorms (``qk_norm``: ``attention.q_norm.weight``, ``attention.k_norm.weight``,
applied before RoPE) are the shape's options; a ``head_dim`` other than
``hidden_size / num_heads`` makes Q ``num_heads * head_dim`` wide. The block's parameter names are the family's canonical names.

Rotary angles reach every block in fp32 (:func:`block_input`, computed once per
sequence length by the trainer's model and passed to each block; the FSDP2
policy leaves block inputs uncast): at position 8191 bf16's spacing is 32, so a
rounded angle could move by up to 16 radians. :func:`apply_rope` rotates in fp32.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from model_families.llama import LlamaShape
from model_families.rotary import apply_rope, rope_angles


class RMSNorm(nn.Module):
    """``weight * x / sqrt(mean(x^2) + eps)`` over the last dimension, computed in fp32 (one parameter, ``weight``)."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.ones(size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), (x.shape[-1],), self.weight.float(), self.eps).type_as(x)


class Attention(nn.Module):
    """Causal grouped-query self-attention: fused ``[q; k; v]`` projection (biases with ``qkv_bias``), the
    per-head query and key RMSNorms with ``qk_norm`` (before RoPE, Qwen3's order), SDPA, output projection
    (no bias)."""

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.num_heads = shape.num_heads
        self.num_kv_heads = shape.num_kv_heads
        self.head_dim = shape.head_size
        w, k = shape.q_size, shape.kv_size
        self.sizes = (w, k, k)
        self.qkv = nn.Linear(shape.hidden_size, w + 2 * k, bias=shape.qkv_bias)
        if shape.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, shape.norm_eps)
            self.k_norm = RMSNorm(self.head_dim, shape.norm_eps)
        self.proj = nn.Linear(w, shape.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        b, s, _ = x.shape
        q, k, v = self.qkv(x).split(self.sizes, dim=-1)
        q = q.view(b, s, self.num_heads, self.head_dim)
        k = k.view(b, s, self.num_kv_heads, self.head_dim)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(b, s, self.num_kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rope
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        gqa = self.num_kv_heads != self.num_heads
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        return self.proj(out.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    """SwiGLU: ``fc2(silu(gate) * up)`` with ``[gate; up] = fc1(x)``, no biases."""

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.fc1 = nn.Linear(shape.hidden_size, 2 * shape.ffn_hidden_size, bias=False)
        self.fc2 = nn.Linear(shape.ffn_hidden_size, shape.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.fc1(x).chunk(2, dim=-1)
        return self.fc2(F.silu(gate) * up)


class TransformerBlock(nn.Module):
    """Pre-RMSNorm Llama block (torch-native).

    ``forward(x [batch, seq, hidden], rope (cos, sin) [seq, head_dim] fp32) -> [batch, seq, hidden]``.
    """

    def __init__(self, shape: LlamaShape) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(shape.hidden_size, shape.norm_eps)
        self.attention = Attention(shape)
        self.ffn_norm = RMSNorm(shape.hidden_size, shape.norm_eps)
        self.feed_forward = FeedForward(shape)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), rope)
        return x + self.feed_forward(self.ffn_norm(x))


def build_block(shape: LlamaShape, layer_number: int, *, device: str | torch.device = "cpu") -> TransformerBlock:
    """Block ``layer_number`` (1-based; all blocks are alike here) on ``device`` (``"meta"``: no memory),
    fp32 parameters (FSDP2 keeps them as the master shards)."""
    with torch.device(device):
        return TransformerBlock(shape)


def build_final_norm(shape: LlamaShape) -> nn.Module:
    """The norm between the last block and the LM head: RMSNorm over ``hidden_size``."""
    return RMSNorm(shape.hidden_size, shape.norm_eps)


def block_input(shape: LlamaShape, seq_length: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """What every block receives besides the hidden state: ``(cos, sin)`` of the rotary angles,
    ``[seq_length, head_dim]`` each, fp32."""
    angles = rotary_angles(shape, seq_length, device)
    return angles.cos(), angles.sin()


def rotary_angles(shape: LlamaShape, seq_length: int, device: torch.device | str) -> torch.Tensor:
    """The shape's rotary angles ``[seq_length, head size]`` (fp32): base ``rope_base``, with its ``llama3``
    frequency scaling where set (both backends' :func:`block_input`)."""
    scaling = shape.rope_scaling
    return rope_angles(
        seq_length,
        shape.head_size,
        shape.rope_base,
        device,
        llama3_scaling=None if scaling is None else dataclasses.asdict(scaling),
    )


__all__ = [
    "Attention",
    "FeedForward",
    "RMSNorm",
    "TransformerBlock",
    "block_input",
    "build_block",
    "build_final_norm",
    "rotary_angles",
]
