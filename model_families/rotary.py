"""Rotary position embedding (RoPE) in the rotate-half layout, shared by the families' block modules.

The angles are built in fp32 and reach every block in fp32 (a bf16 angle at position 8K can be off by up to
16 radians): ``rope_angles`` feeds the torch-native blocks (as ``cos``/``sin``) and TransformerEngine's
``rotary_pos_emb`` (viewed ``[seq, 1, 1, head_dim]``); ``apply_rope`` rotates queries and keys in fp32.
The layout is Hugging Face's (``LlamaRotaryEmbedding``, ``rotate_half``) and TransformerEngine's
non-interleaved one (``RotaryPositionEmbedding``, ``rotary_pos_interleaved=False``).

Imports torch: only the families' ``torch_block``/``te_block`` modules import this one (the pure family
modules never do; ``pyproject.toml``'s import-linter contracts).
"""

from __future__ import annotations

import torch

__all__ = ["apply_rope", "rope_angles"]


def rope_angles(seq_length: int, head_dim: int, base: float, device: torch.device | str) -> torch.Tensor:
    """Rotary angles ``[seq_length, head_dim]`` (fp32, radians): ``cat(freqs, freqs)`` with
    ``freqs[pos, i] = pos * base^(-2i/head_dim)``, the inverse frequencies computed in fp32."""
    inv_freq = 1.0 / (float(base) ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    positions = torch.arange(seq_length, device=device, dtype=torch.float32)
    freqs = torch.outer(positions, inv_freq)
    return torch.cat([freqs, freqs], dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[batch, heads, seq, head_dim]`` by the angles' ``cos``/``sin`` ``[seq, head_dim]``, in
    fp32, returned in ``x``'s dtype: ``x * cos + rotate_half(x) * sin`` with
    ``rotate_half([x1, x2]) = [-x2, x1]``."""
    half = x.shape[-1] // 2
    xf = x.float()
    rotated = torch.cat([-xf[..., half:], xf[..., :half]], dim=-1)
    return (xf * cos + rotated * sin).type_as(x)
