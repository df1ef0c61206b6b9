"""The GPT family: decoder-only transformer shapes, their size presets, parameter counts, FLOP terms,
the planner's per-block memory and speed terms, and its parameters' names, initialisation and export facts.

Pure Python (imports :mod:`platform_spec` only): the trainer builds its model
from these shapes around the family's blocks (``torch_block.py``, the
torch-native block; ``te_block.py``, the TransformerEngine block; both
imported only when the trainer asks :data:`FAMILY` for them), the planner
counts parameters, FLOPs, activations and memory traffic from them, and the
submitter validates requests against them. The family registers itself by
name when imported (``model_families/__init__.py`` imports it).

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

The planner's per-block terms (:data:`FAMILY` ``.terms``)
---------------------------------------------------------
``a`` is the precision's activation bytes, ``q`` its quantized bytes per element
with scales (``None``: not quantized), both from the precision registry;
``W = 4h^2 + 2hf`` the matmul weights of a block (:func:`matmul_weights_per_block`).

Saved for backward, per token per block (:func:`block_activation_terms`; fused
attention never stores the ``s x s`` scores): LayerNorm inputs ``2ah``, the four
GEMM inputs (``a`` bytes for bf16, else the columnwise quantized copy the
weight-gradient GEMM reads, ``q`` bytes -- except the MLP's two, which
TransformerEngine's ``LayerNormMLP`` keeps in both layouts, ``c`` bytes, the
precision's weight-copy bytes on the GPU: ``2q``, or ``q`` for per-tensor fp8 on
Blackwell; for bf16 the output-projection input is the attention output itself),
Q K V ``3ah``, attention output ``ah``, the softmax log-sum-exp ``4n``, the FC1
output before GELU ``af``, the GELU output ``(c or a)f``, and in
TransformerEngine's FSDP example (the guide's benchmark) two hidden-dropout
masks ``2h`` (1-byte booleans; the trainer's blocks have no dropout). For
``gpt-1b`` in mxfp8 (blocks-only) this is ``~30.3h`` bytes (62.1 KB) per token
per block (with the MLP inputs in one layout, ``26.2h``: the guide's 15.5 GB
point was under-predicted by 10% until the second layout was counted).

Backward transient (:func:`block_backward_transient_bytes_per_token`), at the
GELU backward: the incoming gradient ``ah``, FC2's data gradient ``af`` and the
GELU-backward output (``2qf`` rowwise + columnwise quantized, or ``af``), minus
the GELU output (``qf`` or ``af``) already freed by FC2's weight gradient.

Elementwise HBM traffic per token per block
(:func:`block_elementwise_bytes_per_token`): forward ``4ah`` (two LayerNorms,
read + write) ``+ 2(3a + m)h`` (two bias-dropout-residual adds, ``m`` = 1 byte
of dropout mask in the benchmark, 0 in the trainer) ``+ 2af`` (GELU); backward
twice the forward. Quantized formats add the casts of the four GEMM inputs,
rowwise + columnwise, ``(a + 2q)(3h + f)`` forward and of the four output
gradients ``(a + 2q)(5h + f)`` backward. This term is why fp8/mxfp8/nvfp4 give
only a modest speed-up over bf16 for small models (the guide's observation): it
scales with ``h`` while the matmuls scale with ``h^2``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from platform_spec import models
from platform_spec.errors import FieldError
from platform_spec.models import ModelFamily, ShapeTerms, check_gemm_dimensions, register_family

DEFAULT_VOCAB_SIZE = 50304
"""GPT-2's 50257 tokens padded to a multiple of 128 (synthetic data and the
parameter counts in the table below)."""
ROPE_BASE = 10000.0
"""Rotary position embedding base (RoPE, rotate-half layout: TransformerEngine's default)."""
LAYERNORM_EPS = 1e-5
"""LayerNorm epsilon of the blocks and the final norm (``te.TransformerLayer``'s default)."""
ACTIVATION = "gelu_tanh"
"""The MLP's activation: GELU, tanh approximation (TransformerEngine's ``gelu``)."""
INIT_STD = 0.02
"""Standard deviation of the normal initialisation of weights (GPT-2); residual output projections use
``INIT_STD / sqrt(2 * num_layers)``."""
DROPOUT_MASK_BYTES = 1.0
"""Bytes per element of a saved dropout mask (torch bool), in TransformerEngine's FSDP example."""
KERNELS_PER_BLOCK = 60
"""CUDA kernels (and FSDP hook work) per block per forward + backward (estimate; the planner's launch floor)."""


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
        check_structure(self)

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
        changes: dict[str, Any] = {}
        if num_layers is not None:
            changes["num_layers"] = num_layers
        if vocab_size is not None:
            changes["vocab_size"] = vocab_size
        return dataclasses.replace(self, **changes)


_POSITIVE_INTS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "vocab_size")


