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
:func:`from_hf_config` maps a configuration of a dense architecture of
:data:`HF_ARCHITECTURES` (``model_type`` ``llama``: Llama 2 to 3.3;
``mistral``, its ``sliding_window`` a shape field that must be at least the run's ``seq_length``;
``qwen2``: Qwen2/2.5, Q/K/V biases;
``qwen3``: per-head Q/K RMSNorm, its own ``head_dim``), in the transformers 4
form (``rope_theta``, ``rope_scaling``) or the transformers 5 form
(``rope_parameters``), to a shape, and :func:`to_hf_config` writes one (the
export's ``config.json``); see :data:`HF_CONFIG_KEYS` for the keys and what each
maps to, and :data:`HF_IGNORED_KEYS` for the keys read as information only.
RoPE is plain or Llama 3.1's ``llama3`` frequency scaling (:class:`RopeScaling`).
Anything else (Qwen's sliding windows, MoE keys, another RoPE type, biases
elsewhere, another activation, an unknown key) is refused with the key named.

A Mistral ``sliding_window`` ``w`` (transformers' default is 4096) lets each query see itself and the
``w - 1`` keys before it (transformers' ``sliding_window_overlay`` of ``masking_utils.py`` keeps
``kv_idx > q_idx - w``). Within a sequence of ``s <= w`` tokens that is every earlier key: full causal
attention, which the blocks compute, exactly. :func:`validate_shape` with the run's ``seq_length`` refuses
``s > w``, naming ``sliding_window``, its value and the sequence length.

Options for those architectures (shape fields, all off for Llama 3): ``head_dim``
(Q is ``q = n * d`` wide, ``h`` unless set otherwise: the per-block count has
``2hq`` for Q and O), ``qkv_bias`` (``q + 2k`` more parameters per block) and
``qk_norm`` (``2d``); the planner's terms use ``q`` where the attention width is
meant.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from platform_spec import models, precisions
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


@dataclass(frozen=True)
class RopeScaling:
    """Llama 3.1's ``rope_type: llama3`` frequency scaling (``_compute_llama3_parameters`` of transformers'
    ``modeling_rope_utils.py``; Meta's ``apply_scaling`` in llama-models): with ``w = 2 pi / inv_freq``, a pair
    whose wavelength is longer than ``original_max_positions / low_freq_factor`` turns ``factor`` times slower,
    one shorter than ``original_max_positions / high_freq_factor`` is kept, and between them the inverse
    frequency is interpolated, ``(1 - t) inv_freq / factor + t inv_freq`` with
    ``t = (original_max_positions / w - low_freq_factor) / (high_freq_factor - low_freq_factor)``."""

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_positions: int


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
        head_dim: head size ``d``; ``None``: ``hidden_size / num_heads`` (Qwen3 and Mistral-Nemo set another).
        qkv_bias: the Q, K and V projections have biases (Qwen2/2.5; the output projection never has one).
        qk_norm: an RMSNorm over each query and key head (``d`` weights each, eps ``norm_eps``) before RoPE
            (Qwen3).
        rope_scaling_factor: the ``llama3`` frequency scaling's ``factor`` (Llama 3.1 8.0, Llama 3.2 32.0);
            ``None``: no scaling. The four ``rope_*`` scaling fields are all set or all ``None``.
        rope_low_freq_factor: its ``low_freq_factor`` (1.0 in Llama 3.1 to 3.3).
        rope_high_freq_factor: its ``high_freq_factor`` (4.0), greater than ``rope_low_freq_factor``.
        rope_original_max_positions: its ``original_max_position_embeddings``, the pretraining context the
            wavelengths are measured against (8192).
        sliding_window: Mistral's attention window ``w`` in tokens (each query sees itself and ``w - 1`` keys
            before it); ``None``: full causal attention. The blocks compute full causal attention, exact for
            sequences of at most ``w`` tokens: :func:`validate_shape` refuses a longer ``seq_length``.

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
    head_dim: int | None = None
    qkv_bias: bool = False
    qk_norm: bool = False
    rope_scaling_factor: float | None = None
    rope_low_freq_factor: float | None = None
    rope_high_freq_factor: float | None = None
    rope_original_max_positions: int | None = None
    sliding_window: int | None = None

    def __post_init__(self) -> None:
        check_structure(self)

    @property
    def head_size(self) -> int:
        """Head size ``d``: ``head_dim`` where set, else ``h / n``."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_heads

    @property
    def q_size(self) -> int:
        """Width of Q and of the attention output: ``n * d`` (``h`` unless ``head_dim`` says otherwise)."""
        return self.num_heads * self.head_size

    @property
    def kv_size(self) -> int:
        """Width of K and of V: ``k = num_kv_heads * d``."""
        return self.num_kv_heads * self.head_size

    @property
    def rope_scaling(self) -> RopeScaling | None:
        """The ``llama3`` frequency scaling of the rotary embedding, or ``None`` (plain RoPE)."""
        if self.rope_scaling_factor is None:
            return None
        return RopeScaling(
            factor=float(self.rope_scaling_factor),
            low_freq_factor=float(self.rope_low_freq_factor),  # type: ignore[arg-type]
            high_freq_factor=float(self.rope_high_freq_factor),  # type: ignore[arg-type]
            original_max_positions=int(self.rope_original_max_positions),  # type: ignore[arg-type]
        )

    @property
    def params_per_block(self) -> int:
        """Parameters in one block: ``2hq + 2hk + 3hf + 2h`` (``q = n * d``), plus the Q/K/V biases
        ``q + 2k`` (``qkv_bias``) and the per-head query and key RMSNorm weights ``2d`` (``qk_norm``)
        (module docstring)."""
        h, q, k, f = self.hidden_size, self.q_size, self.kv_size, self.ffn_hidden_size
        bias = q + 2 * k if self.qkv_bias else 0
        norms = 2 * self.head_size if self.qk_norm else 0
        return 2 * h * q + 2 * h * k + 3 * h * f + 2 * h + bias + norms

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
    if shape.head_dim is not None:
        d = shape.head_dim
        if isinstance(d, bool) or not isinstance(d, int) or d < 2 or d % 2:
            raise FieldError("head_dim", d, "an even integer >= 2 (RoPE rotates pairs of dimensions), or unset")
    elif h % n:
        raise FieldError(
            "num_heads", n, f"a divisor of hidden_size ({h}): the head size hidden_size / num_heads is an integer"
        )
    elif (h // n) % 2:
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
    for name in ("tied_embeddings", "qkv_bias", "qk_norm"):
        if not isinstance(getattr(shape, name), bool):
            raise FieldError(name, getattr(shape, name), "true or false")
    if shape.qkv_bias and shape.qk_norm:
        raise FieldError(
            "qk_norm",
            True,
            "false with qkv_bias: no published architecture has both (Qwen2 the biases, Qwen3 the norms)",
        )
    _check_rope_scaling(shape)
    window = shape.sliding_window
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise FieldError("sliding_window", window, "an integer >= 1 (tokens a query attends to), or unset")


_ROPE_SCALING_FIELDS = (
    "rope_scaling_factor", "rope_low_freq_factor", "rope_high_freq_factor", "rope_original_max_positions",
)  # fmt: skip


def _check_rope_scaling(shape: LlamaShape) -> None:
    """The four ``rope_*`` scaling fields: all ``None``, or a ``factor >= 1``, ``0 < low < high`` and a positive
    integer ``original_max_positions`` (the ranges transformers' ``_validate_llama3_rope_parameters`` warns
    outside of)."""
    values = {name: getattr(shape, name) for name in _ROPE_SCALING_FIELDS}
    if all(value is None for value in values.values()):
        return
    for name, value in values.items():
        if value is None:
            raise FieldError(name, None, "a value: the llama3 RoPE scaling needs all of " + ", ".join(values))
    factor, low, high, original = values.values()
    if not _real(factor) or factor < 1:
        raise FieldError("rope_scaling_factor", factor, "a finite number >= 1 (llama3 RoPE scaling's factor, e.g. 8.0)")
    if not _real(low) or low <= 0:
        raise FieldError("rope_low_freq_factor", low, "a finite number > 0 (llama3 RoPE scaling, e.g. 1.0)")
    if not _real(high) or high <= low:
        raise FieldError("rope_high_freq_factor", high, f"a finite number > rope_low_freq_factor ({low}), e.g. 4.0")
    if isinstance(original, bool) or not isinstance(original, int) or original < 1:
        raise FieldError("rope_original_max_positions", original, "an integer >= 1 (e.g. 8192)")


def _real(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


TE_UNBUILT_FIELDS: tuple[str, ...] = ("qkv_bias", "qk_norm")
"""The shape fields the TransformerEngine blocks (:mod:`model_families.llama.te_block`) do not build, read
against the trainer image's TransformerEngine (``transformer_engine/pytorch`` on branch ``release_v2.19``):
``TransformerLayer``'s one ``bias`` flag biases every projection (QKV, output, FC1, FC2), never Q/K/V alone;
its ``qk_norm_type="RMSNorm"`` with ``qk_norm_before_rope=True`` is Qwen3's per-head norm, but the blocks do
not use it yet (not yet checked on a GPU). Such shapes train on the torch-native blocks, in bf16 or fp32."""

TE_UNBUILT_REASON = "the TransformerEngine blocks build no Q/K/V-only biases and no per-head Q/K norms"
"""Why a :data:`TE_UNBUILT_FIELDS` shape cannot use them, for error messages."""


def te_unbuilt(shape: LlamaShape) -> str | None:
    """The first of :data:`TE_UNBUILT_FIELDS` set on ``shape`` (Qwen2's Q/K/V biases, Qwen3's per-head Q/K
    RMSNorms); ``None`` when the TransformerEngine blocks build the shape. The family's
    :attr:`~platform_spec.models.ModelFamily.te_unbuilt`: the trainer then builds the torch-native blocks."""
    return next((name for name in TE_UNBUILT_FIELDS if getattr(shape, name)), None)


def validate_shape(shape: LlamaShape, *, precision: str | None = None, seq_length: int | None = None) -> None:
    """The family's one shape rule: :func:`check_structure`, and with ``precision`` the GEMM multiples of
    the precision registry on ``hidden_size``, ``ffn_hidden_size``, ``num_heads * head size`` and
    ``num_kv_heads * head size``, and for a TransformerEngine precision (fp8, mxfp8, nvfp4) a shape the
    TransformerEngine blocks build (:func:`te_unbuilt`: no ``qkv_bias``, no ``qk_norm``); with ``seq_length``
    (tokens per sequence) a ``sliding_window`` of at least that many tokens (the window never binds; module
    docstring).

    Raises:
        FieldError: naming the field (``precision``: unknown precision; ``sliding_window``: shorter than
            ``seq_length``, both named).
    """
    check_structure(shape)
    window = shape.sliding_window
    if window is not None and seq_length is not None and seq_length > window:
        raise FieldError(
            "sliding_window",
            window,
            f"at least seq_length ({seq_length}): the blocks compute full causal attention, which is a "
            f"{window}-token sliding window only for sequences of at most {window} tokens (shorten seq_length "
            f"to {window} or less)",
        )
    unbuilt = te_unbuilt(shape)
    if unbuilt is not None and precision is not None and precisions.get_precision(precision).uses_te:
        raise FieldError(
            unbuilt,
            True,
            f"false with precision {precision}: its recipes run in the TransformerEngine blocks, and "
            f"{TE_UNBUILT_REASON} (train this shape in bf16 or fp32, on the torch-native blocks)",
        )
    check_gemm_dimensions(
        {
            "hidden_size": (shape.hidden_size, shape.hidden_size, "hidden_size"),
            "ffn_hidden_size": (shape.ffn_hidden_size, shape.ffn_hidden_size, "ffn_hidden_size"),
            "num_heads": (shape.num_heads, shape.q_size, "the query width num_heads * head size"),
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
    return models.attention_flops_per_token(model.num_layers, model.q_size, seq_length, causal=causal)


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
        attention_width=model.q_size,
        include_embedding=include_embedding,
        causal=causal,
    )


# ---------------------------------------------------------------------------
# The planner's per-block terms (module docstring)


def matmul_weights_per_block(model: LlamaShape) -> int:
    """``W = 2hq + 2hk + 3hf`` (``q = n * d``, ``h`` unless ``head_dim`` differs): the weights one block's GEMMs
    read (Q, K, V, O, gate, up, down)."""
    h, q, k, f = model.hidden_size, model.q_size, model.kv_size, model.ffn_hidden_size
    return 2 * h * q + 2 * h * k + 3 * h * f


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
    h, k, f, n, w = model.hidden_size, model.kv_size, model.ffn_hidden_size, model.num_heads, model.q_size
    a, q = activation_bytes, quantized_bytes
    gemm_in = q if q is not None else a
    mlp_in = gemm_in if q is None or quantized_copy_bytes is None else quantized_copy_bytes
    return {
        "norm1_input": a * h,
        "qkv_gemm_input": gemm_in * h,
        "q_k_v": a * (w + 2 * k),
        "attention_output": a * w,
        "softmax_lse": 4.0 * n,
        "proj_gemm_input": (q * w) if q is not None else 0.0,
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
    fwd = 4 * a * h + 2 * (3 * a + mask) * h + 3 * a * f + 2 * a * (model.q_size + k)
    bwd = 2 * fwd
    if q is not None:
        fwd += (a + 2 * q) * (3 * h + f)
        bwd += (a + 2 * q) * (3 * h + 2 * k + 2 * f)
    return fwd, bwd


# ---------------------------------------------------------------------------
# Parameters: canonical names, initialisation, export

BLOCK_PARAMETER_NAMES: tuple[str, ...] = (
    "attention_norm.weight", "attention.qkv.weight", "attention.qkv.bias", "attention.q_norm.weight",
    "attention.k_norm.weight", "attention.proj.weight", "ffn_norm.weight", "feed_forward.fc1.weight",
    "feed_forward.fc2.weight",
)  # fmt: skip
"""The canonical names of a block's parameters (the torch-native block's; ``attention.qkv.bias`` with
``qkv_bias``, ``attention.q_norm.weight`` and ``attention.k_norm.weight`` with ``qk_norm``)."""

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
"""TransformerEngine block parameter names -> canonical names (the image's TE: ``LayerNormLinear`` registers
``layer_norm_weight`` and, unsplit, ``weight``; ``LayerNormMLP`` ``layer_norm_weight``, ``fc1_weight``,
``fc2_weight``; RMSNorm has no ``layer_norm_bias`` and ``bias=False`` registers no biases)."""

_NORMS = ("norm", "attention_norm", "ffn_norm", "q_norm", "k_norm")
_RESIDUAL_OUTPUTS = ("proj", "fc2")


def residual_init_std(model: LlamaShape) -> float:
    """``INIT_STD / sqrt(2 L)``: the residual output projections' initial standard deviation."""
    return INIT_STD / math.sqrt(2.0 * model.num_layers)


