"""Per-GPU memory model: what is live at the peak, in GB (10^9 bytes), by term.

Two setups are modelled.

``blocks_only=True`` -- TransformerEngine's FSDP example (``examples/pytorch/fsdp/fsdp.py``
in NVIDIA/TransformerEngine), which the published guide ran for its numbers:
``L`` stacked ``te.TransformerLayer(h, 3h, heads)`` blocks (hidden and attention
dropout 0.1, TE's defaults), no embedding, no head, a random ``(s, b, h)`` input,
``loss = y.sum()``. Parameters are created in the compute dtype (``params_dtype``:
bf16 under the fp8/mxfp8/nvfp4 recipes, else the precision's) and wrapped in FSDP1 (``FULL_SHARD``,
``MixedPrecision(param_dtype=dtype, reduce_dtype=fp32)``, one unit per block);
``torch.optim.Adam`` keeps its two moments in the parameter dtype (bf16) -- no
fp32 master copy. The reported figure is ``torch.cuda.max_memory_allocated()``
over 5 iterations (the optimizer state exists from the first step on).

``blocks_only=False`` -- our trainer: token embedding, the same blocks, final
LayerNorm, untied LM head, cross-entropy; FSDP2 ``fully_shard`` per block and at
the root with ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``,
fp32 sharded parameters (they are the AdamW master weights), fp32 gradients,
AdamW moments in fp32.

Notation: ``L`` blocks, hidden ``h`` (the residual stream), vocabulary ``V``,
``T = b*s`` tokens per GPU per micro-batch, ``D`` the FSDP shard degree (every
GPU for ``full``, the GPUs of one instance for ``hybrid``/HSDP), ``N`` the
parameters of the modelled network, ``N_b`` per block, ``W`` the matmul weights
per block (the model family's ``matmul_weights_per_block``; GPT: ``4h^2 + 2hf``
with FFN ``f``).

The per-block terms come from the model's family, looked up by name
(:attr:`platform_spec.models.ModelFamily.terms`; the GPT family's derivations
are in ``model_families/gpt/__init__.py``): ``W``, the bytes a block saves for
backward per token (``S``), the transient of its backward; this module adds
the skeleton every family shares (embedding, final norm, head, loss), FSDP and
the optimizer. ``a`` = bytes per activation element (the precision's
compute dtype: 2; 4 for fp32), ``q`` = bytes per quantized element including its
scales: fp8 1 (one fp32 scale per tensor), mxfp8 ``1 + 1/32`` (an E8M0 scale per
32 values), nvfp4 ``0.5 + 1/16`` (an E4M3 scale per 16 values). Both are the
precision registry's (:mod:`platform_spec.precisions`, with their sources).

Terms (each a key of :class:`MemoryBreakdown`)
----------------------------------------------
``parameters``
    Sharded persistent parameters. Blocks-only: ``a*N/D`` (bf16). Full:
    ``4*N/D`` (fp32). With ``quantized_model_init`` the block matmul weights
    are stored quantized in the layouts TransformerEngine creates them with
    (rowwise and columnwise: ``c``, as for ``quantized_weight_copies``,
    :meth:`platform_spec.precisions.Precision.stored_weight_bytes`): ``c*L*W/D``
    replaces their share.
``optimizer_state``
    Adam moments. Blocks-only: ``2*a*N/D`` (``zeros_like`` of bf16 params).
    Full: the trainer's optimizer on a GPU, from its one home
    (:func:`platform_spec.optimizers.optimizer_for`): ``8*N/D`` (two fp32
    moments; FSDP2's fp32 shards are the master weights); with
    ``quantized_model_init`` TransformerEngine's ``FusedAdam(master_weights=True)``,
    which keeps an fp32 master copy of *every* parameter: ``12*N/D``.
``gradients``
    Sharded gradients (blocks-only ``a*N/D``, full ``4*N/D``) at the optimizer
    step. With one micro-batch and ``zero_grad(set_to_none=True)`` none exist
    yet when backward starts (the activation peak). With
    ``gradient_accumulation_steps > 1`` it depends on ``gradient_sync``
    (:mod:`platform_spec.training_modes`): ``every_micro_batch`` (the default)
    reduce-scatters each micro-batch, so the sharded gradients of the earlier
    micro-batches (``4*N/D``; blocks-only ``a*N/D``) are live through every
    later backward; ``last_micro_batch`` keeps FSDP2's *unsharded* gradients,
    accumulated in the reduce dtype (fp32: ``4*N``; FSDP2's
    ``to_accumulated_grad_if_needed``), live from the first backward to the
    step. The planner once assumed the second always (and in bf16, ``2*N``),
    which made 30B-70B runs that ran on 80 GB GPUs "not fit".
    Full model, in every case: the root FSDP unit (token embedding, final
    norm, LM head: ``N_root`` parameters, ``2Vh + h`` untied, ``Vh + h``
    tied) reduce-scatters its gradients only when its last parameter has one,
    at the end of backward (FSDP2 runs the root's ``post_backward`` from its
    final callback: its inputs are token ids, which take no gradient). So the
    head's unsharded gradient, ``a*V*h`` in the compute dtype, is live from the
    loss's backward on, through every block's backward; and at the end of
    backward every block's sharded gradient (``4*N/D``) is live with the
    root's unsharded gradients (``a*N_root``; under ``last_micro_batch`` with
    accumulation, accumulated in fp32, ``4*N_root``) and the reduce-scatter
    input (``transient``): the ``end_of_backward`` moment. The planner once
    left both out, which under-predicted full checkpointing with few GPUs
    (Llama 3 70B on 16 H100s: 76.8 GB predicted, 83.3 GB by this account).
``gathered_parameters``
    FSDP's unsharded compute copies: the block being computed and the one
    being prefetched, ``2 * g * N_b`` with ``g = a`` (or ``2q`` rowwise +
    columnwise when stored quantized: TE's FSDP2 support gathers the quantized
    data); the full model's root (embedding, final norm, head:
    ``g * (N - L*N_b)``) is gathered at both peaks (the loss, the start of
    backward).
    ``reshard_after_forward=False`` keeps every block gathered from its
    forward to its backward: ``g * L * N_b``.
``quantized_weight_copies``
    fp8/mxfp8/nvfp4 without ``quantized_model_init``: TransformerEngine casts
    each weight at use and keeps the quantized copy for backward (rowwise for
    forward and columnwise -- a transpose -- for the data-gradient GEMM):
    ``c * W`` per block with ``c`` = 2 (fp8 on Hopper: data + transpose),
    1 (fp8 on Blackwell, whose tensor cores read either layout),
    ``2(1 + 1/32)`` (mxfp8), ``2(0.5 + 1/16)`` (nvfp4). Every block that keeps
    its activations (all ``L`` without checkpointing), plus the one block being
    recomputed when any is checkpointed. This is why the guide says low
    precision uses *more* memory than bf16 by default. From TransformerEngine
    2.16 on (:data:`TE_FSDP2_DROPS_WEIGHT_WORKSPACE`, #2805) modules under FSDP2
    save no copy for backward and quantize the gathered weight again there, so
    the full trainer holds one block's copy at a time (the block in backward)
    and casts each weight twice per micro-batch
    (:func:`keeps_weight_copies`, from the image's
    :data:`platform_spec.trainer_image.TRANSFORMER_ENGINE_VERSION`); the
    blocks-only example (FSDP1) keeps them at every release.
``activations``
    Saved for backward, ``S`` bytes per token per block (the family's
    ``block_activation_terms``, by tensor; with the blocks-only benchmark's
    hidden-dropout masks, our trainer has no dropout). GPT: LayerNorm inputs
    ``2ah``, the four GEMM inputs (``a``, or quantized: the columnwise copy
    ``q`` of the QKV and projection inputs, both layouts ``c`` of the two MLP
    inputs, which TransformerEngine's ``LayerNormMLP`` saves whole), Q K V
    ``3ah``, attention output ``ah``, the softmax log-sum-exp ``4n``, the FC1
    output ``af``, the GELU output ``(c or a)f`` (fused attention never
    stores the ``s x s`` scores); ``~30.3h`` bytes (62.1 KB) per token per block
    for ``gpt-1b`` in mxfp8 (blocks-only).
    Activation checkpointing (:mod:`platform_spec.training_modes`) recomputes
    ``k`` of the ``L`` blocks: 0 (``off``), ``L`` (``full``) or ``floor(L/N)``
    (``selective:N``, every Nth block). When backward starts, a recomputing
    block holds only its input (``ah``), every other block its ``S``, plus the
    output ``ah`` (full model: also the final-norm output); and while any block
    recomputes, one block's recomputed tensors (``S`` less its input, already
    counted) are live on top.
``logits_and_loss``
    Full model only, by the plan's ``loss`` (:func:`logits_bytes`). The trainer computes the cross-entropy in chunks of
    ``2^26 / V`` tokens whose logits are recomputed in backward
    (``training.model.chunked_cross_entropy``), so one chunk's logits are live
    at a time: bf16 logits ``2V``, the fp32 copy ``4V``, the saved fp32
    log-softmax ``4V``, its fp32 gradient ``4V`` and the bf16 gradient ``2V``:
    ``16 V * min(T, 2^26 / V)`` bytes, at most ~1.07 GB. An unchunked fp32
    loss (``loss="unchunked-fp32"``, torchtitan's) holds ``12 V T`` bytes
    (:data:`UNCHUNKED_LOSS_BYTES_PER_LOGIT`): 25 GB for one 32K sequence with a
    128K vocabulary.
``transient``
    The largest short-lived allocation of the peak phase. In a block's
    backward: the family's ``block_backward_transient_bytes_per_token`` (GPT:
    the incoming gradient ``ah``, FC2's data gradient ``af`` and the
    GELU-backward output, ``2qf`` rowwise + columnwise quantized or ``af``,
    minus the GELU output freed by then); or, at the end of that
    block's backward (its recomputed activations freed), FSDP's unsharded
    gradient and its fp32 reduce-scatter copy ``(a + 4) * N_b`` (FSDP2's
    ``foreach_reduce`` copies the gradients into one fp32 input, then frees
    them). At the end of backward: the root's fp32 reduce-scatter input
    ``4 * N_root``. At the optimizer step: one parameter-sized temporary of the
    example's foreach ``torch.optim.Adam`` (blocks-only); the trainer's: its
    optimizer's ``step_temporary_bytes * N/D``
    (:func:`platform_spec.optimizers.optimizer_for`; on a GPU the fused AdamW
    and TE's FusedAdam need none).
``workspace``
    cuBLAS/cuBLASLt and TransformerEngine GEMM workspaces: a fixed 0.1 GB
    (estimate).

The peak is the largest of four moments: the loss (full model), the first
block's backward, the end of backward (full model: the root unit's
reduce-scatter, see ``gradients``), the optimizer step; the breakdown lists
what is live at that moment (``peak_phase``). ``total`` is comparable to
``torch.cuda.max_memory_allocated()`` (the trainer's ``peak_mem_allocated_gb``).

Verdict: fits, at-risk or out-of-memory
----------------------------------------
``required = total + fragmentation_margin + runtime_overhead`` where the
fragmentation margin is 10% of the activation-like terms (activations,
logits, transient: the caching allocator's reserved-minus-allocated grows with
them; with an unchunked loss at the loss moment, also the freed bf16 logits' block,
:data:`UNCHUNKED_LOSS_CACHED_BYTES_PER_LOGIT`: together they give torchtitan's published
reserved memory) and the runtime overhead (CUDA context, NCCL buffers, cuBLAS handles --
outside the PyTorch allocator) is 2 GB; both estimates. HBM capacity is the
vendor figure read as GiB (an "80 GB" H100 reports 81,559 MiB; a "180 GB" B200
183,359 MiB) converted to 10^9 bytes, less what the device does not report
(:data:`SAFETY_FRACTION`, 0.5%): ``usable = 0.995 * capacity``. The verdict (:data:`MEMORY_STATUSES`):

* ``out-of-memory``: ``required > usable``;
* ``at-risk``: ``required * (1 + AT_RISK_FRACTION) > usable`` -- the
  requirement is within the model's stated error of usable memory;
* ``fits``: otherwise.

:data:`AT_RISK_FRACTION` (5%) is calibrated on the published points
(``benchmarks/planner_published.py``; ``tests/planner/test_published.py``): no
published peak is under-predicted by more than it, and no published run that
completed is refused by it (the submitter refuses ``at-risk`` without
``accept_memory_risk``). The plan shows the requirement's band from the same
validation (:attr:`MemoryBreakdown.required_band`): published peaks were up to
13.5% below the prediction (:data:`PUBLISHED_OVER_PREDICTION`) and never above it
by more than 5%. Until issue 28 5% of the capacity was also held back, a second
margin no evidence supported, which refused llm-foundry's MPT-3B runs at
sequence 8192 (bf16 and fp8) that had completed on 80 GB H100s.

Calibration (tests/planner/test_calibration.py)
-----------------------------------------------
The guide's ``gpt-1b`` at sequence 8192, mxfp8, 8x B200, blocks-only. No
factor is fitted to these points; every term above is derived:

====================  =========  ==========  =====
checkpointing, batch  published  predicted   error
====================  =========  ==========  =====
off, 1                15.5 GB    15.6 GB     +1%
full, 1               2.3 GB     2.6 GB      +12%
full, 16              22.8 GB    24.6 GB     +8%
====================  =========  ==========  =====

The first row was under-predicted by 10% (13.9 GB) while the MLP's two saved
GEMM inputs were counted in one layout: TransformerEngine 2.10's
``LayerNormMLP`` saves its FC1 input and GELU output quantized in both
layouts (``layernorm_linear.py`` and ``linear.py`` drop the rowwise data
before saving; ``layernorm_mlp.py`` does not), ``4.1h`` bytes per token per
block more in mxfp8: 1.66 GB at this point. The independent published points
(torchtitan, MosaicML's llm-foundry) are in ``benchmarks/published_points.json``
and ``benchmarks/planner_published.py``.

The example calls ``prepare_te_modules_for_fsdp``, which lets TE modules that
FSDP wraps *directly* scatter their saved tensors over the FSDP group; the
example wraps whole ``te.TransformerLayer`` blocks, whose inner linear modules
keep their saved tensors whole, and the measured 15.5 GB is consistent with
unsharded activations (sharded, the model would predict ~8 GB), so none are
sharded here. With checkpointing on, the example skips that call anyway.

The guide's large-model statement (~14B+: "most configurations OOM without
checkpointing; 87-171 GB depending on batch and sequence") is tested as: over
gpt-14b/32b/64b x sequence 2K-8K x batch 1-32 most configurations do not fit
without checkpointing, and with it the largest power-of-two batch that fits
uses 106-114 GB (inside 87-171).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from planner.inputs import ResolvedInput
from platform_spec.catalogue import GPUSpec
from platform_spec.models import LOSS_CHUNK_ELEMENTS
from platform_spec.optimizers import OptimizerChoice, optimizer_for
from platform_spec.precisions import get_precision
from platform_spec.trainer_image import TRANSFORMER_ENGINE_VERSION

GB = 1e9
GIB = 2**30

WORKSPACE_GB = 0.1
"""cuBLAS/cuBLASLt + TransformerEngine GEMM workspaces (estimate)."""
FRAGMENTATION_FRACTION = 0.10
"""Allocator fragmentation margin as a fraction of activation-like terms (estimate)."""
RUNTIME_OVERHEAD_GB = 2.0
"""CUDA context, NCCL buffers, library handles outside the PyTorch allocator (estimate)."""
SAFETY_FRACTION = 0.005
"""Share of the catalogue's HBM no allocation can have: the device reports 0.44% (H100: 81,559 of 81,920 MiB) to
0.52% (B200: 183,359 of 184,320 MiB) less than the vendor's figure read as GiB. It was 5%, an unexplained margin on
top of the at-risk one, which called llm-foundry's MPT-3B at sequence 8192 (it ran on 80 GB H100s) at-risk or out
of memory (module docstring, "Verdict")."""
AT_RISK_FRACTION = 0.05
"""A requirement within this fraction of usable memory (``required * (1 + AT_RISK_FRACTION) > usable``) is
``at-risk``. Calibrated on the published points (``benchmarks/planner_published.py``): no published peak is
under-predicted by more than it (the largest under-prediction is 0.0%, torchtitan's), and it is the largest whole
percent that refuses no published run that completed (the tightest, llm-foundry's MPT-3B at sequence 8192 on 80 GB
H100s, leaves 5.3%). ``tests/planner/test_published.py`` holds both."""
PUBLISHED_OVER_PREDICTION = 0.135
"""The largest over-prediction of a published peak (``predicted / published - 1``: the guide's checkpointed batch-1
point, +13.5%): the low end of the requirement's band (:attr:`MemoryBreakdown.required_band`)."""

FITS, AT_RISK, OUT_OF_MEMORY = "fits", "at-risk", "out-of-memory"
MEMORY_STATUSES: tuple[str, ...] = (FITS, AT_RISK, OUT_OF_MEMORY)
"""The memory verdict of a plan, its one enum (the plan's ``status``; tables and JSON show it)."""


def memory_status(required: float, usable: float) -> str:
    """:data:`FITS`, :data:`AT_RISK` or :data:`OUT_OF_MEMORY` for a requirement against usable memory (GB)."""
    if required > usable:
        return OUT_OF_MEMORY
    if required * (1 + AT_RISK_FRACTION) > usable:
        return AT_RISK
    return FITS


REDUCE_BYTES = 4.0
"""Bytes per gradient element in FSDP2's reduce dtype (fp32, the trainer's ``MixedPrecisionPolicy.reduce_dtype``;
fp32 training reduces in fp32 too): sharded gradients and, under ``last_micro_batch``, the accumulated unsharded ones."""
LOSS_PEAK_BYTES_PER_LOGIT = 16.0
"""Bytes per logit live in the loss's backward: bf16 logits 2, fp32 copy 4, saved fp32
log-softmax 4, its fp32 gradient 4, the bf16 gradient 2."""
UNCHUNKED_LOSS_BYTES_PER_LOGIT = 12.0
"""``loss="unchunked-fp32"`` (torchtitan's ``cross_entropy(pred.flatten(0, 1).float(), ...)``, train.py at 9dec370):
bytes per logit of the whole micro-batch live at the peak of its backward -- the saved fp32 log-softmax output 4,
its fp32 incoming gradient 4, the fp32 gradient it produces 4 (the bf16 logits are deleted before backward)."""
UNCHUNKED_LOSS_CACHED_BYTES_PER_LOGIT = 2.0
"""``loss="unchunked-fp32"``: bytes per logit reserved but not allocated at that peak, part of the fragmentation
margin: the bf16 logits' block, freed before backward, which PyTorch's caching allocator keeps reserved and cannot
grow into the larger fp32 gradients allocated after it. With :data:`FRAGMENTATION_FRACTION` it gives torchtitan's
published ``max_reserved_gib`` at sequence 32768 (``benchmarks/published_points.json``)."""
TE_FSDP2_DROPS_WEIGHT_WORKSPACE: tuple[int, int] = (2, 16)
"""The first TransformerEngine release whose modules under FSDP2 do not save their quantized weight copy for
backward: NVIDIA/TransformerEngine #2805 (commit 0a088c1d5, "Fix FSDP2 memory leaks for FP8 weight workspaces and
transpose caches", in v2.16 and later): ``linear.py``, ``layernorm_linear.py`` and ``layernorm_mlp.py`` quantize
the weight rowwise only in forward (``columnwise=is_grad_enabled and not is_fsdp2``), save ``None`` in place of the
workspace (``if is_fsdp2 and weightmat is not weight: wt_save = None``) and re-quantize it in backward from the
weight FSDP2 gathers again. ``is_fsdp2`` holds for every TE module inside a ``fully_shard``-ed block
(``distributed._get_module_fsdp_state`` finds the closest FSDP2 parent)."""


def loss_chunk_tokens(vocab_size: int) -> int:
    """Tokens per chunk of the trainer's chunked cross-entropy: ``LOSS_CHUNK_ELEMENTS // V`` (at least 1;
    :data:`platform_spec.models.LOSS_CHUNK_ELEMENTS`, the trainer's)."""
    return max(1, LOSS_CHUNK_ELEMENTS // vocab_size)


BREAKDOWN_TERMS: tuple[str, ...] = (
    "parameters",
    "gradients",
    "optimizer_state",
    "gathered_parameters",
    "quantized_weight_copies",
    "activations",
    "logits_and_loss",
    "transient",
    "workspace",
)
"""Keys of :attr:`MemoryBreakdown.terms`, in display order."""


def activation_bytes(precision: str) -> float:
    """Bytes per activation element ``a``: the precision's compute dtype (4 for fp32, else 2)."""
    return float(get_precision(precision).compute_bytes)


def quantized_bytes(precision: str) -> float | None:
    """Bytes per quantized element ``q`` including block scales; ``None`` if not quantized (the registry's)."""
    return get_precision(precision).quantized_bytes


def weight_copy_bytes(precision: str, gpu: GPUSpec) -> float:
    """Bytes per weight of TransformerEngine's quantized weight copy (rowwise + columnwise); 0 for
    bf16/fp16/fp32 (:meth:`platform_spec.precisions.Precision.weight_copy_bytes` at the GPU's compute capability)."""
    return get_precision(precision).weight_copy_bytes(gpu.compute_capability)


def keeps_weight_copies(r: ResolvedInput, te_version: tuple[int, int] = TRANSFORMER_ENGINE_VERSION) -> bool:
    """Whether TransformerEngine keeps each block's quantized weight copy from its forward to its backward
    (the ``quantized_weight_copies`` term for every block that keeps its activations).

    The blocks-only example wraps its blocks in FSDP1, so they are kept at every release; the full trainer's
    blocks are FSDP2 units, whose copies are dropped after forward and re-quantized in backward from
    :data:`TE_FSDP2_DROPS_WEIGHT_WORKSPACE` on (``te_version``: the trainer image's,
    :data:`platform_spec.trainer_image.TRANSFORMER_ENGINE_VERSION`). Then one block's copy is live at a time:
    the block in backward (or being recomputed)."""
    return r.input.blocks_only or te_version < TE_FSDP2_DROPS_WEIGHT_WORKSPACE


def weight_casts_per_microbatch(r: ResolvedInput) -> int:
    """How many times each block weight is quantized per micro-batch: 1 (forward, the copy kept for backward), 2
    when the copy is not kept (:func:`keeps_weight_copies`: backward quantizes it again), 0 with
    ``quantized_model_init`` (the weights are stored quantized)."""
    if r.input.quantized_model_init and quantized_bytes(r.input.precision) is not None:
        return 0
    return 1 if keeps_weight_copies(r) else 2


def _bytes(r: ResolvedInput) -> dict[str, float | None]:
    """The family terms' byte arguments for the plan's precision: ``activation_bytes`` ``a`` and
    ``quantized_bytes`` ``q``."""
    return {
        "activation_bytes": activation_bytes(r.input.precision),
        "quantized_bytes": quantized_bytes(r.input.precision),
    }


def block_activation_bytes_per_token(r: ResolvedInput) -> float:
    """``S``: bytes per token one block saves for backward (the family's ``block_activation_terms``,
    summed; with the blocks-only benchmark's dropout masks, and the tensors TransformerEngine keeps in both
    layouts at the GPU's weight-copy bytes)."""
    terms = r.family.terms
    assert terms is not None  # resolve() refuses a family without terms
    both = weight_copy_bytes(r.input.precision, r.gpu)
    return sum(
        terms.block_activation_terms(
            r.model, **_bytes(r), dropout=r.input.blocks_only, quantized_copy_bytes=both or None
        ).values()
    )


@dataclass(frozen=True)
class MemoryBreakdown:
    """Per-GPU memory at the peak, GB (10^9 bytes).

    Attributes:
        terms: ``{term: GB}`` for every key of :data:`BREAKDOWN_TERMS` (what is
            live at the peak; see the module docstring for each derivation).
        total: sum of ``terms``: the predicted peak allocated memory.
        peak_phase: ``"loss"``, ``"backward"``, ``"end_of_backward"`` or ``"optimizer_step"``.
        fragmentation_margin: allocator margin (estimate), GB.
        runtime_overhead: CUDA context/NCCL outside the allocator (estimate), GB.
        required: ``total + fragmentation_margin + runtime_overhead``.
        capacity: the GPU's HBM, GB (10^9 bytes).
        usable: ``capacity * (1 - SAFETY_FRACTION)``.
        status: :data:`FITS`, :data:`AT_RISK` or :data:`OUT_OF_MEMORY` (:func:`memory_status`).
        phases: ``{phase: total GB}`` for each moment considered.
        phase_terms: ``{phase: {term: GB}}``, what is live at each moment considered.
    """

    terms: dict[str, float]
    total: float
    peak_phase: str
    fragmentation_margin: float
    runtime_overhead: float
    required: float
    capacity: float
    usable: float
    status: str
    phases: dict[str, float] = field(default_factory=dict)
    phase_terms: dict[str, dict[str, float]] = field(default_factory=dict)

    def __getattr__(self, name: str) -> float:
        # memory.activations, memory.parameters ... read the terms
        terms = self.__dict__.get("terms")
        if terms is not None and name in terms:
            return float(terms[name])
        raise AttributeError(name)

    @property
    def fits(self) -> bool:
        """``status == "fits"``: the requirement leaves at least the at-risk margin free (an ``at-risk`` plan
        does not count as fitting)."""
        return self.status == FITS

    @property
    def required_band(self) -> tuple[float, float]:
        """The requirement's uncertainty from the published validation, GB: ``(required / (1 +
        PUBLISHED_OVER_PREDICTION), required * (1 + AT_RISK_FRACTION))`` -- published peaks were up to 13.5% below
        the prediction and never more than 5% above it."""
        return self.required / (1 + PUBLISHED_OVER_PREDICTION), self.required * (1 + AT_RISK_FRACTION)

    @property
    def headroom(self) -> float:
        """``usable - required`` (negative when it does not fit), GB."""
        return self.usable - self.required

    def to_dict(self) -> dict[str, object]:
        """JSON-able: every term plus ``total``, margins, ``required`` and its ``required_band`` (``[low,
        high]``), capacity, ``status``, ``fits``, ``peak_phase``."""
        out: dict[str, object] = {k: round(v, 4) for k, v in self.terms.items()}
        out.update(
            total=round(self.total, 4),
            peak_phase=self.peak_phase,
            fragmentation_margin=round(self.fragmentation_margin, 4),
            runtime_overhead=round(self.runtime_overhead, 4),
            required=round(self.required, 4),
            required_band=[round(v, 4) for v in self.required_band],
            capacity=round(self.capacity, 4),
            usable=round(self.usable, 4),
            headroom=round(self.headroom, 4),
            status=self.status,
            fits=self.fits,
        )
        return out


def capacity_gb(gpu: GPUSpec) -> float:
    """HBM in 10^9 bytes (the vendor's figure read as GiB, see the module docstring)."""
    return gpu.hbm_gb * GIB / GB


def estimate_memory(r: ResolvedInput) -> MemoryBreakdown:
    """The per-GPU memory breakdown of a resolved plan input (module docstring)."""
    p = r.input
    m = r.model
    terms = r.family.terms
    assert terms is not None  # resolve() refuses a family without terms
    L, h, V = m.num_layers, m.hidden_size, m.vocab_size
    D = r.shard_degree
    T = r.tokens_per_microbatch
    a = activation_bytes(p.precision)
    q = quantized_bytes(p.precision)
    qmi = p.quantized_model_init and q is not None
    W = terms.matmul_weights_per_block(m)
    Nb = m.params_per_block
    blocks_only = p.blocks_only
    N = m.block_params if blocks_only else m.num_params
    N_root = N - L * Nb  # embedding + final norm + head (0 for blocks-only)
    k = r.checkpointed_blocks  # blocks that recompute in backward (0 off, L full, floor(L/N) selective:N)

    # --- persistent, sharded -------------------------------------------------
    qb = q if q is not None else 0.0  # bytes per stored quantized weight (quantized_model_init)
    state_params, state_optim = state_bytes(r)
    params, optim = state_params / D, state_optim / D
    if blocks_only:
        grad_bytes = a * N / D
        step_temp = a * N / D
    else:
        grad_bytes = 4.0 * N / D
        step_temp = trainer_optimizer(r).step_temporary_bytes * N / D

    # --- gathered compute copies ---------------------------------------------
    g_block = (2 * qb * W + a * (Nb - W)) if qmi else a * Nb  # bytes per gathered block
    blocks_gathered = L if not p.reshard_after_forward else min(2, L)
    gathered = blocks_gathered * g_block + a * N_root

    wc = 0.0 if qmi else weight_copy_bytes(p.precision, r.gpu)
    kept = L - k  # blocks that keep their activations (and TE's quantized weight copies) for backward
    # TE keeps a copy for every block that keeps its activations, plus the one being recomputed; from
    # TE_FSDP2_DROPS_WEIGHT_WORKSPACE on, under FSDP2, only the block in backward holds one (keeps_weight_copies)
    copies_kept = kept if keeps_weight_copies(r) else 0
    qcopies = wc * W * (copies_kept + (1 if k or not keeps_weight_copies(r) else 0))

    # --- activations -----------------------------------------------------------
    S = block_activation_bytes_per_token(r)
    tail = a * h if blocks_only else 2 * a * h  # output (+ final-norm output feeding the head)
    saved_fwd = (k * a * h + kept * S + tail) * T  # recomputing blocks keep their input only
    recomputed = (S - a * h) * T if k else 0.0  # the block being recomputed in backward
    act_transient = terms.block_backward_transient_bytes_per_token(m, activation_bytes=a, quantized_bytes=q) * T
    grad_reduce = (a + REDUCE_BYTES) * Nb  # a block's unsharded gradient + its reduce-scatter input
    logits = 0.0 if blocks_only else logits_bytes(r)
    # the root unit's (embedding, final norm, head) unsharded gradients: the head's from the loss's backward
    # on, all of them at the end of backward, when FSDP2 reduce-scatters the root (module docstring)
    head_grad = 0.0 if blocks_only else a * V * h
    grads_in_backward = accumulated_gradient_bytes(r) + head_grad

    static = {"parameters": params, "optimizer_state": optim, "workspace": WORKSPACE_GB * GB}
    zero = dict.fromkeys(BREAKDOWN_TERMS, 0.0)
    phases: dict[str, dict[str, float]] = {}
    if not blocks_only:
        phases["loss"] = {
            **zero,
            **static,
            "gradients": grads_in_backward,
            "gathered_parameters": gathered,
            "quantized_weight_copies": wc * W * copies_kept,
            "activations": saved_fwd,
            "logits_and_loss": logits,
        }
    # first block's backward: recomputed block + the larger of its activation
    # transient and (after its activations are freed) the gradient buffers
    with_acts = recomputed + act_transient
    after_acts = grad_reduce
    if with_acts >= after_acts:
        acts_bwd, transient_bwd = saved_fwd + recomputed, act_transient
    else:
        acts_bwd, transient_bwd = saved_fwd, grad_reduce
    phases["backward"] = {
        **zero,
        **static,
        "gradients": grads_in_backward,
        "gathered_parameters": gathered,
        "quantized_weight_copies": qcopies,
        "activations": acts_bwd,
        "transient": transient_bwd,
    }
    if not blocks_only:
        # the root's reduce-scatter, last of the backward: every block's sharded gradient, the root's
        # unsharded gradients (accumulated in fp32 under last_micro_batch) and the reduce-scatter input
        accumulated = p.gradient_accumulation_steps > 1 and p.gradient_sync == "last_micro_batch"
        root_grads = (REDUCE_BYTES if accumulated else a) * N_root
        phases["end_of_backward"] = {
            **zero,
            **static,
            "gradients": grad_bytes + root_grads,
            "transient": REDUCE_BYTES * N_root,
        }
    phases["optimizer_step"] = {**zero, **static, "gradients": grad_bytes, "transient": step_temp}

    totals = {name: sum(t.values()) for name, t in phases.items()}
    peak_phase = max(totals, key=lambda k: totals[k])
    peak_terms = {name: v / GB for name, v in phases[peak_phase].items()}
    total = totals[peak_phase] / GB
    frag = FRAGMENTATION_FRACTION * (
        peak_terms["activations"] + peak_terms["logits_and_loss"] + peak_terms["transient"]
    )
    if peak_phase == "loss" and p.loss == "unchunked-fp32":
        frag += UNCHUNKED_LOSS_CACHED_BYTES_PER_LOGIT * V * T / GB  # the freed bf16 logits' cached block
    required = total + frag + RUNTIME_OVERHEAD_GB
    cap = capacity_gb(r.gpu)
    usable = cap * (1 - SAFETY_FRACTION)
    return MemoryBreakdown(
        terms=peak_terms,
        total=total,
        peak_phase=peak_phase,
        fragmentation_margin=frag,
        runtime_overhead=RUNTIME_OVERHEAD_GB,
        required=required,
        capacity=cap,
        usable=usable,
        status=memory_status(required, usable),
        phases={name: v / GB for name, v in totals.items()},
        phase_terms={name: {term: v / GB for term, v in t.items()} for name, t in phases.items()},
    )


def logits_bytes(r: ResolvedInput) -> float:
    """Bytes of the ``logits_and_loss`` term at the loss's peak (full trainer), by the plan's ``loss``: the trainer's
    chunked loss holds :data:`LOSS_PEAK_BYTES_PER_LOGIT` per logit of one chunk (``V * min(T, 2^26 / V)`` logits);
    an unchunked fp32 loss :data:`UNCHUNKED_LOSS_BYTES_PER_LOGIT` per logit of the whole micro-batch (``V * T``)."""
    V, T = r.model.vocab_size, r.tokens_per_microbatch
    if r.input.loss == "unchunked-fp32":
        return UNCHUNKED_LOSS_BYTES_PER_LOGIT * V * T
    return LOSS_PEAK_BYTES_PER_LOGIT * V * min(T, loss_chunk_tokens(V))


def trainer_optimizer(r: ResolvedInput) -> OptimizerChoice:
    """The optimizer the trainer builds for the planned run (on a GPU): :func:`platform_spec.optimizers.optimizer_for`."""
    return optimizer_for("cuda", quantized_model_init=stores_quantized_weights(r))


def stores_quantized_weights(r: ResolvedInput) -> bool:
    """Whether the plan stores block weights quantized (``quantized_model_init`` with a quantized precision)."""
    return r.input.quantized_model_init and get_precision(r.input.precision).quantized


def state_bytes(r: ResolvedInput) -> tuple[float, float]:
    """``(parameters, optimizer_state)``: bytes of the persistent training state of one replica of the modelled
    network, before sharding (the ``parameters`` and ``optimizer_state`` terms times the shard degree ``D``).

    Full trainer: fp32 parameters ``4N`` (with ``quantized_model_init`` the block matmul weights stored
    quantized, :meth:`~platform_spec.precisions.Precision.stored_weight_bytes` ``c`` each: ``c*L*W + 4*(N - L*W)``)
    and the trainer's optimizer state, ``state_bytes_per_parameter * N`` (:func:`trainer_optimizer`: ``8N``, two
    fp32 moments; ``12N`` with TransformerEngine's FusedAdam, whose fp32 master copy covers every parameter).
    Blocks-only: the example's parameters and Adam moments in the compute dtype, ``a*N`` and ``2*a*N``. What a
    trainer checkpoint holds besides RNG and trainer state (:mod:`planner.checkpoint`)."""
    p, m = r.input, r.model
    L = m.num_layers
    N = m.block_params if p.blocks_only else m.num_params
    a = activation_bytes(p.precision)
    terms = r.family.terms
    assert terms is not None  # resolve() refuses a family without terms
    W = terms.matmul_weights_per_block(m)
    if p.blocks_only:
        q = quantized_bytes(p.precision)
        qmi = p.quantized_model_init and q is not None
        return (q * L * W + a * (N - L * W) if qmi and q is not None else a * N), 2 * a * N
    if stores_quantized_weights(r):
        c = get_precision(p.precision).stored_weight_bytes(r.gpu.compute_capability)
        params = c * L * W + 4.0 * (N - L * W)
    else:
        params = 4.0 * N
    return params, trainer_optimizer(r).state_bytes_per_parameter * N


def accumulated_gradient_bytes(r: ResolvedInput) -> float:
    """Bytes per GPU of gradients live through a later micro-batch's forward and backward (module docstring,
    ``gradients``): 0 with one micro-batch; with more, the sharded gradients (``every_micro_batch``: full
    trainer ``4N/D``, blocks-only ``aN/D``) or FSDP2's unsharded ones accumulated in the reduce dtype
    (``last_micro_batch``: fp32 ``4N``; blocks-only, the example's FSDP1 ``no_sync``: ``aN``)."""
    p, m = r.input, r.model
    if p.gradient_accumulation_steps <= 1:
        return 0.0
    N = m.block_params if p.blocks_only else m.num_params
    per_param = activation_bytes(p.precision) if p.blocks_only else REDUCE_BYTES
    if p.gradient_sync == "last_micro_batch":
        return per_param * N
    return per_param * N / r.shard_degree


__all__ = [
    "AT_RISK",
    "AT_RISK_FRACTION",
    "BREAKDOWN_TERMS",
    "FITS",
    "MEMORY_STATUSES",
    "OUT_OF_MEMORY",
    "PUBLISHED_OVER_PREDICTION",
    "TE_FSDP2_DROPS_WEIGHT_WORKSPACE",
    "UNCHUNKED_LOSS_BYTES_PER_LOGIT",
    "UNCHUNKED_LOSS_CACHED_BYTES_PER_LOGIT",
    "MemoryBreakdown",
    "accumulated_gradient_bytes",
    "activation_bytes",
    "block_activation_bytes_per_token",
    "capacity_gb",
    "estimate_memory",
    "keeps_weight_copies",
    "logits_bytes",
    "memory_status",
    "quantized_bytes",
    "state_bytes",
    "stores_quantized_weights",
    "trainer_optimizer",
    "weight_casts_per_microbatch",
    "weight_copy_bytes",
]
