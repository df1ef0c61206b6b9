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

import math
from collections.abc import Mapping

import torch

__all__ = ["apply_rope", "llama3_inverse_frequencies", "rope_angles"]


def llama3_inverse_frequencies(
    inv_freq: torch.Tensor,
    *,
    factor: float,
    low_freq_factor: float,
    high_freq_factor: float,
    original_max_positions: int,
) -> torch.Tensor:
    """``inv_freq`` ``[head_dim / 2]`` (fp32) with Llama 3.1's ``rope_type: llama3`` frequency scaling
    (:class:`model_families.llama.RopeScaling` has the rule; the arithmetic of transformers'
    ``_compute_llama3_parameters``, in fp32, so the angles are the Hugging Face model's bit for bit on CPU)."""
    low_freq_wavelen = original_max_positions / low_freq_factor
    high_freq_wavelen = original_max_positions / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (original_max_positions / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled)


def rope_angles(
    seq_length: int,
    head_dim: int,
    base: float,
    device: torch.device | str,
    *,
    llama3_scaling: Mapping[str, float] | None = None,
) -> torch.Tensor:
    """Rotary angles ``[seq_length, head_dim]`` (fp32, radians): ``cat(freqs, freqs)`` with
    ``freqs[pos, i] = pos * inv_freq[i]``, ``inv_freq[i] = base^(-2i/head_dim)`` computed in fp32 as
    transformers does (integer exponents cast to fp32), then, with ``llama3_scaling`` (the keyword
    arguments of :func:`llama3_inverse_frequencies`), Llama 3.1's frequency scaling."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float32) / head_dim
    inv_freq = 1.0 / (float(base) ** exponents)
    if llama3_scaling is not None:
        inv_freq = llama3_inverse_frequencies(inv_freq, **llama3_scaling)  # type: ignore[arg-type]
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
