"""A CPU stand-in for the PyTorch API of the trainer image's TransformerEngine (2.19), for tests of OUR code only.

THIS IS NOT TRANSFORMERENGINE, and a test passing with it says nothing about
whether TransformerEngine works: no fp8 arithmetic happens here. It exists so
that CPU tests can check the trainer's own logic around TE: FSDP2 input casting
of the blocks (the rotary table must reach them in fp32), TE's ``_extra_state``
across a DCP save and a fresh model's load (the recipe and delayed scaling's
amax history must come back, also from a checkpoint the previous image's TE 2.10
wrote), and initial weights under sharding (TE's ``reset_parameters`` fills each
rank's shard from the same seed). The real library is exercised by
``benchmarks/gpu_check.py`` on a GPU (``benchmarks/gpu_check_in_image.sh``).

What is copied from TransformerEngine's ``release_v2.19`` branch (``git show
release_v2.19:<path>`` in github.com/NVIDIA/TransformerEngine; the version is
:data:`platform_spec.trainer_image.TRANSFORMER_ENGINE_VERSION`), so our calls meet the same names:

* ``transformer_engine/pytorch/transformer.py``: ``TransformerLayer.__init__``'s
  keyword parameters and defaults (with 2.19's ``bottom_right_diagonal`` and
  ``enc_dec_bottom_right_diagonal``), ``forward``'s parameters; submodule and
  parameter names (``self_attention.layernorm_qkv``, ``.core_attention``,
  ``.proj``, ``layernorm_mlp`` with ``fc1_weight`` ...). Unknown keywords raise
  ``TypeError`` as they would there. The two configurations the trainer's
  families use: LayerNorm, ``gelu``, biases (GPT); ``normalization="RMSNorm"``
  (no ``layer_norm_bias``), ``activation="swiglu"`` (FC1 ``2f`` rows, ``silu``
  of the first half times the second), ``bias=False`` (biases are empty plain
  tensors, not Parameters) and ``num_gqa_groups`` (QKV ``h + 2 * groups * d``
  rows, ``[q; k; v]``) (Llama), as ``module/layernorm_linear.py``,
  ``module/layernorm_mlp.py`` and ``attention/multi_head_attention.py`` build them.
* ``transformer_engine/pytorch/module/base.py``: ``get_extra_state`` returns
  ``torch.empty(0, dtype=torch.uint8)`` until the module has run under
  ``autocast``, and always for a stateless recipe (current scaling, MXFP8,
  NVFP4: 2.16.1's #3123), else (delayed scaling) a ``uint8`` tensor holding a
  pickle of ``{"recipe", "scale_fwd", "amax_history_fwd", "scale_bwd",
  "amax_history_bwd", "extra_fp8_variables"}``; ``set_extra_state`` ignores an
  empty tensor, asks ``_extra_state.should_load_extra_state_pickle`` about a
  pickle (ignore a stateless one; refuse a delayed-scaling one unless
  ``NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE=1``), else restores it;
  ``reset_parameters`` initialises a DTensor parameter's local shard with the
  module's ``init_method`` and re-wraps it. :data:`WRITE_FORMAT` ``"2.10"``
  writes v2.10's format instead (a pickle for every recipe, recipes without
  the fields added since), for tests of checkpoints the 25.12 image wrote.
* ``transformer_engine/pytorch/_extra_state.py``: ``UNSAFE_PICKLE_EXTRA_STATE_ENV``
  and ``should_load_extra_state_pickle``'s decisions (from the pickle's opcodes,
  without running it).
* ``transformer_engine/common/recipe/__init__.py``: ``Format`` (max values),
  ``MMParams``, ``DelayedScaling`` (``margin=0``, ``fp8_format=HYBRID``,
  ``amax_history_len=1024``, ``amax_compute_algo="max"``, ...),
  ``Float8CurrentScaling``, ``MXFP8BlockScaling``, ``NVFP4BlockScaling``, their
  fields and defaults (as the environment variables leave them unset), and
  the ``delayed()`` / ``mxfp8()`` / ... predicates; the classes carry TE's
  module name, so their pickles name what TE's do.
* ``transformer_engine/pytorch/quantization.py``: ``autocast(enabled, calibrating,
  recipe, amax_reduction_group, _graph)`` (a class: one instance is not entered
  twice at once), and ``distributed.py``'s ``checkpoint(function, *args, **kwargs)``.
* The fp8 metadata life cycle of ``module/base.py``: ``init_fp8_metadata``
  (each forward: ``fp8`` and ``fp8_checkpoint`` follow the autocast; nothing is
  redone while the recipe is unchanged) and ``set_meta_tensor`` (returns early
  only when the existing scaling state is of the recipe's kind, so a recipe
  change -- including one restored by ``set_extra_state`` -- builds a fresh
  state); ``reset_parameters`` re-creates every Parameter (a DTensor's from its
  new local shard) and then sets TE's parallelism attributes on the new ones,
  as ``LayerNormLinear`` / ``Linear`` / ``LayerNormMLP.reset_parameters`` do.
* Activation recompute (``distributed.py``: ``checkpoint(..., use_reentrant=False)``'s
  ``recompute_fn``): the recompute re-enters ``autocast`` with the forward's
  fp8 setting and recipe, in TE's recompute phase, where ``prepare_forward``
  uses (and afterwards restores) the forward's scaling state: a recompute
  leaves the scaling state and ``fp8_checkpoint`` as the forward left them.

The math is the torch-native block's (:class:`training.model.TransformerBlock`)
in the input's dtype; "scaling" only records each input's amax into the amax
history (roll, write row 0) and sets ``scale = fp8_max / max(history)``.

Use :func:`install` (``monkeypatch``) to put ``transformer_engine``,
``transformer_engine.pytorch`` (with ``._extra_state`` and ``.distributed``) and
``transformer_engine.common.recipe`` in ``sys.modules``.
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import pickle
import pickletools
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

# ---------------------------------------------------------------------------
# transformer_engine.common.recipe (release_v2.19: common/recipe/__init__.py)

RECIPE_MODULE = "transformer_engine.common.recipe"
"""The module TE's recipe classes live in: the classes below carry it, so their pickles name what TE's do."""


class _FormatHelper(NamedTuple):
    max_fwd: float
    max_bwd: float


class Format(Enum):
    E2M1 = _FormatHelper(max_fwd=6, max_bwd=6)
    E4M3 = _FormatHelper(max_fwd=448, max_bwd=448)
    E5M2 = _FormatHelper(max_fwd=57344, max_bwd=57344)
    HYBRID = _FormatHelper(max_fwd=448, max_bwd=57344)


@dataclass(frozen=True)
class MMParams:
    use_split_accumulator: bool = True


class Recipe:
    def nvfp4(self) -> bool:
        return isinstance(self, NVFP4BlockScaling)

    def mxfp8(self) -> bool:
        return isinstance(self, MXFP8BlockScaling)

    def delayed(self) -> bool:
        return isinstance(self, DelayedScaling)

    def float8_current_scaling(self) -> bool:
        return isinstance(self, Float8CurrentScaling)

    def float8_block_scaling(self) -> bool:
        return False


@dataclass()
class DelayedScaling(Recipe):
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: Any = "max"
    scaling_factor_compute_algo: Any = None
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: str | None = None


@dataclass()
class Float8CurrentScaling(Recipe):
    use_power_2_scales: bool = False
    fp8_format: Format = Format.HYBRID
    fp8_gemm_fprop: MMParams = MMParams(use_split_accumulator=False)
    fp8_gemm_dgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_gemm_wgrad: MMParams = MMParams(use_split_accumulator=True)
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: str | None = None


@dataclass()
class MXFP8BlockScaling(Recipe):
    margin: int = 0
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: str | None = None
    enable_2d_quantization: bool = False


@dataclass()
class NVFP4BlockScaling(Recipe):
    fp4_format: Format = Format.E2M1
    fp8_format: Format = Format.E4M3
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: str | None = None


RECIPE_TYPES = (
    _FormatHelper,
    Format,
    MMParams,
    Recipe,
    DelayedScaling,
    Float8CurrentScaling,
    MXFP8BlockScaling,
    NVFP4BlockScaling,
)
for _cls in RECIPE_TYPES:
    _cls.__module__ = RECIPE_MODULE

STATELESS_RECIPES = (Float8CurrentScaling, MXFP8BlockScaling, NVFP4BlockScaling)
"""``_extra_state.py``'s ``STATELESS`` policy: recipes whose extra state is empty since 2.16.1."""