def init_rule(canonical: str, model: LlamaShape) -> str | float:
    """How the trainer initialises the parameter called ``canonical``: RMSNorm weights (the per-head query
    and key norms too) ``"ones"``, biases ``"zeros"``, the residual output projections (attention ``proj``,
    ``fc2``) N(0, :func:`residual_init_std`), every other weight (token embedding -- the LM head too when
    tied --, LM head, QKV, gate/up) N(0, 0.02)."""
    if canonical.endswith(".bias"):
        return "zeros"
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
    h, w, k, f = model.hidden_size, model.q_size, model.kv_size, model.ffn_hidden_size
    out: dict[str, tuple[ExportSlice, ...]] = {
        "tok_embeddings.weight": (ExportSlice("model.embed_tokens.weight", 0, model.vocab_size),),
        "norm.weight": (ExportSlice("model.norm.weight", 0, h),),
        "output.weight": () if model.tied_embeddings else (ExportSlice("lm_head.weight", 0, model.vocab_size),),
    }
    for i in range(model.num_layers):
        ours, theirs = f"layers.{i}.", f"model.layers.{i}."
        out[ours + "attention_norm.weight"] = (ExportSlice(theirs + "input_layernorm.weight", 0, h),)
        for kind in ("weight", "bias") if model.qkv_bias else ("weight",):
            out[ours + "attention.qkv." + kind] = (
                ExportSlice(theirs + "self_attn.q_proj." + kind, 0, w),
                ExportSlice(theirs + "self_attn.k_proj." + kind, w, w + k),
                ExportSlice(theirs + "self_attn.v_proj." + kind, w + k, w + 2 * k),
            )
        if model.qk_norm:
            d = model.head_size
            out[ours + "attention.q_norm.weight"] = (ExportSlice(theirs + "self_attn.q_norm.weight", 0, d),)
            out[ours + "attention.k_norm.weight"] = (ExportSlice(theirs + "self_attn.k_norm.weight", 0, d),)
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
        "tie_word_embeddings": "tied_embeddings",
        "rms_norm_eps": "norm_eps",
        "head_dim": "head_dim",
    }
)
"""Hugging Face config key -> shape field, for every architecture of :data:`HF_ARCHITECTURES`. Absent
optional keys take the configuration class's defaults (:attr:`HfArchitecture.defaults`), as ``transformers``
would load the file. RoPE is read from either form (:data:`HF_ROPE_KEYS`)."""

