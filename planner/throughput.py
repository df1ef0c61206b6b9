"""Step time, tokens/s, MFU and cost of a training configuration.

Model (per GPU, per micro-batch of ``T = b*s`` tokens)
------------------------------------------------------
Compute is a sum of rooflines, each at its own achieved rate::

    t_gpu = ( gemm_flops / peak(precision)          # block matmuls (fp8/mxfp8/nvfp4 tensor cores)
            + head_flops / peak(bf16)               # LM head, kept in bf16 (full model)
            ) / EFFICIENCY
          + attn_flops / (peak(attention) * ATTENTION_PEAK_FRACTION[kernel])  # EFFICIENCY for te-fused
          + elementwise_bytes / (hbm_bandwidth * HBM_EFFICIENCY)    # norms, residuals, GELU, quantize/cast

The tensor-core work runs at :data:`EFFICIENCY` of the dense peak; the attention kernel at its own measured fraction
(the plan's ``attention``: :data:`ATTENTION_PEAK_FRACTION`, TransformerEngine's fused attention at
:data:`EFFICIENCY`); the memory-bound elementwise kernels stream at :data:`HBM_EFFICIENCY` of the HBM bandwidth, as
the optimizer step does (they once ran at the tensor cores' efficiency, which made them ~1.5x too slow: the
small-model, long-sequence points were then predicted too fast only because the attention was).

The block terms are the model family's, looked up by name
(:attr:`platform_spec.models.ModelFamily.terms`; the GPT family's derivations
are in ``model_families/gpt/__init__.py``); the embedding, head and loss are the
skeleton every family shares.

* ``gemm_flops = 6 * L * W * T`` (``W``: the family's matmul weights per block,
  GPT ``4h^2 + 2hf``); ``attn_flops``: the family's attention FLOPs per token
  times ``T`` (GPT: ``6 * L * h * s``, the causal half); ``head_flops = 6 * h * V * T``
  (8 when the chunked loss recomputes the head's forward, ``T > 2^26 / V``).
* Elementwise traffic per token per block (``a`` activation bytes, ``q``
  quantized bytes): the family's ``block_elementwise_bytes_per_token``, forward
  and backward (GPT: LayerNorms, residual adds with the benchmark's dropout
  masks, GELU, and for the quantized formats the rowwise + columnwise casts of
  the GEMM inputs and output gradients), plus casting every weight once per
  micro-batch. This term is why fp8/mxfp8/nvfp4 give only a modest speed-up
  over bf16 for small models (the guide's observation): it scales with ``h``
  while the matmuls scale with ``h^2``.
* Activation checkpointing adds one forward of each recomputing block (its
  matmuls, attention and elementwise forward work): ``k/L`` of ~+33% of block
  compute, ``k`` the recomputing blocks (all for ``full``, every Nth for
  ``selective:N``, :mod:`platform_spec.training_modes`). The guide's 10-30% is
  wall-clock, where communication and fixed costs dilute it;
  :attr:`ThroughputEstimate.recompute_overhead_pct` reports ours.
* The validation loss (``eval_interval``, ``eval_batches``): one evaluation is ``eval_batches`` forward
  passes of a micro-batch, a third of its compute without recompute plus its exposed forward all-gathers
  (:func:`evaluation_time`); spread over ``eval_interval`` steps it is
  :attr:`ThroughputEstimate.eval_overhead_pct` of the wall time, which the cost of a token budget includes
  and tokens/s leaves out.
* Small micro-batches under-use the GPU: the step cannot run faster than the
  CPU can launch its kernels, the family's ``kernels_per_block`` per block at
  ``LAUNCH_S`` each (``t_compute = max(t_gpu, launch floor)``).

``EFFICIENCY`` = 0.533 is calibrated (:func:`calibrate`) on the independent published steady-state measurements
(``benchmarks/published_points.json``: llm-foundry's MPT on H100, Megatron-Bridge's Llama 3 8B on H100 and B200,
MLPerf Training v5.1's Llama 3.1 8B on B200): the one factor at which the median of ``log(predicted / published)``
over them is zero. One factor for every point, not one per point: what the points differ in (model size, sequence,
precision, attention kernel, GPU) is the model's. ``FIRST_ITERATION_S`` is then fitted to the guide's batch-1
point (~6K tokens/s, ``gpt-1b``, mxfp8, sequence 8192, 8x B200, blocks-only); the guide's other points (~51K at
batch 16 with checkpointing: +9%; checkpointing at batch 1: "slightly below 6K") are predicted, not fitted. The
factor was once fitted to the guide's two points alone (0.478), the example's average over 5 iterations including
the first, which made the independent Blackwell points 9-15% slow.

How we read the guide's tokens/s
--------------------------------
The guide ran TransformerEngine's ``fsdp.py``, which prints only rank 0's
average iteration time over ``--num-iters`` (default 5) iterations *including
the first* (kernel JIT and autotuning, NCCL communicator set-up, allocator
growth, lazy optimizer state). We read ~6K and ~51K tokens/s as **per GPU**
(``batch * seq / iteration time`` on one rank): as whole-job figures they would
mean ~750 tokens/s per GPU, a marginal rate of 2% of B200's fp8 peak and a
10-second fixed cost per iteration, while the per-GPU reading gives a marginal
rate of ~19% of fp8 peak (~39% of bf16 peak) and a ~6.5 s one-off first
iteration -- both ordinary. The ~8x from 16x the tokens is the fixed cost
being amortised. So ``blocks_only`` plans add ``FIRST_ITERATION_S / 5`` to
each step (the example's measurement), and full-trainer plans report steady
state (the trainer's metric lines exclude warm-up).

Communication (FSDP)
--------------------
Per micro-batch each GPU all-gathers the block parameters in forward (and again
in backward when ``reshard_after_forward``); it reduce-scatters fp32 gradients
after every micro-batch (``gradient_sync=every_micro_batch``, the default) or
after the last of each optimizer step only (``last_micro_batch``: the other
micro-batches keep unsharded gradients, :mod:`platform_spec.training_modes`):
bytes received per GPU ``= bytes * (D - 1) / D`` per reduce-scatter.
HSDP adds an all-reduce of the sharded fp32 gradients across the ``R``
replicas with each reduce-scatter: ``2 * 4N/D * (R-1)/R``.
Bandwidth (:func:`platform_spec.catalogue.collective_bandwidth`): within one NVLink domain the unidirectional NVLink bandwidth (half
the catalogue's bidirectional figure) at ``NVLINK_EFFICIENCY`` -- a domain may hold several instances: up to 18
``ml.p6e-gb200.36xlarge`` hosts (72 GPUs) of a GB200 UltraServer, whose FSDP and HSDP collectives stay on NVLink
across instances; a shard group that spans NVLink domains (instances of P5/P6, GB200 jobs of more than 18
hosts) moves each GPU's volume at the host's whole EFA bandwidth at ``EFA_EFFICIENCY`` (NCCL runs one ring channel
per NIC, the hops inside a host over NVLink; this was the bandwidth *per GPU* until
llm-foundry's 70B runs on 32 H100s, predicted at a third of their published
speed, showed it 8x too low), and HSDP's replica all-reduce -- one GPU per
host in each of the host's ``gpus_per_host`` concurrent groups -- a share of it. An UltraServer is planned as
its hosts (the collectives, HSDP's per-node shard group), so 2 x ``ml.u-p6e-gb200x72`` and 36 x
``ml.p6e-gb200.36xlarge`` plan the same. Each collective also pays a latency. Overlap: FSDP
prefetches the next block's gather during the current block's compute, so only
the first gather, the last reduce-scatter and any communication longer than the
compute it hides behind are exposed.

The optimizer step is memory-bound (Adam reads and writes parameters and two
moments, reads gradients) at HBM bandwidth.

Checkpoints: what an interval save blocks the training for (the device-to-host staging of an asynchronous save; the
staging and the write of a synchronous one), spread over ``checkpoint_interval`` steps, is part of the step time
(:mod:`planner.checkpoint`).

Outputs: step time, tokens/s per GPU and per job, model TFLOP/s per GPU and MFU
in percent of the precision's dense peak (:func:`platform_spec.catalogue.dense_peak_tflops`,
the same definition the trainer's ``mfu`` metric uses), and -- given a price
per instance-hour and a token budget -- wall time and cost.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from planner.checkpoint import CheckpointEstimate, estimate_checkpoint
from planner.inputs import ResolvedInput
from planner.memory import (
    activation_bytes,
    loss_chunk_tokens,
    quantized_bytes,
    weight_casts_per_microbatch,
    weight_copy_bytes,
)
from platform_spec.catalogue import collective_bandwidth, dense_peak_tflops
from platform_spec.models import mfu_percent, model_tflops_per_second
from platform_spec.precisions import get_precision
from platform_spec.training_modes import gradient_reductions_per_step

EFFICIENCY = 0.533
"""Achieved fraction of the dense tensor-core peak, GEMMs and TE's fused attention (:func:`calibrate`, module
docstring)."""
FIRST_ITERATION_S = 6.57
"""One-off cost of the TE example's first timed iteration, seconds (fitted by :func:`calibrate`)."""
TIMED_ITERATIONS = 5
"""``fsdp.py --num-iters`` default: iterations averaged in the example's timing."""
LAUNCH_S = 5e-6
"""CPU time to launch one kernel through PyTorch and TransformerEngine, seconds (estimate)."""
HBM_EFFICIENCY = 0.7
"""Achieved fraction of HBM bandwidth of the memory-bound kernels: the optimizer step and the elementwise work
(estimate)."""
STEP_OVERHEAD_S = 0.005
"""Full trainer only: per-step host work (loss sync, logging, data hand-off), seconds (estimate)."""
FLASH_ATTENTION_2_PEAK_FRACTION = 0.15
"""Achieved fraction of the dense bf16 peak of FlashAttention-2's forward + backward, counting the causal half of
the score FLOPs (``attention="flash-attention-2"``). Measured, not fitted to a point: the slope of time per token
against sequence length in llm-foundry's H100 bf16 sweeps (scripts/train/benchmarking/README.md at 4952183, MPT-1B
sequence 2048 -> 8192 -> 32768 and MPT-3B 4096 -> 8192 -> 16384, no checkpointing, the same batch tokens): only
the attention grows with ``s``, at 137-160 TFLOP/s, 14-16% of the H100's 989. As the FlashAttention-3 paper
(Shah et al., arXiv:2407.08608, abstract: "FlashAttention-2 ... achieving only 35% utilization on the H100 GPU")
reports forward-only for the full square; the backward is slower still and the causal tiles on the diagonal are
computed whole."""
ATTENTION_PEAK_FRACTION: dict[str, float] = {"flash-attention-2": FLASH_ATTENTION_2_PEAK_FRACTION}
"""Achieved fraction of the dense peak by attention kernel (:data:`planner.inputs.ATTENTION_KERNELS`); a kernel not
listed (``te-fused``, cuDNN's fused attention) runs at the GEMMs' :data:`EFFICIENCY`, which was fitted with it."""


