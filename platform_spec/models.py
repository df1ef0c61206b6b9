"""The model-family seam: what a family is, the registry that finds one by name, and model FLOPs utilisation.

A model family is one folder under ``model_families/`` (torchtitan registers
its models the same way, by name): its pure ``__init__`` defines the family's
shape dataclass (a :class:`ModelShape`), its size presets and its FLOP terms,
and builds one :class:`ModelFamily` record; ``model_families/__init__.py``
registers every family, one line each. The trainer and the planner look a
family (or a preset) up here and never name a family's module.

Registration is by import of the ``model_families`` package
(:data:`FAMILIES_PACKAGE`): the first lookup imports it when nothing is
registered yet, the way ``importlib.metadata`` entry points load plugins, so
``platform_spec`` names no family and every reader sees the same registry.

Pure Python, standard library only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from platform_spec.errors import FieldError

__all__ = [
    "FAMILIES_PACKAGE",
    "ModelFamily",
    "ModelShape",
    "UnknownModelError",
    "family_names",
    "family_of",
    "get_family",
    "get_preset",
    "mfu_percent",
    "model_tflops_per_second",
    "preset_names",
    "register_family",
]

FAMILIES_PACKAGE = "model_families"
"""The package whose import registers every model family (its ``__init__`` holds the registration list)."""


@runtime_checkable
class ModelShape(Protocol):
    """What every family's shape dataclass offers (frozen dataclasses; sizes as integers).

    Attributes:
        name: the preset's name (``"gpt-1b"``), or any label for a custom shape.
        num_layers: transformer blocks.
        vocab_size: embedding rows.
        block_params: parameters in all blocks.
        num_params: parameters of the full model.
    """

    name: str
    num_layers: int
    vocab_size: int

    @property
    def block_params(self) -> int: ...

    @property
    def num_params(self) -> int: ...

    def with_overrides(self, *, num_layers: int | None = None, vocab_size: int | None = None) -> ModelShape: ...


@dataclass(frozen=True)
class ModelFamily:
    """One registered model family.

    Attributes:
        name: the family's name (``"gpt"``), also its folder under ``model_families/``.
        shape_type: the family's shape dataclass (a :class:`ModelShape`).
        presets: named shapes, in size order (the ``model`` hyperparameter's values).
        flops_per_token: ``(shape, seq_length, *, include_embedding=True, causal=True) -> float``,
            training FLOPs per token (forward + backward), the trainer's TFLOP/s and MFU numerator and
            the planner's throughput.
        description: one line for documentation.
    """

    name: str
    shape_type: type
    presets: Mapping[str, Any]
    flops_per_token: Callable[..., float]
    description: str = ""


class UnknownModelError(FieldError, KeyError):
    """A model preset (or family) name no registered family knows (a ``ValueError`` and a ``KeyError``)."""


_FAMILIES: dict[str, ModelFamily] = {}


def register_family(family: ModelFamily) -> ModelFamily:
    """Add ``family`` to the registry (``model_families/__init__.py`` calls this once per family).

    Registering the same record again is a no-op (a re-imported module).

    Raises:
        ValueError: another family of that name, or a preset name another family already has.
    """
    existing = _FAMILIES.get(family.name)
    if existing is not None:
        if existing == family:
            return existing
        raise ValueError(f"model family {family.name!r} is registered twice")
    for other in _FAMILIES.values():
        clash = sorted(set(other.presets) & set(family.presets))
        if clash:
            raise ValueError(f"model family {family.name!r}: presets {clash} belong to family {other.name!r}")
    _FAMILIES[family.name] = family
    return family


def _registry() -> Mapping[str, ModelFamily]:
    """The registered families, importing :data:`FAMILIES_PACKAGE` first when none is registered yet.

    Raises:
        RuntimeError: still none after that import: the package is being imported right now (a family's
            pure module imported something that looks a family up, an import cycle) or registers nothing.
    """
    if not _FAMILIES:
        importlib.import_module(FAMILIES_PACKAGE)  # registers every family (see the module docstring)
        if not _FAMILIES:
            raise RuntimeError(
                f"no model family is registered after importing {FAMILIES_PACKAGE!r}: a family's pure module must "
                "not look families up while the package registers them (import cycle), and the package must "
                "register at least one"
            )
    return MappingProxyType(_FAMILIES)


def family_names() -> tuple[str, ...]:
    """Names of the registered families, in registration order."""
    return tuple(_registry())


def get_family(name: str) -> ModelFamily:
    """The family called ``name``.

    Raises:
        UnknownModelError: naming the registered families.
    """
    family = _registry().get(name)
    if family is None:
        raise UnknownModelError("model_family", name, "one of " + ", ".join(family_names()))
    return family


def preset_names() -> tuple[str, ...]:
    """Every preset of every family, family by family in registration order."""
    return tuple(preset for family in _registry().values() for preset in family.presets)


def family_of(preset: str) -> ModelFamily:
    """The family that defines ``preset``.

    Raises:
        UnknownModelError: (field ``model``) naming every preset.
    """
    for family in _registry().values():
        if preset in family.presets:
            return family
    raise UnknownModelError("model", preset, "one of " + ", ".join(preset_names()))


def get_preset(name: str) -> Any:
    """The shape of the preset called ``name`` (a :class:`ModelShape` of its family).

    Raises:
        UnknownModelError: (a ``KeyError`` and ``ValueError``, field ``model``) naming every preset.
    """
    return family_of(name).presets[name]


def model_tflops_per_second(tokens_per_second: float, flops_per_token: float) -> float:
    """Achieved model TFLOP/s: ``tokens_per_second * flops_per_token / 1e12``.

    Pass per-GPU tokens/s to get per-GPU TFLOP/s (the MFU numerator).
    """
    return tokens_per_second * flops_per_token / 1e12


def mfu_percent(tokens_per_second_per_gpu: float, flops_per_token: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation in percent (0-100): achieved per-GPU TFLOP/s over the dense peak.

    ``peak_tflops`` comes from :func:`platform_spec.catalogue.dense_peak_tflops`; ``flops_per_token``
    from the model family (:attr:`ModelFamily.flops_per_token`).

    Raises:
        ValueError: ``peak_tflops <= 0``.
    """
    if peak_tflops <= 0:
        raise ValueError(f"peak_tflops must be > 0, got {peak_tflops}")
    return 100.0 * model_tflops_per_second(tokens_per_second_per_gpu, flops_per_token) / peak_tflops