HF_ROPE_KEYS = ("rope_theta", "rope_scaling", "rope_parameters")
"""The RoPE keys of the two forms: transformers 4 writes ``rope_theta`` and ``rope_scaling`` (``null`` or
``{"rope_type": "llama3", "factor", "low_freq_factor", "high_freq_factor",
"original_max_position_embeddings"}``), transformers 5 one ``rope_parameters`` object holding ``rope_theta``
and ``rope_type`` (``"default"`` or ``"llama3"`` with the same four keys)
(``RotaryEmbeddingConfigMixin.convert_rope_params_to_dict`` of ``modeling_rope_utils.py``, transformers 5.18)."""

HF_ROPE_THETA_DEFAULT = 10000.0
"""``RotaryEmbeddingConfigMixin.default_theta`` (transformers 5.18; every 4.x configuration class's
``rope_theta`` default): the base of a configuration that names none."""

_LLAMA3_KEYS = {
    "factor": "rope_scaling_factor",
    "low_freq_factor": "rope_low_freq_factor",
    "high_freq_factor": "rope_high_freq_factor",
    "original_max_position_embeddings": "rope_original_max_positions",
}
"""The ``llama3`` RoPE type's keys -> shape fields."""


@dataclass(frozen=True)
class HfArchitecture:
    """One Hugging Face architecture the family reads and writes.

    Attributes:
        model_type: its ``model_type``.
        architecture: its ``architectures`` class.
        required: ``{key: (the only accepted value, why)}``; absent is that value.
        defaults: the configuration class's defaults of the optional :data:`HF_CONFIG_KEYS` (transformers 5.18;
            ``num_key_value_heads`` ``None`` is ``num_attention_heads``, ``head_dim`` ``None`` the quotient).
        qkv_bias: the Q/K/V projections have biases (the shape's ``qkv_bias``).
        qk_norm: per-head query/key RMSNorm (the shape's ``qk_norm``).
        extra_keys: further keys read as information only (window settings that do not apply when off).
        sliding_window: the configuration's ``sliding_window`` is the shape's (Mistral; absent is
            ``defaults["sliding_window"]``).
    """

    model_type: str
    architecture: str
    required: Mapping[str, tuple[Any, str]]
    defaults: Mapping[str, Any]
    qkv_bias: bool = False
    qk_norm: bool = False
    extra_keys: frozenset[str] = frozenset()
    sliding_window: bool = False