WRITE_FORMAT = "2.19"
"""The extra-state format ``get_extra_state`` writes: ``"2.19"`` (stateless recipes: an empty tensor) or
``"2.10"`` (the 25.12 image's TE: a pickle for every recipe once a module ran under autocast), for tests of
checkpoints the old image wrote (``monkeypatch.setattr(fake_transformer_engine, "WRITE_FORMAT", "2.10")``).
Reading is always 2.19's."""

FIELDS_SINCE_2_10 = ("backward_override", "enable_2d_quantization")
"""Recipe fields release_v2.19 has and v2.10 had not (``git diff v2.10 release_v2.19 --
transformer_engine/common/recipe/__init__.py``): absent from a v2.10 pickle's recipe, so TE 2.19 reads their
class defaults."""


# ---------------------------------------------------------------------------
# transformer_engine.pytorch._extra_state (release_v2.19; NVIDIA/TransformerEngine#3123, in TE from 2.16.1)

UNSAFE_PICKLE_EXTRA_STATE_ENV = "NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE"


def should_load_extra_state_pickle(data: bytes, context: str) -> bool:
    """TE's decision on a non-empty pickled extra state, made (as TE does) from the pickle's opcodes without
    running it: False (ignore it) when it holds no global and no delayed-scaling key, or a recipe of a
    stateless kind only and no delayed-scaling key; otherwise True when the opt-in variable is ``"1"``, else
    ``RuntimeError`` naming the variable (TE's advisory)."""
    if _pickle_is_ignorable(data):
        return False
    if os.getenv(UNSAFE_PICKLE_EXTRA_STATE_ENV, "0") == "1":
        return True
    raise RuntimeError(
        f"Refusing to load pickled Transformer Engine extra state for {context}. Delayed-scaling FP8 metadata "
        "can be stored as a Python pickle, and loading it can execute arbitrary code. Only enable unsafe "
        f"loading if this checkpoint is from a trusted source. To load it anyway, set {UNSAFE_PICKLE_EXTRA_STATE_ENV}=1."
    )


_STRING_OPCODES = {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "BINUNICODE8", "SHORT_BINUNICODE"}


def _pickle_is_ignorable(data: bytes) -> bool:
    stateless = {(RECIPE_MODULE, cls.__name__) for cls in STATELESS_RECIPES}
    strings: list[str] = []
    globals_: list[tuple[str, str]] = []
    try:
        for opcode, arg, _ in pickletools.genops(data):
            if opcode.name in _STRING_OPCODES:
                strings.append(arg if isinstance(arg, str) else bytes(arg).decode("utf-8", "replace"))
            elif opcode.name == "GLOBAL":
                globals_.append(tuple(str(arg).split(" ", 1)))  # type: ignore[arg-type]
            elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                globals_.append((strings[-2], strings[-1]))
    except Exception:  # not a pickle TE can read: the unsafe path, as TE decides
        return False
    delayed_keys = bool(set(strings) & {"scale_fwd", "amax_history_fwd", "scale_bwd", "amax_history_bwd"})
    if not globals_ and not delayed_keys:
        return True
    if "recipe" not in strings or delayed_keys:
        return False
    recipes = {g for g in globals_ if g[0] == RECIPE_MODULE and g[1] in {c.__name__ for c in RECIPE_TYPES[3:]}}
    return bool(recipes) and recipes <= stateless


# ---------------------------------------------------------------------------
# transformer_engine.pytorch: autocast, checkpoint


class _GlobalState:
    enabled = False
    recipe: Recipe | None = None
    group: Any = None
    recompute_phase = False  # TE distributed.py: in_fp8_activation_recompute_phase()


class autocast:  # TE's name (a class in release_v2.19's quantization.py)
    """``te.autocast``: the same parameters; like TE's, one instance cannot be entered twice at once."""

    def __init__(
        self,
        enabled: bool = True,
        calibrating: bool = False,
        recipe: Recipe | None = None,
        amax_reduction_group: Any = None,
        _graph: bool = False,
    ) -> None:
        self._enabled, self._recipe, self._group = enabled, recipe, amax_reduction_group
        self._saved: tuple[bool, Recipe | None, Any] | None = None

    def __enter__(self) -> autocast:
        if self._saved is not None:
            raise RuntimeError("autocast context manager cannot be entered more than once concurrently")
        self._saved = (_GlobalState.enabled, _GlobalState.recipe, _GlobalState.group)
        # TE's get_default_fp8_recipe: DelayedScaling below Blackwell (what a CPU stand-in imitates)
        _GlobalState.enabled, _GlobalState.recipe, _GlobalState.group = (
            self._enabled,
            self._recipe or DelayedScaling(),
            self._group,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._saved is not None
        _GlobalState.enabled, _GlobalState.recipe, _GlobalState.group = self._saved
        self._saved = None


@contextlib.contextmanager
def _recompute_phase(fp8: bool, recipe: Recipe | None) -> Iterator[None]:
    """TE's ``recompute_fn`` context: ``autocast(enabled=fp8, recipe=fp8_recipe)`` of the forward, in the
    recompute phase (``activation_recompute_forward(recompute_phase=True)``)."""
    saved = _GlobalState.recompute_phase
    _GlobalState.recompute_phase = True
    try:
        with autocast(enabled=fp8, recipe=recipe):
            yield
    finally:
        _GlobalState.recompute_phase = saved


def checkpoint(function: Callable, *args: Any, **kwargs: Any) -> Any:
    """``te.distributed.checkpoint`` release_v2.19, the non-reentrant path the trainer uses (``use_reentrant=False``):
    the forward's fp8 setting and recipe are captured and re-entered around the recompute."""
    use_reentrant = kwargs.pop("use_reentrant", True)
    for name in ("distribute_saved_activations", "get_rng_state_tracker", "tp_group"):
        kwargs.pop(name, None)
    if use_reentrant:  # TE's _CheckpointFunction: not what the trainer calls, so not imitated here
        raise NotImplementedError("the stand-in implements te.checkpoint(..., use_reentrant=False) only")
    fp8, recipe = _GlobalState.enabled, (_GlobalState.recipe if _GlobalState.enabled else None)

    def contexts() -> tuple[Any, Any]:
        return contextlib.nullcontext(), _recompute_phase(fp8, recipe)

    return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False, context_fn=contexts, **kwargs)


# ---------------------------------------------------------------------------
# TransformerEngineBaseModule's fp8 metadata and extra state (release_v2.19 format, or v2.10's on request)


class _DelayedScalingState:
    """``DelayedScalingRecipeState``: per-tensor scales and an amax history ``[history, tensors]``."""

    def __init__(self, history: int, tensors: int) -> None:
        self.scale = torch.ones(tensors, dtype=torch.float32)
        self.amax_history = torch.zeros(history, tensors, dtype=torch.float32)


class _RecipeState:
    """The other recipes' states (``Float8CurrentScalingRecipeState``, ``MXFP8BlockScalingRecipeState``,
    ``NVFP4BlockScalingRecipeState``): nothing that ``get_extra_state`` saves."""

    def __init__(self, recipe: Recipe) -> None:
        self.recipe_type = type(recipe)


def _state_matches(recipe: Recipe, state: Any) -> bool:
    """``set_meta_tensor``'s early return: the existing state is of the recipe's kind."""
    if recipe.delayed():
        return isinstance(state, _DelayedScalingState)
    return isinstance(state, _RecipeState) and state.recipe_type is type(recipe)


