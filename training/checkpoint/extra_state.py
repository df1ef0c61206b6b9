"""TransformerEngine ``_extra_state`` in checkpoints: resumed on the trainer image's TE without unpickling what
the platform did not write.

Each TE module saves its fp8 state as ``_extra_state``: a ``uint8`` tensor holding a Python pickle of
``{"recipe": <recipe object>, "extra_fp8_variables": {...}}`` plus, for delayed scaling, the
``scale_fwd`` / ``amax_history_fwd`` / ``scale_bwd`` / ``amax_history_bwd`` tensors
(``TransformerEngineBaseModule.get_extra_state``, ``transformer_engine/pytorch/module/base.py``). TE 2.10
(the 25.12 image's) wrote that pickle for every recipe once a module had run under ``te.autocast``; from
2.16.1 (NVIDIA/TransformerEngine#3123, ``transformer_engine/pytorch/_extra_state.py``) TE writes an empty
tensor for the stateless recipes (current scaling, MXFP8, NVFP4), ignores their old pickles on load, and
refuses to unpickle a delayed-scaling state (its own, too) unless ``NVTE_ALLOW_UNSAFE_PICKLE_EXTRA_STATE=1``
-- an opt-in for the whole process that would let any pickle in any checkpoint run code.

So the trainer reads every non-empty extra state itself first, with :class:`RestrictedUnpickler`: only
the classes such a state holds can be named (the recipe classes of :mod:`platform_spec.precisions` and
their field types from ``transformer_engine.common.recipe``, ``torch._utils._rebuild_tensor_v2`` with no
hooks and a view within its storage, ``collections.OrderedDict``), and a tensor's storage is read by torch's weights-only unpickler
(``torch.storage._load_from_bytes`` itself would call ``torch.load(weights_only=False)``). The payload
must then have the shape above. Only when every extra state of the checkpoint passed does TE get the
opt-in, for that one ``set_state_dict`` call (:func:`te_unpickles_checked_states`); TE then restores the
recipe and delayed scaling's scales and amax history from bytes already proven to build nothing else.
Anything else is refused (:class:`ExtraStateRefused`) before any weight is loaded.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pickle
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from platform_spec.precisions import PRECISIONS

__all__ = [
    "RECIPE_MODULE",
    "ExtraStateRefused",
    "ForbiddenGlobal",
    "ForbiddenTensor",
    "RestrictedUnpickler",
    "check_extra_states",
    "read_extra_state",
    "te_unpickles_checked_states",
]

RECIPE_MODULE = "transformer_engine.common.recipe"
"""Where TE's recipe classes live (and the module name their pickles carry)."""

RECIPE_CLASSES: tuple[str, ...] = tuple(
    sorted({spec.class_name for record in PRECISIONS for spec in record.te_recipes.values()})
)
"""The recipe classes the trainer runs (the precision registry's): the only recipes a checkpoint may hold."""

RECIPE_FIELD_TYPES: tuple[str, ...] = ("Format", "_FormatHelper", "MMParams", "QParams")
"""Types a recipe's fields hold (``transformer_engine/common/recipe/__init__.py``, release_v2.19 and v2.10):
the fp8 format enum and its ``(max_fwd, max_bwd)`` tuple, GEMM and quantization parameters."""

STATE_TENSORS = ("scale_fwd", "amax_history_fwd", "scale_bwd", "amax_history_bwd")
"""Delayed scaling's tensors in the state (TE 1.x also saved ``scale_inv_*``, which TE drops on load)."""

_STATE_KEYS = frozenset({"recipe", "extra_fp8_variables", *STATE_TENSORS, "scale_inv_fwd", "scale_inv_bwd"})
_PRIMITIVES = (bool, int, float, str, type(None))


