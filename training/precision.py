"""Precision: device checks, FSDP dtypes, TransformerEngine recipes and contexts.

==========  ===============  ==================================================
precision   FSDP params      compute
==========  ===============  ==================================================
fp32        fp32             fp32 (TF32 tensor cores on CUDA, the catalogue's
                             fp32 peak convention)
bf16        bf16 (fp32 ms)   bf16
fp16        fp16 (fp32 ms)   fp16 with dynamic loss scaling
fp8         bf16 (fp32 ms)   TE ``Float8CurrentScaling`` (default) or
                             ``DelayedScaling`` (``fp8_scaling=delayed``)
mxfp8       bf16 (fp32 ms)   TE ``MXFP8BlockScaling`` (Blackwell)
nvfp4       bf16 (fp32 ms)   TE ``NVFP4BlockScaling`` (Blackwell)
==========  ===============  ==================================================

"fp32 ms": fp32 master shards kept by FSDP2 (the optimizer steps them);
gradients are reduced in fp32.

Every fact in the table is the precision registry's
(:mod:`platform_spec.precisions`): the dtypes, the recipe class and its
arguments, whether the CPU path runs a format, the hardware rule, the GEMM
shape multiple, loss scaling, the extra ``torch.autocast``, TF32. This module
turns a registry record into the trainer's converter for it (torchtitan's
model converters: one object per numeric format that owns its device check
and what the format changes in training), :class:`PrecisionPlan`, or
:class:`TransformerEnginePlan` for a format that is a TransformerEngine
recipe. Nothing here names a format: adding one is its registry entry (plus,
for a TE format, the recipe in the trainer image's TransformerEngine).

Device rules, checked before step 1 (:meth:`PrecisionPlan.check`): on CPU only
the registry's CPU formats (fp32, bf16) run; on CUDA the GPU's compute
capability must pass the format's one hardware rule
(:meth:`platform_spec.precisions.Precision.supported_by`: fp8 >= 8.9,
mxfp8/nvfp4 10.x or 11.x), and the TE formats need TransformerEngine and
micro-batches whose tokens are a multiple of the format's GEMM multiple. TE API
names follow the trainer image's TransformerEngine
(:data:`platform_spec.trainer_image.TRANSFORMER_ENGINE_VERSION`, read against
its ``release_v2.19`` branch: ``transformer_engine.common.recipe``,
``te.autocast``, a class there). With ``quantized_model_init`` the blocks' GEMM
weights are stored quantized in the recipe's format
(:func:`training.model.build_model`); which precisions allow it is the
registry's (:attr:`platform_spec.precisions.Precision.quantized_model_init_refusal`).

Resuming a TE precision: each TE module's ``_extra_state`` (delayed scaling: the
recipe, the scales and amax history; the stateless recipes save nothing since TE
2.16.1) is saved with the model and restored by :mod:`training.checkpoint.manager`
(see ``size_extra_state`` and :mod:`training.checkpoint.extra_state`). A resume
under another recipe (allowed) restores a saved one, and TE replaces it at
the first step under the new recipe (``module/base.py``:
``init_fp8_metadata`` takes the autocast's recipe and ``set_meta_tensor``
builds a fresh scaling state when the kind differs); bf16/fp16/fp32 steps run
outside ``te.autocast``, and TE then saves no fp8 state.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any

import torch

from platform_spec import precisions as registry
from platform_spec.hyperparameters import HyperparameterError
from platform_spec.precisions import Precision, names_where, supported_names
from training.environment import GPUUnavailable, ResourceConfig, expected_gpus, gpus_missing_reason

TE_PRECISIONS: tuple[str, ...] = names_where(lambda p: p.uses_te)
"""Precisions that are TransformerEngine recipes (the registry's): fp8, mxfp8, nvfp4."""
BLOCK_SCALED: tuple[str, ...] = names_where(lambda p: p.block_scaled)
"""Block-scaled formats (the registry's): mxfp8, nvfp4."""


class PrecisionError(HyperparameterError):
    """The precision cannot run on this device (names ``precision`` and what would run)."""


class PrecisionPlan:
    """The trainer's converter of one registry format: how it maps onto FSDP2, torch and the device.

    The base class serves the formats torch runs by itself (fp32, bf16, fp16);
    :class:`TransformerEnginePlan` the TransformerEngine recipes. Build one with :func:`plan`.

    Attributes:
        record: the registry's :class:`~platform_spec.precisions.Precision`.
        name: the format's name.
        param_dtype: dtype FSDP2 all-gathers parameters in (the record's ``compute_dtype``).
        reduce_dtype: dtype of the gradient reduce-scatter (the record's ``reduce_dtype``).
        uses_te_recipe: whether the format is a TransformerEngine recipe.
        loss_scaling: whether training needs dynamic loss scaling (:meth:`loss_scaler`).
    """

    def __init__(self, record: Precision) -> None:
        self.record = record
        self.name = record.name
        self.param_dtype: torch.dtype = getattr(torch, record.compute_dtype)
        self.reduce_dtype: torch.dtype = getattr(torch, record.reduce_dtype)
        self.uses_te_recipe = record.uses_te
        self.loss_scaling = record.loss_scaling

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, param_dtype={self.param_dtype}, reduce_dtype={self.reduce_dtype})"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.record == self.record  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.name))

    @property
    def mixed(self) -> bool:
        """Whether FSDP casts parameters for compute (a MixedPrecisionPolicy is needed)."""
        return self.param_dtype != torch.float32

    def _refuse(self, expected: str) -> PrecisionError:
        return PrecisionError("precision", self.name, expected)

    # -- the device check ------------------------------------------------------------------------
    def check(
        self,
        device: torch.device,
        *,
        te_available: bool | None = None,
        seq_length: int | None = None,
        batch_size: int | None = None,
    ) -> None:
        """Fail before step 1 when the format cannot run on ``device`` (see :func:`check_supported`).

        Raises:
            PrecisionError: naming the precision, the device and what would run.
        """
        record = self.record
        if device.type == "cpu":
            if not record.cpu:
                cpu = names_where(lambda p: p.cpu)
                raise self._refuse(
                    f"one of {', '.join(cpu)} on CPU ({self.name} needs an NVIDIA GPU"
                    + (" with TransformerEngine)" if record.uses_te else ")")
                )
            return
        if device.type != "cuda":
            raise self._refuse(f"a CPU or CUDA device (got {device.type})")
        name = torch.cuda.get_device_name(device)
        cc = tuple(torch.cuda.get_device_capability(device))
        if not record.supported_by(cc):
            raise self._refuse(
                f"one of {', '.join(supported_names(cc))} on {name} (compute capability {cc[0]}.{cc[1]}); "
                f"{self.name} needs {record.hardware}"
            )
        self._check_cuda(cc, te_available=te_available, seq_length=seq_length, batch_size=batch_size)

    def _check_cuda(
        self, cc: tuple[int, ...], *, te_available: bool | None, seq_length: int | None, batch_size: int | None
    ) -> None:
        """What the format needs on a CUDA GPU that runs it, beyond the hardware rule: nothing here."""

    # -- what the format changes in training ---------------------------------------------------------
    def configure_backends(self, device: torch.device) -> None:
        """Set the process-wide torch switches the format needs on ``device``: TF32 tensor cores for
        fp32 matmuls and convolutions where the registry says so (:attr:`Precision.matmul_tf32`: the
        format's MFU peak is TF32's); nothing on CPU."""
        if device.type == "cuda" and self.record.matmul_tf32:
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True

    def recipe(self, fp8_scaling: str | None = None) -> Any:
        """The TransformerEngine recipe object of the format: None (not a TE format)."""
        return None

    def reduces_amax(self, fp8_scaling: str | None = None) -> bool:
        """Whether the format's recipe reduces its amax over the data-parallel group (pass the group to
        :meth:`autocast`): the registry's :attr:`~platform_spec.precisions.TERecipe.amax_reduction`."""
        spec = self.record.te_recipe(fp8_scaling)
        return spec is not None and spec.amax_reduction

    def autocast(
        self, recipe: Any = None, *, device_type: str = "cuda", amax_reduction_group: Any = None
    ) -> contextlib.AbstractContextManager:
        """The forward context: ``torch.autocast`` to the registry's ``autocast_dtype`` where the format
        has one, else a no-op (FSDP2's MixedPrecisionPolicy already casts parameters and inputs)."""
        if self.record.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device_type, dtype=getattr(torch, self.record.autocast_dtype))

    def loss_scaler(self) -> DynamicLossScaler | None:
        """A fresh :class:`DynamicLossScaler` where the format needs loss scaling (fp16), else None."""
        return DynamicLossScaler() if self.loss_scaling else None


