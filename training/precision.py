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

Device rules, checked before step 1 (:func:`check_supported`): on CPU only
fp32 and bf16 run; on CUDA the GPU must support the precision
(:func:`planner.catalogue.supports_precision` for catalogue GPUs; otherwise
compute capability: fp8 >= 8.9, mxfp8/nvfp4 10.x), and fp8/mxfp8/nvfp4 need
TransformerEngine. TE API names follow TransformerEngine 2.10, the version
of the trainer image (``transformer_engine.common.recipe``, ``te.autocast``;
the older ``fp8_autocast`` is used when ``autocast`` is absent). Weights are
never stored quantized: TE 2.10 cannot train FSDP2-sharded quantized weights
(:data:`training.hyperparameters.QUANTIZED_MODEL_INIT_REFUSAL`).

Resuming a TE precision: each TE module's ``_extra_state`` (the recipe and,
for delayed scaling, the scales and amax history) is saved with the model and
restored by :mod:`training.checkpoint` (see ``size_extra_state``). A resume
under another recipe (allowed) restores the saved one, and TE replaces it at
the first step under the new recipe (TE 2.10 ``module/base.py``:
``init_fp8_metadata`` takes the autocast's recipe and ``set_meta_tensor``
builds a fresh scaling state when the kind differs); bf16/fp16/fp32 steps run
outside ``te.autocast``, and TE then saves no fp8 state.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from dataclasses import dataclass
from typing import Any

import torch

from training.environment import GPUUnavailable, ResourceConfig, expected_gpus, gpus_missing_reason
from training.hyperparameters import CPU_PRECISIONS, HyperparameterError

TE_PRECISIONS = ("fp8", "mxfp8", "nvfp4")
BLOCK_SCALED = ("mxfp8", "nvfp4")


class PrecisionError(HyperparameterError):
    """The precision cannot run on this device (names ``precision`` and what would run)."""


@dataclass(frozen=True)
class PrecisionPlan:
    """How a precision maps onto FSDP2 and TransformerEngine."""

    name: str
    param_dtype: torch.dtype
    reduce_dtype: torch.dtype
    uses_te_recipe: bool
    loss_scaling: bool

    @property
    def mixed(self) -> bool:
        """Whether FSDP casts parameters for compute (a MixedPrecisionPolicy is needed)."""
        return self.param_dtype != torch.float32


def plan(precision: str) -> PrecisionPlan:
    """The :class:`PrecisionPlan` of ``precision``.

    Raises:
        PrecisionError: unknown precision.
    """
    if precision == "fp32":
        return PrecisionPlan("fp32", torch.float32, torch.float32, False, False)
    if precision == "bf16":
        return PrecisionPlan("bf16", torch.bfloat16, torch.float32, False, False)
    if precision == "fp16":
        return PrecisionPlan("fp16", torch.float16, torch.float32, False, True)
    if precision in TE_PRECISIONS:
        return PrecisionPlan(precision, torch.bfloat16, torch.float32, True, False)
    raise PrecisionError("precision", precision, "one of fp32, bf16, fp16, fp8, mxfp8, nvfp4")


def _capability_supports(cc: tuple[int, int], precision: str) -> bool:
    if precision in ("fp32", "bf16", "fp16"):
        return True
    if precision == "fp8":
        return cc >= (8, 9)
    return (10, 0) <= cc < (12, 0)  # mxfp8 / nvfp4: TE's own block-scaling check


def check_supported(
    precision: str,
    device: torch.device,
    *,
    te_available: bool | None = None,
    seq_length: int | None = None,
    batch_size: int | None = None,
) -> None:
    """Fail before step 1 when ``precision`` cannot run on ``device``.

    Args:
        te_available: whether TransformerEngine imports (CUDA only; probed when None).
        seq_length, batch_size: checked against the TE GEMM shape rules
            (tokens per micro-batch divisible by 16 for fp8, 32 for mxfp8/nvfp4).

    Raises:
        PrecisionError: naming the precision, the device and what would run.
    """
    plan(precision)
    if device.type == "cpu":
        if precision not in CPU_PRECISIONS:
            raise PrecisionError(
                "precision", precision,
                f"one of {', '.join(CPU_PRECISIONS)} on CPU ({precision} needs an NVIDIA GPU"
                + (" with TransformerEngine)" if precision in TE_PRECISIONS else ")"),
            )
        return
    if device.type != "cuda":
        raise PrecisionError("precision", precision, f"a CPU or CUDA device (got {device.type})")
    name = torch.cuda.get_device_name(device)
    cc = torch.cuda.get_device_capability(device)
    from planner import catalogue

    gpu = catalogue.gpu_for_device_name(name)
    if gpu is not None:
        ok = catalogue.supports_precision(gpu, precision)
        allowed = catalogue.supported_precisions(gpu)
    else:
        ok = _capability_supports(cc, precision)
        allowed = tuple(p for p in ("fp32", "bf16", "fp16", "fp8", "mxfp8", "nvfp4") if _capability_supports(cc, p))
    if not ok:
        need = "compute capability >= 8.9 (Ada, Hopper, Blackwell)" if precision == "fp8" else "Blackwell (compute capability 10.x)"
        raise PrecisionError(
            "precision", precision,
            f"one of {', '.join(allowed)} on {name} (compute capability {cc[0]}.{cc[1]}); {precision} needs {need}",
        )
    if precision in TE_PRECISIONS:
        if te_available is None:
            from training.model import transformer_engine_available

            te_available = transformer_engine_available()
        if not te_available:
            raise PrecisionError(
                "precision", precision,
                "bf16, fp16 or fp32 here: TransformerEngine is not installed in this environment "
                "(use the trainer image, which ships it)",
            )
        if seq_length is not None and batch_size is not None:
            multiple = 16 if precision == "fp8" else 32
            if (seq_length * batch_size) % multiple:
                raise PrecisionError(
                    "seq_length", seq_length,
                    f"batch_size * seq_length divisible by {multiple} for {precision} (TransformerEngine GEMM shapes)",
                )