def attention_peak_tflops(r: ResolvedInput) -> float:
    """Dense peak the fused attention runs at: the precision's high-precision format (bf16 under the TE
    recipes, which keep attention in bf16; else the precision itself: :attr:`Precision.high_precision`)."""
    return dense_peak_tflops(r.gpu, get_precision(r.input.precision).high_precision)


def elementwise_bytes_per_token(r: ResolvedInput) -> tuple[float, float]:
    """HBM bytes per token per block of the non-matmul work: ``(forward, backward)``, the family's
    ``block_elementwise_bytes_per_token`` (hidden-dropout masks in the blocks-only benchmark, TE's
    default, not in our trainer)."""
    terms = r.family.terms
    assert terms is not None  # resolve() refuses a family without terms
    return terms.block_elementwise_bytes_per_token(
        r.model,
        activation_bytes=activation_bytes(r.input.precision),
        quantized_bytes=quantized_bytes(r.input.precision),
        dropout=r.input.blocks_only,
    )


@dataclass(frozen=True)
class ComputeTime:
    """GPU time of one micro-batch, seconds, by term.

    Attributes:
        gemm: block matmuls (and the LM head), forward + backward.
        attention: fused attention, forward + backward.
        elementwise: memory-bound work (norms, dropout, residuals, GELU, casts).
        recompute: the extra forward of activation checkpointing (0 without).
        launch_floor: CPU kernel-launch time of the micro-batch.
    """

    gemm: float
    attention: float
    elementwise: float
    recompute: float
    launch_floor: float

    @property
    def gpu(self) -> float:
        """GPU time including the recompute, seconds."""
        return self.gemm + self.attention + self.elementwise + self.recompute

    @property
    def total(self) -> float:
        return max(self.gpu, self.launch_floor)


