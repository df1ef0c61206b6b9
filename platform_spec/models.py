"""The model-family seam: what a family is, the registry that finds one by name, and model FLOPs utilisation.

A model family is one folder under ``model_families/`` (torchtitan registers
its models the same way, by name): its pure ``__init__`` defines the family's
shape dataclass (a :class:`ModelShape`), its size presets, its FLOP terms, the
planner's per-block memory and speed terms (:class:`ShapeTerms`) and the
names, initialisation and export facts of its parameters, and builds one
:class:`ModelFamily` record; beside it, one module per block implementation
(``torch_block.py``, ``te_block.py``: the trainer's backends), imported only
when the trainer asks for one (:meth:`ModelFamily.block_module`). A family
registers itself (``FAMILY = register_family(ModelFamily(...))``) and
``model_families/__init__.py`` imports every family, one line each. The
trainer and the planner look a family (or a preset) up here and never name a
family's module.

The skeleton the trainer builds around a family's blocks (``training/model.py``,
the same for every family): token embedding ``tok_embeddings``, the
family's blocks ``layers.<i>``, a final norm ``norm`` (built by the family's
torch module), an untied LM head ``output`` and the chunked cross-entropy
(:data:`LOSS_CHUNK_ELEMENTS`). A block module offers
``build_block(shape, layer_number, *, device) -> nn.Module`` (a block's
``forward(hidden [batch, seq, hidden_size], block_input)``) and
``block_input(shape, seq_length, device)`` (what every block receives besides
the hidden state, e.g. rotary angles, fp32; ``None`` if nothing); the torch
module also ``build_final_norm(shape)``.

Registration is by import of the ``model_families`` package
(:data:`FAMILIES_PACKAGE`): the first lookup imports it when nothing is
registered yet, the way ``importlib.metadata`` entry points load plugins, so
``platform_spec`` names no family and every reader sees the same registry.

Pure Python, standard library only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import Any, Protocol, runtime_checkable

from platform_spec.errors import FieldError

__all__ = [
    "FAMILIES_PACKAGE",
    "LOSS_CHUNK_ELEMENTS",
    "ModelFamily",
    "ModelShape",
    "ShapeTerms",
    "UnknownModelError",
    "family_names",
    "family_of",
    "family_of_shape",
    "get_family",
    "get_preset",
    "mfu_percent",
    "model_tflops_per_second",
    "preset_names",
    "register_family",
]

FAMILIES_PACKAGE = "model_families"
"""The package whose import registers every model family (its ``__init__`` holds the registration list)."""

LOSS_CHUNK_ELEMENTS = 1 << 26
"""fp32 logits alive at once in the trainer's chunked cross-entropy (64 Mi elements = 256 MiB): the
skeleton's loss (``training.model.chunked_cross_entropy``) computes ``LOSS_CHUNK_ELEMENTS // vocab_size``
tokens per chunk, and the planner's ``logits_and_loss`` term counts one such chunk."""


@runtime_checkable
class ModelShape(Protocol):
    """What every family's shape dataclass offers (frozen dataclasses; sizes as integers).

    Attributes:
        name: the preset's name (``"gpt-1b"``), or any label for a custom shape.
        num_layers: transformer blocks.
        hidden_size: width of the residual stream (embedding columns, LM-head rows).
        vocab_size: embedding rows.
        params_per_block: parameters in one block.
        block_params: parameters in all blocks.
        num_params: parameters of the full model.
    """

    name: str
    num_layers: int
    hidden_size: int
    vocab_size: int

    @property
    def params_per_block(self) -> int: ...

    @property
    def block_params(self) -> int: ...

    @property
    def num_params(self) -> int: ...

    def with_overrides(self, *, num_layers: int | None = None, vocab_size: int | None = None) -> ModelShape: ...


@dataclass(frozen=True)
class ShapeTerms:
    """The planner's per-block terms of one family: what ``planner/memory.py`` and
    ``planner/throughput.py`` sum over the blocks (the skeleton's embedding, head and loss they count
    themselves).

    Byte arguments (keyword-only) come from the precision registry (:mod:`platform_spec.precisions`):
    ``activation_bytes`` is ``a``, bytes per element of the precision's compute dtype;
    ``quantized_bytes`` is ``q``, bytes per quantized element including its scales, or ``None`` when the
    precision does not quantize. ``dropout``: the block saves hidden-dropout masks (TransformerEngine's
    FSDP example, the guide's benchmark); the trainer's blocks have no dropout.

    Attributes:
        matmul_weights_per_block: ``(shape) -> int``: ``W``, the weights one block's GEMMs read (what
            TransformerEngine keeps quantized copies of; ``6W`` training FLOPs per token).
        attention_flops_per_token: ``(shape, seq_length, *, causal=True) -> float``: training FLOPs per
            token (forward + backward; a third is forward) of the attention-score matmuls of every block.
        block_activation_terms: ``(shape, *, activation_bytes, quantized_bytes, dropout) -> {tensor: bytes}``:
            bytes per token one block saves for backward, by tensor; the block's input (``a * hidden_size``)
            is one of them.
        block_backward_transient_bytes_per_token: ``(shape, *, activation_bytes, quantized_bytes) -> float``:
            extra bytes per token alive at the peak of one block's backward.
        block_elementwise_bytes_per_token: ``(shape, *, activation_bytes, quantized_bytes, dropout) ->
            (forward, backward)``: HBM bytes per token per block of the memory-bound work (norms,
            residuals, activations, quantizing casts).
        kernels_per_block: CUDA kernels (and FSDP hook work) one block launches per forward + backward,
            the planner's launch-bound floor (an estimate).
    """

    matmul_weights_per_block: Callable[[Any], int]
    attention_flops_per_token: Callable[..., float]
    block_activation_terms: Callable[..., Mapping[str, float]]
    block_backward_transient_bytes_per_token: Callable[..., float]
    block_elementwise_bytes_per_token: Callable[..., tuple[float, float]]
    kernels_per_block: int


