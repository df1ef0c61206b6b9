"""A :class:`Plan` (memory, speed, cost; its :class:`Recommendation` s are :mod:`planner.recommend`'s) and
:func:`evaluate`, which works one out."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from planner.checkpoint import D2H_EFFICIENCY, DOWNLOAD_TIME_NOTE, NVME_WRITE_GB_S
from planner.errors import PlanInputError
from planner.inputs import PlanInput, ResolvedInput, ResolveMemo, resolve
from planner.memory import AT_RISK_FRACTION, OUT_OF_MEMORY, MemoryBreakdown, estimate_memory
from planner.throughput import ThroughputEstimate, estimate_throughput
from platform_spec.precisions import get_precision


@dataclass(frozen=True)
class Recommendation:
    """One suggested change and its effect.

    Attributes:
        title: one line, e.g. ``"Raise batch_size to 16"``.
        reason: why (the guide's rule and the figures behind it).
        changes: ``{field: new value}`` in hyperparameter names (plus
            ``instance_count``); empty for advice that changes nothing.
        after: the plan with ``changes`` applied (its own ``recommendations``
            empty); ``None`` for advice without changes.
        kind: ``"fit"``, ``"throughput"``, ``"checkpointing"``,
            ``"communication"``, ``"precision"``, ``"memory"``, ``"checkpoint"`` (interval and stop saves:
            :mod:`planner.checkpoint`) or ``"advice"``.
    """

    title: str
    reason: str
    changes: dict[str, Any]
    after: Plan | None
    kind: str = "advice"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: title, reason, kind, changes and the ``after`` figures (or ``null``)."""
        return {
            "title": self.title,
            "reason": self.reason,
            "kind": self.kind,
            "changes": dict(self.changes),
            "after": None if self.after is None else self.after.summary(),
        }


@dataclass(frozen=True)
class Plan:
    """The planner's answer for one :class:`PlanInput`.

    Attributes:
        input: the (normalised) input.
        resolved: model shape, hardware and parallel layout.
        memory_gb: per-GPU memory breakdown, GB (``.total``, ``.fits``, terms).
        throughput: speed model output (step time, tokens/s, MFU, cost).
        recommendations: what to change, with the figures after each change.
    """

    input: PlanInput
    resolved: ResolvedInput
    memory_gb: MemoryBreakdown
    throughput: ThroughputEstimate
    recommendations: list[Recommendation] = field(default_factory=list)

    @property
    def status(self) -> str:
        """The memory verdict: ``"fits"``, ``"at-risk"`` (within the model's stated error of usable memory) or
        ``"out-of-memory"`` (:data:`planner.memory.MEMORY_STATUSES`)."""
        return self.memory_gb.status

    @property
    def fits(self) -> bool:
        """Whether the configuration fits in GPU memory with the margins of :mod:`planner.memory` (``status ==
        "fits"``: an ``at-risk`` plan does not count)."""
        return self.memory_gb.fits

    @property
    def ran(self) -> bool:
        """Whether the speed figures describe a run: not for a configuration predicted out of memory."""
        return self.status != OUT_OF_MEMORY

    @property
    def not_run_reason(self) -> str | None:
        """Why the speed figures are withheld (``None`` when they are not): the memory verdict in words."""
        if self.ran:
            return None
        mem = self.memory_gb
        return f"not run: out of memory ({mem.required:.1f} GB needed per GPU, {mem.usable:.1f} GB usable)"

    @property
    def tokens_per_second(self) -> float:
        """Whole-job tokens/s."""
        return self.throughput.tokens_per_second

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.throughput.tokens_per_second_per_gpu

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation, percent (0-100)."""
        return self.throughput.mfu

    @property
    def step_time_s(self) -> float:
        return self.throughput.step_time_s

    @property
    def tflops_per_gpu(self) -> float:
        return self.throughput.tflops_per_gpu

    def _speed(self, value: float, digits: int) -> float | None:
        """``value`` rounded, or ``None`` when the plan is predicted out of memory (it would not run)."""
        return round(value, digits) if self.ran else None

    def summary(self) -> dict[str, Any]:
        """The headline figures (used for a recommendation's ``after``); speed figures are ``null`` for a
        configuration predicted out of memory (``not_run`` says why)."""
        return {
            "status": self.status,
            "fits": self.fits,
            "memory_gb_total": round(self.memory_gb.total, 3),
            "memory_gb_required": round(self.memory_gb.required, 3),
            "tokens_per_second": self._speed(self.tokens_per_second, 1),
            "tokens_per_second_per_gpu": self._speed(self.tokens_per_second_per_gpu, 1),
            "mfu": self._speed(self.mfu, 2),
            "step_time_s": self._speed(self.step_time_s, 5),
            "not_run": self.not_run_reason,
        }

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description of the plan.

        Keys: ``input`` (the plan input's fields), ``model`` (the shape's fields and parameter
        counts), ``hardware`` (instance, GPU, world size, shard/replicate
        degrees), ``status`` (``"fits"``, ``"at-risk"`` or ``"out-of-memory"``), ``fits`` (bool,
        ``status == "fits"``), ``memory_gb`` (per GPU, GB: ``total``, every
        term of ``planner.memory.BREAKDOWN_TERMS``, ``peak_phase``,
        ``fragmentation_margin``, ``runtime_overhead``, ``required``,
        ``capacity``, ``usable``, ``headroom``, ``status``, ``fits``), ``activation_checkpointing``
        (``mode``, ``checkpointed_blocks`` of ``num_layers``), ``step_time_s``,
        ``tokens_per_step`` (job), ``tokens_per_second`` (job),
        ``tokens_per_second_per_gpu``, ``tflops_per_gpu``, ``mfu`` (percent),
        ``cost`` -- each ``null`` for an ``out-of-memory`` plan, which would not run, with the reason in
        ``not_run`` (``null`` otherwise) --, ``peak_tflops``, ``flops_per_token``, ``bound``,
        ``recompute_overhead_pct``, ``checkpoint`` (:meth:`planner.checkpoint.CheckpointEstimate.to_dict`: size,
        per-GPU shard, written and downloaded per host, staging memory and time, write time, blocking time and its
        share per step, the save at a stop against SageMaker's 120 s; ``null`` for a blocks-only plan),
        ``evaluation`` (``seconds`` of one validation-loss evaluation and
        ``overhead_pct``, its share of the ``eval_interval`` steps' time; 0 with evaluation off, ``null`` for an
        ``out-of-memory`` plan), ``time_breakdown_s`` (per micro-batch
        compute terms, exposed communication, optimizer, fixed, gradient reduce-scatters per step),
        ``communication`` (GB per GPU per micro-batch that reduce-scatters, link, bandwidth), ``cost``
        (``null`` without a token budget: ``tokens``, ``wall_time_hours``, ``instance_hours``,
        ``price_per_hour``, ``cost_usd``), ``recommendations`` (list of
        ``{title, reason, kind, changes, after}``) and ``notes`` (modelling
        assumptions that apply).
        """
        r, t, m = self.resolved, self.throughput, self.resolved.model
        shape: Any = m  # a family's shape dataclass (platform_spec.models.ModelShape is its protocol)
        cost = None
        if t.cost is not None and self.ran:
            cost = {
                "tokens": t.cost.tokens,
                "wall_time_hours": round(t.cost.wall_time_hours, 4),
                "instance_hours": round(t.cost.instance_hours, 4),
                "price_per_hour": self.input.price_per_hour,
                "cost_usd": None if t.cost.cost is None else round(t.cost.cost, 2),
            }
        return {
            "input": self.input.to_dict(),
            "model": {
                "name": m.name,
                **{f.name: getattr(m, f.name) for f in dataclasses.fields(shape) if f.name != "name"},
                "block_params": m.block_params,
                "num_params": m.num_params,
                "modelled_params": m.block_params if self.input.blocks_only else m.num_params,
            },
            "hardware": {
                "instance_type": r.instance.instance_type,
                "instance_count": self.input.instance_count,
                "gpu": r.gpu.name,
                "gpus_per_instance": r.instance.gpus_per_instance,
                "world_size": r.world_size,
                "shard_degree": r.shard_degree,
                "replicate_degree": r.replicate_degree,
                "hbm_gb": r.gpu.hbm_gb,
            },
            "status": self.status,
            "fits": self.fits,
            "memory_gb": self.memory_gb.to_dict(),
            "activation_checkpointing": {
                "mode": r.activation_checkpointing.name,
                "checkpointed_blocks": r.checkpointed_blocks,
                "num_layers": m.num_layers,
            },
            "not_run": self.not_run_reason,
            "step_time_s": self._speed(t.step_time_s, 6),
            "tokens_per_step": t.tokens_per_step,
            "tokens_per_second": self._speed(t.tokens_per_second, 1),
            "tokens_per_second_per_gpu": self._speed(t.tokens_per_second_per_gpu, 1),
            "tflops_per_gpu": self._speed(t.tflops_per_gpu, 2),
            "mfu": self._speed(t.mfu, 2),
            "peak_tflops": t.peak_tflops,
            "flops_per_token": t.flops_per_token,
            "bound": t.bound,
            "recompute_overhead_pct": round(t.recompute_overhead_pct, 2),
            "checkpoint": None if t.checkpoint is None else t.checkpoint.to_dict(),
            "evaluation": {
                "seconds": self._speed(t.eval_time_s, 6),
                "overhead_pct": self._speed(t.eval_overhead_pct, 2),
            },
            "time_breakdown_s": {
                "gemm": t.compute.gemm,
                "attention": t.compute.attention,
                "elementwise": t.compute.elementwise,
                "recompute": t.compute.recompute,
                "launch_floor": t.compute.launch_floor,
                "exposed_communication": t.exposed_comm_s,
                "optimizer": t.optimizer_s,
                "fixed": t.fixed_s,
                "checkpoint": 0.0 if t.checkpoint is None else t.checkpoint.per_step_s,
                "micro_batches": t.micro_batches,
                "gradient_reductions": t.gradient_reductions,
            },
            "communication": {
                "allgather_gb": t.comm.allgather_bytes / 1e9,
                "reduce_scatter_gb": t.comm.reduce_scatter_bytes / 1e9,
                "allreduce_gb": t.comm.allreduce_bytes / 1e9,
                "seconds": t.comm.total,
                "link": t.comm.link,
                "bandwidth_gb_s": round(t.comm.bandwidth_gb_s, 1),
            },
            "cost": cost,
            "recommendations": [rec.to_dict() for rec in self.recommendations],
            "notes": notes(self),
        }


def notes(plan: Plan) -> list[str]:
    """Modelling assumptions that apply to ``plan`` (short sentences)."""
    out = []
    if plan.input.blocks_only:
        out.append(
            "blocks-only: TransformerEngine's FSDP example (stacked te.TransformerLayer, bf16 parameters, "
            "Adam moments in bf16, FSDP1); tokens/s include the example's first-iteration cost averaged "
            "over its 5 timed iterations, as the guide measured"
        )
    else:
        out.append(
            "full trainer: FSDP2, fp32 sharded parameters and AdamW moments, bf16 compute, chunked "
            "cross-entropy, no dropout; steady-state tokens/s"
        )
    if get_precision(plan.input.precision).quantized and not plan.input.quantized_model_init:
        out.append("TransformerEngine keeps high-precision weights plus quantized copies (quantized_weight_copies)")
    elif plan.input.quantized_model_init:
        out.append(
            "block weights stored quantized (quantized_model_init); TransformerEngine's FusedAdam keeps fp32 master "
            "weights of every parameter (optimizer_state)"
        )
    out.append(
        "memory_gb.total is the predicted peak allocated memory; status also counts the margins: at-risk when the "
        f"requirement is within {AT_RISK_FRACTION:.0%} of usable memory (the model's stated error)"
    )
    if not plan.ran:
        out.append("out of memory: the speed and cost figures are withheld (null); time_breakdown_s is the model's")
    if plan.input.inter_container_encryption and plan.input.instance_count > 1:
        out.append(INTER_CONTAINER_ENCRYPTION_NOTE)
    if plan.throughput.checkpoint is not None:
        out.append(CHECKPOINT_NOTE)
    return out


CHECKPOINT_NOTE = (
    "checkpoint: size = fp32 parameters and AdamW moments (12 bytes per parameter) plus RNG and trainer-state files; "
    "each host downloads the whole synced prefix at a restart, assumed to hold one checkpoint (the newest complete "
    f"one), in bytes only ({DOWNLOAD_TIME_NOTE}); write time at {NVME_WRITE_GB_S:g} GB/s per host (one local NVMe "
    "device's published write rate, a conservative figure); staging at the GPU-to-host link "
    f"x {D2H_EFFICIENCY:g} (estimate); the interval saves' blocking time is in the step time"
)
"""The note of every plan of the full trainer: the checkpoint figures' assumptions (:mod:`planner.checkpoint`)."""


INTER_CONTAINER_ENCRYPTION_NOTE = (
    "inter_container_encryption: SageMaker encrypts the IP traffic between the job's instances (IPsec: the page "
    "asks for UDP 500 and ESP within the security group); AWS states it can increase training time by an amount "
    "that depends on the amount of communication between instances, here FSDP's all-gathers and reduce-scatters "
    "(see communication), and publishes no figure, nor whether it covers NCCL's traffic over EFA, which bypasses "
    "the kernel's IP stack; the speed and cost figures do not include it (Amazon SageMaker AI Developer Guide, Protect "
    "Communications Between ML Compute Instances in a Distributed Training Job, "
    "https://docs.aws.amazon.com/sagemaker/latest/dg/train-encrypt.html)"
)
"""The note of a multi-instance plan with ``inter_container_encryption`` (a single instance is unaffected: "Enabling
inter-container traffic encryption doesn't affect training jobs with a single compute instance", the same page)."""


def evaluate(plan_input: PlanInput) -> Plan:
    """The plan of ``plan_input`` without recommendations.

    Raises:
        PlanInputError: see :func:`planner.inputs.resolve`.
    """
    r = resolve(plan_input)
    return Plan(input=r.input, resolved=r, memory_gb=estimate_memory(r), throughput=estimate_throughput(r))


def evaluate_on_gpus(plan_input: PlanInput, gpus: int) -> Plan:
    """The plan of ``plan_input`` run on ``gpus`` GPUs of one instance of its type (no recommendations).

    For a machine with fewer GPUs than the instance type holds, e.g. a one-GPU
    benchmark host (``benchmarks/gpu_check.py``): the GPU, its peaks and
    memory are the instance's; FSDP shards over ``gpus`` ranks (one rank: no
    collectives). ``instance_count`` must be 1 and ``sharding_strategy`` full.

    Raises:
        PlanInputError: see :func:`planner.inputs.resolve`; ``gpus`` outside
            1..GPUs per instance, or more than one instance.
    """
    r = resolve(plan_input)
    if plan_input.instance_count != 1 or r.input.sharding_strategy != "full":
        raise PlanInputError(
            "instance_count", plan_input.instance_count, "1 with sharding_strategy full for a partial instance"
        )
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= r.instance.gpus_per_instance:
        raise PlanInputError(
            "gpus", gpus, f"an integer from 1 to {r.instance.gpus_per_instance} ({r.instance.instance_type})"
        )
    r = dataclasses.replace(r, world_size=gpus, shard_degree=gpus, replicate_degree=1)
    return Plan(input=r.input, resolved=r, memory_gb=estimate_memory(r), throughput=estimate_throughput(r))


class Evaluator:
    """:func:`evaluate` for the configurations one :func:`~planner.recommend.estimate` (or ``auto_tune``)
    weighs, each worked out once.

    The recommendations weigh many configurations that differ from the plan in a field or two (a batch size
    bisected, a checkpointing mode, a precision), some of them more than once; this answers each with the
    same plan :func:`evaluate` gives, keeping what its resolution shares with the others (:class:`ResolveMemo`)
    and, for :meth:`fits`, leaving the speed model out (whether a configuration fits is its memory's answer).

    Args:
        plans: plans already worked out (by :func:`evaluate`), answered as they are.

    Keys are plan inputs as the recommendations build them from a plan's normalised input
    (:attr:`Plan.input`), so equal keys are one configuration (hashable, each value of its field's type); a
    caller's own input goes to :func:`evaluate`, which refuses what it must.
    """

    def __init__(self, *plans: Plan) -> None:
        self._memo = ResolveMemo()
        self._plans: dict[PlanInput, Plan] = {plan.input: plan for plan in plans}
        self._memory: dict[PlanInput, tuple[ResolvedInput, MemoryBreakdown]] = {}

    def _resolved_memory(self, plan_input: PlanInput) -> tuple[ResolvedInput, MemoryBreakdown]:
        found = self._memory.get(plan_input)
        if found is None:
            r = resolve(plan_input, memo=self._memo)
            found = self._memory[plan_input] = (r, estimate_memory(r))
        return found

    def __call__(self, plan_input: PlanInput) -> Plan:
        """:func:`evaluate` of ``plan_input``.

        Raises:
            PlanInputError: see :func:`planner.inputs.resolve`.
        """
        plan = self._plans.get(plan_input)
        if plan is None:
            r, memory = self._resolved_memory(plan_input)
            plan = self._plans[plan_input] = Plan(
                input=r.input, resolved=r, memory_gb=memory, throughput=estimate_throughput(r)
            )
        return plan

    def fits(self, plan_input: PlanInput) -> bool:
        """``evaluate(plan_input).fits``, from the memory model alone.

        Raises:
            PlanInputError: see :func:`planner.inputs.resolve`.
        """
        plan = self._plans.get(plan_input)
        return plan.fits if plan is not None else self._resolved_memory(plan_input)[1].fits


__all__ = ["CHECKPOINT_NOTE", "Evaluator", "Plan", "Recommendation", "evaluate", "evaluate_on_gpus", "notes"]