def compute_time(r: ResolvedInput, *, efficiency: float = EFFICIENCY) -> ComputeTime:
    """GPU compute time of one micro-batch on one GPU (see the module docstring)."""
    p, m = r.input, r.model
    terms = r.family.terms
    assert terms is not None  # resolve() refuses a family without terms
    L, h, V = m.num_layers, m.hidden_size, m.vocab_size
    s = p.seq_length
    T = r.tokens_per_microbatch
    W = terms.matmul_weights_per_block(m)
    attn_per_token = terms.attention_flops_per_token(m, s)  # forward + backward, every block
    peak = dense_peak_tflops(r.gpu, p.precision) * 1e12
    peak_bf16 = dense_peak_tflops(r.gpu, get_precision(p.precision).high_precision) * 1e12  # LM head's format
    peak_attn = attention_peak_tflops(r) * 1e12
    bw = r.gpu.hbm_bandwidth_tb_s * 1e12
    a = activation_bytes(p.precision)

    gemm = 6.0 * L * W * T / peak
    # the attention kernel's achieved rate: a measured fraction of the peak, or the GEMMs' efficiency (te-fused)
    attn_efficiency = ATTENTION_PEAK_FRACTION.get(p.attention, efficiency)
    attn = attn_per_token * T / peak_attn / attn_efficiency
    fwd_b, bwd_b = elementwise_bytes_per_token(r)
    elem_bytes = L * (fwd_b + bwd_b) * T
    wc = weight_copy_bytes(p.precision, r.gpu)
    if wc:
        # cast every weight once per micro-batch, twice when TE does not keep the copy for backward
        elem_bytes += weight_casts_per_microbatch(r) * L * W * (a + wc)
    if not p.blocks_only:
        # the chunked loss recomputes the head forward (one chunk or more); an unchunked loss does not
        head_passes = 6.0 if p.loss != "chunked" or loss_chunk_tokens(V) >= T else 8.0
        gemm += head_passes * h * V * T / peak_bf16  # LM head
        elem_bytes += (20.0 * V + 20.0 * h) * T  # logits softmax/cross-entropy, embedding, final norm
    elem = elem_bytes / bw

    # the recomputing blocks run their forward again: k of L blocks (0 off, L full, floor(L/N) selective:N)
    share = r.checkpointed_blocks / L
    recompute = share * (
        2.0 * L * W * T / peak / efficiency
        + attn_per_token / 3.0 * T / peak_attn / attn_efficiency
        + L * fwd_b * T / (bw * HBM_EFFICIENCY)
    )
    kernels = terms.kernels_per_block * L * (1.0 + share / 3.0)
    return ComputeTime(
        gemm=gemm / efficiency,
        attention=attn,
        elementwise=elem / HBM_EFFICIENCY,
        recompute=recompute,
        launch_floor=kernels * LAUNCH_S,
    )


