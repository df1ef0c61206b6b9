"""Model size presets: the decoder-only transformer shapes the platform knows.

Pure Python (no torch): the trainer builds its model from these, the planner
counts parameters and activations from them, and the submitter validates
requests against them.

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
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

DEFAULT_VOCAB_SIZE = 50304
"""GPT-2's 50257 tokens padded to a multiple of 128 (synthetic data and the
parameter counts in the table below)."""


@dataclass(frozen=True)
class ModelConfig:
    """Shape of a decoder-only transformer.

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


def get_preset(name: str) -> ModelConfig:
    """The preset called ``name``.

    Raises:
        KeyError: with the list of known presets.
    """
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown model preset {name!r}; expected one of {', '.join(PRESETS)}") from None


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
