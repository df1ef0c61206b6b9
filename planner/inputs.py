"""What the planner is asked about (:class:`PlanInput`: the trainer's hyperparameters on hardware, with a
budget) and its validated, resolved form (:class:`ResolvedInput`: model shape, hardware, parallel layout)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from planner.errors import PlanInputError
from platform_spec import catalogue, models
from platform_spec import hyperparameters as hpmod
from platform_spec.hyperparameters import HyperparameterError, Hyperparameters
from platform_spec.training_modes import ActivationCheckpointing
from platform_spec.training_modes import activation_checkpointing as parse_activation_checkpointing

CHECKPOINT_SAVES: tuple[str, ...] = ("async", "sync")
"""How interval checkpoints are saved, a plan input (:attr:`PlanInput.checkpoint_save`): ``async`` (DCP's
``async_save``: the training waits for the device-to-host staging only) or ``sync`` (it waits for the write too). The
save at a stop is synchronous either way (:mod:`planner.checkpoint`)."""
DEFAULT_CHECKPOINT_SAVE = "async"
"""The trainer's way for interval checkpoints: asynchronous."""
LOSS_IMPLEMENTATIONS: tuple[str, ...] = ("chunked", "unchunked-fp32")
"""How the cross-entropy is computed, a plan input (:attr:`PlanInput.loss`): ``chunked`` (the trainer's
``training.model.chunked_cross_entropy``: one chunk of ``2^26`` logits live at a time, its logits recomputed in
backward) or ``unchunked-fp32`` (one fp32 cross-entropy over every logit of the micro-batch, as torchtitan's
``cross_entropy(pred.flatten(0, 1).float(), ...)`` does). What the loss moment holds is :mod:`planner.memory`'s."""
DEFAULT_LOSS = "chunked"
"""The trainer's loss: chunked."""
ATTENTION_KERNELS: tuple[str, ...] = ("te-fused", "flash-attention-2")
"""The attention kernel, a plan input (:attr:`PlanInput.attention`): ``te-fused`` (TransformerEngine's fused
attention, cuDNN's, which the trainer's TE blocks run) or ``flash-attention-2`` (Dao's FlashAttention-2, what
llm-foundry's MPT and PyTorch's ``scaled_dot_product_attention`` flash backend run). Its achieved rate is
:mod:`planner.throughput`'s (:data:`planner.throughput.ATTENTION_PEAK_FRACTION`)."""
DEFAULT_ATTENTION = "te-fused"
"""The trainer's attention on a GPU: TransformerEngine's fused attention."""