@dataclass(frozen=True)
class CommTime:
    """FSDP communication of one micro-batch that reduce-scatters, seconds and bytes received per GPU: the
    all-gathers (every micro-batch) and the reduce-scatter and HSDP all-reduce (every micro-batch, or the last
    of each step only: ``gradient_sync``; :attr:`ThroughputEstimate.gradient_reductions`)."""

    allgather_bytes: float
    reduce_scatter_bytes: float
    allreduce_bytes: float
    allgather_s: float
    reduce_scatter_s: float
    allreduce_s: float
    bandwidth_gb_s: float
    link: str

    @property
    def total(self) -> float:
        return self.allgather_s + self.reduce_scatter_s + self.allreduce_s


def _group_bandwidth(r: ResolvedInput, group: int, *, per_host: int | None = None) -> tuple[float, float, str]:
    """(bytes/s per GPU, latency s, link name) of a collective over ``group`` GPUs
    (:func:`platform_spec.catalogue.collective_bandwidth`, which the trainer's pre-flight measurement is logged
    beside)."""
    link = collective_bandwidth(r.instance, group, per_host=per_host)
    return link.bytes_per_s, link.latency_s, link.link


def comm_time(r: ResolvedInput) -> CommTime:
    """FSDP collectives of one micro-batch (module docstring)."""
    p, m = r.input, r.model
    D, R = r.shard_degree, r.replicate_degree
    N = m.block_params if p.blocks_only else m.num_params
    L = m.num_layers
    a = activation_bytes(p.precision)
    q = quantized_bytes(p.precision)
    gather_bytes_per_param = q if (p.quantized_model_init and q is not None) else a
    passes = 2 if p.reshard_after_forward else 1
    frac = (D - 1) / D if D > 1 else 0.0
    ag = passes * gather_bytes_per_param * N * frac
    rs = 4.0 * N * frac
    bw, lat, link = _group_bandwidth(r, D)
    units = L + (0 if p.blocks_only else 1)
    ag_s = (ag / bw + passes * units * lat) if D > 1 else 0.0
    rs_s = (rs / bw + units * lat) if D > 1 else 0.0
    ar = 0.0
    ar_s = 0.0
    if R > 1:
        ar = 2 * 4.0 * N / D * (R - 1) / R
        bw_x, lat_x, _ = _group_bandwidth(r, R, per_host=1)  # one replica per host
        ar_s = ar / bw_x + units * lat_x
    return CommTime(
        allgather_bytes=ag,
        reduce_scatter_bytes=rs,
        allreduce_bytes=ar,
        allgather_s=ag_s,
        reduce_scatter_s=rs_s,
        allreduce_s=ar_s,
        bandwidth_gb_s=bw / 1e9 if bw != float("inf") else 0.0,
        link=link,
    )


