"""The training precisions: one :class:`Precision` record per numeric format, the one home of their facts.

Everything else derives from :data:`PRECISIONS`: the hyperparameter's allowed
values and the CPU path's (:mod:`platform_spec.hyperparameters`), which GPU
runs which format and which dense peak is its MFU denominator
(:mod:`platform_spec.catalogue`), the planner's bytes per element and its
advice, the trainer's FSDP dtypes, TransformerEngine recipe and GEMM shape
check (``training/precision.py``), the submitter's and the sweeps' hardware
checks, and the reports' order and colours. Adding a format is one entry here
plus, where it is a TransformerEngine recipe, the recipe in the trainer image.

==========  =========  =========================  =====  ===================  ===  ======
precision   compute    TE recipe                  q (B)  dense peak           CPU  GEMM
==========  =========  =========================  =====  ===================  ===  ======
fp32        float32    --                         --     TF32 (``tf32``)      yes  --
bf16        bfloat16   --                         --     bf16                 yes  --
fp16        float16    -- (dynamic loss scaling)  --     fp16 (= bf16)        no   --
fp8         bfloat16   Float8CurrentScaling /     1      fp8                  no   16
                       DelayedScaling
mxfp8       bfloat16   MXFP8BlockScaling          33/32  fp8                  no   32
nvfp4       bfloat16   NVFP4BlockScaling          9/16   fp4                  no   32
==========  =========  =========================  =====  ===================  ===  ======

``q`` is the bytes one quantized element costs including its scales; for the
TransformerEngine formats ``compute`` is the dtype of the parameters FSDP2
gathers and of everything outside TE's quantized GEMMs (attention, the LM head).

The hardware rule (:meth:`Precision.supported_by`), one for the whole platform
-------------------------------------------------------------------------------
A GPU of compute capability ``cc`` runs a format when ``min_capability <= cc``
and, where a format has one, ``cc < below_capability``:

* fp8 (``Float8CurrentScaling``, ``DelayedScaling``): ``cc >= 8.9`` (Ada,
  Hopper, Blackwell): TransformerEngine's ``_compute_fp8_support`` ("Device
  compute capability 8.9 or higher required for FP8 execution").
* mxfp8: ``10.0 <= cc < 12.0``: TransformerEngine's ``_compute_mxfp8_support``
  ("Device compute capability 10.0 or higher required for MXFP8 execution";
  "MXFP8 (for all gemm layouts) is not supported on 12.0+ architectures yet").
* nvfp4: ``10.0 <= cc < 12.0``: TransformerEngine's ``_compute_nvfp4_support``
  accepts ``cc >= 10.0``, but its own FSDP2 tests skip 12.x ("NVFP4BlockScaling
  is failing on SM120 with hadamard_transform ... CUDA Error: invalid
  argument"), so 12.x (GeForce/workstation Blackwell) is not offered.
  Both rules are in ``transformer_engine/pytorch/quantization.py`` and
  ``tests/pytorch/distributed/test_torch_fsdp2.py`` of NVIDIA/TransformerEngine.
* bf16: ``cc >= 8.0``: below Ampere PyTorch only emulates bfloat16
  (``torch.cuda.is_bf16_supported(including_emulation=False)`` is
  ``get_device_properties().major >= 8``).
* fp32 and fp16 run on every GPU PyTorch supports (TF32 tensor cores, from 8.0,
  change only the speed: the catalogue's fp32 peak is TF32's).

This replaces two rules that disagreed for compute capability 11.x (the
catalogue's "block-scaled formats need ``cc`` 10.x" and the trainer's
``10.0 <= cc < 12.0``): TransformerEngine, which runs the formats, accepts 11.x
(Jetson Thor, ``sm_110``), so the platform does too.

Pure Python, standard library only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from platform_spec.errors import FieldError

__all__ = [
    "CPU_PRECISIONS",
    "PRECISIONS",
    "PRECISION_NAMES",
    "QUANTIZED_MODEL_INIT_PRECISIONS",
    "SCALED_PRECISIONS",
    "SCALINGS",
    "TE_FUSED_ATTENTION_DTYPES",
    "Precision",
    "TERecipe",
    "UnknownPrecisionError",
    "get_precision",
    "names_where",
    "recipe_scalings",
    "supported_names",
]

DTYPE_BYTES: Mapping[str, int] = MappingProxyType({"float32": 4, "bfloat16": 2, "float16": 2})
"""Bytes per element of the compute dtypes (``torch.<name>``)."""

TE_SOURCE = "NVIDIA/TransformerEngine transformer_engine/pytorch/quantization.py (_compute_*_support)"
TE_FSDP2_TESTS = (
    "NVIDIA/TransformerEngine tests/pytorch/distributed/test_torch_fsdp2.py (check_nvfp4_support skips SM120)"
)
TORCH_BF16 = "PyTorch torch/cuda/__init__.py is_bf16_supported: get_device_properties().major >= 8"
TE_LAYOUT = (
    "NVIDIA/TransformerEngine transformer_engine/pytorch/csrc/extensions/util.cpp non_tn_fp8_gemm_supported: "
    "major >= 10 (Blackwell tensor cores read fp8 in either layout; Hopper needs a transposed copy)"
)
TE_FSDP2_FUSED_ADAM_TESTS = (
    "NVIDIA/TransformerEngine release_v2.19 tests/pytorch/distributed/fsdp2_tests/run_fsdp2_fused_adam.py "
    "test_fused_adam_fp8_high_precision_init"
)
TE_STORED_USAGES = (
    "NVIDIA/TransformerEngine release_v2.19 transformer_engine/pytorch/module/base.py reset_parameters: a weight "
    "stored quantized is created with the quantizer's rowwise and (while autograd is on) columnwise usage"
)
OCP_MX = "OCP Microscaling Formats (MX) v1.0: 32-element blocks sharing one E8M0 (1-byte) scale"
NVIDIA_NVFP4 = (
    "NVIDIA technical blog 'Introducing NVFP4 for Efficient and Accurate Low-Precision Inference': "
    "E2M1 (4-bit) values in 16-element blocks with an E4M3 (1-byte) scale, plus one fp32 scale per tensor"
)


TE_FUSED_ATTENTION_DTYPES: tuple[str, ...] = ("bfloat16", "float16")
"""Compute dtypes (``torch.<name>``) for which TransformerEngine's ``DotProductAttention`` has a fused or
flash backend: TE's ``get_attention_backend`` disables FlashAttention 2/3/4 and FusedAttention for any other
``qkv_dtype`` ("Disabling FusedAttention for unsupported qkv_dtype ... Supported: qkv_dtype = {torch.bfloat16,
torch.float16, torch.float8_e4m3fn}"; fp8 attention is TE's own recipe, which the trainer does not use), leaving
``UnfusedDotProductAttention``, which materialises the ``[batch, heads, seq, seq]`` scores (NVIDIA/TransformerEngine
``transformer_engine/pytorch/attention/dot_product_attention/utils.py``, "Filter: Data type", the same in the
release_v2.10 and release_v2.19 branches). :attr:`Precision.te_blocks` reads it."""


class UnknownPrecisionError(FieldError):
    """A precision name that is not in :data:`PRECISIONS` (names the ones that are)."""

    def __init__(self, name: Any, *, field: str = "precision") -> None:
        super().__init__(field, name, "one of " + ", ".join(PRECISION_NAMES))


@dataclass(frozen=True)
class TERecipe:
    """A TransformerEngine recipe, by name: ``transformer_engine.common.recipe.<class_name>(**kwargs)``.

    Attributes:
        class_name: the recipe class (in the trainer image's TransformerEngine: :mod:`platform_spec.trainer_image`).
        kwargs: constructor arguments; a value naming a member of
            ``transformer_engine.common.recipe.Format`` is given as that member's
            name under the key ``fp8_format`` (e.g. ``"HYBRID"``: E4M3 forward,
            E5M2 backward).
        amax_reduction: the recipe reduces its amax history over a process group
            (``DelayedScaling``'s ``reduce_amax``, on by default in TE: "the amax
            value for FP8 tensors is reduced across the fp8_group specified in the
            autocast call"), so the trainer passes its data-parallel group to
            ``te.autocast`` as ``amax_reduction_group`` and every rank's scales agree.
    """

    class_name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    amax_reduction: bool = False


@dataclass(frozen=True)
class Precision:
    """One training precision (see the module docstring for the table and the hardware rule).

    Attributes:
        name: the hyperparameter value, e.g. ``"mxfp8"``.
        compute_dtype: ``torch`` dtype name FSDP2 gathers parameters in and the
            non-quantized work runs in (``"float32"``, ``"bfloat16"``, ``"float16"``).
        reduce_dtype: dtype of the gradient reduction (always ``"float32"`` here).
        te_recipes: TransformerEngine recipes by scaling name (the ``fp8_scaling``
            hyperparameter for fp8; one entry for the block-scaled formats); empty
            when the format is not a TE recipe.
        quantized_bytes: bytes per quantized element including its scales, or
            ``None`` when the format does not quantize (the planner's ``q``).
        block_scaled: scales per block of elements (mxfp8, nvfp4): a transposed
            copy needs its own scales, so TE always keeps rowwise and columnwise copies.
        dense_peak: the :class:`platform_spec.catalogue.GPUSpec` attribute that is
            this format's dense peak (the MFU denominator), e.g. ``"fp8_tflops"``.
        high_precision: the format TE leaves outside its quantized GEMMs in
            (fused attention, the LM head): ``"bf16"`` for the TE formats, else itself.
        min_capability: lowest CUDA compute capability that runs it.
        below_capability: compute capabilities from here on do not run it, or ``None``.
        capability_source: where :attr:`min_capability` / :attr:`below_capability` come from.
        hardware: the hardware rule in words, for messages.
        cpu: whether the trainer's torch-native CPU path runs it.
        loss_scaling: whether training needs dynamic loss scaling (fp16).
        gemm_multiple: TransformerEngine GEMMs need ``batch_size * seq_length``
            divisible by this, or ``None`` (no TE GEMM).
        autocast_dtype: ``torch.autocast`` dtype the format's forward runs under
            besides the TE recipe (nvfp4: ``"bfloat16"``, TE's NVFP4 kernels need
            bf16 activations), or ``None``.
        color: the format's colour in reports (matplotlib hex).
        quantized_model_init_refusal: why the trainer does not store this quantized format's block weights
            quantized (``quantized_model_init``) under FSDP2, naming the upstream statement; ``None`` where it
            does (fp8, mxfp8) and for a format that does not quantize (the hyperparameter's own rule refuses
            it there, :data:`QUANTIZED_MODEL_INIT_PRECISIONS`).
        sources: where the other figures come from.
    """

    name: str
    compute_dtype: str
    reduce_dtype: str = "float32"
    te_recipes: Mapping[str, TERecipe] = field(default_factory=dict)
    quantized_bytes: float | None = None
    block_scaled: bool = False
    dense_peak: str = "bf16_tflops"
    high_precision: str = ""
    min_capability: tuple[int, int] = (0, 0)
    below_capability: tuple[int, int] | None = None
    capability_source: str = ""
    hardware: str = "any CUDA GPU"
    cpu: bool = False
    loss_scaling: bool = False
    gemm_multiple: int | None = None
    autocast_dtype: str | None = None
    color: str = "#7F7F7F"
    quantized_model_init_refusal: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)

    @property
    def uses_te(self) -> bool:
        """Whether the format is a TransformerEngine recipe (needs TE and a GPU)."""
        return bool(self.te_recipes)

    @property
    def te_blocks(self) -> bool:
        """Whether the trainer builds TransformerEngine blocks for this format on a GPU where TE imports: its
        :attr:`compute_dtype` is one TE's fused or flash attention runs (:data:`TE_FUSED_ATTENTION_DTYPES`).
        fp32 is not: TE would run ``UnfusedDotProductAttention`` (the full ``[b, h, s, s]`` scores, 4 bytes
        each: 8.6 GB per block at batch 1, 32 heads, sequence 8192), so fp32 trains on the torch-native blocks,
        whose ``scaled_dot_product_attention`` has a memory-efficient fp32 kernel. Every TE recipe computes in
        bf16 and is one (:meth:`platform_spec.models.ModelFamily.backend_for` reads this)."""
        return self.compute_dtype in TE_FUSED_ATTENTION_DTYPES

    @property
    def matmul_tf32(self) -> bool:
        """Whether the format's fp32 matmuls run on TF32 tensor cores (the trainer sets
        ``torch.backends.cuda.matmul.allow_tf32`` and cuDNN's): its dense peak, the MFU denominator, is
        TF32's, so the trainer runs what it is measured against."""
        return self.dense_peak == "tf32_tflops"

    @property
    def quantized(self) -> bool:
        """Whether the format stores quantized copies of GEMM operands (the fp8 family)."""
        return self.quantized_bytes is not None

    @property
    def stores_quantized_weights(self) -> bool:
        """Whether the trainer can store this format's block weights quantized (``quantized_model_init``):
        a quantized format without :attr:`quantized_model_init_refusal`."""
        return self.quantized and self.quantized_model_init_refusal is None

    def stored_weight_bytes(self, compute_capability: tuple[int, int]) -> float:
        """Bytes per block matmul weight stored quantized (``quantized_model_init``) on a GPU of
        ``compute_capability``: the layouts TransformerEngine creates the parameter with, rowwise and
        columnwise (:data:`TE_STORED_USAGES`), i.e. :meth:`weight_copy_bytes` (``2q``; ``q`` for per-tensor
        fp8 where the tensor cores read either layout). ``0`` for a format that does not quantize."""
        return self.weight_copy_bytes(compute_capability)

    @property
    def compute_bytes(self) -> int:
        """Bytes per element of :attr:`compute_dtype` (the planner's activation bytes ``a``)."""
        return DTYPE_BYTES[self.compute_dtype]

    @property
    def scalings(self) -> tuple[str, ...]:
        """The names of :attr:`te_recipes` (the first is the default)."""
        return tuple(self.te_recipes)

    def te_recipe(self, scaling: str | None = None) -> TERecipe | None:
        """The TE recipe for ``scaling`` (default: the first), ``None`` for a non-TE format.

        A format with one recipe ignores ``scaling`` (``fp8_scaling`` applies to fp8 only).

        Raises:
            FieldError: ``fp8_scaling`` is not one of :attr:`scalings` (formats with several recipes).
        """
        if not self.te_recipes:
            return None
        if len(self.te_recipes) == 1 or scaling is None:
            return next(iter(self.te_recipes.values()))
        try:
            return self.te_recipes[scaling]
        except KeyError:
            raise FieldError("fp8_scaling", scaling, "one of " + ", ".join(self.te_recipes)) from None

    def supported_by(self, compute_capability: tuple[int, int]) -> bool:
        """Whether a GPU of ``compute_capability`` (``(major, minor)``, as
        ``torch.cuda.get_device_capability`` reports it) runs this format (the module docstring's rule)."""
        cc = tuple(compute_capability)
        if cc < self.min_capability:
            return False
        return self.below_capability is None or cc < self.below_capability

    def weight_copy_bytes(self, compute_capability: tuple[int, int]) -> float:
        """Bytes per weight of TransformerEngine's quantized weight copies (rowwise for forward,
        columnwise for the data-gradient GEMM): ``0`` for a format that does not quantize; one
        copy ``q`` for per-tensor fp8 where the tensor cores read either layout (compute
        capability >= 10.0, :data:`TE_LAYOUT`), else ``2q``."""
        q = self.quantized_bytes
        if q is None:
            return 0.0
        if not self.block_scaled and tuple(compute_capability) >= (10, 0):
            return q
        return 2.0 * q


def _recipes(**recipes: TERecipe) -> Mapping[str, TERecipe]:
    return MappingProxyType(dict(recipes))


PRECISIONS: tuple[Precision, ...] = (
    Precision(
        name="fp32",
        compute_dtype="float32",
        dense_peak="tf32_tflops",
        high_precision="fp32",
        hardware="any CUDA GPU",
        capability_source="runs wherever PyTorch runs; TF32 tensor cores (compute capability >= 8.0) change the speed only",
        cpu=True,
        color="#4C72B0",
    ),
    Precision(
        name="bf16",
        compute_dtype="bfloat16",
        dense_peak="bf16_tflops",
        high_precision="bf16",
        min_capability=(8, 0),
        hardware="compute capability >= 8.0 (Ampere or newer)",
        capability_source=TORCH_BF16,
        cpu=True,
        color="#55A868",
    ),
    Precision(
        name="fp16",
        compute_dtype="float16",
        dense_peak="fp16_tflops",
        high_precision="fp16",
        hardware="any CUDA GPU",
        capability_source="runs wherever PyTorch runs",
        loss_scaling=True,
        color="#8172B2",
    ),
    Precision(
        name="fp8",
        compute_dtype="bfloat16",
        te_recipes=_recipes(
            current=TERecipe("Float8CurrentScaling", MappingProxyType({"fp8_format": "HYBRID"})),
            delayed=TERecipe(
                "DelayedScaling",
                MappingProxyType({"fp8_format": "HYBRID", "amax_history_len": 1024, "amax_compute_algo": "max"}),
                amax_reduction=True,
            ),
        ),
        quantized_bytes=1.0,
        dense_peak="fp8_tflops",
        high_precision="bf16",
        min_capability=(8, 9),
        hardware="compute capability >= 8.9 (Ada, Hopper, Blackwell)",
        capability_source=TE_SOURCE,
        gemm_multiple=16,
        color="#C44E52",
        sources={
            "quantized_bytes": "1 byte (E4M3/E5M2) per element; one fp32 scale per tensor (negligible)",
            "stored_weight_bytes": TE_STORED_USAGES,
            "weight_copy_bytes": TE_LAYOUT,
            "gemm_multiple": "TransformerEngine fp8 GEMMs (cuBLASLt) need dimensions divisible by 16",
        },
    ),
    Precision(
        name="mxfp8",
        compute_dtype="bfloat16",
        te_recipes=_recipes(block=TERecipe("MXFP8BlockScaling")),
        quantized_bytes=1.0 + 1.0 / 32,
        block_scaled=True,
        dense_peak="fp8_tflops",
        high_precision="bf16",
        min_capability=(10, 0),
        below_capability=(12, 0),
        hardware="Blackwell data-centre GPUs (compute capability 10.x or 11.x)",
        capability_source=TE_SOURCE,
        gemm_multiple=32,
        color="#DD8452",
        sources={
            "quantized_bytes": OCP_MX,
            "stored_weight_bytes": TE_STORED_USAGES,
            "gemm_multiple": "MXFP8BlockScaling scales blocks of 32 elements (E4M3)",
        },
    ),
    Precision(
        name="nvfp4",
        compute_dtype="bfloat16",
        te_recipes=_recipes(block=TERecipe("NVFP4BlockScaling")),
        quantized_bytes=0.5 + 1.0 / 16,
        block_scaled=True,
        dense_peak="fp4_tflops",
        high_precision="bf16",
        min_capability=(10, 0),
        below_capability=(12, 0),
        hardware="Blackwell data-centre GPUs (compute capability 10.x or 11.x)",
        capability_source=TE_SOURCE + "; " + TE_FSDP2_TESTS,
        gemm_multiple=32,
        autocast_dtype="bfloat16",
        color="#937860",
        quantized_model_init_refusal=(
            "false: TransformerEngine marks nvfp4 weights stored quantized under FSDP2 as unsupported "
            '("quantized_model_init and FSDP2 is not currently supported, since the block tensor is dequantized '
            'before we flatten it for FSDP2": ' + TE_FSDP2_FUSED_ADAM_TESTS + "), so nvfp4 keeps high-precision "
            "weights with quantized copies"
        ),
        sources={
            "quantized_bytes": NVIDIA_NVFP4,
            "gemm_multiple": "the trainer's check since nvfp4 was added, at least what the image's TE requires "
            "(NVFP4_BLOCK_SCALING_SIZE = 16 on both GEMM dimensions: transformer_engine/pytorch/constants.py, "
            "release_v2.19); unchanged here",
        },
    ),
)
"""Every training precision, in report order (baseline preference first: fp32, bf16, ...)."""

PRECISION_NAMES: tuple[str, ...] = tuple(p.name for p in PRECISIONS)
"""The names of :data:`PRECISIONS`, in order: the ``precision`` hyperparameter's allowed values."""

_BY_NAME: Mapping[str, Precision] = MappingProxyType({p.name: p for p in PRECISIONS})


def get_precision(name: Any, *, field: str = "precision") -> Precision:
    """The record of ``name`` (exact, lower-case name; normalise first where people type).

    Raises:
        UnknownPrecisionError: (a :class:`FieldError` on ``field``) naming :data:`PRECISION_NAMES`.
    """
    precision = _BY_NAME.get(name) if isinstance(name, str) else None
    if precision is None:
        raise UnknownPrecisionError(name, field=field)
    return precision


def names_where(predicate: Callable[[Precision], bool]) -> tuple[str, ...]:
    """The names of the precisions for which ``predicate(precision)`` is true, in :data:`PRECISIONS` order."""
    return tuple(p.name for p in PRECISIONS if predicate(p))


def supported_names(compute_capability: tuple[int, int]) -> tuple[str, ...]:
    """The precisions a GPU of ``compute_capability`` runs, in order (:meth:`Precision.supported_by`)."""
    return names_where(lambda p: p.supported_by(compute_capability))


CPU_PRECISIONS: tuple[str, ...] = names_where(lambda p: p.cpu)
"""Precisions the trainer's torch-native CPU path runs."""

QUANTIZED_MODEL_INIT_PRECISIONS: tuple[str, ...] = names_where(lambda p: p.stores_quantized_weights)
"""Precisions whose block weights the trainer stores quantized with ``quantized_model_init=true`` (fp8, mxfp8):
:attr:`Precision.stores_quantized_weights`."""

SCALED_PRECISIONS: tuple[str, ...] = names_where(lambda p: len(p.scalings) > 1)
"""Precisions with a choice of TransformerEngine scaling recipe, made by the ``fp8_scaling`` hyperparameter
(fp8: current or delayed scaling); formats with one recipe ignore it."""

SCALINGS: tuple[str, ...] = tuple(
    dict.fromkeys(scaling for p in PRECISIONS if p.name in SCALED_PRECISIONS for scaling in p.scalings)
)
"""The ``fp8_scaling`` hyperparameter's values, the first its default: the recipe names of
:data:`SCALED_PRECISIONS`, in registry order (``current``, ``delayed``)."""


def recipe_scalings(precision: Precision) -> tuple[str, ...]:
    """The ``fp8_scaling`` values that run each TransformerEngine recipe of ``precision`` once: its
    :attr:`~Precision.scalings` where it offers a choice, else the default scaling (:data:`SCALINGS`'
    first, which a one-recipe format ignores); ``()`` for a format that is no TE recipe."""
    if not precision.uses_te:
        return ()
    return precision.scalings if precision.name in SCALED_PRECISIONS else SCALINGS[:1]