class _BaseModule(nn.Module):
    """The parts of ``TransformerEngineBaseModule`` our code meets: fp8 metadata, extra state, reset."""

    def __init__(self, num_gemms: int, init_method: Callable | None) -> None:
        super().__init__()
        self.fp8_meta: dict[str, Any] = {"fp8_checkpoint": False, "num_gemms": num_gemms}
        self.fp8 = False
        self.fp8_initialized = False
        self.fp8_meta_tensors_initialized = False
        self._init_method = init_method

    # -- module/base.py: set_meta_tensor, init_fp8_meta_tensors, init_fp8_metadata, prepare_forward

    def set_meta_tensor(self, fwd: bool, recipe: Recipe) -> None:
        key = "scaling_fwd" if fwd else "scaling_bwd"
        if self.fp8_meta_tensors_initialized and _state_matches(recipe, self.fp8_meta.get(key)):
            if recipe.delayed():  # adjust_amax_history_length
                state = self.fp8_meta[key]
                length, current = recipe.amax_history_len, state.amax_history.shape[0]
                if length < current:
                    state.amax_history = state.amax_history[:length].clone()
                elif length > current:
                    state.amax_history = F.pad(state.amax_history, (0, 0, 0, length - current))
            return
        tensors = self.fp8_meta["num_gemms"] * (3 if fwd else 2)
        if recipe.delayed():
            self.fp8_meta[key] = _DelayedScalingState(recipe.amax_history_len, tensors)
        else:
            self.fp8_meta[key] = _RecipeState(recipe)

    def init_fp8_meta_tensors(self, recipe: Recipe) -> None:
        self.set_meta_tensor(True, recipe)
        self.set_meta_tensor(False, recipe)
        self.fp8_meta_tensors_initialized = True

    def init_fp8_metadata(self) -> None:
        """Each forward outside the recompute phase: follow the autocast; a new recipe gets its state."""
        self.fp8 = _GlobalState.enabled
        self.fp8_meta["fp8_checkpoint"] = self.fp8
        if not self.fp8:
            self.fp8_initialized = False
            return
        recipe = _GlobalState.recipe
        assert recipe is not None
        if self.fp8_initialized and recipe == self.fp8_meta.get("recipe"):
            return
        self.fp8_meta["recipe"] = recipe
        if hasattr(recipe, "fp8_format"):
            self.fp8_meta["fp8_max_fwd"] = recipe.fp8_format.value.max_fwd
            self.fp8_meta["fp8_max_bwd"] = recipe.fp8_format.value.max_bwd
        self.init_fp8_meta_tensors(recipe)
        self.fp8_initialized = True

    def _record(self, x: torch.Tensor) -> None:
        """``prepare_forward``, and what the quantizers leave behind: delayed scaling's amax and scale."""
        if self.fp8 and _GlobalState.recompute_phase:
            # TE: get_old_fp8_meta_tensors_for_recompute(), then restore_fp8_meta_tensors() after the
            # recompute: the forward's scaling state is used and left as it was
            return
        self.init_fp8_metadata()
        if not self.fp8:
            return
        recipe = self.fp8_meta["recipe"]
        if recipe.delayed():
            with torch.no_grad():
                state = self.fp8_meta["scaling_fwd"]
                state.amax_history.copy_(torch.roll(state.amax_history, 1, dims=0))
                state.amax_history[0].fill_(float(x.detach().abs().max()))
                state.scale.fill_(recipe.fp8_format.value.max_fwd / max(float(state.amax_history.max()), 1e-12))

    # -- extra state (release_v2.19 module/base.py; v2.10's when WRITE_FORMAT says so)

    def get_extra_state(self) -> torch.Tensor:
        if not (self.fp8_meta["fp8_checkpoint"] or self.fp8):
            return torch.empty(0, dtype=torch.uint8)
        recipe = self.fp8_meta["recipe"]
        if isinstance(recipe, STATELESS_RECIPES) and WRITE_FORMAT != "2.10":  # 2.16.1+: nothing to save
            return torch.empty(0, dtype=torch.uint8)
        if WRITE_FORMAT == "2.10":  # v2.10's recipe classes had none of the fields added since
            recipe = copy.copy(recipe)
            for name in FIELDS_SINCE_2_10:
                recipe.__dict__.pop(name, None)
        state: dict[str, Any] = {"recipe": recipe}
        if recipe.delayed():
            state["scale_fwd"] = self.fp8_meta["scaling_fwd"].scale.clone()
            state["amax_history_fwd"] = self.fp8_meta["scaling_fwd"].amax_history.clone()
            state["scale_bwd"] = self.fp8_meta["scaling_bwd"].scale.clone()
            state["amax_history_bwd"] = self.fp8_meta["scaling_bwd"].amax_history.clone()
        state["extra_fp8_variables"] = {
            k: v for k, v in self.fp8_meta.items() if isinstance(v, (bool, int, float, str, tuple, list))
        }
        return torch.frombuffer(bytearray(pickle.dumps(state)), dtype=torch.uint8)

    def set_extra_state(self, state: Any) -> None:
        if state is None:
            return
        context = type(self).__name__
        if isinstance(state, torch.Tensor):
            if state.numel() == 0:
                return
            data = state.detach().cpu().numpy().tobytes()
            if not should_load_extra_state_pickle(data, context):
                return
            state = pickle.loads(data)
        elif isinstance(state, io.BytesIO):  # the deprecated format: always the unsafe path
            if os.getenv(UNSAFE_PICKLE_EXTRA_STATE_ENV, "0") != "1":
                raise RuntimeError(f"Refusing to load pickled Transformer Engine extra state for {context}.")
            state.seek(0)
            state = torch.load(state, weights_only=False)
        else:
            raise RuntimeError("Unsupported checkpoint format.")
        if "recipe" not in state:  # TE 1.x: delayed scaling, with scale_inv
            state["recipe"] = DelayedScaling()
            state.pop("scale_inv_fwd", None)
            state.pop("scale_inv_bwd", None)
        self.fp8_meta.update(state["extra_fp8_variables"])
        self.fp8_meta["recipe"] = state["recipe"]
        self.init_fp8_meta_tensors(self.fp8_meta["recipe"])
        if self.fp8_meta["recipe"].delayed():
            self.fp8_meta["scaling_fwd"].scale.copy_(state["scale_fwd"])
            self.fp8_meta["scaling_fwd"].amax_history.copy_(state["amax_history_fwd"])
            self.fp8_meta["scaling_bwd"].scale.copy_(state["scale_bwd"])
            self.fp8_meta["scaling_bwd"].amax_history.copy_(state["amax_history_bwd"])

    # -- parameters

    def _parallelism_attributes(self) -> dict[str, dict[str, Any]]:
        """What the subclass's ``reset_parameters`` sets on each new Parameter (``set_parallel_mode=False``)."""
        return {}

    def reset_parameters(self, defer_init: bool | None = False) -> None:
        """TE's shape: each parameter (a DTensor's *local shard*) filled by ``init_method`` or ones/zeros,
        wrapped in a new ``nn.Parameter`` (the old object is replaced), then TE's parallelism attributes."""
        if defer_init:
            return
        from torch.distributed.tensor import DTensor

        for name, param in list(self.named_parameters(recurse=False)):
            dtensor = param if isinstance(param, DTensor) else None
            local = param._local_tensor if dtensor is not None else param
            if local.device.type == "meta":
                local = torch.empty_like(local, device="cpu")  # TE: device="cuda"
            with torch.no_grad():
                if name.endswith("layer_norm_weight"):
                    local.fill_(1.0)
                elif name.endswith("bias"):
                    local.zero_()
                elif self._init_method is not None:
                    self._init_method(local)
            if dtensor is not None:
                new = DTensor.from_local(
                    local,
                    device_mesh=dtensor.device_mesh,
                    placements=dtensor.placements,
                    shape=dtensor.size(),
                    stride=dtensor.stride(),
                )
                setattr(self, name, nn.Parameter(new))
            else:
                setattr(self, name, nn.Parameter(local.detach()))
        for name, attrs in self._parallelism_attributes().items():
            param = getattr(self, name)
            for key, value in attrs.items():
                assert not hasattr(param, key)  # set_tensor_model_parallel_attributes asserts it too
                setattr(param, key, value)


