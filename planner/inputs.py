"""What the planner is asked about (:class:`PlanInput`) and its validated,
resolved form (:class:`ResolvedInput`: model shape, hardware, parallel layout).

Field names are the trainer's hyperparameter names (:mod:`platform_spec.hyperparameters`)
plus the hardware: ``instance_type``, ``instance_count``; and the budget:
``price_per_hour`` (USD per instance-hour, an input: no price list is shipped)
and ``tokens`` (a training-token budget).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from planner.errors import PlanInputError
from platform_spec import hyperparameters as hpmod
from platform_spec import models
from platform_spec.catalogue import (
    GPUSpec,
    InstanceSpec,
    UnsupportedHostArchitectureError,
    UnsupportedPrecisionError,
    get_instance,
    host_architecture_problem,
    supported_precisions,
    supports_precision,
)
from platform_spec.hyperparameters import HyperparameterError, Hyperparameters
from platform_spec.models import ModelFamily
from platform_spec.training_modes import DEFAULT_GRADIENT_SYNC, ActivationCheckpointing
from platform_spec.training_modes import activation_checkpointing as parse_activation_checkpointing

if TYPE_CHECKING:
    from platform_spec.models import ModelShape

HYPERPARAMETER_FIELDS: tuple[str, ...] = (
    "model",
    "model_family",
    *hpmod.SHAPE_HYPERPARAMETERS,
    "precision",
    "quantized_model_init",
    "batch_size",
    "seq_length",
    "gradient_accumulation_steps",
    "gradient_sync",
    "activation_checkpointing",
    "sharding_strategy",
    "reshard_after_forward",
)
""":class:`PlanInput` fields that are trainer hyperparameters (same names, same rules): the model and its shape
hyperparameters (:data:`platform_spec.hyperparameters.SHAPE_HYPERPARAMETERS`), numerics, batch, memory modes and
sharding."""


@dataclass(frozen=True)
class PlanInput:
    """A training configuration to plan.

    Attributes:
        model: preset name of a registered model family (:func:`platform_spec.models.preset_names`),
            e.g. ``"gpt-8b"``, ``"llama3-8b"``; or a family's name for a custom shape of it (every shape
            field without a default given below).
        num_layers: transformer blocks; ``None``: the preset's.
        precision: one of :data:`platform_spec.precisions.PRECISION_NAMES`.
        seq_length: tokens per sequence.
        batch_size: micro-batch, sequences per GPU.
        activation_checkpointing: ``"off"``, ``"full"`` (recompute every block) or ``"selective:N"`` (every
            Nth block; :mod:`platform_spec.training_modes`).
        instance_type: a :data:`platform_spec.catalogue.INSTANCES` key.
        instance_count: instances in the job.
        sharding_strategy: ``"full"`` (FSDP over every GPU) or ``"hybrid"``
            (HSDP: shard within an instance, replicate across instances).
        reshard_after_forward: FSDP frees gathered parameters after forward
            (``False`` keeps them until backward: more memory, less traffic).
        quantized_model_init: store block weights quantized (fp8 family only).
        gradient_accumulation_steps: micro-batches per optimizer step.
        gradient_sync: ``"every_micro_batch"`` (reduce-scatter each micro-batch: sharded accumulation) or
            ``"last_micro_batch"`` (unsharded fp32 gradients kept until the last: less traffic, more memory).
        vocab_size: ``None``: the preset's.
        model_family, hidden_size, num_heads, num_kv_heads, ffn_hidden_size, rope_base, tied_embeddings,
            norm_eps: the shape hyperparameters (``None``: the preset's; a family refuses those it has not,
            :func:`platform_spec.models.resolve_shape`).
        blocks_only: model TransformerEngine's FSDP example (the guide's
            benchmark) instead of the full trainer; see :mod:`planner.memory`.
        price_per_hour: USD per instance-hour, for cost; ``None``: no cost.
        tokens: training-token budget for wall time and cost; ``None``: none.
    """

    model: str
    num_layers: int | None
    precision: str
    seq_length: int
    batch_size: int
    activation_checkpointing: str
    instance_type: str
    instance_count: int = 1
    sharding_strategy: str = "full"
    reshard_after_forward: bool = True
    quantized_model_init: bool = False
    gradient_accumulation_steps: int = 1
    vocab_size: int | None = None
    blocks_only: bool = False
    price_per_hour: float | None = None
    tokens: float | None = None
    gradient_sync: str = DEFAULT_GRADIENT_SYNC
    model_family: str | None = None
    hidden_size: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    ffn_hidden_size: int | None = None
    rope_base: float | None = None
    tied_embeddings: bool | None = None
    norm_eps: float | None = None

    @classmethod
    def from_hyperparameters(
        cls, hp: Hyperparameters, *, instance_type: str, instance_count: int = 1, **kw: Any
    ) -> PlanInput:
        """The plan input for trainer hyperparameters ``hp`` on ``instance_count`` x ``instance_type``.

        ``kw`` sets the non-hyperparameter fields (``blocks_only``,
        ``price_per_hour``, ``tokens``) or overrides a hyperparameter.
        """
        values: dict[str, Any] = {name: getattr(hp, name) for name in HYPERPARAMETER_FIELDS}
        values.update(kw)
        return cls(instance_type=instance_type, instance_count=instance_count, **values)

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
        """The hyperparameter fields as ``{name: value}`` (``None`` left out)."""
        return {n: getattr(self, n) for n in HYPERPARAMETER_FIELDS if getattr(self, n) is not None}


_MISSING = set(HYPERPARAMETER_FIELDS) - {f.name for f in dataclasses.fields(PlanInput)}
if _MISSING:  # a shape hyperparameter added to platform_spec needs its PlanInput field
    raise ImportError(f"planner.PlanInput lacks the hyperparameter fields {sorted(_MISSING)}")


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
            GPUs per instance for hybrid).
        replicate_degree: ``world_size / shard_degree`` (HSDP replicas).
    """

    input: PlanInput
    model: ModelShape
    family: ModelFamily
    instance: InstanceSpec
    gpu: GPUSpec
    world_size: int
    shard_degree: int
    replicate_degree: int

    @property
    def tokens_per_microbatch(self) -> int:
        """Tokens one GPU processes per micro-batch: ``batch_size * seq_length``."""
        return self.input.batch_size * self.input.seq_length

    # Worked out on first use and kept with the instance (its fields are frozen): the memory and speed models ask
    # for them several times per configuration, and one estimate weighs about 120 configurations (issue 17).
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
    (the recommendations' candidates): each hyperparameter value's normal form, a pure function of the
    value. Only successes are kept, so a refused value is refused again, with the same error, every time.

    Keys hold each value's type (``1`` and ``True`` are equal in Python, not as hyperparameters), and the
    values must be hashable: :class:`planner.plan.Evaluator` passes one only for the inputs it derives from
    a resolved (normalised) input, never for the caller's own.
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


def resolve(plan_input: PlanInput, *, memo: ResolveMemo | None = None) -> ResolvedInput:
    """Validate ``plan_input`` and look up its model and hardware.

    Args:
        memo: reuse what earlier calls worked out (:class:`ResolveMemo`; the same answers and errors, sooner);
            ``None``: work everything out.

    Raises:
        platform_spec.errors.FieldError: naming the field and the allowed values --
            :class:`PlanInputError` for an unknown model or precision, out-of-range
            numbers or a combination the trainer refuses
            (:func:`platform_spec.hyperparameters.validate`: ``quantized_model_init``);
            the catalogue's :class:`~platform_spec.catalogue.UnknownInstanceTypeError`,
            :class:`~platform_spec.catalogue.UnsupportedHostArchitectureError` (host CPUs
            the trainer image is not built for) and
            :class:`~platform_spec.catalogue.UnsupportedPrecisionError` (a precision the
            instance's GPU cannot run).
    """
    p = plan_input
    check = _check_hyperparameter if memo is None else memo.coerce
    for name in HYPERPARAMETER_FIELDS:
        value = getattr(p, name)
        if value is None and hpmod.SPECS[name].optional:
            continue
        coerced = check(name, value)
        if coerced != value or type(coerced) is not type(value):
            # accept "MXFP8" / "8" style values by normalising them
            p = dataclasses.replace(p, **{name: coerced})
    try:  # the trainer's cross-field rules and its model family's shape rule, from their one home
        model = hpmod.validate(Hyperparameters(**p.hyperparameters()))  # the shape the rules checked
    except HyperparameterError as exc:
        raise PlanInputError(exc.field, exc.value, exc.expected) from exc
    instance = get_instance(p.instance_type)  # UnknownInstanceTypeError (a FieldError)
    if p.instance_type != instance.instance_type:
        p = dataclasses.replace(p, instance_type=instance.instance_type)
    problem = host_architecture_problem(instance.instance_type)
    if problem is not None:
        raise UnsupportedHostArchitectureError(instance.instance_type, problem)
    if isinstance(p.instance_count, bool) or not isinstance(p.instance_count, int) or not 1 <= p.instance_count <= 4096:
        raise PlanInputError("instance_count", p.instance_count, "an integer from 1 to 4096")
    if not isinstance(p.blocks_only, bool):
        raise PlanInputError("blocks_only", p.blocks_only, "true or false")
    for name in ("price_per_hour", "tokens"):
        v = getattr(p, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
            raise PlanInputError(name, v, "a positive number or None")
    gpu = instance.gpu_spec
    if not supports_precision(gpu, p.precision):
        raise UnsupportedPrecisionError(p.precision, f"{gpu.name}, {instance.instance_type}", supported_precisions(gpu))
    family = models.family_of_shape(model)
    if family.terms is None:
        raise PlanInputError(
            "model", p.model, f"a model whose family declares planner terms (family {family.name!r} has none)"
        )
    world = p.instance_count * instance.gpus_per_instance
    shard = world if p.sharding_strategy == "full" else min(world, instance.gpus_per_instance)
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


__all__ = ["HYPERPARAMETER_FIELDS", "PlanInput", "PlanInputError", "ResolveMemo", "ResolvedInput", "resolve"]