@dataclass(frozen=True, kw_only=True)
class PlanInput(Hyperparameters):
    """A training configuration to plan: the trainer's hyperparameters (:class:`Hyperparameters`, their names,
    defaults and rules; the estimate depends on :data:`~platform_spec.hyperparameters.PLANNED_HYPERPARAMETERS`)
    on hardware, with a budget.

    Attributes:
        instance_type: a :data:`platform_spec.catalogue.INSTANCES` key.
        instance_count: instances in the job.
        blocks_only: model TransformerEngine's FSDP example (the guide's benchmark) instead of the full
            trainer; see :mod:`planner.memory`.
        price_per_hour: USD per instance-hour, for cost (an input: no price list is shipped); ``None``: no cost.
        tokens: training-token budget for wall time and cost; ``None``: none.
        inter_container_encryption: the job encrypts the traffic between its instances (SageMaker's
            ``EnableInterContainerTrafficEncryption``): not modelled in the figures, noted (:func:`planner.plan.notes`).
        checkpoint_save: how interval checkpoints are saved, one of :data:`CHECKPOINT_SAVES` (default
            :data:`DEFAULT_CHECKPOINT_SAVE`): what the step time, the staging memory and the save at a stop count
            (:mod:`planner.checkpoint`).
        loss: how the cross-entropy is computed, one of :data:`LOSS_IMPLEMENTATIONS` (default
            :data:`DEFAULT_LOSS`, the trainer's): the loss moment's memory and the head's recompute. Another
            framework's (``unchunked-fp32``) plans its runs; the trainer always chunks.
        attention: the attention kernel, one of :data:`ATTENTION_KERNELS` (default :data:`DEFAULT_ATTENTION`,
            the trainer's): the attention's achieved rate. Another framework's (``flash-attention-2``) plans its
            runs.
    """

    instance_type: str
    instance_count: int = 1
    blocks_only: bool = False
    price_per_hour: float | None = None
    tokens: float | None = None
    inter_container_encryption: bool = False
    checkpoint_save: str = DEFAULT_CHECKPOINT_SAVE
    loss: str = DEFAULT_LOSS
    attention: str = DEFAULT_ATTENTION

    @classmethod
    def from_hyperparameters(
        cls, hp: Hyperparameters, *, instance_type: str, instance_count: int = 1, **kw: Any
    ) -> PlanInput:
        """The plan input for trainer hyperparameters ``hp`` on ``instance_count`` x ``instance_type``; ``kw``
        sets the other fields (``blocks_only``, ``price_per_hour``, ``tokens``, ``inter_container_encryption``,
        ``checkpoint_save``, ``loss``, ``attention``) or
        overrides a hyperparameter."""
        values: dict[str, Any] = {name: getattr(hp, name) for name in hpmod.SPECS}
        return cls(instance_type=instance_type, instance_count=instance_count, **{**values, **kw})

    @classmethod
    def from_request(
        cls, values: dict[str, Any], *, instance_type: str, instance_count: int = 1, **kw: Any
    ) -> PlanInput:
        """Like :meth:`from_hyperparameters` from raw (string) hyperparameters, e.g.
        :data:`platform_spec.hyperparameters.GUIDE_DEFAULT_REQUEST`.

        Raises:
            PlanInputError: a value does not parse (names the field).
        """
        try:
            hp = hpmod.parse(values)
        except HyperparameterError as exc:
            raise PlanInputError(exc.field, exc.value, exc.expected) from exc
        return cls.from_hyperparameters(hp, instance_type=instance_type, instance_count=instance_count, **kw)

    def replace(self, **changes: Any) -> PlanInput:
        """A copy with ``changes`` applied (``dataclasses.replace``, and its ``TypeError`` for a name that is
        no field)."""
        return dataclasses.replace(self, **changes)

    def hyperparameters(self) -> dict[str, Any]:
        """The hyperparameters the estimate depends on as ``{name: value}`` (``None`` left out)."""
        return {n: v for n in hpmod.PLANNED_HYPERPARAMETERS if (v := getattr(self, n)) is not None}

    @classmethod
    def own_fields(cls) -> tuple[str, ...]:
        """The fields besides the hyperparameters: the hardware, the budget, ``blocks_only``,
        ``inter_container_encryption``, ``checkpoint_save``, ``loss`` and ``attention``."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.name not in hpmod.SPECS)

    def to_dict(self) -> dict[str, Any]:
        """The fields the estimate depends on (a plan's ``input``): the planned hyperparameters, then the
        hardware and budget."""
        return {n: getattr(self, n) for n in (*hpmod.PLANNED_HYPERPARAMETERS, *self.own_fields())}


@dataclass(frozen=True)
class ResolvedInput:
    """A validated :class:`PlanInput` with its model shape and hardware.

    Attributes:
        input: the plan input.
        model: the model shape (overrides applied).
        family: the model's family (its per-block terms: :attr:`platform_spec.models.ModelFamily.terms`).
        instance: the instance spec.
        gpu: the GPU spec.
        world_size: GPUs in the job.
        shard_degree: FSDP shard group size (``world_size`` for full sharding,
            GPUs per host for hybrid: the trainer's HSDP mesh shards within a node, also on an UltraServer).
        replicate_degree: ``world_size / shard_degree`` (HSDP replicas).
    """

    input: PlanInput
    model: models.ModelShape
    family: models.ModelFamily
    instance: catalogue.InstanceSpec
    gpu: catalogue.GPUSpec
    world_size: int
    shard_degree: int
    replicate_degree: int

    @property
    def tokens_per_microbatch(self) -> int:
        """Tokens one GPU processes per micro-batch: ``batch_size * seq_length``."""
        return self.input.batch_size * self.input.seq_length

    # Worked out on first use and kept with the instance (its fields are frozen): the memory and speed models ask
    # for them several times per configuration, and one estimate weighs about 120 configurations.
    @cached_property
    def activation_checkpointing(self) -> ActivationCheckpointing:
        """The input's activation-checkpointing mode, parsed (:mod:`platform_spec.training_modes`)."""
        return parse_activation_checkpointing(self.input.activation_checkpointing)

    @cached_property
    def checkpointed_blocks(self) -> int:
        """Blocks that recompute in backward: 0 (``off``), all (``full``) or every Nth (``selective:N``)."""
        return self.activation_checkpointing.checkpointed_count(self.model.num_layers)

    @property
    def checkpointing(self) -> bool:
        """Whether any block recomputes."""
        return self.checkpointed_blocks > 0


def _check_hyperparameter(name: str, value: Any) -> Any:
    try:
        return hpmod.coerce(name, value)
    except HyperparameterError as exc:
        raise PlanInputError(name, value, exc.expected) from exc


class ResolveMemo:
    """What :func:`resolve` works out once for the many inputs of one estimate that differ in a few fields
    (the recommendations' candidates): each hyperparameter value's normal form, a pure function of the value.
    Only successes are kept, so a refused value is refused again, with the same error, every time. Keys hold
    each value's type (``1 == True`` in Python, not as hyperparameters); values must be hashable:
    :class:`planner.plan.Evaluator` passes one only for inputs it derives from a resolved (normalised) input.
    """

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: dict[tuple[str, type, Any], Any] = {}

    def coerce(self, name: str, value: Any) -> Any:
        """:func:`platform_spec.hyperparameters.coerce` of ``value``, once per (name, type, value).

        Raises:
            PlanInputError: as :func:`resolve`.
        """
        key = (name, type(value), value)
        try:
            return self.values[key]
        except KeyError:
            coerced = self.values[key] = _check_hyperparameter(name, value)
            return coerced


def _normalised(plan_input: PlanInput, check: Callable[[str, Any], Any]) -> PlanInput:
    """``plan_input`` with every hyperparameter checked by ``check`` and in its normal form (``"MXFP8"`` ->
    ``"mxfp8"``, ``"8"`` -> ``8``); a declared default (or ``None`` for an optional one) is one already."""
    changes = {}
    for name, spec in hpmod.SPECS.items():
        value = getattr(plan_input, name)
        if value is spec.default or (value is None and spec.optional):
            continue
        coerced = check(name, value)
        if coerced != value or type(coerced) is not type(value):
            changes[name] = coerced
    return dataclasses.replace(plan_input, **changes) if changes else plan_input


def resolve(plan_input: PlanInput, *, memo: ResolveMemo | None = None) -> ResolvedInput:
    """Validate ``plan_input`` and look up its model and hardware.

    Args:
        memo: reuse what earlier calls worked out (:class:`ResolveMemo`; the same answers and errors, sooner);
            ``None``: work everything out.

    Raises:
        platform_spec.errors.FieldError: naming the field and the allowed values -- :class:`PlanInputError`
            for an unknown model or precision, out-of-range numbers or a combination the trainer refuses
            (:func:`platform_spec.hyperparameters.validate`); the catalogue's
            :class:`~platform_spec.catalogue.UnknownInstanceTypeError`,
            :class:`~platform_spec.catalogue.UnsupportedHostArchitectureError` (host CPUs the trainer image is
            not built for) and :class:`~platform_spec.catalogue.UnsupportedPrecisionError` (a precision the
            instance's GPU cannot run).
    """
    p = _normalised(plan_input, _check_hyperparameter if memo is None else memo.coerce)
    try:  # the trainer's cross-field rules and its model family's shape rule, from their one home
        model = hpmod.validate(p)  # the shape the rules checked
    except HyperparameterError as exc:
        raise PlanInputError(exc.field, exc.value, exc.expected) from exc
    instance = catalogue.get_instance(p.instance_type)  # UnknownInstanceTypeError (a FieldError)
    if p.instance_type != instance.instance_type:
        p = dataclasses.replace(p, instance_type=instance.instance_type)
    problem = catalogue.host_architecture_problem(instance.instance_type)
    if problem is not None:
        raise catalogue.UnsupportedHostArchitectureError(instance.instance_type, problem)
    if isinstance(p.instance_count, bool) or not isinstance(p.instance_count, int) or not 1 <= p.instance_count <= 4096:
        raise PlanInputError("instance_count", p.instance_count, "an integer from 1 to 4096")
    for name in ("blocks_only", "inter_container_encryption"):
        if not isinstance(getattr(p, name), bool):
            raise PlanInputError(name, getattr(p, name), "true or false")
    if p.checkpoint_save not in CHECKPOINT_SAVES:
        raise PlanInputError("checkpoint_save", p.checkpoint_save, "one of " + ", ".join(CHECKPOINT_SAVES))
    if p.loss not in LOSS_IMPLEMENTATIONS:
        raise PlanInputError("loss", p.loss, "one of " + ", ".join(LOSS_IMPLEMENTATIONS))
    if p.attention not in ATTENTION_KERNELS:
        raise PlanInputError("attention", p.attention, "one of " + ", ".join(ATTENTION_KERNELS))
    for name in ("price_per_hour", "tokens"):
        v = getattr(p, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
            raise PlanInputError(name, v, "a positive number or None")
    gpu = instance.gpu_spec
    if not catalogue.supports_precision(gpu, p.precision):
        raise catalogue.UnsupportedPrecisionError(
            p.precision, f"{gpu.name}, {instance.instance_type}", catalogue.supported_precisions(gpu)
        )
    family = models.family_of_shape(model)
    if family.terms is None:
        raise PlanInputError(
            "model", p.model, f"a model whose family declares planner terms (family {family.name!r} has none)"
        )
    world = p.instance_count * instance.gpus_per_instance
    shard = world if p.sharding_strategy == "full" else min(world, instance.gpus_per_host)  # the trainer's node
    return ResolvedInput(
        input=p,
        model=model,
        family=family,
        instance=instance,
        gpu=gpu,
        world_size=world,
        shard_degree=shard,
        replicate_degree=world // shard,
    )


__all__ = [
    "ATTENTION_KERNELS",
    "CHECKPOINT_SAVES",
    "DEFAULT_ATTENTION",
    "DEFAULT_CHECKPOINT_SAVE",
    "DEFAULT_LOSS",
    "LOSS_IMPLEMENTATIONS",
    "PlanInput",
    "PlanInputError",
    "ResolveMemo",
    "ResolvedInput",
    "resolve",
]