_NO_BIAS = "false: the family's blocks have no biases on the {} (Qwen2's Q/K/V biases: model_type qwen2)"
_COMMON_REQUIRED: dict[str, tuple[Any, str]] = {
    "hidden_act": ("silu", "'silu' (SwiGLU)"),
    "attention_dropout": (0.0, "0.0: the trainer's blocks have no dropout"),
}
_QWEN_REQUIRED: dict[str, tuple[Any, str]] = {
    **_COMMON_REQUIRED,
    "use_sliding_window": (False, "false: sliding-window attention is not implemented by the trainer's blocks"),
}
_QWEN_KEYS = frozenset({"sliding_window", "max_window_layers", "layer_types"})

HF_ARCHITECTURES: Mapping[str, HfArchitecture] = MappingProxyType(
    {
        "llama": HfArchitecture(
            "llama",
            "LlamaForCausalLM",
            {
                **_COMMON_REQUIRED,
                "attention_bias": (False, _NO_BIAS.format("attention projections")),
                "mlp_bias": (False, _NO_BIAS.format("MLP")),
                "pretraining_tp": (1, "1"),
            },
            {"tie_word_embeddings": False, "rms_norm_eps": 1e-6, "num_key_value_heads": None, "head_dim": None},
        ),
        "mistral": HfArchitecture(
            "mistral",
            "MistralForCausalLM",
            _COMMON_REQUIRED,
            {
                "tie_word_embeddings": False,
                "rms_norm_eps": 1e-6,
                "num_key_value_heads": 8,
                "head_dim": None,
                "sliding_window": 4096,
            },
            sliding_window=True,
        ),
        "qwen2": HfArchitecture(
            "qwen2",
            "Qwen2ForCausalLM",
            _QWEN_REQUIRED,
            {"tie_word_embeddings": False, "rms_norm_eps": 1e-6, "num_key_value_heads": 32, "head_dim": None},
            qkv_bias=True,
            extra_keys=_QWEN_KEYS,
        ),
        "qwen3": HfArchitecture(
            "qwen3",
            "Qwen3ForCausalLM",
            {**_QWEN_REQUIRED, "attention_bias": (False, _NO_BIAS.format("attention projections"))},
            {"tie_word_embeddings": False, "rms_norm_eps": 1e-6, "num_key_value_heads": 32, "head_dim": 128},
            qk_norm=True,
            extra_keys=_QWEN_KEYS,
        ),
    }
)
"""The dense Llama-family architectures of transformers whose math the family's blocks compute, by
``model_type``: Llama (2, 3, 3.1, 3.2, 3.3), Mistral (v0.2 and later, Nemo: no window; v0.1 and
transformers' default: a window of at least the sequence length),
Qwen2/2.5 (Q/K/V biases) and Qwen3 (per-head Q/K RMSNorm). Any other ``model_type`` (MoE, sliding windows,
other attention) is refused naming it."""