class TransformerEnginePlan(PrecisionPlan):
    """The converter of a format that is a TransformerEngine recipe (fp8, mxfp8, nvfp4): TE must import,
    micro-batch tokens must be a multiple of the format's GEMM multiple, and the forward runs under
    ``te.autocast`` with the recipe the registry names (plus the registry's ``torch.autocast``, nvfp4's bf16)."""

    def _check_cuda(
        self, cc: tuple[int, ...], *, te_available: bool | None, seq_length: int | None, batch_size: int | None
    ) -> None:
        if te_available is None:
            from training.model import transformer_engine_available

            te_available = transformer_engine_available()
        if not te_available:
            without_te = names_where(lambda p: p.supported_by(cc) and not p.uses_te)
            raise self._refuse(
                f"one of {', '.join(without_te)} here: TransformerEngine is not installed in this environment "
                "(use the trainer image, which ships it)"
            )
        multiple = self.record.gemm_multiple
        if seq_length is not None and batch_size is not None and multiple and (seq_length * batch_size) % multiple:
            raise PrecisionError(
                "seq_length",
                seq_length,
                f"batch_size * seq_length divisible by {multiple} for {self.name} (TransformerEngine GEMM shapes)",
            )

    def recipe(self, fp8_scaling: str | None = None) -> Any:
        """The TransformerEngine recipe object: the registry's :class:`~platform_spec.precisions.TERecipe`
        for ``fp8_scaling`` (formats with one recipe ignore it) built from
        ``transformer_engine.common.recipe``, e.g. fp8:
        ``Float8CurrentScaling(fp8_format=Format.HYBRID)`` or
        ``DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=1024, amax_compute_algo="max")``;
        mxfp8: ``MXFP8BlockScaling()``; nvfp4: ``NVFP4BlockScaling()``.

        Raises:
            PrecisionError: the installed TE lacks the recipe class (too old).
            platform_spec.errors.FieldError: ``fp8_scaling`` names no recipe of a format with several.
        """
        spec = self.record.te_recipe(fp8_scaling)
        assert spec is not None  # a TE format has at least one recipe
        from transformer_engine.common import recipe as te_recipes

        cls = getattr(te_recipes, spec.class_name, None)
        if cls is None:
            raise self._refuse(
                f"a TransformerEngine with transformer_engine.common.recipe.{spec.class_name} (installed TE is too old)"
            )
        kwargs = dict(spec.kwargs)
        if "fp8_format" in kwargs:
            kwargs["fp8_format"] = getattr(te_recipes.Format, kwargs["fp8_format"])
        return cls(**kwargs)

    def autocast(
        self, recipe: Any = None, *, device_type: str = "cuda", amax_reduction_group: Any = None
    ) -> contextlib.AbstractContextManager:
        """``te.autocast(enabled=True, recipe=..., amax_reduction_group=...)`` (the trainer image's TE:
        ``transformer_engine/pytorch/quantization.py``), inside the registry's ``torch.autocast`` where the
        format has one (nvfp4: bf16, TE's NVFP4 kernels need bf16 activations in forward and backward); a
        no-op without a recipe (a step outside the format)."""
        if recipe is None:
            return contextlib.nullcontext()
        import transformer_engine.pytorch as te

        stack = contextlib.ExitStack()
        stack.enter_context(super().autocast(recipe, device_type=device_type))
        stack.enter_context(te.autocast(enabled=True, recipe=recipe, amax_reduction_group=amax_reduction_group))
        return stack