def check_structure(model: ModelConfig) -> None:
    """The rules every GPT shape obeys whatever the precision: positive sizes, an integer and even head
    size ``hidden_size / num_attention_heads`` (RoPE rotates pairs of dimensions).

    Raises:
        FieldError: (a ``ValueError``) naming the first field that breaks one.
    """
    for name in _POSITIVE_INTS:
        value = getattr(model, name)
        lowest = 2 if name == "vocab_size" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            raise FieldError(name, value, f"an integer >= {lowest}")
    h, n = model.hidden_size, model.num_attention_heads
    if h % n:
        raise FieldError(
            "num_attention_heads", n, f"a divisor of hidden_size ({h}): the head size hidden_size / heads is an integer"
        )
    if (h // n) % 2:
        raise FieldError(
            "num_attention_heads",
            n,
            f"a value making the head size hidden_size / heads ({h} / {n} = {h // n}) even (RoPE rotates pairs)",
        )


def validate_shape(model: ModelConfig, *, precision: str | None = None, seq_length: int | None = None) -> None:
    """The family's one shape rule: :func:`check_structure`, and with ``precision`` the GEMM multiples of
    the precision registry on ``hidden_size`` and ``ffn_hidden_size``
    (:func:`platform_spec.models.check_gemm_dimensions`). Any ``seq_length`` is accepted (full causal
    attention and RoPE, no learned positions).

    Raises:
        FieldError: naming the field.
    """
    check_structure(model)
    check_gemm_dimensions(
        {
            "hidden_size": (model.hidden_size, model.hidden_size, "hidden_size"),
            "ffn_hidden_size": (model.ffn_hidden_size, model.ffn_hidden_size, "ffn_hidden_size"),
        },
        precision,
    )


PRESETS: dict[str, ModelConfig] = {
    # CPU-sized, for tests, demos and local sweeps (byte-level vocabulary).
    "gpt-tiny": ModelConfig(
        "gpt-tiny", num_layers=4, hidden_size=256, num_attention_heads=4, ffn_hidden_size=768, vocab_size=512
    ),
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
    return models.matmul_params(model, include_embedding=include_embedding)


def attention_flops_per_token(model: ModelConfig, seq_length: int, *, causal: bool = True) -> float:
    """Training FLOPs per token of the attention score/value matmuls: ``6Lhs`` causal, ``12Lhs`` full."""
    return models.attention_flops_per_token(model.num_layers, model.hidden_size, seq_length, causal=causal)


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
    return models.transformer_flops_per_token(
        model, seq_length, attention_width=model.hidden_size, include_embedding=include_embedding, causal=causal
    )


# ---------------------------------------------------------------------------
# The planner's per-block terms (module docstring)


def matmul_weights_per_block(model: ModelConfig) -> int:
    """``W = 4h^2 + 2hf``: the weights one block's GEMMs read (QKV, output projection, FC1, FC2)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    return 4 * h * h + 2 * h * f


def block_activation_terms(
    model: ModelConfig,
    *,
    activation_bytes: float,
    quantized_bytes: float | None,
    dropout: bool = False,
    quantized_copy_bytes: float | None = None,
) -> dict[str, float]:
    """Bytes saved for backward per token in one block, by tensor (module docstring).

    Args:
        activation_bytes: ``a``, bytes per element of the precision's compute dtype.
        quantized_bytes: ``q``, bytes per quantized element with its scales; ``None``: not quantized.
        dropout: the block applies hidden dropout (TE's default 0.1, as in the guide's benchmark) and
            saves two boolean masks; the trainer's blocks use none.
        quantized_copy_bytes: bytes per element of a quantized tensor kept in both layouts, rowwise and
            columnwise (the precision's ``weight_copy_bytes`` on the GPU: ``2q``, or ``q`` for per-tensor fp8
            on Blackwell); ``None``: ``q``. TransformerEngine's ``LayerNormMLP`` saves its two GEMM inputs
            (the FC1 input and the GELU output) quantized in both layouts, where ``LayerNormLinear`` and
            ``Linear`` drop the rowwise data first (the image's TE, ``release_v2.19``: ``layernorm_mlp.py`` saves ``ln_out`` and
            ``act_out`` as quantized; ``layernorm_linear.py`` and ``linear.py`` call
            ``update_usage(rowwise_usage=False)``).

    Returns:
        ``{tensor: bytes per token}``; the sum is the block's saved activations, ``ln1_input`` its input.
    """
    h, f, n = model.hidden_size, model.ffn_hidden_size, model.num_attention_heads
    a, q = activation_bytes, quantized_bytes
    gemm_in = q if q is not None else a
    mlp_in = gemm_in if q is None or quantized_copy_bytes is None else quantized_copy_bytes
    return {
        "ln1_input": a * h,
        "qkv_gemm_input": gemm_in * h,
        "q_k_v": 3 * a * h,
        "attention_output": a * h,
        "softmax_lse": 4.0 * n,
        "proj_gemm_input": (q * h) if q is not None else 0.0,
        "dropout_masks": 2 * DROPOUT_MASK_BYTES * h if dropout else 0.0,
        "ln2_input": a * h,
        "fc1_gemm_input": mlp_in * h,
        "fc1_output": a * f,
        "fc2_gemm_input": mlp_in * f,
    }


def block_backward_transient_bytes_per_token(
    model: ModelConfig, *, activation_bytes: float, quantized_bytes: float | None
) -> float:
    """Extra bytes per token alive in a block's backward, at the GELU backward (module docstring)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    a, q = activation_bytes, quantized_bytes
    if q is None:
        return a * h + a * f
    return a * h + a * f + 2 * q * f - q * f


def block_elementwise_bytes_per_token(
    model: ModelConfig, *, activation_bytes: float, quantized_bytes: float | None, dropout: bool = False
) -> tuple[float, float]:
    """HBM bytes per token per block of the non-matmul work, ``(forward, backward)`` (module docstring)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    a, q = activation_bytes, quantized_bytes
    mask = DROPOUT_MASK_BYTES if dropout else 0.0
    fwd = 4 * a * h + 2 * (3 * a + mask) * h + 2 * a * f
    bwd = 2 * fwd
    if q is not None:
        fwd += (a + 2 * q) * (3 * h + f)
        bwd += (a + 2 * q) * (5 * h + f)
    return fwd, bwd


# ---------------------------------------------------------------------------
# Parameters: canonical names, initialisation, export

TE_PARAMETER_NAMES: Mapping[str, str] = MappingProxyType(
    {
        # ``te_block.TEBlock`` (``te.TransformerLayer`` with fuse_qkv_params=True, LayerNorm, bias) -> the
        # torch-native block's names (``torch_block.TransformerBlock``), the canonical ones
        "layer.self_attention.layernorm_qkv.layer_norm_weight": "attention_norm.weight",
        "layer.self_attention.layernorm_qkv.layer_norm_bias": "attention_norm.bias",
        "layer.self_attention.layernorm_qkv.weight": "attention.qkv.weight",
        "layer.self_attention.layernorm_qkv.bias": "attention.qkv.bias",
        "layer.self_attention.proj.weight": "attention.proj.weight",
        "layer.self_attention.proj.bias": "attention.proj.bias",
        "layer.layernorm_mlp.layer_norm_weight": "ffn_norm.weight",
        "layer.layernorm_mlp.layer_norm_bias": "ffn_norm.bias",
        "layer.layernorm_mlp.fc1_weight": "feed_forward.fc1.weight",
        "layer.layernorm_mlp.fc1_bias": "feed_forward.fc1.bias",
        "layer.layernorm_mlp.fc2_weight": "feed_forward.fc2.weight",
        "layer.layernorm_mlp.fc2_bias": "feed_forward.fc2.bias",
    }
)
"""TransformerEngine block parameter names -> canonical names (a model export's names)."""

_NORMS = ("norm", "attention_norm", "ffn_norm")
_RESIDUAL_OUTPUTS = ("proj", "fc2")


def residual_init_std(model: ModelConfig) -> float:
    """``INIT_STD / sqrt(2 L)``: the residual output projections' initial standard deviation (GPT-2)."""
    return INIT_STD / math.sqrt(2.0 * model.num_layers)


def init_rule(canonical: str, model: ModelConfig) -> str | float:
    """How the trainer initialises the parameter called ``canonical``: ``"ones"``, ``"zeros"`` or the
    standard deviation of a normal draw.

    LayerNorm weights 1, biases 0, residual output projections (attention ``proj``, ``fc2``)
    N(0, :func:`residual_init_std`), every other weight (token embedding, LM head, QKV, FC1) N(0, 0.02).
    """
    parts = canonical.rsplit(".", 2)
    module, kind = (parts[-2] if len(parts) > 1 else ""), parts[-1]
    if module in _NORMS:
        return "ones" if kind == "weight" else "zeros"
    if kind == "bias":
        return "zeros"
    if module in _RESIDUAL_OUTPUTS:
        return residual_init_std(model)
    return INIT_STD


FAMILY = register_family(
    ModelFamily(
        name="gpt",
        shape_type=ModelConfig,
        presets=PRESETS,
        flops_per_token=flops_per_token,
        description="decoder-only transformer, pre-LayerNorm blocks, untied LM head (the guide's 1B shape and larger)",
        terms=ShapeTerms(
            matmul_weights_per_block=matmul_weights_per_block,
            attention_flops_per_token=attention_flops_per_token,
            block_activation_terms=block_activation_terms,
            block_backward_transient_bytes_per_token=block_backward_transient_bytes_per_token,
            block_elementwise_bytes_per_token=block_elementwise_bytes_per_token,
            kernels_per_block=KERNELS_PER_BLOCK,
        ),
        package=__name__,
        blocks=MappingProxyType({"torch": ".torch_block", "te": ".te_block"}),
        parameter_names=MappingProxyType({"te": TE_PARAMETER_NAMES}),
        init_rule=init_rule,
        export_format="gpt-decoder",
        export_metadata=MappingProxyType(
            {"rope_base": ROPE_BASE, "layernorm_eps": LAYERNORM_EPS, "activation": ACTIVATION}
        ),
        renamed_shape_fields=MappingProxyType({"num_heads": "num_attention_heads"}),
        validate_shape=validate_shape,
    )
)
"""The GPT family's registry record, registered when this module is imported (``model_families/__init__.py``
imports it)."""

__all__ = [
    "ACTIVATION",
    "DEFAULT_VOCAB_SIZE",
    "FAMILY",
    "INIT_STD",
    "KERNELS_PER_BLOCK",
    "LAYERNORM_EPS",
    "PRESETS",
    "ROPE_BASE",
    "TE_PARAMETER_NAMES",
    "ModelConfig",
    "attention_flops_per_token",
    "block_activation_terms",
    "block_backward_transient_bytes_per_token",
    "block_elementwise_bytes_per_token",
    "check_structure",
    "flops_per_token",
    "init_rule",
    "matmul_params",
    "matmul_weights_per_block",
    "preset_table",
    "residual_init_std",
    "validate_shape",
]