HF_MODEL_TYPES: tuple[str, ...] = tuple(HF_ARCHITECTURES)
"""The ``model_type`` values :func:`from_hf_config` reads."""

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
    """A Hugging Face ``config.json`` (as a mapping) of an architecture of :data:`HF_ARCHITECTURES`, in
    the transformers 4 form (``rope_theta``, ``rope_scaling``) or the transformers 5 form
    (``rope_parameters``), as a custom shape named ``"llama"``.

    Raises:
        FieldError: naming the key refused (its field is the ``config.json`` key, ``rope_parameters.<key>``
            inside the RoPE object): not a JSON object, an unknown ``model_type``, a missing or malformed
            size, a value of the architecture's :attr:`HfArchitecture.required` other than the one accepted
            (sliding windows, biases, dropout, another activation), a RoPE type other than ``default`` and
            ``llama3``, an unknown key, or a shape the family's structure refuses (the key that sets the field).
    """
    arch = _check_hf_keys(config)
    values: dict[str, Any] = {}
    for key, field_name in HF_CONFIG_KEYS.items():
        if key in config and config[key] is not None:
            values[field_name] = config[key]
        elif key in arch.defaults:
            values[field_name] = arch.defaults[key]
        else:
            raise FieldError(key, None, f"an integer (required in a {arch.model_type} config.json)")
    if values["num_kv_heads"] is None:
        values["num_kv_heads"] = values["num_heads"]
    if arch.sliding_window:
        values["sliding_window"] = config.get("sliding_window", arch.defaults["sliding_window"])
    if isinstance(values["norm_eps"], int) and not isinstance(values["norm_eps"], bool):
        values["norm_eps"] = float(values["norm_eps"])
    values.update(_rope_fields(config))
    h, n, d = values["hidden_size"], values["num_heads"], values["head_dim"]
    if _is_int(h) and _is_int(n) and n > 0 and h % n == 0 and d == h // n:
        values["head_dim"] = None  # the quotient: the shape derives it
    inverse = {field_name: key for key, field_name in HF_CONFIG_KEYS.items()}
    if config.get("rope_parameters") is not None:
        inverse.update({"rope_base": "rope_parameters.rope_theta"})
        inverse.update({f: f"rope_parameters.{k}" for k, f in _LLAMA3_KEYS.items()})
    else:
        inverse.update({"rope_base": "rope_theta", **{f: f"rope_scaling.{k}" for k, f in _LLAMA3_KEYS.items()}})
    try:
        return LlamaShape(FAMILY_NAME, **values, qkv_bias=arch.qkv_bias, qk_norm=arch.qk_norm)
    except FieldError as error:
        raise FieldError(inverse.get(error.field, error.field), error.value, error.expected) from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rope_fields(config: Mapping[str, Any]) -> dict[str, Any]:
    """The shape's ``rope_base`` and ``llama3`` scaling fields from either RoPE form (:data:`HF_ROPE_KEYS`).

    Raises:
        FieldError: both forms at once, a RoPE object that is not one, another ``rope_type``, a key the type
            does not have, or a ``partial_rotary_factor`` other than 1.
    """
    parameters = config.get("rope_parameters")
    if parameters is not None:
        for old in ("rope_theta", "rope_scaling"):
            if config.get(old) is not None:
                raise FieldError(
                    old,
                    config[old],
                    "absent with rope_parameters: a config.json has the transformers 4 form (rope_theta, "
                    "rope_scaling) or the transformers 5 form (rope_parameters), not both",
                )
        where, rope, theta = "rope_parameters", parameters, None
    else:
        where, rope, theta = "rope_scaling", config.get("rope_scaling") or {}, config.get("rope_theta")
    if not isinstance(rope, Mapping):
        raise FieldError(where, rope, "a JSON object (RoPE parameters) or null")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", "llama3"):
        raise FieldError(
            f"{where}.rope_type",
            rope_type,
            "'default' or 'llama3': the trainer's rotary embedding implements no other RoPE type",
        )
    allowed = {"rope_type", "type", "partial_rotary_factor"} | ({"rope_theta"} if where == "rope_parameters" else set())
    if rope_type == "llama3":
        allowed |= set(_LLAMA3_KEYS)
    for key in rope:
        if key not in allowed:
            raise FieldError(
                f"{where}.{key}", rope[key], f"no such key for rope_type {rope_type!r}: " + ", ".join(sorted(allowed))
            )
    partial = rope.get("partial_rotary_factor", 1.0)
    if partial != 1.0 or isinstance(partial, bool):
        raise FieldError(f"{where}.partial_rotary_factor", partial, "1.0: the blocks rotate the whole head")
    if where == "rope_parameters":
        theta = rope.get("rope_theta")
    base = HF_ROPE_THETA_DEFAULT if theta is None else theta
    out: dict[str, Any] = {"rope_base": float(base) if _is_int(base) else base}
    if rope_type == "llama3":
        for key, field_name in _LLAMA3_KEYS.items():
            value = rope.get(key)
            if value is None and key == "original_max_position_embeddings":
                value = config.get("max_position_embeddings")  # transformers' standardize_rope_params fallback
            if value is None:
                raise FieldError(f"{where}.{key}", None, "a number (required by rope_type 'llama3')")
            out[field_name] = float(value) if _is_int(value) and key != "original_max_position_embeddings" else value
    return out