def _tensor_parallel(dim: int) -> dict[str, Any]:
    """``distributed.set_tensor_model_parallel_attributes(tensor, True, dim, 1)``."""
    return {"tensor_model_parallel": True, "partition_dim": dim, "partition_stride": 1}


_SEQUENCE_PARALLEL = {"sequence_parallel": False}


def _param(*shape: int, dtype: torch.dtype, device: Any) -> nn.Parameter:
    return nn.Parameter(torch.empty(*shape, dtype=dtype, device=device))


def _norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The module's ``normalization`` (TE: ``LayerNorm`` with ``layer_norm_bias``, ``RMSNorm`` without one)."""
    if module.normalization == "RMSNorm":
        return F.rms_norm(x, (x.shape[-1],), module.layer_norm_weight, module.eps)
    return F.layer_norm(x, (x.shape[-1],), module.layer_norm_weight, module.layer_norm_bias, module.eps)


def _no_bias(dtype: torch.dtype, device: Any) -> torch.Tensor:
    """What TE sets for a bias when ``bias=False``: an empty plain tensor, not a Parameter."""
    return torch.Tensor().to(dtype=dtype, device=device)


class LayerNormLinear(_BaseModule):
    def __init__(
        self,
        in_features: int,
        out_features: int,
        eps: float,
        *,
        dtype: torch.dtype,
        device: Any,
        init_method: Callable | None,
        normalization: str = "LayerNorm",
        bias: bool = True,
    ) -> None:
        super().__init__(1, init_method)
        self.eps = eps
        self.normalization = normalization
        self.layer_norm_weight = _param(in_features, dtype=dtype, device=device)
        if normalization == "RMSNorm":
            self.layer_norm_bias = None
        else:
            self.layer_norm_bias = _param(in_features, dtype=dtype, device=device)
        self.weight = _param(out_features, in_features, dtype=dtype, device=device)
        self.bias = _param(out_features, dtype=dtype, device=device) if bias else _no_bias(dtype, device)

    def _parallelism_attributes(self) -> dict[str, dict[str, Any]]:
        attributes = {"layer_norm_weight": _SEQUENCE_PARALLEL, "weight": _tensor_parallel(0)}
        if self.layer_norm_bias is not None:
            attributes["layer_norm_bias"] = _SEQUENCE_PARALLEL
        return attributes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._record(x)
        h = _norm(self, x)
        return F.linear(h, self.weight, self.bias if isinstance(self.bias, nn.Parameter) else None)


class Linear(_BaseModule):
    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        dtype: torch.dtype,
        device: Any,
        init_method: Callable | None,
        bias: bool = True,
    ) -> None:
        super().__init__(1, init_method)
        self.weight = _param(out_features, in_features, dtype=dtype, device=device)
        self.bias = _param(out_features, dtype=dtype, device=device) if bias else _no_bias(dtype, device)

    def _parallelism_attributes(self) -> dict[str, dict[str, Any]]:
        return {"weight": _tensor_parallel(0)}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._record(x)
        return F.linear(x, self.weight, self.bias if isinstance(self.bias, nn.Parameter) else None)


class LayerNormMLP(_BaseModule):
    def __init__(
        self,
        hidden: int,
        ffn: int,
        eps: float,
        *,
        dtype: torch.dtype,
        device: Any,
        init_method: Callable | None,
        output_layer_init_method: Callable | None,
        normalization: str = "LayerNorm",
        bias: bool = True,
        activation: str = "gelu",
    ) -> None:
        super().__init__(2, init_method)
        self.eps = eps
        self.normalization = normalization
        self.activation = activation
        self._output_init = output_layer_init_method
        fc1_rows = 2 * ffn if activation == "swiglu" else ffn  # TE: gated activations double FC1
        self.layer_norm_weight = _param(hidden, dtype=dtype, device=device)
        if normalization == "RMSNorm":
            self.layer_norm_bias = None
        else:
            self.layer_norm_bias = _param(hidden, dtype=dtype, device=device)
        self.fc1_weight = _param(fc1_rows, hidden, dtype=dtype, device=device)
        self.fc1_bias = _param(fc1_rows, dtype=dtype, device=device) if bias else _no_bias(dtype, device)
        self.fc2_weight = _param(hidden, ffn, dtype=dtype, device=device)
        self.fc2_bias = _param(hidden, dtype=dtype, device=device) if bias else _no_bias(dtype, device)

    def _parallelism_attributes(self) -> dict[str, dict[str, Any]]:
        attributes = {
            "layer_norm_weight": _SEQUENCE_PARALLEL,
            "fc1_weight": _tensor_parallel(0),
            "fc2_weight": _tensor_parallel(1),
        }
        if self.layer_norm_bias is not None:
            attributes["layer_norm_bias"] = _SEQUENCE_PARALLEL
        if isinstance(self.fc1_bias, nn.Parameter):
            attributes["fc1_bias"] = _tensor_parallel(0)
        return attributes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._record(x)
        h = _norm(self, x)
        fc1_bias = self.fc1_bias if isinstance(self.fc1_bias, nn.Parameter) else None
        fc2_bias = self.fc2_bias if isinstance(self.fc2_bias, nn.Parameter) else None
        fc1 = F.linear(h, self.fc1_weight, fc1_bias)
        if self.activation == "swiglu":  # TE's gated activations gate the first half: silu(a) * b
            gate, up = fc1.chunk(2, dim=-1)
            act = F.silu(gate) * up
        else:
            act = F.gelu(fc1, approximate="tanh")
        return F.linear(act, self.fc2_weight, fc2_bias)