@dataclass(frozen=True)
class Cost:
    """Wall time and cost of a token budget.

    Attributes:
        tokens: the budget, tokens.
        wall_time_hours: ``tokens / job tokens/s / 3600``.
        instance_hours: ``wall_time_hours * instance_count``.
        cost: ``instance_hours * price_per_hour`` (USD; ``None`` without a price).
    """

    tokens: float
    wall_time_hours: float
    instance_hours: float
    cost: float | None


@dataclass(frozen=True)
class ThroughputEstimate:
    """Speed of one configuration.

    Attributes:
        flops_per_token: model training FLOPs per token (the model family's ``flops_per_token``).
        compute: GPU compute per micro-batch by term.
        comm: FSDP communication per micro-batch.
        exposed_comm_s: communication not hidden behind compute, per micro-batch.
        optimizer_s: optimizer step, seconds.
        fixed_s: per-step fixed cost (the TE example's first-iteration share, or host overhead).
        step_time_s: one optimizer step, seconds, with the interval checkpoints' share (``checkpoint.per_step_s``).
        tokens_per_step: tokens per optimizer step, whole job.
        tokens_per_second: whole job.
        tokens_per_second_per_gpu: per GPU.
        tflops_per_gpu: model TFLOP/s per GPU.
        peak_tflops: dense peak of the precision, TFLOP/s.
        mfu: model FLOPs utilisation, percent (0-100).
        bound: ``"compute"``, ``"communication"`` or ``"launch"`` (what limits the micro-batch).
        recompute_overhead_pct: step time added by activation checkpointing, percent.
        eval_time_s: one evaluation of the validation loss (``eval_batches`` forward passes of a micro-batch:
            :func:`evaluation_time`), seconds; 0 with ``eval_interval`` 0.
        eval_overhead_pct: ``eval_time_s`` spread over the ``eval_interval`` steps between evaluations, percent of
            their training time. tokens/s, TFLOP/s and MFU leave it out (as the trainer's metric lines do); the
            wall time and cost of ``tokens`` include it.
        cost: wall time and cost of ``tokens`` (``None`` without a token budget).
        checkpoint: the checkpoints' size, times and memory (:mod:`planner.checkpoint`); its ``per_step_s``, the
            interval saves' blocking time over ``checkpoint_interval`` steps, is part of ``step_time_s`` (so of
            tokens/s, MFU and cost); ``None`` for a blocks-only plan (the example saves none).
        micro_batches: micro-batches per step (``gradient_accumulation_steps``).
        gradient_reductions: reduce-scatters of the gradients per step (``micro_batches`` for
            ``every_micro_batch``, 1 for ``last_micro_batch``).
    """

    flops_per_token: float
    compute: ComputeTime
    comm: CommTime
    exposed_comm_s: float
    optimizer_s: float
    fixed_s: float
    step_time_s: float
    tokens_per_step: float
    tokens_per_second: float
    tokens_per_second_per_gpu: float
    tflops_per_gpu: float
    peak_tflops: float
    mfu: float
    bound: str
    recompute_overhead_pct: float
    cost: Cost | None
    eval_time_s: float = 0.0
    eval_overhead_pct: float = 0.0
    checkpoint: CheckpointEstimate | None = None

    micro_batches: int = 1
    gradient_reductions: int = 1

    @property
    def comm_fraction(self) -> float:
        """Exposed communication as a share of the step time (0-1)."""
        return min(1.0, self.exposed_comm_s * self.micro_batches / self.step_time_s)


