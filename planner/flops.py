"""Training FLOPs per token and model TFLOP/s: the one definition the trainer's
TFLOP/s and MFU metrics and the planner's throughput model share.

Derivation (decoder-only transformer of :class:`training.presets.ModelConfig`,
``L`` blocks, hidden ``h``, FFN ``f``, vocabulary ``V``, sequence ``s``):

Dense matmuls -- ``6N``
    A matmul with a ``k x n`` weight costs ``2kn`` FLOPs per token forward
    (one multiply and one add per weight). Backward costs twice that
    (gradient w.r.t. the input and w.r.t. the weight). So each parameter
    that multiplies activations costs 6 FLOPs per token per training step:
    ``6N``. ``N`` counts every block parameter (``4h^2 + 2hf`` matmul
    weights plus ``9h + f`` biases and LayerNorm weights, which are noise at
    these sizes and counted as usual for ``6N``), and, with
    ``include_embedding=True``, the output head ``h*V`` (a real matmul). The
    input token embedding is a table lookup (no FLOPs) and is never counted.

Attention scores -- ``6 * L * h * s`` (causal) or ``12 * L * h * s`` (full)
    Per block and token, forward: ``Q K^T`` is a dot product of length ``h``
    (summed over heads) with each of the ``s`` keys, ``2sh`` FLOPs, and
    ``softmax(.) V`` another ``2sh``: ``4sh``; times 3 for forward+backward:
    ``12sh`` per block -- the PaLM paper's ``12 * L * H * Q * T`` term
    (Chowdhery et al. 2022, appendix B), which counts the full square.
    With the causal mask a query at position ``i`` attends to ``i+1`` keys,
    on average ``(s+1)/2 ~ s/2``; fused (flash) attention kernels skip the
    masked tiles, so the work a causal model needs is half: ``6 * L * h * s``.

**Decision:** by default we count the causal half (``causal=True``): the
FLOPs the model needs and the kernels do. PaLM/torchtitan-style figures (full
square) are ``causal=False``; at ``s = 8192`` and ``h = 2048`` the difference
for ``gpt-1b`` is ~8% of the total. Activation-checkpointing recompute is
*not* counted (model FLOPs, not hardware FLOPs: MFU falls when you recompute,
as it should).

Softmax, LayerNorm, GELU, residual adds and the loss are ``O(s*h)`` elementwise
work, below 1% here, and are left out as in every MFU convention.
"""

from __future__ import annotations

from training.presets import ModelConfig


def matmul_params(model: ModelConfig, *, include_embedding: bool = True) -> int:
    """``N`` of ``6N``: block parameters, plus the output head ``h*V`` when ``include_embedding``."""
    n = model.block_params
    if include_embedding:
        n += model.hidden_size * model.vocab_size
    return n


def attention_flops_per_token(model: ModelConfig, seq_length: int, *, causal: bool = True) -> float:
    """Training FLOPs per token of the attention score/value matmuls: ``6Lhs`` causal, ``12Lhs`` full."""
    if seq_length < 1:
        raise ValueError(f"seq_length must be >= 1, got {seq_length}")
    factor = 6.0 if causal else 12.0
    return factor * model.num_layers * model.hidden_size * seq_length


def flops_per_token(
    model: ModelConfig, seq_length: int, *, include_embedding: bool = True, causal: bool = True
) -> float:
    """Training (forward + backward) FLOPs per token: ``6N + 6Lhs`` (see the module docstring).

    Args:
        model: the model's shape.
        seq_length: tokens per sequence ``s``.
        include_embedding: count the output head matmul (``h*V``) in ``N``;
            ``False`` for the blocks-only benchmark (no embedding, no head).
        causal: count the causal half of the attention scores (default); ``False``
            counts the full square like PaLM.

    Returns:
        FLOPs per token (float).

    Raises:
        ValueError: ``seq_length < 1``.
    """
    return 6.0 * matmul_params(model, include_embedding=include_embedding) + attention_flops_per_token(
        model, seq_length, causal=causal
    )


def model_tflops_per_second(tokens_per_second: float, flops_per_token: float) -> float:
    """Achieved model TFLOP/s: ``tokens_per_second * flops_per_token / 1e12``.

    Pass per-GPU tokens/s to get per-GPU TFLOP/s (the MFU numerator).
    """
    return tokens_per_second * flops_per_token / 1e12


def mfu_percent(tokens_per_second_per_gpu: float, flops_per_token: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation in percent (0-100): achieved per-GPU TFLOP/s over the dense peak.

    ``peak_tflops`` comes from :func:`planner.catalogue.dense_peak_tflops`.

    Raises:
        ValueError: ``peak_tflops <= 0``.
    """
    if peak_tflops <= 0:
        raise ValueError(f"peak_tflops must be > 0, got {peak_tflops}")
    return 100.0 * model_tflops_per_second(tokens_per_second_per_gpu, flops_per_token) / peak_tflops


__all__ = [
    "attention_flops_per_token",
    "flops_per_token",
    "matmul_params",
    "mfu_percent",
    "model_tflops_per_second",
]
