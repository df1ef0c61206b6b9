"""The Llama family: Llama-style decoder shapes (RMSNorm, SwiGLU, grouped-query attention, RoPE with a
configurable base, no biases, optional tied embeddings), their presets, parameter counts, FLOP terms, the
planner's per-block terms, the one shape rule, the Hugging Face ``config.json`` mapping and the export names.

Pure Python (imports :mod:`platform_spec` only), like every family's ``__init__``:
the trainer builds its model from these shapes around the family's blocks
(``torch_block.py``, torch-native; ``te_block.py``, TransformerEngine; both
imported only when the trainer asks :data:`FAMILY` for them), the planner
counts parameters, FLOPs, activations and memory traffic from them, and the
submitter validates requests against them.

Architecture
------------
Pre-norm blocks, the structure of Meta's Llama 3 (``llama/model.py`` of
meta-llama/llama3) and of Hugging Face's ``LlamaForCausalLM``::

    x = x + o_proj(causal_gqa_attention(rope(q_proj, k_proj, v_proj of RMSNorm(x))))
    x = x + down_proj(silu(gate_proj(RMSNorm(x))) * up_proj(RMSNorm(x)))

``h`` hidden size, ``n`` query heads, ``g`` KV heads (``num_kv_heads``;
``n % g == 0``, each KV head serves ``n / g`` consecutive query heads, the
convention of ``repeat_kv`` in Hugging Face and of TransformerEngine's and
flash attention's GQA), head size ``d = h / n`` (even: RoPE rotates pairs),
``k = g * d`` the width of K and of V, ``f`` the SwiGLU inner size. No
biases anywhere; RMSNorm weights only (eps ``norm_eps``); a final RMSNorm;
an LM head that may share the embedding's weight (``tied_embeddings``).

RoPE (base ``rope_base``, 500000 for Llama 3) in the **rotate-half** layout:
a head vector ``[x1, x2]`` (halves) becomes ``[x1 cos - x2 sin, x2 cos + x1 sin]``
with angle ``pos * base^(-2i/d)`` for pair ``i`` -- Hugging Face's ``rotate_half``
(its conversion script permutes Meta's interleaved q/k rows into this layout)
and TransformerEngine's default (``rotary_pos_interleaved=False``). The
trainer's q/k rows are therefore in Hugging Face's layout already and the
export needs no permutation.

Canonical parameter names (the torch-native block's, what initialisation is
keyed on) and the Hugging Face names of the export (:func:`export_layout`)::

    tok_embeddings.weight                 [V, h]          model.embed_tokens.weight
    layers.{i}.attention_norm.weight      [h]             model.layers.{i}.input_layernorm.weight
    layers.{i}.attention.qkv.weight       [h + 2k, h]     rows 0:h     model.layers.{i}.self_attn.q_proj.weight
                                                          rows h:h+k   model.layers.{i}.self_attn.k_proj.weight
                                                          rows h+k:    model.layers.{i}.self_attn.v_proj.weight
    layers.{i}.attention.proj.weight      [h, h]          model.layers.{i}.self_attn.o_proj.weight
    layers.{i}.ffn_norm.weight            [h]             model.layers.{i}.post_attention_layernorm.weight
    layers.{i}.feed_forward.fc1.weight    [2f, h]         rows 0:f     model.layers.{i}.mlp.gate_proj.weight
                                                          rows f:2f    model.layers.{i}.mlp.up_proj.weight
    layers.{i}.feed_forward.fc2.weight    [h, f]          model.layers.{i}.mlp.down_proj.weight
    norm.weight                           [h]             model.norm.weight
    output.weight                         [V, h]          lm_head.weight (absent when tied)

The fused QKV and gate/up tensors are what TransformerEngine's fused layers
hold (``fuse_qkv_params=True, qkv_weight_interleaved=False``: ``[q; k; v]``
rows; ``activation="swiglu"``: ``silu`` of the first half times the second,
TE's convention), so both backends have the same parameters
(:data:`TE_PARAMETER_NAMES`).

Parameters per block::

    q h*h + k,v 2*h*k + o h*h + gate, up, down 3*h*f + 2 RMSNorms 2h
    = 2h^2 + 2hk + 3hf + 2h

plus the embedding ``V*h``, the final norm ``h`` and, untied, the head ``h*V``.
``llama3-8b`` counts 8,030,261,248 and ``llama3-70b`` 70,553,706,496: Meta's
8.03B and 70.6B (Llama 3 model card).

FLOPs per token
---------------
As for the GPT family (its module docstring has the derivation): ``6N`` for
the matmuls, ``N`` the block parameters plus the LM head ``h*V`` (a real
matmul also when tied; the embedding lookup is not), and ``6 * L * h * s`` for
the causal attention scores. With GQA the K and V projections are ``h*k``
weights each (in ``N``), while the score matmuls still run per *query* head:
``n * d = h`` wide, so the attention term is GPT's.

The planner's per-block terms (:data:`FAMILY` ``.terms``)
---------------------------------------------------------
GPT's accounting (same conventions: ``a`` activation bytes, ``q`` quantized
bytes with scales or ``None``; what ``te.TransformerLayer`` saves for backward
with fused attention, never the ``s x s`` scores), with GQA and SwiGLU:
``W = 2h^2 + 2hk + 3hf`` (:func:`matmul_weights_per_block`).

Saved per token per block (:func:`block_activation_terms`): the two RMSNorm
inputs ``2ah``; the four GEMM inputs (``q`` bytes quantized -- the columnwise
copy the weight gradient reads -- else ``a``; in bf16 the output projection's
input is the attention output itself): QKV ``h``, output projection ``h``,
FC1 ``h``, FC2 ``f``; Q K V after RoPE ``a(h + 2k)`` (GQA: K and V are
``k`` wide; RoPE is linear, its backward needs only the angles); the attention
output ``ah``; the softmax log-sum-exp ``4n`` (fp32 per query head); the FC1
output before SwiGLU ``2af`` (gate and up); dropout masks as GPT's when asked
(the trainer has none). For ``llama3-8b`` in bf16 this is ``34.0h`` bytes
(139 KB) per token per block.

Backward transient (:func:`block_backward_transient_bytes_per_token`), at the
SwiGLU backward: the incoming gradient ``ah``, FC2's data gradient ``af`` and
the SwiGLU-backward output ``2f`` wide (``2 * 2qf`` rowwise + columnwise
quantized, or ``2af``), minus the SwiGLU output (``qf`` or ``af``) freed by
FC2's weight gradient: ``ah + 2af`` unquantized, ``ah + af + 3qf`` quantized.

Elementwise HBM traffic per token per block
(:func:`block_elementwise_bytes_per_token`): forward ``4ah`` (two RMSNorms,
read + write) ``+ 2(3a + m)h`` (two residual adds, ``m`` dropout-mask bytes)
``+ 3af`` (SwiGLU reads ``2f``, writes ``f``) ``+ 2a(h + k)`` (RoPE reads and
writes Q and K; GPT's terms leave RoPE out); backward twice the forward.
Quantized formats add the casts of the four GEMM inputs, rowwise + columnwise,
``(a + 2q)(3h + f)`` forward and of the four output gradients
``(a + 2q)(3h + 2k + 2f)`` backward (QKV ``h + 2k``, output projection ``h``,
FC1 ``2f``, FC2 ``h``).

The shape rule
--------------
:func:`validate_shape` is the family's one rule (the trainer's, the planner's
and the submitter's, through :func:`platform_spec.models.resolve_shape`):
positive sizes, ``hidden_size % num_heads == 0`` (integer head size), an even
head size (RoPE), ``num_heads % num_kv_heads == 0`` (GQA), ``rope_base > 1``,
``0 < norm_eps < 1``, and for a TransformerEngine precision the GEMM multiple
of the precision registry on ``hidden_size``, ``ffn_hidden_size`` and
``num_kv_heads * head size`` (:func:`platform_spec.models.check_gemm_dimensions`).
Errors are :class:`platform_spec.errors.FieldError` naming the field.

Hugging Face ``config.json``
----------------------------
:func:`from_hf_config` maps a ``LlamaForCausalLM`` configuration (``model_type``
``llama``) to a shape and :func:`to_hf_config` writes one (the export's
``config.json``); see :data:`HF_CONFIG_KEYS` for the keys and what each maps
to, and :data:`HF_IGNORED_KEYS` for the keys read as information only. Anything
else (``rope_scaling``, used by Llama 3.1 and later, biases, another
activation, another head size, an unknown key) is refused with the key named.
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
from platform_spec.models import ExportSlice, ModelFamily, ShapeTerms, check_gemm_dimensions, register_family

ROPE_BASE = 500000.0
"""RoPE base of Llama 3 (``rope_theta`` 500000.0 in Meta's ``params.json`` and Hugging Face's ``config.json``
of Meta-Llama-3-8B/70B); the default of a custom shape."""
NORM_EPS = 1e-5
"""RMSNorm epsilon of Llama 3 (``norm_eps`` / ``rms_norm_eps`` 1e-05, same sources); the default of a custom shape."""
ACTIVATION = "swiglu"
"""The MLP: ``down(silu(gate(x)) * up(x))`` (TransformerEngine's ``swiglu``; Hugging Face's ``hidden_act: silu``)."""
INIT_STD = 0.02
"""Standard deviation of the normal initialisation of weights (Hugging Face's ``initializer_range`` default);
residual output projections use ``INIT_STD / sqrt(2 * num_layers)`` (as the GPT family)."""
DROPOUT_MASK_BYTES = 1.0
"""Bytes per element of a saved dropout mask (torch bool), when the planner models dropout."""
KERNELS_PER_BLOCK = 60
"""CUDA kernels (and FSDP hook work) per block per forward + backward (estimate, as the GPT family's)."""

HF_MODEL_TYPE = "llama"
"""``model_type`` of a Hugging Face Llama ``config.json``."""
HF_ARCHITECTURE = "LlamaForCausalLM"
"""The Hugging Face class the export loads into (``architectures`` of its ``config.json``)."""


@dataclass(frozen=True)
class LlamaShape:
    """Shape of a Llama-style decoder (a :class:`platform_spec.models.ModelShape`).

    Attributes:
        name: preset name (``"llama3-8b"``), or ``"llama"`` for a custom shape.
        num_layers: transformer blocks ``L``.
        hidden_size: model width ``h``.
        num_heads: query heads ``n``; ``h / n`` is the head size ``d`` (an even integer).
        num_kv_heads: key/value heads ``g`` (grouped-query attention; ``n % g == 0``; ``g == n`` is
            multi-head attention).
        ffn_hidden_size: SwiGLU inner width ``f`` (each of gate, up and down is ``h x f``).
        vocab_size: embedding rows and LM-head columns ``V``.
        rope_base: RoPE base (``rope_theta``), e.g. 500000.0 for Llama 3.
        tied_embeddings: the LM head shares the token embedding's weight.
        norm_eps: RMSNorm epsilon (blocks and the final norm).

    Raises:
        FieldError: a structurally impossible shape (:func:`check_structure`), naming the field.
    """

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    rope_base: float = ROPE_BASE
    tied_embeddings: bool = False
    norm_eps: float = NORM_EPS

    def __post_init__(self) -> None:
        check_structure(self)

    @property
    def head_dim(self) -> int:
        """Head size ``d = h / n``."""
        return self.hidden_size // self.num_heads

    @property
    def kv_size(self) -> int:
        """Width of K and of V: ``k = num_kv_heads * head_dim``."""
        return self.num_kv_heads * self.head_dim

    @property
    def params_per_block(self) -> int:
        """Parameters in one block: ``2h^2 + 2hk + 3hf + 2h`` (module docstring)."""
        h, k, f = self.hidden_size, self.kv_size, self.ffn_hidden_size
        return 2 * h * h + 2 * h * k + 3 * h * f + 2 * h

    @property
    def block_params(self) -> int:
        """Parameters in all blocks."""
        return self.num_layers * self.params_per_block

    @property
    def embedding_params(self) -> int:
        """Token embedding ``V*h`` + final RMSNorm ``h`` + LM head ``h*V`` unless tied."""
        head = 0 if self.tied_embeddings else self.vocab_size * self.hidden_size
        return self.vocab_size * self.hidden_size + self.hidden_size + head

    @property
    def num_params(self) -> int:
        """All parameters of the full model (a tied weight counted once)."""
        return self.block_params + self.embedding_params

    def with_overrides(self, *, num_layers: int | None = None, vocab_size: int | None = None) -> LlamaShape:
        """A copy with ``num_layers`` / ``vocab_size`` replaced where given (any field:
        :func:`platform_spec.models.resolve_shape`)."""
        changes: dict[str, Any] = {
            k: v for k, v in (("num_layers", num_layers), ("vocab_size", vocab_size)) if v is not None
        }
        return dataclasses.replace(self, **changes)


_POSITIVE_INTS = ("num_layers", "hidden_size", "num_heads", "num_kv_heads", "ffn_hidden_size", "vocab_size")


def check_structure(shape: LlamaShape) -> None:
    """The rules every Llama shape obeys whatever the precision (module docstring, "The shape rule").

    Raises:
        FieldError: naming the first field that breaks one.
    """
    for name in _POSITIVE_INTS:
        value = getattr(shape, name)
        lowest = 2 if name == "vocab_size" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            raise FieldError(name, value, f"an integer >= {lowest}")
    h, n, g = shape.hidden_size, shape.num_heads, shape.num_kv_heads
    if h % n:
        raise FieldError(
            "num_heads", n, f"a divisor of hidden_size ({h}): the head size hidden_size / num_heads is an integer"
        )
    if (h // n) % 2:
        raise FieldError(
            "num_heads",
            n,
            f"a value making the head size hidden_size / num_heads ({h} / {n} = {h // n}) even (RoPE rotates pairs of dimensions)",
        )
    if n % g:
        raise FieldError(
            "num_kv_heads",
            g,
            f"a divisor of num_heads ({n}) (grouped-query attention: each KV head serves num_heads / num_kv_heads query heads)",
        )
    if not _real(shape.rope_base) or shape.rope_base <= 1:
        raise FieldError("rope_base", shape.rope_base, "a finite number > 1 (the RoPE base, e.g. 500000 for Llama 3)")
    if not _real(shape.norm_eps) or not 0 < shape.norm_eps < 1:
        raise FieldError("norm_eps", shape.norm_eps, "a number > 0 and < 1 (the RMSNorm epsilon, e.g. 1e-05)")
    if not isinstance(shape.tied_embeddings, bool):
        raise FieldError("tied_embeddings", shape.tied_embeddings, "true or false")


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def validate_shape(shape: LlamaShape, *, precision: str | None = None) -> None:
    """The family's one shape rule: :func:`check_structure`, and with ``precision`` the GEMM multiples of
    the precision registry on ``hidden_size``, ``ffn_hidden_size`` and ``num_kv_heads * head size``.

    Raises:
        FieldError: naming the field (``precision``: unknown precision).
    """
    check_structure(shape)
    check_gemm_dimensions(
        {
            "hidden_size": (shape.hidden_size, shape.hidden_size, "hidden_size"),
            "ffn_hidden_size": (shape.ffn_hidden_size, shape.ffn_hidden_size, "ffn_hidden_size"),
            "num_kv_heads": (shape.num_kv_heads, shape.kv_size, "the K/V width num_kv_heads * head size"),
        },
        precision,
    )


PRESETS: dict[str, LlamaShape] = {
    # CPU-sized, for tests, demos and local sweeps (byte-level vocabulary): GQA 4:2, tied embeddings
    "llama-tiny": LlamaShape(
        "llama-tiny",
        num_layers=4,
        hidden_size=256,
        num_heads=4,
        num_kv_heads=2,
        ffn_hidden_size=704,
        vocab_size=512,
        rope_base=10000.0,
        tied_embeddings=True,
    ),
    # Meta Llama 3 8B and 70B: meta-llama/llama3 MODEL_CARD.md (8B and 70B, GQA, 128K-token vocabulary)
    # and their params.json / Hugging Face config.json (dim/hidden_size, n_layers/num_hidden_layers,
    # n_heads/num_attention_heads, n_kv_heads/num_key_value_heads 8, intermediate_size 14336 / 28672,
    # vocab_size 128256, rope_theta 500000.0, norm_eps/rms_norm_eps 1e-05, tie_word_embeddings false)
    "llama3-8b": LlamaShape(
        "llama3-8b", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
        vocab_size=128256,
    ),
    "llama3-70b": LlamaShape(
        "llama3-70b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, ffn_hidden_size=28672,
        vocab_size=128256,
    ),
}  # fmt: skip


def preset_table() -> list[dict[str, int | str | float | bool]]:
    """Rows for documentation: the presets' fields, block and total parameters."""
    return [
        {
            "model": c.name,
            **{f.name: getattr(c, f.name) for f in dataclasses.fields(c) if f.name != "name"},
            "block_params": c.block_params,
            "num_params": c.num_params,
        }
        for c in PRESETS.values()
    ]


# ---------------------------------------------------------------------------
# FLOPs (module docstring)


def matmul_params(model: LlamaShape, *, include_embedding: bool = True) -> int:
    """``N`` of ``6N``: block parameters, plus the LM head ``h*V`` when ``include_embedding`` (tied or not)."""
    return models.matmul_params(model, include_embedding=include_embedding)


def attention_flops_per_token(model: LlamaShape, seq_length: int, *, causal: bool = True) -> float:
    """Training FLOPs per token of the attention score/value matmuls: ``6Lhs`` causal, ``12Lhs`` full
    (per query head: GQA shares K and V, not the score work).

    Raises:
        ValueError: ``seq_length < 1``.
    """
    return models.attention_flops_per_token(
        model.num_layers, model.num_heads * model.head_dim, seq_length, causal=causal
    )


def flops_per_token(
    model: LlamaShape, seq_length: int, *, include_embedding: bool = True, causal: bool = True
) -> float:
    """Training (forward + backward) FLOPs per token: ``6N + 6Lhs`` (module docstring).

    Args:
        model: the model's shape.
        seq_length: tokens per sequence ``s``.
        include_embedding: count the LM head matmul (``h*V``) in ``N``; ``False`` for blocks only.
        causal: count the causal half of the attention scores (default); ``False``: the full square.

    Raises:
        ValueError: ``seq_length < 1``.
    """
    return models.transformer_flops_per_token(
        model,
        seq_length,
        attention_width=model.num_heads * model.head_dim,
        include_embedding=include_embedding,
        causal=causal,
    )


# ---------------------------------------------------------------------------
# The planner's per-block terms (module docstring)


def matmul_weights_per_block(model: LlamaShape) -> int:
    """``W = 2h^2 + 2hk + 3hf``: the weights one block's GEMMs read (Q, K, V, O, gate, up, down)."""
    h, k, f = model.hidden_size, model.kv_size, model.ffn_hidden_size
    return 2 * h * h + 2 * h * k + 3 * h * f


def block_activation_terms(
    model: LlamaShape,
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
        dropout: the block applies hidden dropout and saves two boolean masks (the trainer's blocks do not).
        quantized_copy_bytes: bytes per element of a quantized tensor kept in both layouts (rowwise and
            columnwise); ``None``: ``q``. TransformerEngine's ``LayerNormMLP`` keeps its two GEMM inputs so
            (the GPT family's :func:`model_families.gpt.block_activation_terms` has the source).

    Returns:
        ``{tensor: bytes per token}``; the sum is the block's saved activations, ``norm1_input`` its input.
    """
    h, k, f, n = model.hidden_size, model.kv_size, model.ffn_hidden_size, model.num_heads
    a, q = activation_bytes, quantized_bytes
    gemm_in = q if q is not None else a
    mlp_in = gemm_in if q is None or quantized_copy_bytes is None else quantized_copy_bytes
    return {
        "norm1_input": a * h,
        "qkv_gemm_input": gemm_in * h,
        "q_k_v": a * (h + 2 * k),
        "attention_output": a * h,
        "softmax_lse": 4.0 * n,
        "proj_gemm_input": (q * h) if q is not None else 0.0,
        "dropout_masks": 2 * DROPOUT_MASK_BYTES * h if dropout else 0.0,
        "norm2_input": a * h,
        "fc1_gemm_input": mlp_in * h,
        "fc1_output": 2 * a * f,
        "fc2_gemm_input": mlp_in * f,
    }


def block_backward_transient_bytes_per_token(
    model: LlamaShape, *, activation_bytes: float, quantized_bytes: float | None
) -> float:
    """Extra bytes per token alive in a block's backward, at the SwiGLU backward (module docstring)."""
    h, f = model.hidden_size, model.ffn_hidden_size
    a, q = activation_bytes, quantized_bytes
    if q is None:
        return a * h + a * f + 2 * a * f - a * f
    return a * h + a * f + 2 * (2 * q * f) - q * f


def block_elementwise_bytes_per_token(
    model: LlamaShape, *, activation_bytes: float, quantized_bytes: float | None, dropout: bool = False
) -> tuple[float, float]:
    """HBM bytes per token per block of the non-matmul work, ``(forward, backward)`` (module docstring)."""
    h, k, f = model.hidden_size, model.kv_size, model.ffn_hidden_size
    a, q = activation_bytes, quantized_bytes
    mask = DROPOUT_MASK_BYTES if dropout else 0.0
    fwd = 4 * a * h + 2 * (3 * a + mask) * h + 3 * a * f + 2 * a * (h + k)
    bwd = 2 * fwd
    if q is not None:
        fwd += (a + 2 * q) * (3 * h + f)
        bwd += (a + 2 * q) * (3 * h + 2 * k + 2 * f)
    return fwd, bwd


# ---------------------------------------------------------------------------
# Parameters: canonical names, initialisation, export

TE_PARAMETER_NAMES: Mapping[str, str] = MappingProxyType(
    {
        # ``te_block.TEBlock`` (``te.TransformerLayer`` with fuse_qkv_params=True, qkv_weight_interleaved=False,
        # normalization="RMSNorm", activation="swiglu", bias=False) -> the torch-native block's names
        "layer.self_attention.layernorm_qkv.layer_norm_weight": "attention_norm.weight",
        "layer.self_attention.layernorm_qkv.weight": "attention.qkv.weight",
        "layer.self_attention.proj.weight": "attention.proj.weight",
        "layer.layernorm_mlp.layer_norm_weight": "ffn_norm.weight",
        "layer.layernorm_mlp.fc1_weight": "feed_forward.fc1.weight",
        "layer.layernorm_mlp.fc2_weight": "feed_forward.fc2.weight",
    }
)
"""TransformerEngine block parameter names -> canonical names (TE 2.10: ``LayerNormLinear`` registers
``layer_norm_weight`` and, unsplit, ``weight``; ``LayerNormMLP`` ``layer_norm_weight``, ``fc1_weight``,
``fc2_weight``; RMSNorm has no ``layer_norm_bias`` and ``bias=False`` registers no biases)."""

_NORMS = ("norm", "attention_norm", "ffn_norm")
_RESIDUAL_OUTPUTS = ("proj", "fc2")


def residual_init_std(model: LlamaShape) -> float:
    """``INIT_STD / sqrt(2 L)``: the residual output projections' initial standard deviation."""
    return INIT_STD / math.sqrt(2.0 * model.num_layers)


def init_rule(canonical: str, model: LlamaShape) -> str | float:
    """How the trainer initialises the parameter called ``canonical``: RMSNorm weights ``"ones"``, the
    residual output projections (attention ``proj``, ``fc2``) N(0, :func:`residual_init_std`), every other
    weight (token embedding -- the LM head too when tied --, LM head, QKV, gate/up) N(0, 0.02)."""
    parts = canonical.rsplit(".", 2)
    module = parts[-2] if len(parts) > 1 else ""
    if module in _NORMS:
        return "ones"
    if module in _RESIDUAL_OUTPUTS:
        return residual_init_std(model)
    return INIT_STD


def export_layout(model: LlamaShape) -> dict[str, tuple[ExportSlice, ...]]:
    """Canonical parameter name -> its Hugging Face ``LlamaForCausalLM`` tensors (module docstring's table);
    the LM head maps to nothing when tied (Hugging Face ties it from ``tie_word_embeddings``)."""
    h, k, f = model.hidden_size, model.kv_size, model.ffn_hidden_size
    out: dict[str, tuple[ExportSlice, ...]] = {
        "tok_embeddings.weight": (ExportSlice("model.embed_tokens.weight", 0, model.vocab_size),),
        "norm.weight": (ExportSlice("model.norm.weight", 0, h),),
        "output.weight": () if model.tied_embeddings else (ExportSlice("lm_head.weight", 0, model.vocab_size),),
    }
    for i in range(model.num_layers):
        ours, theirs = f"layers.{i}.", f"model.layers.{i}."
        out[ours + "attention_norm.weight"] = (ExportSlice(theirs + "input_layernorm.weight", 0, h),)
        out[ours + "attention.qkv.weight"] = (
            ExportSlice(theirs + "self_attn.q_proj.weight", 0, h),
            ExportSlice(theirs + "self_attn.k_proj.weight", h, h + k),
            ExportSlice(theirs + "self_attn.v_proj.weight", h + k, h + 2 * k),
        )
        out[ours + "attention.proj.weight"] = (ExportSlice(theirs + "self_attn.o_proj.weight", 0, h),)
        out[ours + "ffn_norm.weight"] = (ExportSlice(theirs + "post_attention_layernorm.weight", 0, h),)
        out[ours + "feed_forward.fc1.weight"] = (
            ExportSlice(theirs + "mlp.gate_proj.weight", 0, f),
            ExportSlice(theirs + "mlp.up_proj.weight", f, 2 * f),
        )
        out[ours + "feed_forward.fc2.weight"] = (ExportSlice(theirs + "mlp.down_proj.weight", 0, h),)
    return out


# ---------------------------------------------------------------------------
# Hugging Face config.json

HF_CONFIG_KEYS: Mapping[str, str] = MappingProxyType(
    {
        "num_hidden_layers": "num_layers",
        "hidden_size": "hidden_size",
        "num_attention_heads": "num_heads",
        "num_key_value_heads": "num_kv_heads",
        "intermediate_size": "ffn_hidden_size",
        "vocab_size": "vocab_size",
        "rope_theta": "rope_base",
        "tie_word_embeddings": "tied_embeddings",
        "rms_norm_eps": "norm_eps",
    }
)
"""Hugging Face ``LlamaConfig`` key -> shape field. Absent optional keys take ``LlamaConfig``'s defaults
(:data:`HF_DEFAULTS`), as ``transformers`` would load the file."""

HF_DEFAULTS: Mapping[str, Any] = MappingProxyType(
    {"rope_theta": 10000.0, "tie_word_embeddings": False, "rms_norm_eps": 1e-6}
)
"""``transformers.LlamaConfig``'s defaults of the optional keys (``num_key_value_heads`` defaults to
``num_attention_heads``)."""

HF_REQUIRED_VALUES: Mapping[str, Any] = MappingProxyType(
    {
        "model_type": HF_MODEL_TYPE,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "rope_scaling": None,
        "attention_dropout": 0.0,
        "pretraining_tp": 1,
    }
)
"""Keys whose only accepted value is this one (absent is that value, but ``model_type`` is required):
another activation, biases, RoPE scaling (Llama 3.1's ``rope_type: llama3``, not implemented by the
trainer's blocks) or attention dropout is refused with the key named."""

HF_IGNORED_KEYS: frozenset[str] = frozenset(
    {
        "architectures", "bos_token_id", "eos_token_id", "pad_token_id", "max_position_embeddings",
        "initializer_range", "torch_dtype", "dtype", "transformers_version", "use_cache", "_name_or_path",
        "platform",
    }
)  # fmt: skip
"""Keys that do not change the model's math (token ids, the inference cache, the dtype it was saved in,
the initialisation, the longest position it was trained for, and ``platform``: what this platform's model
export records beside the configuration): read as information only."""


def from_hf_config(config: Mapping[str, Any]) -> LlamaShape:
    """A Hugging Face ``LlamaForCausalLM`` ``config.json`` (as a mapping) as a custom shape named ``"llama"``.

    ``head_dim``, when present, must be ``hidden_size / num_attention_heads``.

    Raises:
        FieldError: naming the key refused (its field is the ``config.json`` key): not a JSON object, a
            missing or malformed size, a value of :data:`HF_REQUIRED_VALUES` other than the one accepted,
            an unknown key, or a shape the family's structure refuses (the key that sets the field).
    """
    _check_hf_keys(config)
    values: dict[str, Any] = {}
    for key, field_name in HF_CONFIG_KEYS.items():
        if key in config and config[key] is not None:
            values[field_name] = config[key]
        elif key in HF_DEFAULTS:
            values[field_name] = HF_DEFAULTS[key]
        elif key == "num_key_value_heads":
            values[field_name] = config.get("num_attention_heads")
        else:
            raise FieldError(key, None, "an integer (required in a Llama config.json)")
    for key in ("rope_theta", "rms_norm_eps"):
        field_name = HF_CONFIG_KEYS[key]
        if isinstance(values[field_name], int) and not isinstance(values[field_name], bool):
            values[field_name] = float(values[field_name])
    inverse = {field_name: key for key, field_name in HF_CONFIG_KEYS.items()}
    try:
        shape = LlamaShape(FAMILY_NAME, **values)
    except FieldError as error:
        raise FieldError(inverse.get(error.field, error.field), error.value, error.expected) from None
    head_dim = config.get("head_dim")
    if head_dim is not None and head_dim != shape.head_dim:
        raise FieldError(
            "head_dim",
            head_dim,
            f"absent or hidden_size / num_attention_heads ({shape.head_dim}): the blocks derive it",
        )
    return shape


def _check_hf_keys(config: Any) -> None:
    """A :class:`FieldError` naming the key unless ``config`` is a JSON object of known keys with
    ``model_type``, :data:`HF_REQUIRED_VALUES` and, if it has ``architectures``, ``LlamaForCausalLM`` there."""
    if not isinstance(config, Mapping):
        raise FieldError("model_config", type(config).__name__, "a JSON object (a Hugging Face config.json)")
    known = {*HF_CONFIG_KEYS, *HF_REQUIRED_VALUES, "head_dim", *HF_IGNORED_KEYS}
    for key in config:
        if not isinstance(key, str) or key not in known:
            raise FieldError(
                str(key),
                config[key],
                "no such key: a Llama config.json the trainer implements has only " + ", ".join(sorted(known)),
            )
    if "model_type" not in config:
        raise FieldError("model_type", None, f"{HF_MODEL_TYPE!r} (a Llama config.json names its model_type)")
    for key, accepted in HF_REQUIRED_VALUES.items():
        value = config.get(key, accepted)
        if value != accepted or (type(value) is not type(accepted) and not _same_number(value, accepted)):
            why = {
                "rope_scaling": "absent or null: RoPE scaling (Llama 3.1's rope_type 'llama3') is not implemented "
                "by the trainer's blocks",
                "hidden_act": "'silu' (SwiGLU)",
                "attention_bias": "false: the family's blocks have no biases",
                "mlp_bias": "false: the family's blocks have no biases",
                "attention_dropout": "0.0: the trainer's blocks have no dropout",
                "pretraining_tp": "1",
                "model_type": f"{HF_MODEL_TYPE!r}",
            }[key]
            raise FieldError(key, value, why)
    architectures = config.get("architectures", [HF_ARCHITECTURE])
    if not isinstance(architectures, list) or HF_ARCHITECTURE not in architectures:
        raise FieldError("architectures", architectures, f"absent or a list naming {HF_ARCHITECTURE}")


def _same_number(value: Any, accepted: Any) -> bool:
    """``0`` for ``0.0`` and the like (JSON does not keep the difference); never a boolean for a number."""
    numbers = (int, float)
    return (
        isinstance(value, numbers)
        and isinstance(accepted, numbers)
        and not isinstance(value, bool)
        and not isinstance(accepted, bool)
        and value == accepted
    )


def to_hf_config(model: LlamaShape) -> dict[str, Any]:
    """``model`` as a Hugging Face ``LlamaForCausalLM`` ``config.json`` (architecture keys; the export adds
    the dtype and the training context). :func:`from_hf_config` of it gives back the shape (named ``llama``)."""
    return {
        "architectures": [HF_ARCHITECTURE],
        "model_type": HF_MODEL_TYPE,
        "num_hidden_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "num_attention_heads": model.num_heads,
        "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.head_dim,
        "intermediate_size": model.ffn_hidden_size,
        "vocab_size": model.vocab_size,
        "rope_theta": float(model.rope_base),
        "rope_scaling": None,
        "rms_norm_eps": float(model.norm_eps),
        "tie_word_embeddings": model.tied_embeddings,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "initializer_range": INIT_STD,
    }


FAMILY_NAME = "llama"

FAMILY = register_family(
    ModelFamily(
        name=FAMILY_NAME,
        shape_type=LlamaShape,
        presets=PRESETS,
        flops_per_token=flops_per_token,
        description="Llama-style decoder: RMSNorm, SwiGLU, grouped-query attention, RoPE, no biases, optional tied "
        "embeddings (Llama 3 8B and 70B shapes)",
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
        export_format=FAMILY_NAME,
        validate_shape=validate_shape,
        from_hf_config=from_hf_config,
        hf_model_types=(HF_MODEL_TYPE,),
        to_hf_config=to_hf_config,
        export_layout=export_layout,
    )
)
"""The Llama family's registry record, registered when this module is imported (``model_families/__init__.py``
imports it)."""

__all__ = [
    "ACTIVATION",
    "FAMILY",
    "FAMILY_NAME",
    "HF_ARCHITECTURE",
    "HF_CONFIG_KEYS",
    "HF_DEFAULTS",
    "HF_IGNORED_KEYS",
    "HF_MODEL_TYPE",
    "HF_REQUIRED_VALUES",
    "INIT_STD",
    "KERNELS_PER_BLOCK",
    "NORM_EPS",
    "PRESETS",
    "ROPE_BASE",
    "TE_PARAMETER_NAMES",
    "LlamaShape",
    "attention_flops_per_token",
    "block_activation_terms",
    "block_backward_transient_bytes_per_token",
    "block_elementwise_bytes_per_token",
    "check_structure",
    "export_layout",
    "flops_per_token",
    "from_hf_config",
    "init_rule",
    "matmul_params",
    "matmul_weights_per_block",
    "preset_table",
    "residual_init_std",
    "to_hf_config",
    "validate_shape",
]