def plan(precision: str) -> PrecisionPlan:
    """The converter of ``precision``, from the registry (:class:`TransformerEnginePlan` for a TE recipe).

    Raises:
        PrecisionError: unknown precision (names the known ones).
    """
    try:
        record = registry.get_precision(precision)
    except registry.UnknownPrecisionError:
        raise PrecisionError("precision", precision, "one of " + ", ".join(registry.PRECISION_NAMES)) from None
    return (TransformerEnginePlan if record.uses_te else PrecisionPlan)(record)


def check_supported(
    precision: str,
    device: torch.device,
    *,
    te_available: bool | None = None,
    seq_length: int | None = None,
    batch_size: int | None = None,
) -> None:
    """Fail before step 1 when ``precision`` cannot run on ``device`` (:meth:`PrecisionPlan.check`).

    Args:
        te_available: whether TransformerEngine imports (CUDA only; probed when None).
        seq_length, batch_size: checked against the TE GEMM shape rules
            (tokens per micro-batch divisible by the registry's ``gemm_multiple``:
            16 for fp8, 32 for mxfp8/nvfp4).

    Raises:
        PrecisionError: naming the precision, the device and what would run.
    """
    plan(precision).check(device, te_available=te_available, seq_length=seq_length, batch_size=batch_size)