@dataclass(frozen=True)
class ModelFamily:
    """One registered model family.

    Attributes:
        name: the family's name (``"gpt"``), also its folder under ``model_families/``.
        shape_type: the family's shape dataclass (a :class:`ModelShape`; a frozen dataclass whose
            fields, ``name`` first, are what a model export's ``config.json`` records).
        presets: named shapes, in size order (the ``model`` hyperparameter's values).
        flops_per_token: ``(shape, seq_length, *, include_embedding=True, causal=True) -> float``,
            training FLOPs per token (forward + backward), the trainer's TFLOP/s and MFU numerator and
            the planner's throughput.
        description: one line for documentation.
        terms: the planner's per-block terms (:class:`ShapeTerms`); ``None``: the planner refuses the family.
        package: the family's package (its ``__init__``'s ``__name__``); :attr:`blocks` are relative to it.
        blocks: the trainer's backends: ``{backend: module}``, the module relative to :attr:`package`
            (``{"torch": ".torch_block", "te": ".te_block"}``), imported by :meth:`block_module` only.
            ``"torch"`` (torch-native, CPU and GPU) is required for training; ``"te"`` (TransformerEngine
            blocks) is used on GPUs where TransformerEngine imports.
        parameter_names: ``{backend: {name inside a block: canonical name}}`` for backends whose block
            parameters are named otherwise than the torch-native block's (the canonical names: a model
            export's names, and what initialisation is keyed on).
        init_rule: ``(canonical parameter name, shape) -> "ones" | "zeros" | std``: how the trainer
            initialises each parameter (a float: normal with that standard deviation), skeleton
            parameters (``tok_embeddings``, ``norm``, ``output``) included.
        export_format: the ``format`` of the family's model exports (``config.json``); default: the name.
        export_metadata: constants a model export records besides the shape (e.g. ``rope_base``).
    """

    name: str
    shape_type: type
    presets: Mapping[str, Any]
    flops_per_token: Callable[..., float]
    description: str = ""
    terms: ShapeTerms | None = None
    package: str = ""
    blocks: Mapping[str, str] = field(default_factory=dict)
    parameter_names: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    init_rule: Callable[[str, Any], str | float] | None = None
    export_format: str = ""
    export_metadata: Mapping[str, Any] = field(default_factory=dict)

    @property
    def format_name(self) -> str:
        """The ``format`` of this family's model exports (:attr:`export_format`, else :attr:`name`)."""
        return self.export_format or self.name

    def block_module(self, backend: str) -> ModuleType:
        """The module of the family's ``backend`` blocks, imported now (torch, maybe TransformerEngine).

        Raises:
            FieldError: (field ``backend``) the family has no such block; names the ones it has.
        """
        module = self.blocks.get(backend)
        if module is None:
            raise FieldError(
                "backend", backend, f"one of {', '.join(self.blocks) or '(none)'} (model family {self.name!r})"
            )
        return importlib.import_module(module, self.package or None)


class UnknownModelError(FieldError, KeyError):
    """A model preset (or family) name no registered family knows (a ``ValueError`` and a ``KeyError``)."""


_FAMILIES: dict[str, ModelFamily] = {}


def register_family(family: ModelFamily) -> ModelFamily:
    """Add ``family`` to the registry (each family's ``__init__`` calls this once, on import); returns it.

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


def family_of_shape(shape: Any) -> ModelFamily:
    """The family whose shape dataclass ``shape`` is an instance of (custom shapes included).

    Raises:
        UnknownModelError: (field ``model``) no registered family has that shape type.
    """
    for family in _registry().values():
        if isinstance(shape, family.shape_type):
            return family
    raise UnknownModelError(
        "model",
        getattr(shape, "name", shape),
        "a shape of a registered family (" + ", ".join(f.shape_type.__name__ for f in _registry().values()) + ")",
    )


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