class DotProductAttention(_BaseModule):
    def __init__(self) -> None:
        super().__init__(1, None)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        self._record(q)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _rotate(t: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """TE's fused RoPE on ``bshd`` input with ``[s, 1, 1, d]`` freqs (rotate-half, computed in fp32)."""
    half = t.shape[-1] // 2
    tf = t.float()
    angles = freqs.float().transpose(0, 1)  # [1, s, 1, d]
    rotated = torch.cat([-tf[..., half:], tf[..., :half]], dim=-1)
    return (tf * angles.cos() + rotated * angles.sin()).to(t.dtype)


class MultiheadAttention(nn.Module):
    def __init__(
        self,
        hidden: int,
        heads: int,
        eps: float,
        *,
        dtype: torch.dtype,
        device: Any,
        init_method: Callable | None,
        output_layer_init_method: Callable | None,
        num_gqa_groups: int | None = None,
        normalization: str = "LayerNorm",
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.heads = heads
        self.groups = num_gqa_groups or heads
        kv = self.groups * (hidden // heads)  # TE: hidden_size_kv = head size * num_gqa_groups
        self.sizes = (hidden, kv, kv)
        self.layernorm_qkv = LayerNormLinear(
            hidden, hidden + 2 * kv, eps, dtype=dtype, device=device, init_method=init_method,
            normalization=normalization, bias=bias,
        )  # fmt: skip
        self.core_attention = DotProductAttention()
        self.proj = Linear(hidden, hidden, dtype=dtype, device=device, init_method=output_layer_init_method, bias=bias)

    def forward(self, x: torch.Tensor, rotary_pos_emb: torch.Tensor | None) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.heads
        q, k, v = self.layernorm_qkv(x).split(self.sizes, dim=-1)  # qkv_weight_interleaved=False: [q; k; v]
        q = q.view(b, s, self.heads, d)
        k, v = (t.view(b, s, self.groups, d) for t in (k, v))
        if rotary_pos_emb is not None:
            q, k = _rotate(q, rotary_pos_emb), _rotate(k, rotary_pos_emb)
        if self.groups != self.heads:  # GQA: query head j reads KV head j // (heads / groups)
            k, v = (t.repeat_interleave(self.heads // self.groups, dim=2) for t in (k, v))
        out = self.core_attention(*(t.transpose(1, 2) for t in (q, k, v)))
        return self.proj(out.transpose(1, 2).reshape(b, s, h))


class TransformerLayer(nn.Module):
    """``te.TransformerLayer`` release_v2.19: the same keyword parameters (and defaults); ``bshd`` only here."""

    def __init__(
        self,
        hidden_size: int,
        ffn_hidden_size: int,
        num_attention_heads: int,
        num_gqa_groups: int | None = None,
        layernorm_epsilon: float = 1e-5,
        hidden_dropout: float = 0.1,
        attention_dropout: float = 0.1,
        init_method: Callable | None = None,
        output_layer_init_method: Callable | None = None,
        layer_number: int | None = None,
        kv_channels: int | None = None,
        self_attn_mask_type: str = "causal",
        window_size: tuple[int, int] | None = None,
        bottom_right_diagonal: bool | None = None,
        enc_dec_attn_mask_type: str = "no_mask",
        enc_dec_bottom_right_diagonal: bool | None = None,
        enc_dec_window_size: tuple[int, int] | None = None,
        tp_group: Any = None,
        tp_size: int = 1,
        params_dtype: torch.dtype | None = None,
        get_rng_state_tracker: Callable | None = None,
        fuse_wgrad_accumulation: bool = False,
        seq_length: int | None = None,
        micro_batch_size: int | None = None,
        sequence_parallel: bool = False,
        apply_residual_connection_post_layernorm: bool = False,
        output_layernorm: bool = False,
        parallel_attention_mlp: bool = False,
        layer_type: str = "encoder",
        drop_path_rate: float = 0.0,
        set_parallel_mode: bool = False,
        fuse_qkv_params: bool = False,
        rotary_pos_interleaved: bool = False,
        zero_centered_gamma: bool = False,
        qkv_weight_interleaved: bool = True,
        ub_tp_comm_overlap: bool = False,
        ub_overlap_ag: bool = True,
        ub_overlap_rs: bool = True,
        ub_overlap_rs_dgrad: bool = False,
        ub_bulk_dgrad: bool = True,
        ub_bulk_wgrad: bool = True,
        bias: bool = True,
        activation: str = "gelu",
        activation_params: dict | None = None,
        normalization: str = "LayerNorm",
        device: torch.device | str = "cuda",
        attn_input_format: str = "sbhd",
        name: str | None = None,
        qk_norm_type: str | None = None,
        qk_norm_eps: float = 1e-6,
        qk_norm_before_rope: bool = False,
        softmax_type: str = "vanilla",
    ) -> None:
        super().__init__()
        # what this stand-in implements (the trainer's configuration); anything else would be a silent lie
        # (the GPT family's: LayerNorm, gelu, biases; the Llama family's: RMSNorm, swiglu, no biases, GQA)
        assert fuse_qkv_params and not qkv_weight_interleaved and not rotary_pos_interleaved
        assert activation in ("gelu", "swiglu") and normalization in ("LayerNorm", "RMSNorm")
        assert attn_input_format == "bshd" and self_attn_mask_type == "causal" and kv_channels is None
        assert hidden_dropout == 0.0 and attention_dropout == 0.0
        dtype = params_dtype or torch.float32
        self.self_attention = MultiheadAttention(
            hidden_size,
            num_attention_heads,
            layernorm_epsilon,
            dtype=dtype,
            device=device,
            init_method=init_method,
            output_layer_init_method=output_layer_init_method,
            num_gqa_groups=num_gqa_groups,
            normalization=normalization,
            bias=bias,
        )
        self.layernorm_mlp = LayerNormMLP(
            hidden_size,
            ffn_hidden_size,
            layernorm_epsilon,
            dtype=dtype,
            device=device,
            init_method=init_method,
            output_layer_init_method=output_layer_init_method,
            normalization=normalization,
            bias=bias,
            activation=activation,
        )
        self.layernorm_mlp._init_method = init_method
        if torch.device(device).type != "meta":  # TE initialises on construction unless deferred
            for module in self.modules():
                if isinstance(module, _BaseModule):
                    module.reset_parameters()
            if output_layer_init_method is not None:
                with torch.no_grad():
                    output_layer_init_method(self.layernorm_mlp.fc2_weight)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        self_attn_mask_type: str | None = None,
        window_size: tuple[int, int] | None = None,
        bottom_right_diagonal: bool | None = None,
        encoder_output: torch.Tensor | None = None,
        enc_dec_attn_mask: Any = None,
        enc_dec_attn_mask_type: str | None = None,
        enc_dec_window_size: tuple[int, int] | None = None,
        enc_dec_bottom_right_diagonal: bool | None = None,
        is_first_microbatch: bool | None = None,
        checkpoint_core_attention: bool = False,
        inference_params: Any = None,
        rotary_pos_emb: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None,
        core_attention_bias_type: str = "no_bias",
        core_attention_bias: torch.Tensor | None = None,
        alibi_slopes: torch.Tensor | None = None,
        cu_seqlens_q: torch.Tensor | None = None,
        cu_seqlens_kv: torch.Tensor | None = None,
        cu_seqlens_q_padded: torch.Tensor | None = None,
        cu_seqlens_kv_padded: torch.Tensor | None = None,
        max_seqlen_q: int | None = None,
        max_seqlen_kv: int | None = None,
        fast_zero_fill: bool = True,
        pad_between_seqs: bool | None = None,
    ) -> torch.Tensor:
        x = hidden_states + self.self_attention(hidden_states, rotary_pos_emb)
        return x + self.layernorm_mlp(x)


def te_modules(model: nn.Module) -> list[_BaseModule]:
    """The stand-in's TE base modules of ``model`` (those with fp8 metadata and extra state)."""
    return [m for m in model.modules() if isinstance(m, _BaseModule)]


def install(monkeypatch: Any) -> types.ModuleType:
    """Put this stand-in in ``sys.modules`` as ``transformer_engine`` (+ ``.pytorch``, ``.pytorch._extra_state``,
    ``.pytorch.distributed``, ``.common.recipe``).

    Returns the ``transformer_engine.pytorch`` module object.
    """
    root = types.ModuleType("transformer_engine")
    common = types.ModuleType("transformer_engine.common")
    recipe = types.ModuleType("transformer_engine.common.recipe")
    for obj in RECIPE_TYPES:
        setattr(recipe, obj.__name__, obj)
    pytorch = types.ModuleType("transformer_engine.pytorch")
    extra_state = types.ModuleType("transformer_engine.pytorch._extra_state")
    extra_state.UNSAFE_PICKLE_EXTRA_STATE_ENV = UNSAFE_PICKLE_EXTRA_STATE_ENV  # type: ignore[attr-defined]
    extra_state.should_load_extra_state_pickle = should_load_extra_state_pickle  # type: ignore[attr-defined]
    distributed = types.ModuleType("transformer_engine.pytorch.distributed")
    distributed.checkpoint = checkpoint  # type: ignore[attr-defined]
    pytorch.TransformerLayer = TransformerLayer  # type: ignore[attr-defined]
    pytorch.autocast = autocast  # type: ignore[attr-defined]
    pytorch.checkpoint = checkpoint  # type: ignore[attr-defined]
    pytorch.distributed = distributed  # type: ignore[attr-defined]
    pytorch._extra_state = extra_state  # type: ignore[attr-defined]
    root.pytorch, root.common, common.recipe = pytorch, common, recipe  # type: ignore[attr-defined]
    for name, module in (
        ("transformer_engine", root),
        ("transformer_engine.common", common),
        ("transformer_engine.common.recipe", recipe),
        ("transformer_engine.pytorch", pytorch),
        ("transformer_engine.pytorch.distributed", distributed),
        ("transformer_engine.pytorch._extra_state", extra_state),
    ):
        monkeypatch.setitem(sys.modules, name, module)
    return pytorch


# ---------------------------------------------------------------------------
# TransformerEngine 2.19: quantized model init, quantized parameters under FSDP2, FusedAdam(master_weights=True)
#
# Copied names and signatures, from NVIDIA/TransformerEngine release_v2.19 (``git show release_v2.19:<path>``):
#
# * ``transformer_engine/pytorch/quantization.py``: ``quantized_model_init(enabled=True, recipe=None,
#   preserve_high_precision_init_val=False)``, a context that makes the TE modules created inside it hold
#   only quantized copies of their GEMM weights (``TransformerEngineBaseModule.__init__`` reads
#   ``primary_weights_in_fp8`` from it).
# * ``transformer_engine/pytorch/module/base.py`` ``reset_parameters``: after initialising a weight (a DTensor's
#   local shard), quantize it with the module's weight quantizer (rowwise and columnwise usage); a per-tensor
#   current-scaling quantizer reduces its amax over the shard group of the parameter's mesh,
#   ``device_mesh.get_group(mesh_dim="shard") if device_mesh.ndim > 1 else device_mesh.get_group()`` (a 2-D
#   mesh without a dimension named ``shard`` raises ``KeyError`` there, as in TE); re-wrap the quantized local
#   tensor with ``DTensor.from_local`` in a new ``nn.Parameter``.
# * ``transformer_engine/pytorch/quantized_tensor.py`` ``QuantizedTensor`` (exported as
#   ``transformer_engine.pytorch.QuantizedTensor``): a ``_make_wrapper_subclass`` whose nominal dtype is the
#   high-precision one; ``dequantize(dtype=None)``, ``quantize_(tensor)``; ``copy_`` from a high-precision
#   tensor quantizes, from a quantized one copies; other ops run on the dequantized values (in-place ones are
#   quantized back); ``untyped_storage()`` is an empty storage and ``_to_copy`` keeps the subclass (#2974, so
#   DCP stages it); ``new_empty`` makes an empty quantized tensor of the quantizer (``make_empty``: what DCP's
#   asynchronous staging, ``_state_dict_stager.py``, fills with copies of the tensor's attributes) and the
#   quantizer's ``__getstate__`` leaves out its amax reduction group (``float8_tensor.py``
#   ``Float8CurrentScalingQuantizer``: "Exclude unpicklable process group"); pickling for DCP, with the rebuild
#   function allowed for ``weights_only`` loading, as TE's ``__init__`` does with ``add_safe_globals``.
# * ``transformer_engine/pytorch/tensor/float8_tensor.py`` / ``mxfp8_tensor.py``: FSDP2's all-gather
#   extension ``fsdp_pre_all_gather(mesh, orig_size, contiguous_orig_stride, module, mp_policy)`` (the
#   quantized data, plus the block scales for MXFP8; the per-tensor scale travels as metadata) and
#   ``fsdp_post_all_gather(all_gather_outputs, metadata, param_dtype, *, out=None)`` (a quantized tensor of
#   the full shape in the compute dtype; with ``out``, refill it in place and return None).
# * ``transformer_engine/pytorch/optimizers/fused_adam.py`` ``FusedAdam(params, lr, betas, eps, weight_decay,
#   amsgrad, *, bias_correction, adam_w_mode, capturable, master_weights, master_weight_dtype, exp_avg_dtype,
#   exp_avg_sq_dtype, use_decoupled_grad, store_param_remainders)``: ``initialize_state(param,
#   store_param_remainders)`` (zero moments; ``master_param`` a fp32 copy of *every* parameter, the dequantized
#   value of a quantized one), ``set_scaled_state(param, state_name, unscaled_state)``, states re-wrapped as
#   DTensors where the parameter is one (#2795), ``state_dict`` / ``load_state_dict``, ``group["step"]``, the
#   AdamW update of ``multi_tensor_adam`` (``adam_w_mode``: ``p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p)``)
#   on the fp32 master of a quantized parameter, quantized back into the parameter afterwards, and on fp32
#   parameters directly (their ``master_param`` is created but unused, as in TE).
#
# NOT TransformerEngine: the "fp8" here is torch's ``float8_e4m3fn`` cast (``HYBRID``'s forward format) with a
# fp32 scale ``448 / amax``, one per tensor (fp8 current scaling) or one per 32 consecutive elements of a row
# (mxfp8, as a fp32 factor rather than E8M0); one layout only (TE also keeps the columnwise one); the GEMMs run
# on the dequantized values. Delayed scaling and nvfp4 weights are not imitated (the trainer refuses both:
# platform_spec.hyperparameters.quantized_model_init_refusal).


class _QuantizationState:
    """``FP8GlobalStateManager.quantization_state``'s fields that ``quantized_model_init`` sets."""

    fp8_parameters = False
    fp8_recipe: Recipe | None = None
    high_precision_init_val = False


@contextlib.contextmanager
def quantized_model_init(
    enabled: bool = True, recipe: Recipe | None = None, preserve_high_precision_init_val: bool = False
) -> Iterator[None]:
    saved = (
        _QuantizationState.fp8_parameters,
        _QuantizationState.fp8_recipe,
        _QuantizationState.high_precision_init_val,
    )
    _QuantizationState.fp8_parameters = enabled
    _QuantizationState.fp8_recipe = recipe if recipe is not None else Float8CurrentScaling()
    _QuantizationState.high_precision_init_val = preserve_high_precision_init_val
    try:
        yield
    finally:
        (
            _QuantizationState.fp8_parameters,
            _QuantizationState.fp8_recipe,
            _QuantizationState.high_precision_init_val,
        ) = saved


FP8_E4M3_MAX = 448.0
MX_BLOCK = 32


class _Quantizer:
    """The weight quantizer of a recipe: per-tensor current scaling (``Float8CurrentScalingQuantizer``, amax
    reduced over ``amax_reduction_group`` when ``with_amax_reduction``) or 32-element blocks (``MXFP8Quantizer``)."""

    def __init__(self, recipe: Recipe) -> None:
        if isinstance(recipe, MXFP8BlockScaling):
            self.block = True
        elif isinstance(recipe, Float8CurrentScaling):
            self.block = False
        else:
            raise NotImplementedError(
                f"the stand-in stores weights quantized for fp8 current scaling and mxfp8 only, not {recipe}"
            )
        self.amax_reduction_group: Any = None
        self.with_amax_reduction = False

    def __getstate__(self) -> dict[str, Any]:
        """``Float8CurrentScalingQuantizer.__getstate__``: without the process group, which cannot be pickled
        (DCP's asynchronous staging deep-copies a quantized tensor's quantizer)."""
        return {**self.__dict__, "amax_reduction_group": None}

    def make_empty(self, shape: torch.Size, dtype: torch.dtype, device: Any) -> QuantizedTensor:
        """An uninitialised quantized tensor of ``shape`` (``Quantizer.make_empty``)."""
        data = torch.empty(shape, dtype=torch.uint8, device=device)
        rows = shape[:-1].numel()
        scale_shape = (rows, shape[-1] // MX_BLOCK) if self.block else ()
        return QuantizedTensor(shape, dtype, data, torch.empty(scale_shape, device=device), self)

    def scale_inv(self, x: torch.Tensor, rows: int | None = None) -> torch.Tensor:
        """``1 / scale``: per tensor ``[]`` or per block ``[rows, cols / 32]`` (``rows`` of the weight ``x`` or a
        flat view of it holds)."""
        x = x.detach().float()
        if self.block:
            rows = rows if rows is not None else x.shape[:-1].numel()
            amax = x.reshape(rows, -1, MX_BLOCK).abs().amax(dim=-1)
        else:
            amax = x.abs().amax()
            if self.with_amax_reduction and torch.distributed.is_initialized():
                torch.distributed.all_reduce(amax, op=torch.distributed.ReduceOp.MAX, group=self.amax_reduction_group)
        return torch.clamp(amax, min=1e-12) / FP8_E4M3_MAX

    def encode(self, x: torch.Tensor, scale_inv: torch.Tensor) -> torch.Tensor:
        x = x.detach().float()
        if self.block:
            scaled = (x.reshape(scale_inv.shape[0], -1, MX_BLOCK) / scale_inv.unsqueeze(-1)).reshape(x.shape)
        else:
            scaled = x / scale_inv
        return scaled.to(torch.float8_e4m3fn).view(torch.uint8)

    def __call__(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> QuantizedTensor:
        scale_inv = self.scale_inv(x)
        return QuantizedTensor(x.shape, dtype or x.dtype, self.encode(x, scale_inv), scale_inv, self)


def _decode(data: torch.Tensor, scale_inv: torch.Tensor, block: bool, dtype: torch.dtype) -> torch.Tensor:
    values = data.view(torch.float8_e4m3fn).float()
    if block:
        shape = values.shape
        values = (values.reshape(scale_inv.shape[0], -1, MX_BLOCK) * scale_inv.unsqueeze(-1)).reshape(shape)
    else:
        values = values * scale_inv
    return values.to(dtype)


def _rebuild_quantized(data: torch.Tensor, scale_inv: torch.Tensor, dtype: torch.dtype, block: bool) -> QuantizedTensor:
    """Unpickle a :class:`QuantizedTensor` (allowed for ``torch.load(weights_only=True)`` by :func:`install`)."""
    quantizer = _Quantizer(MXFP8BlockScaling() if block else Float8CurrentScaling())
    return QuantizedTensor(data.shape, dtype, data, scale_inv, quantizer)


_ALIASES = {
    torch.ops.aten.detach.default,
    torch.ops.aten.alias.default,
    torch.ops.aten.view.default,
    torch.ops.aten._unsafe_view.default,
    torch.ops.aten.as_strided.default,
    torch.ops.aten.view_as.default,
}


class QuantizedTensor(torch.Tensor):
    """A weight held quantized: ``_data`` (fp8 bits as ``uint8``) and ``_scale_inv``; nominal ``dtype``."""

    _data: torch.Tensor
    _scale_inv: torch.Tensor
    _quantizer: _Quantizer

    @staticmethod
    def __new__(
        cls, shape: Any, dtype: torch.dtype, data: torch.Tensor, scale_inv: torch.Tensor, quantizer: _Quantizer
    ) -> QuantizedTensor:
        self = torch.Tensor._make_wrapper_subclass(
            cls, tuple(shape), dtype=dtype, device=data.device, requires_grad=False
        )
        self._data, self._scale_inv, self._quantizer = data, scale_inv, quantizer
        return self

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return f"QuantizedTensor(shape={tuple(self.shape)}, dtype={self.dtype}, block={self._quantizer.block})"

    def dequantize(self, dtype: torch.dtype | None = None) -> torch.Tensor:  # type: ignore[override]
        return _decode(self._data, self._scale_inv, self._quantizer.block, dtype or self.dtype)

    def quantize_(self, tensor: torch.Tensor) -> QuantizedTensor:
        """Quantize ``tensor``'s values into this tensor, in place (its scale follows them)."""
        scale_inv = self._quantizer.scale_inv(tensor, self._scale_inv.shape[0] if self._quantizer.block else None)
        self._data.copy_(self._quantizer.encode(tensor.reshape(self._data.shape), scale_inv))
        self._scale_inv.copy_(scale_inv)
        return self

    def _alias(self, shape: Any) -> QuantizedTensor:
        return QuantizedTensor(shape, self.dtype, self._data.view(shape), self._scale_inv, self._quantizer)

    def untyped_storage(self) -> torch.UntypedStorage:  # type: ignore[override]
        return torch.UntypedStorage(0, device=self.device)

    def __reduce_ex__(self, protocol: Any) -> Any:
        return _rebuild_quantized, (self._data.clone(), self._scale_inv.clone(), self.dtype, self._quantizer.block)

    # -- FSDP2's all-gather extension (float8_tensor.py / mxfp8_tensor.py)

    def fsdp_pre_all_gather(
        self, mesh: Any, orig_size: Any, contiguous_orig_stride: Any, module: Any, mp_policy: Any
    ) -> tuple[tuple[torch.Tensor, ...], Any]:
        if self._quantizer.block:
            return (self._data, self._scale_inv), (True,)
        return (self._data,), (False, self._scale_inv)

    def fsdp_post_all_gather(
        self,
        all_gather_outputs: tuple[torch.Tensor, ...],
        metadata: Any,
        param_dtype: torch.dtype,
        *,
        out: QuantizedTensor | None = None,
    ) -> tuple[QuantizedTensor, tuple[torch.Tensor, ...]] | None:
        data = all_gather_outputs[0]
        scale_inv = all_gather_outputs[1] if metadata[0] else metadata[1]
        if out is not None:
            out._data, out._scale_inv = data, scale_inv
            return None
        return QuantizedTensor(data.shape, param_dtype, data, scale_inv, self._quantizer), tuple(all_gather_outputs)

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _ALIASES and isinstance(args[0], QuantizedTensor):
            source = args[0]
            shape = source.shape if func in (torch.ops.aten.detach.default, torch.ops.aten.alias.default) else args[1]
            if func is torch.ops.aten.view_as.default:
                shape = args[1].shape
            shape = torch.empty(source.shape, device="meta").view(shape).shape  # resolves a -1
            if shape.numel() != source.numel():
                raise NotImplementedError(f"the stand-in's QuantizedTensor does not support {func} to {tuple(shape)}")
            return source._alias(shape)
        if func is torch.ops.aten.copy_.default and isinstance(args[0], QuantizedTensor):
            dst, src = args[0], args[1]
            if isinstance(src, QuantizedTensor):
                dst._data.copy_(src._data)
                dst._scale_inv.copy_(src._scale_inv)
            else:
                dst.quantize_(src)
            return dst
        if func is torch.ops.aten.new_empty.default and isinstance(args[0], QuantizedTensor):
            # quantized_tensor.py: "New empty op (used by DCP async staging to create CPU copies)"
            src = args[0]
            return src._quantizer.make_empty(
                torch.Size(args[1]), kwargs.get("dtype") or src.dtype, kwargs.get("device") or src.device
            )
        if func is torch.ops.aten.clone.default:
            src = args[0]
            return QuantizedTensor(src.shape, src.dtype, src._data.clone(), src._scale_inv.clone(), src._quantizer)
        if func is torch.ops.aten._to_copy.default and kwargs.get("dtype") in (None, args[0].dtype):
            src = args[0]
            device = kwargs.get("device") or src.device
            return QuantizedTensor(
                src.shape, src.dtype, src._data.to(device), src._scale_inv.to(device), src._quantizer
            )

        def plain(x: Any) -> Any:
            return x.dequantize() if isinstance(x, QuantizedTensor) else x

        out = func(*torch.utils._pytree.tree_map(plain, args), **torch.utils._pytree.tree_map(plain, kwargs))
        if func._schema.name.endswith("_") and args and isinstance(args[0], QuantizedTensor):
            return args[0].quantize_(out)  # an in-place op: its result quantized back
        return out


_GEMM_WEIGHTS = ("weight", "fc1_weight", "fc2_weight")
"""The parameters TE gives an ``fp8_meta_index`` (the GEMM weights) in the stand-in's modules."""

_base_module_init_2_10 = _BaseModule.__init__
_base_reset_parameters_2_10 = _BaseModule.reset_parameters


def _base_module_init(self: _BaseModule, num_gemms: int, init_method: Callable | None) -> None:
    _base_module_init_2_10(self, num_gemms, init_method)
    self.primary_weights_in_fp8 = _QuantizationState.fp8_parameters
    self.preserve_high_precision_init_val = _QuantizationState.high_precision_init_val
    self._weight_recipe = _QuantizationState.fp8_recipe


def _reset_parameters(self: _BaseModule, defer_init: bool | None = False) -> None:
    """``reset_parameters`` of the sections above, then TE 2.19's quantization of the GEMM weights when the
    module was created under :func:`quantized_model_init` (see this section's header)."""
    _base_reset_parameters_2_10(self, defer_init)
    if defer_init or not self.primary_weights_in_fp8:
        return
    from torch.distributed.tensor import DTensor

    for name, param in list(self.named_parameters(recurse=False)):
        if name not in _GEMM_WEIGHTS:
            continue
        assert self._weight_recipe is not None
        quantizer = _Quantizer(self._weight_recipe)
        is_dtensor = isinstance(param, DTensor)
        local = param._local_tensor if is_dtensor else param.detach()
        if is_dtensor and not quantizer.block:
            device_mesh = param.device_mesh
            quantizer.amax_reduction_group = (
                device_mesh.get_group(mesh_dim="shard") if device_mesh.ndim > 1 else device_mesh.get_group()
            )
            quantizer.with_amax_reduction = True
        quantized = quantizer(local)
        if is_dtensor:
            new = nn.Parameter(
                DTensor.from_local(
                    quantized,
                    device_mesh=param.device_mesh,
                    placements=param.placements,
                    shape=param.size(),
                    stride=param.stride(),
                )
            )
        else:
            new = nn.Parameter(quantized)
        for key, value in vars(param).items():  # TE sets its parallelism attributes after quantizing
            if not key.startswith("_"):
                setattr(new, key, value)
        setattr(self, name, new)


_BaseModule.__init__ = _base_module_init  # type: ignore[method-assign]
_BaseModule.reset_parameters = _reset_parameters  # type: ignore[method-assign]


class FusedAdam(torch.optim.Optimizer):
    """``transformer_engine.pytorch.optimizers.FusedAdam`` (see this section's header), in plain torch."""

    def __init__(
        self,
        params: Any,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
        *,
        bias_correction: bool = True,
        adam_w_mode: bool = True,
        capturable: bool = False,
        master_weights: bool = False,
        master_weight_dtype: torch.dtype = torch.float32,
        exp_avg_dtype: torch.dtype = torch.float32,
        exp_avg_sq_dtype: torch.dtype = torch.float32,
        use_decoupled_grad: bool = False,
        store_param_remainders: bool = False,
        set_grad_none: bool | None = None,
    ) -> None:
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad variant.")
        if (master_weight_dtype, exp_avg_dtype, exp_avg_sq_dtype) != (torch.float32,) * 3 or store_param_remainders:
            raise NotImplementedError("the stand-in keeps fp32 states only")
        if capturable or use_decoupled_grad or not bias_correction or not adam_w_mode:
            raise NotImplementedError("the stand-in imitates FusedAdam(adam_w_mode=True) with bias correction only")
        defaults = {
            "lr": lr,
            "bias_correction": bias_correction,
            "betas": betas,
            "eps": eps,
            "weight_decay": weight_decay,
        }
        super().__init__(params, defaults)
        self.master_weights = master_weights
        self.store_param_remainders = False

    def _initialize_state(self, param: torch.Tensor, state_name: str, zero_buffer: bool) -> None:
        from torch.distributed.tensor import DTensor

        local = param._local_tensor if isinstance(param, DTensor) else param
        data = torch.zeros(local.shape, dtype=torch.float32, device=local.device)
        if not zero_buffer:
            data = torch.empty_like(data)
        if isinstance(param, DTensor):
            data = DTensor.from_local(
                data,
                device_mesh=param.device_mesh,
                placements=param.placements,
                shape=param.size(),
                stride=param.stride(),
            )
        self.state[param][state_name] = data

    def initialize_state(self, param: torch.Tensor, store_param_remainders: bool) -> None:
        from torch.distributed.tensor import DTensor

        self._initialize_state(param, "exp_avg", zero_buffer=True)
        self._initialize_state(param, "exp_avg_sq", zero_buffer=True)
        if self.master_weights:
            self._initialize_state(param, "master_param", zero_buffer=False)
            local = param._local_tensor if isinstance(param, DTensor) else param
            if isinstance(local, QuantizedTensor):
                master = local.dequantize(dtype=torch.float32).clone().detach()
            else:
                master = local.clone().detach().float()
            self.set_scaled_state(param, "master_param", master)

    def _local_state(self, param: torch.Tensor, state_name: str) -> torch.Tensor:
        from torch.distributed.tensor import DTensor

        state = self.state[param][state_name]
        return state._local_tensor if isinstance(state, DTensor) else state

    def get_unscaled_state(self, param: torch.Tensor, state_name: str) -> torch.Tensor:
        return self._local_state(param, state_name)

    def set_scaled_state(self, param: torch.Tensor, state_name: str, unscaled_state: torch.Tensor) -> None:
        assert unscaled_state.dtype == torch.float32
        if state_name not in self.state[param]:
            self._initialize_state(param, state_name, False)
        self._local_state(param, state_name).copy_(unscaled_state)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        from itertools import chain

        from torch.distributed.tensor import DTensor

        super().load_state_dict(state_dict)
        id_map = dict(
            zip(
                chain.from_iterable(g["params"] for g in state_dict["param_groups"]),
                chain.from_iterable(g["params"] for g in self.param_groups),
                strict=True,
            )
        )
        for key, value in state_dict["state"].items():
            if key in id_map:
                param = id_map[key]
                self.state[param] = {}
                for name, state in value.items():
                    if state is None:
                        continue
                    if isinstance(state, DTensor):
                        state = state._local_tensor
                    self.set_scaled_state(param, name, state.float())

    @torch.no_grad()
    def step(self, closure: Callable | None = None) -> Any:
        from torch.distributed.tensor import DTensor

        loss = closure() if closure is not None else None
        for group in self.param_groups:
            group["step"] = group.get("step", 0) + 1
            beta1, beta2 = group["betas"]
            bias1, bias2 = 1 - beta1 ** group["step"], 1 - beta2 ** group["step"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                if len(self.state[p]) == 0:
                    self.initialize_state(p, False)
                assert isinstance(p, DTensor) == isinstance(p.grad, DTensor), "[FusedAdam DTensor Disparity]"
                local = p._local_tensor if isinstance(p, DTensor) else p
                grad = p.grad._local_tensor if isinstance(p.grad, DTensor) else p.grad
                m, v = self._local_state(p, "exp_avg"), self._local_state(p, "exp_avg_sq")
                if isinstance(local, QuantizedTensor):
                    if not self.master_weights:
                        raise RuntimeError(
                            "FusedAdam without master_weights does not support QuantizedTensor parameters."
                        )
                    target = self._local_state(p, "master_param")
                elif local.dtype == torch.float32:
                    target = local
                else:
                    raise NotImplementedError("the stand-in steps fp32 and quantized parameters only")
                g = grad.float()
                m.mul_(beta1).add_(g, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                update = (m / bias1) / ((v / bias2).sqrt() + group["eps"]) + group["weight_decay"] * target
                target.sub_(group["lr"] * update)
                if isinstance(local, QuantizedTensor):
                    local.quantize_(target)
        return loss


def install_2_19(monkeypatch: Any) -> types.ModuleType:
    """:func:`install`, plus this section: ``te.quantized_model_init``, ``te.QuantizedTensor``,
    ``transformer_engine.pytorch.optimizers.FusedAdam``, and the rebuild function of a pickled
    :class:`QuantizedTensor` allowed for ``torch.load(weights_only=True)`` (DCP's loader).

    Returns the ``transformer_engine.pytorch`` module object.
    """
    pytorch = install(monkeypatch)
    optimizers = types.ModuleType("transformer_engine.pytorch.optimizers")
    optimizers.FusedAdam = FusedAdam  # type: ignore[attr-defined]
    pytorch.optimizers = optimizers  # type: ignore[attr-defined]
    pytorch.quantized_model_init = quantized_model_init  # type: ignore[attr-defined]
    pytorch.QuantizedTensor = QuantizedTensor  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch.optimizers", optimizers)
    torch.serialization.add_safe_globals([_rebuild_quantized])
    return pytorch