def te_recipe(precision: str, fp8_scaling: str | None = None) -> Any:
    """The TransformerEngine recipe object for ``precision`` (None for fp32/bf16/fp16):
    :meth:`TransformerEnginePlan.recipe` (``fp8_scaling`` None: the registry's default,
    :data:`platform_spec.precisions.SCALINGS`' first).

    Raises:
        PrecisionError: unknown precision, or the installed TE lacks the recipe (too old).
    """
    return plan(precision).recipe(fp8_scaling)


def autocast(
    precision: str, recipe: Any, *, device_type: str = "cuda", amax_reduction_group: Any = None
) -> contextlib.AbstractContextManager:
    """The forward context of ``precision`` with ``recipe`` (:meth:`PrecisionPlan.autocast`):
    ``te.autocast(recipe=...)`` for TE precisions (nvfp4 also under ``torch.autocast(bf16)``), else a no-op."""
    return plan(precision).autocast(recipe, device_type=device_type, amax_reduction_group=amax_reduction_group)


def require_cuda(resource: ResourceConfig) -> None:
    """Refuse to train on the CPU on a GPU instance (before any process group or model exists).

    SageMaker names the host's instance type in ``resourceconfig.json``
    (``current_instance_type``); when the catalogue gives it GPUs and
    ``torch.cuda.is_available()`` is false (e.g. a driver older than the
    image's CUDA without NVIDIA's forward-compatibility start-up), the trainer
    would otherwise fall back to gloo on the CPU and run for days.

    Raises:
        training.environment.GPUUnavailable: naming the instance type, its GPU
            count and CUDA's own reason (``torch.cuda.init()``'s error).
    """
    expected = expected_gpus(resource)
    if not expected or torch.cuda.is_available():
        return
    try:
        torch.cuda.init()
        detail = "torch.cuda.is_available() is false"
    except Exception as exc:
        detail = " ".join(str(exc).split())[:300]
    built = torch.version.cuda or "none (a CPU-only build)"
    raise GPUUnavailable(
        gpus_missing_reason(
            resource.current_instance_type or "",
            expected,
            "CUDA is not usable in this process",
            f"{detail}; PyTorch {torch.__version__} built for CUDA {built}",
        )
    )


class DynamicLossScaler:
    """Dynamic loss scaling for fp16: scale the loss, unscale the gradients, skip steps that overflow.

    The scale starts at ``2**16``, halves on a non-finite gradient norm (the
    step is skipped) and doubles after ``growth_interval`` good steps.
    Works on DTensor gradients (``torch._foreach_mul_`` dispatches through DTensor).
    """

    def __init__(self, init_scale: float = 2.0**16, growth_interval: int = 2000, min_scale: float = 1.0) -> None:
        self.scale = float(init_scale)
        self.growth_interval = growth_interval
        self.min_scale = min_scale
        self.good_steps = 0

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        return loss * self.scale

    @torch.no_grad()
    def unscale_(self, parameters: list[torch.nn.Parameter]) -> None:
        grads = [p.grad for p in parameters if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, 1.0 / self.scale)

    def update(self, grad_norm: float) -> bool:
        """Record the step's gradient norm; returns whether the optimizer should step."""
        if not math.isfinite(grad_norm):
            self.scale = max(self.min_scale, self.scale / 2.0)
            self.good_steps = 0
            return False
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale *= 2.0
            self.good_steps = 0
        return True

    def state_dict(self) -> dict[str, float]:
        return {"scale": self.scale, "good_steps": self.good_steps}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.scale = float(state["scale"])
        self.good_steps = int(state["good_steps"])


__all__ = [
    "BLOCK_SCALED",
    "TE_PRECISIONS",
    "DynamicLossScaler",
    "PrecisionError",
    "PrecisionPlan",
    "TransformerEnginePlan",
    "autocast",
    "check_supported",
    "plan",
    "require_cuda",
    "te_recipe",
]