def _check_hf_keys(config: Any) -> HfArchitecture:
    """The architecture of ``config``, or a :class:`FieldError` naming the key unless ``config`` is a JSON
    object of known keys with a known ``model_type``, the architecture's required values and, if it has
    ``architectures``, its class there."""
    if not isinstance(config, Mapping):
        raise FieldError("model_config", type(config).__name__, "a JSON object (a Hugging Face config.json)")
    if "model_type" not in config:
        raise FieldError(
            "model_type", None, "one of " + ", ".join(HF_MODEL_TYPES) + " (a config.json names its model_type)"
        )
    arch = HF_ARCHITECTURES.get(config["model_type"])
    if arch is None:
        raise FieldError(
            "model_type",
            config["model_type"],
            "one of " + ", ".join(HF_MODEL_TYPES) + ": the dense architectures the trainer's blocks implement",
        )
    known = {*HF_CONFIG_KEYS, *HF_ROPE_KEYS, "model_type", *arch.required, *arch.extra_keys, *HF_IGNORED_KEYS}
    if arch.sliding_window:
        known.add("sliding_window")
    for key in config:
        if not isinstance(key, str) or key not in known:
            raise FieldError(
                str(key),
                config[key],
                f"no such key: a {arch.model_type} config.json the trainer implements has only "
                + ", ".join(sorted(known)),
            )
    for key, (accepted, why) in arch.required.items():
        value = config.get(key, accepted)
        if value != accepted or (type(value) is not type(accepted) and not _same_number(value, accepted)):
            raise FieldError(key, value, why)
    layer_types = config.get("layer_types")
    if layer_types is not None and (
        not isinstance(layer_types, list) or any(t != "full_attention" for t in layer_types)
    ):
        raise FieldError("layer_types", layer_types, "null or every layer 'full_attention' (no sliding windows)")
    architectures = config.get("architectures", [arch.architecture])
    if not isinstance(architectures, list) or arch.architecture not in architectures:
        raise FieldError("architectures", architectures, f"absent or a list naming {arch.architecture}")
    return arch


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