def _exposed(r: ResolvedInput, c: ComputeTime, k: CommTime, *, reduce: bool = True) -> float:
    """Communication of one micro-batch not hidden behind its compute; ``reduce``: this
    micro-batch reduce-scatters (the last of a step; every one without accumulation)."""
    L = r.model.num_layers
    units = L + (0 if r.input.blocks_only else 1)
    # forward is a third of the work without recompute; the recompute runs inside backward
    fwd_compute = max(0.0, c.total - c.recompute) / 3.0
    bwd_compute = c.total - fwd_compute
    passes = 2 if r.input.reshard_after_forward else 1
    ag_fwd = k.allgather_s / passes
    ag_bwd = k.allgather_s - ag_fwd
    reduce_s = (k.reduce_scatter_s + k.allreduce_s) if reduce else 0.0
    first = ag_fwd / units  # the first block's gather has nothing to hide behind
    last = reduce_s / units  # nor the last reduce-scatter
    fwd_exposed = max(0.0, ag_fwd - first - fwd_compute)
    bwd_exposed = max(0.0, ag_bwd + reduce_s - last - bwd_compute)
    return first + last + fwd_exposed + bwd_exposed


def evaluation_time(r: ResolvedInput, c: ComputeTime, k: CommTime) -> float:
    """Seconds of one evaluation of the validation loss (``training.evaluation``): ``eval_batches`` forward
    passes of one micro-batch per GPU, without gradients: a third of the micro-batch's compute without recompute
    (the module's forward share; the eval forward recomputes nothing), and the forward all-gathers not hidden
    behind it (the first block's at least), as in :func:`_exposed`; no backward, reduce-scatter or optimizer step.
    0 with ``eval_interval`` 0."""
    p = r.input
    if not p.eval_interval:
        return 0.0
    units = r.model.num_layers + (0 if p.blocks_only else 1)
    forward = max(0.0, c.total - c.recompute) / 3.0
    gather = k.allgather_s / (2 if p.reshard_after_forward else 1)
    first = gather / units
    return p.eval_batches * (forward + first + max(0.0, gather - first - forward))


