"""The GPT family: decoder-only transformer shapes, their size presets, parameter counts and FLOP terms.

Pure Python (imports :mod:`platform_spec` only): the trainer builds its model
from these shapes (``training/model.py`` holds the torch-native and
TransformerEngine blocks for now), the planner counts parameters, FLOPs and
activations from them, and the submitter validates requests against them. The
family registers itself by name in ``model_families/__init__.py``.

Shapes
------
Architecture (both the TransformerEngine path and the torch-native CPU path):
pre-LayerNorm blocks, each ``LayerNorm -> QKV (with bias) -> causal
self-attention -> output projection -> residual -> LayerNorm -> FC1 ->
GELU -> FC2 -> residual``, i.e. ``te.TransformerLayer``'s default structure.
Token embedding, a final LayerNorm and an untied output head (LM head) wrap
the blocks.

Parameters per block, with ``h`` the hidden size and ``f`` the FFN size::

    QKV 3h*h + 3h, out-proj h*h + h, FC1 h*f + f, FC2 f*h + h, 2 LayerNorms 4h
    = 4h^2 + 2hf + 9h + f

``gpt-1b`` is the published guide's 1B model (24 blocks, hidden 2048, 16
heads, FFN 6144): 24 * 41.97M = 1.007B block parameters, so the guide's
measurements apply to it. Larger presets keep ``f = 3h`` and a head size of
128 and pick the layer count that lands on the name.

FLOPs per token
---------------
The one definition the trainer's TFLOP/s and MFU metrics and the planner's
throughput model share (:data:`FAMILY` ``.flops_per_token``).

Derivation (decoder-only transformer of :class:`ModelConfig`,
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

import dataclasses
from dataclasses import dataclass

from platform_spec.models import ModelFamily

DEFAULT_VOCAB_SIZE = 50304
"""GPT-2's 50257 tokens padded to a multiple of 128 (synthetic data and the
parameter counts in the table below)."""


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a decoder-only transformer (a :class:`platform_spec.models.ModelShape`).

    Attributes:
        name: preset name, e.g. ``"gpt-1b"``.
        num_layers: transformer blocks.
        hidden_size: model width ``h``.
        num_attention_heads: attention heads; ``hidden_size`` must divide evenly.
        ffn_hidden_size: MLP inner width ``f``.
        vocab_size: embedding rows and output-head columns.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    vocab_size: int = DEFAULT_VOCAB_SIZE

    def __post_init__(self) -> None:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_attention_heads {self.num_attention_heads}"
            )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def params_per_block(self) -> int:
        """Parameters in one transformer block (see module docstring)."""
        h, f = self.hidden_size, self.ffn_hidden_size
        return 4 * h * h + 2 * h * f + 9 * h + f

    @property
    def block_params(self) -> int:
        """Parameters in all transformer blocks."""
        return self.num_layers * self.params_per_block

    @property
    def embedding_params(self) -> int:
        """Token embedding + final LayerNorm + untied output head."""
        return 2 * self.vocab_size * self.hidden_size + 2 * self.hidden_size

    @property
    def num_params(self) -> int:
        """All parameters of the full model."""
        return self.block_params + self.embedding_params

    def with_overrides(self, *, num_layers: int | None = None, vocab_size: int | None = None) -> ModelConfig:
        """A copy with ``num_layers`` / ``vocab_size`` replaced where given."""
        changes = {}
        if num_layers is not None:
            changes["num_layers"] = num_layers
        if vocab_size is not None:
            changes["vocab_size"] = vocab_size
        return dataclasses.replace(self, **changes)


PRESETS: dict[str, ModelConfig] = {
    # CPU-sized, for tests, demos and local sweeps (byte-level vocabulary).
    "gpt-tiny": ModelConfig("gpt-tiny", num_layers=4, hidden_size=256, num_attention_heads=4, ffn_hidden_size=768, vocab_size=512),
    # The guide's 1B shape.
    "gpt-1b": ModelConfig("gpt-1b", num_layers=24, hidden_size=2048, num_attention_heads=16, ffn_hidden_size=6144),
    "gpt-3b": ModelConfig("gpt-3b", num_layers=32, hidden_size=3072, num_attention_heads=24, ffn_hidden_size=9216),
    "gpt-8b": ModelConfig("gpt-8b", num_layers=48, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=12288),
    "gpt-14b": ModelConfig("gpt-14b", num_layers=54, hidden_size=5120, num_attention_heads=40, ffn_hidden_size=15360),
    "gpt-32b": ModelConfig("gpt-32b", num_layers=72, hidden_size=6656, num_attention_heads=52, ffn_hidden_size=19968),
    "gpt-64b": ModelConfig("gpt-64b", num_layers=96, hidden_size=8192, num_attention_heads=64, ffn_hidden_size=24576),
}


def preset_table() -> list[dict[str, int | str]]:
    """Rows for documentation: name, layers, hidden, heads, FFN, block and total parameters."""
    return [
        {
            "model": c.name,
            "num_layers": c.num_layers,
            "hidden_size": c.hidden_size,
            "num_attention_heads": c.num_attention_heads,
            "ffn_hidden_size": c.ffn_hidden_size,
            "vocab_size": c.vocab_size,
            "block_params": c.block_params,
            "num_params": c.num_params,
        }
        for c in PRESETS.values()
    ]


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


FAMILY = ModelFamily(
    name="gpt",
    shape_type=ModelConfig,
    presets=PRESETS,
    flops_per_token=flops_per_token,
    description="decoder-only transformer, pre-LayerNorm blocks, untied LM head (the guide's 1B shape and larger)",
)
"""The GPT family's registry record (registered in ``model_families/__init__.py``)."""

__all__ = [
    "DEFAULT_VOCAB_SIZE",
    "FAMILY",
    "PRESETS",
    "ModelConfig",
    "attention_flops_per_token",
    "flops_per_token",
    "matmul_params",
    "preset_table",
]