def hf_architecture(model: LlamaShape) -> HfArchitecture:
    """The architecture that computes ``model``: Qwen3 with per-head Q/K norms, Qwen2 with Q/K/V biases,
    Mistral with a sliding window, else Llama (which also computes a Mistral shape without one)."""
    if model.sliding_window is not None:
        return HF_ARCHITECTURES["mistral"]
    if model.qk_norm:
        return HF_ARCHITECTURES["qwen3"]
    if model.qkv_bias:
        return HF_ARCHITECTURES["qwen2"]
    return HF_ARCHITECTURES["llama"]


def to_hf_config(model: LlamaShape) -> dict[str, Any]:
    """``model`` as a Hugging Face ``config.json`` of :func:`hf_architecture` (architecture keys; the export
    adds the dtype and the training context), RoPE in the transformers 4 form (``rope_theta``,
    ``rope_scaling``), which transformers 4 and 5 both read (5 converts it to ``rope_parameters`` on load;
    4 would ignore ``rope_parameters`` and silently use its default base). :func:`from_hf_config` of it gives
    back the shape (named ``llama``)."""
    arch = hf_architecture(model)
    scaling = model.rope_scaling
    rope_scaling = (
        None
        if scaling is None
        else {
            "rope_type": "llama3",
            "factor": scaling.factor,
            "low_freq_factor": scaling.low_freq_factor,
            "high_freq_factor": scaling.high_freq_factor,
            "original_max_position_embeddings": scaling.original_max_positions,
        }
    )
    return {
        "architectures": [arch.architecture],
        "model_type": arch.model_type,
        "num_hidden_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "num_attention_heads": model.num_heads,
        "num_key_value_heads": model.num_kv_heads,
        "head_dim": model.head_size,
        "intermediate_size": model.ffn_hidden_size,
        "vocab_size": model.vocab_size,
        "rope_theta": float(model.rope_base),
        "rope_scaling": rope_scaling,
        "rms_norm_eps": float(model.norm_eps),
        "tie_word_embeddings": model.tied_embeddings,
        **{key: accepted for key, (accepted, _) in arch.required.items()},
        **({"sliding_window": model.sliding_window} if arch.sliding_window else {}),
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
        te_unbuilt=te_unbuilt,
        parameter_names=MappingProxyType(
            {"torch": MappingProxyType({n: n for n in BLOCK_PARAMETER_NAMES}), "te": TE_PARAMETER_NAMES}
        ),
        init_rule=init_rule,
        export_format=FAMILY_NAME,
        validate_shape=validate_shape,
        from_hf_config=from_hf_config,
        hf_model_types=HF_MODEL_TYPES,
        to_hf_config=to_hf_config,
        export_layout=export_layout,
    )
)
"""The Llama family's registry record, registered when this module is imported (``model_families/__init__.py``
imports it)."""

__all__ = [
    "ACTIVATION",
    "BLOCK_PARAMETER_NAMES",
    "FAMILY",
    "FAMILY_NAME",
    "HF_ARCHITECTURES",
    "HF_CONFIG_KEYS",
    "HF_IGNORED_KEYS",
    "HF_MODEL_TYPES",
    "HF_ROPE_KEYS",
    "HF_ROPE_THETA_DEFAULT",
    "INIT_STD",
    "KERNELS_PER_BLOCK",
    "NORM_EPS",
    "PRESETS",
    "ROPE_BASE",
    "TE_PARAMETER_NAMES",
    "TE_UNBUILT_FIELDS",
    "TE_UNBUILT_REASON",
    "HfArchitecture",
    "LlamaShape",
    "RopeScaling",
    "attention_flops_per_token",
    "block_activation_terms",
    "block_backward_transient_bytes_per_token",
    "block_elementwise_bytes_per_token",
    "check_structure",
    "export_layout",
    "flops_per_token",
    "from_hf_config",
    "hf_architecture",
    "init_rule",
    "matmul_params",
    "matmul_weights_per_block",
    "preset_table",
    "residual_init_std",
    "te_unbuilt",
    "to_hf_config",
    "validate_shape",
]