def estimate_throughput(
    r: ResolvedInput, *, efficiency: float = EFFICIENCY, first_iteration_s: float = FIRST_ITERATION_S
) -> ThroughputEstimate:
    """Step time, tokens/s, MFU (and cost) of a resolved plan input (module docstring)."""
    p, m = r.input, r.model
    c = compute_time(r, efficiency=efficiency)
    k = comm_time(r)
    gas = p.gradient_accumulation_steps
    # gradients are reduce-scattered after every micro-batch or after the last of the step only (gradient_sync)
    reductions = gradient_reductions_per_step(p.gradient_sync, gas)
    exposed_reduce = _exposed(r, c, k, reduce=True)
    exposed_other = _exposed(r, c, k, reduce=False)
    exposed = (reductions * exposed_reduce + (gas - reductions) * exposed_other) / gas  # mean per micro-batch
    N = m.block_params if p.blocks_only else m.num_params
    opt_bytes = (14.0 if p.blocks_only else 28.0) * N / r.shard_degree
    optimizer_s = opt_bytes / (r.gpu.hbm_bandwidth_tb_s * 1e12 * HBM_EFFICIENCY)
    fixed = first_iteration_s / TIMED_ITERATIONS if p.blocks_only else STEP_OVERHEAD_S
    micro = c.total + exposed
    step = gas * micro + optimizer_s + fixed
    # the interval checkpoints' blocking time, spread over the steps between them (planner.checkpoint)
    checkpoint = estimate_checkpoint(r, step)
    if checkpoint is not None:
        step += checkpoint.per_step_s
    tokens_per_gpu_step = gas * r.tokens_per_microbatch
    tps_gpu = tokens_per_gpu_step / step
    fpt = r.family.flops_per_token(m, p.seq_length, include_embedding=not p.blocks_only)  # custom shapes too
    peak = dense_peak_tflops(r.gpu, p.precision)
    if c.launch_floor > c.gpu:
        bound = "launch"
    elif exposed > 0.25 * micro:
        bound = "communication"
    else:
        bound = "compute"
    recompute_pct = 0.0
    if r.checkpointed_blocks:
        # the same configuration without recompute (memory aside): what checkpointing costs in wall time
        plain = dataclasses.replace(r, input=p.replace(activation_checkpointing="off"))
        plain_step = estimate_throughput(plain, efficiency=efficiency, first_iteration_s=first_iteration_s).step_time_s
        recompute_pct = 100.0 * (step / plain_step - 1.0)
    eval_s = evaluation_time(r, c, k)
    eval_pct = 100.0 * eval_s / (p.eval_interval * step) if p.eval_interval else 0.0
    cost = None
    if p.tokens is not None:
        hours = p.tokens / (tps_gpu * r.world_size) / 3600.0 * (1.0 + eval_pct / 100.0)
        inst_hours = hours * p.instance_count
        cost = Cost(
            tokens=float(p.tokens),
            wall_time_hours=hours,
            instance_hours=inst_hours,
            cost=None if p.price_per_hour is None else inst_hours * p.price_per_hour,
        )
    est = ThroughputEstimate(
        flops_per_token=fpt,
        compute=c,
        comm=k,
        exposed_comm_s=exposed,
        optimizer_s=optimizer_s,
        fixed_s=fixed,
        step_time_s=step,
        tokens_per_step=tokens_per_gpu_step * r.world_size,
        tokens_per_second=tps_gpu * r.world_size,
        tokens_per_second_per_gpu=tps_gpu,
        tflops_per_gpu=model_tflops_per_second(tps_gpu, fpt),
        peak_tflops=peak,
        mfu=mfu_percent(tps_gpu, fpt, peak),
        bound=bound,
        recompute_overhead_pct=recompute_pct,
        cost=cost,
        eval_time_s=eval_s,
        eval_overhead_pct=eval_pct,
        checkpoint=checkpoint,
        micro_batches=gas,
        gradient_reductions=reductions,
    )
    return est