def te_recipe(precision: str, fp8_scaling: str = "current") -> Any:
    """The TransformerEngine recipe object for ``precision`` (None for fp32/bf16/fp16).

    fp8: ``Float8CurrentScaling(fp8_format=Format.HYBRID)`` or
    ``DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=1024, amax_compute_algo="max")``;
    mxfp8: ``MXFP8BlockScaling()`` (E4M3, 32-element blocks);
    nvfp4: ``NVFP4BlockScaling()``.

    Raises:
        PrecisionError: the installed TE lacks the recipe (too old).
    """
    if precision not in TE_PRECISIONS:
        return None
    from transformer_engine.common import recipe as te_recipes

    names = {
        ("fp8", "current"): "Float8CurrentScaling",
        ("fp8", "delayed"): "DelayedScaling",
        ("mxfp8", None): "MXFP8BlockScaling",
        ("nvfp4", None): "NVFP4BlockScaling",
    }
    key = (precision, fp8_scaling if precision == "fp8" else None)
    cls = getattr(te_recipes, names[key], None)
    if cls is None:
        raise PrecisionError(
            "precision", precision,
            f"a TransformerEngine with transformer_engine.common.recipe.{names[key]} (installed TE is too old)",
        )
    if precision == "fp8" and fp8_scaling == "delayed":
        return cls(fp8_format=te_recipes.Format.HYBRID, amax_history_len=1024, amax_compute_algo="max")
    if precision == "fp8":
        return cls(fp8_format=te_recipes.Format.HYBRID)
    return cls()


def autocast(precision: str, recipe: Any, *, amax_reduction_group: Any = None) -> contextlib.AbstractContextManager:
    """The forward context: ``te.autocast(recipe=...)`` for TE precisions, else a no-op.

    nvfp4 additionally runs under ``torch.autocast(bf16)`` (TE's NVFP4 kernels
    need bf16 activations in forward and backward). fp32/bf16/fp16 need no
    context: FSDP2's MixedPrecisionPolicy already casts parameters and inputs.
    """
    if recipe is None:
        return contextlib.nullcontext()
    import transformer_engine.pytorch as te

    stack = contextlib.ExitStack()
    if precision == "nvfp4":
        stack.enter_context(torch.autocast(device_type="cuda", dtype=torch.bfloat16))
    if hasattr(te, "autocast"):
        kwargs: dict[str, Any] = {"enabled": True, "recipe": recipe}
        if amax_reduction_group is not None:
            params = inspect.signature(te.autocast).parameters
            group_kw = next((k for k in ("amax_reduction_group", "group") if k in params), None)
            if group_kw is not None:
                kwargs[group_kw] = amax_reduction_group
        stack.enter_context(te.autocast(**kwargs))
    else:  # TE < 2.9
        stack.enter_context(te.fp8_autocast(enabled=True, fp8_recipe=recipe, fp8_group=amax_reduction_group))
    return stack


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
    except Exception as exc:  # noqa: BLE001 - CUDA's own words are the diagnosis
        detail = " ".join(str(exc).split())[:300]
    built = torch.version.cuda or "none (a CPU-only build)"
    raise GPUUnavailable(
        gpus_missing_reason(
            resource.current_instance_type or "", expected, "CUDA is not usable in this process",
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
    "DynamicLossScaler",
    "PrecisionError",
    "PrecisionPlan",
    "TE_PRECISIONS",
    "autocast",
    "check_supported",
    "plan",
    "require_cuda",
    "te_recipe",
]