class ExtraStateRefused(RuntimeError):
    """A checkpoint's TE extra state is not one the trainer writes; nothing of that checkpoint was loaded.

    Attributes:
        key: the state-dict key (``..._extra_state``).
        reason: what was found instead.
    """

    def __init__(self, key: str, reason: str) -> None:
        self.key, self.reason = key, reason
        super().__init__(
            f"{key}: refused TransformerEngine extra state: {reason}. The trainer loads only the fp8 state its "
            f"recipes write ({', '.join(RECIPE_CLASSES)}); a pickle naming anything else could run code, so "
            "it is not unpickled"
        )


class ForbiddenGlobal(pickle.UnpicklingError):
    """A pickle names a global outside those a TE extra state holds (message: ``module.name``)."""


class ForbiddenTensor(pickle.UnpicklingError):
    """A pickled tensor is not a plain one within its storage (message: what it is instead)."""


def _load_storage(data: bytes) -> Any:
    """``torch.storage._load_from_bytes`` read by torch's weights-only unpickler (the original allows any code).

    Raises:
        ForbiddenTensor: the weights-only unpickler refuses the bytes (its own reason, without torch's advice
            to retry with ``weights_only=False``).
    """
    try:
        return torch.load(io.BytesIO(data), weights_only=True)
    except pickle.UnpicklingError as exc:
        text = str(exc)
        detail = text.partition("WeightsUnpickler error:")[2].partition("Check the documentation")[0].strip()
        raise ForbiddenTensor(
            f"a tensor storage that torch's weights-only unpickler refuses ({detail or text.splitlines()[0]})"
        ) from None


def _rebuild_tensor(storage: Any, offset: int, size: tuple, stride: tuple, requires_grad: bool, hooks: Any, *rest: Any):
    """``torch._utils._rebuild_tensor_v2`` for a plain CPU tensor: no backward hooks, no metadata, and a view
    that lies within its storage (torch's ``Tensor.set_`` would grow the storage to fit it, allocating whatever
    size the pickle names and exposing uninitialised memory).

    Raises:
        ForbiddenTensor: hooks or metadata, not a storage, or a view reaching past the storage.
    """
    if hooks or any(rest):
        raise ForbiddenTensor("a tensor with backward hooks or metadata")
    if not isinstance(storage, torch.TypedStorage):
        raise ForbiddenTensor(f"a tensor over a {type(storage).__name__}, not a storage")
    dims = (offset, *size, *stride)
    if len(size) != len(stride) or not all(isinstance(n, int) and n >= 0 for n in dims):
        raise ForbiddenTensor(f"a tensor of size {size}, stride {stride}, offset {offset}")
    end = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) + 1 if all(size) else offset
    # the pickle format hands over a TypedStorage, whose public size() warns that TypedStorage is deprecated on
    # every resume; _size() is the same count without the warning (torch/storage.py)
    elements = storage._size()
    if end > elements:
        raise ForbiddenTensor(
            f"a tensor of size {tuple(size)}, stride {tuple(stride)} at offset {offset} reaching past its storage "
            f"of {elements} elements"
        )
    from torch._utils import _rebuild_tensor_v2

    return _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, OrderedDict())


class RestrictedUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the globals a TE extra state holds (module docstring).

    Raises:
        ForbiddenGlobal: the payload names any other global.
    """

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor
        if (module, name) == ("torch.storage", "_load_from_bytes"):
            return _load_storage
        if module == RECIPE_MODULE and name in RECIPE_CLASSES + RECIPE_FIELD_TYPES:
            return getattr(importlib.import_module(RECIPE_MODULE), name)
        raise ForbiddenGlobal(f"{module}.{name}")


def read_extra_state(data: bytes, key: str) -> dict[str, Any]:
    """Unpickle one extra state with :class:`RestrictedUnpickler` and check its shape.

    Args:
        data: the ``uint8`` tensor's bytes (not empty).
        key: its state-dict key, for the error.

    Returns:
        The state: ``recipe`` (an instance of one of :data:`RECIPE_CLASSES`), ``extra_fp8_variables`` and, for
        delayed scaling, the tensors of :data:`STATE_TENSORS`.

    Raises:
        ExtraStateRefused: a global outside the allowed ones, a tensor that is not a plain one within its
            storage, not a pickle, or not of that shape.
    """
    try:
        state = RestrictedUnpickler(io.BytesIO(data)).load()
    except ForbiddenGlobal as exc:
        raise ExtraStateRefused(key, f"its pickle names {exc}, which no TE recipe's state holds") from None
    except ForbiddenTensor as exc:
        raise ExtraStateRefused(key, f"its pickle holds {exc}") from None
    except Exception as exc:  # a truncated or corrupt pickle fails in many ways
        raise ExtraStateRefused(key, f"not a readable pickle ({type(exc).__name__}: {exc})") from None
    if not isinstance(state, dict) or not set(state) <= _STATE_KEYS:
        found = sorted(map(str, state)) if isinstance(state, dict) else type(state).__name__
        raise ExtraStateRefused(key, f"expected a dict of {sorted(_STATE_KEYS)}, got {found}")
    recipe_classes = tuple(getattr(importlib.import_module(RECIPE_MODULE), n) for n in RECIPE_CLASSES)
    if not isinstance(state.get("recipe"), recipe_classes):
        raise ExtraStateRefused(key, f"expected a recipe of {', '.join(RECIPE_CLASSES)}, got {state.get('recipe')!r}")
    for name in set(state) & {*STATE_TENSORS, "scale_inv_fwd", "scale_inv_bwd"}:
        if not isinstance(state[name], torch.Tensor):
            raise ExtraStateRefused(key, f"{name} is a {type(state[name]).__name__}, expected a tensor")
    variables = state.get("extra_fp8_variables", {})
    if not isinstance(variables, dict) or not all(_plain(v) for v in variables.values()):
        raise ExtraStateRefused(key, "extra_fp8_variables holds more than bools, numbers, strings, tuples and lists")
    return state


def _plain(value: Any) -> bool:
    if isinstance(value, (tuple, list)):
        return all(_plain(v) for v in value)
    return isinstance(value, _PRIMITIVES)


def check_extra_states(model_state: Mapping[str, Any]) -> dict[str, str]:
    """Check every non-empty ``_extra_state`` tensor of a loaded model state dict (:func:`read_extra_state`).

    Returns:
        ``{key: recipe class name}`` for the non-empty ones (empty ones restore nothing and pass).

    Raises:
        ExtraStateRefused: the first one that is not a state the trainer writes (including one that is not a
            1-D ``uint8`` tensor, the only kind TE writes: the checkpoint's metadata sets the dtype it loads as).
    """
    recipes: dict[str, str] = {}
    for key, value in model_state.items():
        if key.endswith("_extra_state") and isinstance(value, torch.Tensor) and value.numel():
            if value.dtype != torch.uint8 or value.dim() != 1:
                raise ExtraStateRefused(
                    key, f"expected a 1-D uint8 tensor, got {value.dtype} of shape {tuple(value.shape)}"
                )
            data = value.detach().cpu().contiguous().numpy().tobytes()
            recipes[key] = type(read_extra_state(data, key)["recipe"]).__name__
    return recipes


@contextlib.contextmanager
def te_unpickles_checked_states() -> Iterator[None]:
    """TE's opt-in to unpickle delayed-scaling extra state, for the duration only (restored after).

    Enter it only around a ``set_state_dict`` whose every extra state :func:`check_extra_states` passed.
    The variable's name is TE's (``transformer_engine.pytorch._extra_state.UNSAFE_PICKLE_EXTRA_STATE_ENV``,
    since 2.16.1); without TransformerEngine (the torch blocks, which save no extra state) nothing is set.
    """
    try:
        env = importlib.import_module("transformer_engine.pytorch._extra_state").UNSAFE_PICKLE_EXTRA_STATE_ENV
    except ImportError:
        yield
        return
    before = os.environ.get(env)
    os.environ[env] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(env, None)
        else:
            os.environ[env] = before