GUIDE_THROUGHPUT_POINTS: tuple[tuple[str, int, float], ...] = (
    ("off", 1, 6000.0),
    ("full", 16, 51000.0),
)
"""The guide's points: (activation_checkpointing, batch_size, tokens/s per GPU) for ``gpt-1b``, mxfp8, sequence
8192, ``ml.p6-b200.48xlarge`` blocks-only. The first fixes :data:`FIRST_ITERATION_S`; the second is predicted."""


def calibrate(points: Sequence[tuple[ResolvedInput, float]]) -> tuple[float, float]:
    """Re-derive ``(EFFICIENCY, FIRST_ITERATION_S)``.

    Args:
        points: independent steady-state measurements, ``(resolved input, published tokens/s per GPU)``
            (``benchmarks/planner_published.py``'s ``calibration_points``).

    Returns:
        The efficiency at which the median of ``log(predicted / published)`` over ``points`` is zero (bisection;
        the median falls as the efficiency rises), and the first-iteration cost, seconds, at which the guide's
        batch-1 point (:data:`GUIDE_THROUGHPUT_POINTS`) is met at that efficiency. The module constants are these
        values, rounded.

    Raises:
        ValueError: ``points`` is empty.
    """
    from planner.inputs import PlanInput, resolve

    if not points:
        raise ValueError("calibrate needs at least one published point")

    def median_log_error(eff: float) -> float:
        errors = [
            math.log(estimate_throughput(r, efficiency=eff).tokens_per_second_per_gpu / published)
            for r, published in points
        ]
        return statistics.median(errors)

    lo, hi = 0.05, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if median_log_error(mid) > 0:  # too fast: lower efficiency
            hi = mid
        else:
            lo = mid
    eff = (lo + hi) / 2
    ckpt, batch, tps = GUIDE_THROUGHPUT_POINTS[0]
    guide = resolve(
        PlanInput(
            model="gpt-1b",
            num_layers=None,
            precision="mxfp8",
            seq_length=8192,
            batch_size=batch,
            activation_checkpointing=ckpt,
            instance_type="ml.p6-b200.48xlarge",
            blocks_only=True,
        )
    )
    steady = estimate_throughput(guide, efficiency=eff, first_iteration_s=0.0)
    return eff, (guide.tokens_per_microbatch / tps - steady.step_time_s) * TIMED_ITERATIONS


__all__ = [
    "ATTENTION_PEAK_FRACTION",
    "EFFICIENCY",
    "FIRST_ITERATION_S",
    "FLASH_ATTENTION_2_PEAK_FRACTION",
    "GUIDE_THROUGHPUT_POINTS",
    "CommTime",
    "ComputeTime",
    "Cost",
    "ThroughputEstimate",
    "calibrate",
    "comm_time",
    "compute_time",
    "estimate_throughput",
    "evaluation_time",
]
