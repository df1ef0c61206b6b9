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
torch module), an LM head ``output`` (sharing the embedding's weight when the
shape's ``tied_embeddings`` is true) and the chunked cross-entropy
(:data:`LOSS_CHUNK_ELEMENTS`). A block module offers
``build_block(shape, layer_number, *, device) -> nn.Module`` (a block's
``forward(hidden [batch, seq, hidden_size], block_input)``) and
``block_input(shape, seq_length, device)`` (what every block receives besides
the hidden state, e.g. rotary angles, fp32; ``None`` if nothing); the torch
module also ``build_final_norm(shape)``.

Shapes are hyperparameters (:func:`resolve_shape`): a preset is a named shortcut, the
shape hyperparameters a family takes (:attr:`ModelFamily.shape_fields`)
override its fields, and a family's name instead of a preset is a custom shape
of that family (every field without a default given). Every shape is checked
by the one rule of its family (:attr:`ModelFamily.validate_shape`: structure,
and the GEMM multiples of the precision, :func:`check_gemm_dimensions`) -- the
trainer, the planner and the submitter all resolve shapes here. A family may
also map a Hugging Face ``config.json`` to its shape and back
(:attr:`ModelFamily.from_hf_config`, :attr:`ModelFamily.to_hf_config`) and
name its exported parameters as that library does
(:attr:`ModelFamily.export_layout`).

Registration is by import of the ``model_families`` package
(:data:`FAMILIES_PACKAGE`): the first lookup imports it when nothing is
registered yet, the way ``importlib.metadata`` entry points load plugins, so
``platform_spec`` names no family and every reader sees the same registry.

Why by name, lazily (plugin-style registration): ``model_families`` imports
``platform_spec`` (each family builds a :class:`ModelFamily` and calls
:func:`register_family`), so ``platform_spec`` must not import it back: a
static import would be a cycle, break the layering (``platform_spec`` at the
bottom, importing nothing of ours: the ``pure-spec`` contract of
pyproject.toml's ``[tool.importlinter]``) and make adding a family an edit
here. ``importlib.import_module(FAMILIES_PACKAGE)`` at the first lookup keeps
the dependency a run-time one, in one direction, and a family one folder plus
one line in ``model_families/__init__.py``. The cost: import-linter (grimp
reads ``import`` statements) cannot see that edge, nor check that a family
folder is registered; ``tests/platform_spec/test_model_registry.py`` checks
instead that every registered name resolves (its record, presets and block
modules) and every family folder is registered. (The Lambda bundles carry
``model_families`` whole, less the torch blocks:
:mod:`platform_constructs.submitter.bundling`.)

Pure Python, standard library only.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from platform_spec import precisions
from platform_spec.errors import FieldError

if TYPE_CHECKING:

    class _DecoderSizes(Protocol):
        """What the FLOP count reads of a shape (read-only: the families' shapes are frozen dataclasses)."""

        @property
        def num_layers(self) -> int: ...
        @property
        def hidden_size(self) -> int: ...
        @property
        def vocab_size(self) -> int: ...
        @property
        def block_params(self) -> int: ...


__all__ = [
    "ATTENTION_FLOP_CONVENTIONS",
    "FAMILIES_PACKAGE",
    "LOSS_CHUNK_ELEMENTS",
    "ExportSlice",
    "ModelFamily",
    "ModelShape",
    "ShapeTerms",
    "UnknownModelError",
    "attention_flops_per_token",
    "check_gemm_dimensions",
    "family_names",
    "family_of",
    "family_of_shape",
    "format_count",
    "get_family",
    "get_preset",
    "matmul_params",
    "mfu_percent",
    "model_tflops_per_second",
    "preset_names",
    "register_family",
    "resolve_shape",
    "shape_from_hf_config",
    "shape_hyperparameters",
    "transformer_flops_per_token",
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
        num_params: parameters of the full model (a tied weight once).

    A shape may also have ``tied_embeddings`` (the LM head shares the token embedding's weight; absent:
    untied), which the trainer's skeleton reads.
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
        block_activation_terms: ``(shape, *, activation_bytes, quantized_bytes, dropout, quantized_copy_bytes)
            -> {tensor: bytes}``: bytes per token one block saves for backward, by tensor; the block's input
            (``a * hidden_size``) is one of them. ``quantized_copy_bytes``: bytes per element of a quantized
            tensor kept in both layouts, rowwise and columnwise (the precision's ``weight_copy_bytes`` on the
            GPU), for the tensors TransformerEngine saves so (``None``: one layout, ``q``).
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
class ExportSlice:
    """One exported tensor cut from a canonical parameter: rows ``start:stop`` of dimension 0, named ``name``
    (e.g. the query rows of a fused QKV weight as ``model.layers.0.self_attn.q_proj.weight``)."""

    name: str
    start: int
    stop: int


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
        te_unbuilt: ``(shape) -> shape field | None``: the first shape field the family's ``"te"`` blocks do
            not build, ``None`` when they build the shape. The trainer trains such a shape on the ``"torch"``
            blocks (:meth:`backend_for`), and the family's :attr:`validate_shape` refuses a TransformerEngine
            precision for it naming that field. ``None``: the ``"te"`` blocks (if any) build every shape.
        parameter_names: ``{backend: {name inside a block: canonical name}}`` for backends whose block
            parameters are named otherwise than the torch-native block's (the canonical names: a model
            export's names, and what initialisation is keyed on).
        init_rule: ``(canonical parameter name, shape) -> "ones" | "zeros" | std``: how the trainer
            initialises each parameter (a float: normal with that standard deviation), skeleton
            parameters (``tok_embeddings``, ``norm``, ``output``) included.
        export_format: the ``format`` of the family's model exports (``config.json``); default: the name.
        export_metadata: constants a model export records besides the shape (e.g. ``rope_base``).
        renamed_shape_fields: ``{hyperparameter name: shape field}`` for the shape fields whose shape
            hyperparameter (:data:`platform_spec.hyperparameters.SHAPE_HYPERPARAMETERS`) is named otherwise;
            the others take their own names (:attr:`shape_fields`).
        validate_shape: ``(shape, *, precision=None, seq_length=None) -> None``, the family's one shape rule
            (the trainer's, the planner's and the submitter's): raises :class:`~platform_spec.errors.FieldError`
            naming the shape field; ``precision`` adds its GEMM multiples (:func:`check_gemm_dimensions`),
            ``seq_length`` (tokens per sequence) what the shape computes exactly only up to some length (the
            Llama family's ``sliding_window``). ``None``: no rule beyond the shape's own construction.
        from_hf_config: ``(config.json as a mapping) -> shape``: a Hugging Face ``config.json`` of this
            family's architecture as its shape (named ``"<family>"``, a custom shape); raises
            :class:`~platform_spec.errors.FieldError` naming the key it refuses. ``None``: not offered.
        hf_model_types: the ``model_type`` values of the Hugging Face configurations :attr:`from_hf_config`
            reads (``("llama",)``): :func:`shape_from_hf_config` picks the family by them.
        to_hf_config: ``(shape) -> dict``: the shape as a Hugging Face ``config.json`` (the model export's
            architecture keys); ``None``: the export's ``config.json`` is the platform's own format.
        export_layout: ``(shape) -> {canonical name: (ExportSlice, ...)}``: the exported names of the
            parameters a model export renames or splits (rows of the canonical tensor, dimension 0); a
            canonical name it leaves out is exported under its own name, one it maps to ``()`` is left out
            (a tied LM head). ``None``: every parameter under its canonical name.
    """

    name: str
    shape_type: type
    presets: Mapping[str, Any]
    flops_per_token: Callable[..., float]
    description: str = ""
    terms: ShapeTerms | None = None
    package: str = ""
    blocks: Mapping[str, str] = field(default_factory=dict)
    te_unbuilt: Callable[[Any], str | None] | None = None
    parameter_names: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    init_rule: Callable[[str, Any], str | float] | None = None
    export_format: str = ""
    export_metadata: Mapping[str, Any] = field(default_factory=dict)
    renamed_shape_fields: Mapping[str, str] = field(default_factory=dict)
    validate_shape: Callable[..., None] | None = None
    from_hf_config: Callable[[Mapping[str, Any]], Any] | None = None
    hf_model_types: tuple[str, ...] = ()
    to_hf_config: Callable[[Any], dict[str, Any]] | None = None
    export_layout: Callable[[Any], Mapping[str, tuple[ExportSlice, ...]]] | None = None

    @property
    def shape_fields(self) -> Mapping[str, str]:
        """``{hyperparameter name: shape field}`` of every field of the family's shape but ``name``, under its
        own name or the one :attr:`renamed_shape_fields` gives; a shape hyperparameter not among them is refused
        for this family."""
        names = {shape_field: name for name, shape_field in self.renamed_shape_fields.items()}
        return {names.get(f.name, f.name): f.name for f in dataclasses.fields(self.shape_type) if f.name != "name"}

    @property
    def format_name(self) -> str:
        """The ``format`` of this family's model exports (:attr:`export_format`, else :attr:`name`)."""
        return self.export_format or self.name

    def backend_for(self, shape: Any, *, te_available: bool, precision: str) -> str:
        """The blocks the trainer builds for ``shape`` at ``precision``: ``"te"`` where ``te_available`` (a
        CUDA device on which TransformerEngine imports), the precision computes in a dtype TE's fused
        attention runs (:attr:`platform_spec.precisions.Precision.te_blocks`: not fp32, which TE would run
        through its unfused attention), the family has ``"te"`` blocks and they build the shape
        (:attr:`te_unbuilt`); ``"torch"`` otherwise. The trainer's one choice of backend.

        Raises:
            platform_spec.precisions.UnknownPrecisionError: ``precision`` is not a known precision.
        """
        te_blocks = precisions.get_precision(precision).te_blocks
        if not te_available or not te_blocks or "te" not in self.blocks:
            return "torch"
        return "te" if self.te_unbuilt is None or self.te_unbuilt(shape) is None else "torch"

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
    names = {family.name, *_FAMILIES}
    named_like_family = sorted(set(family.presets) & names) + [
        p for other in _FAMILIES.values() for p in other.presets if p == family.name
    ]
    if named_like_family:
        raise ValueError(f"model family {family.name!r}: presets {named_like_family} are named like a family")
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


def check_gemm_dimensions(dimensions: Mapping[str, tuple[Any, int, str]], precision: str | None) -> None:
    """Refuse a shape whose TransformerEngine GEMM dimensions the precision cannot run.

    The multiple is the precision registry's ``gemm_multiple`` (:mod:`platform_spec.precisions`: 16 for
    fp8, 32 for mxfp8 and nvfp4; none for formats without TransformerEngine GEMMs), applied to the weight
    dimensions of a family's block GEMMs (the LM head runs outside TransformerEngine, so ``vocab_size`` is
    never one of them).

    Args:
        dimensions: ``{shape field: (its value, the GEMM dimension it sets, what that dimension is)}``,
            e.g. ``{"num_kv_heads": (8, 1024, "num_kv_heads * head size")}``.
        precision: a precision name, or ``None`` (nothing to check).

    Raises:
        FieldError: naming the first field whose dimension is not a multiple (or ``precision``, unknown).
    """
    if precision is None:
        return
    record = precisions.get_precision(precision)
    multiple = record.gemm_multiple
    if not multiple:
        return
    source = record.sources.get("gemm_multiple", "")
    for name, (value, size, what) in dimensions.items():
        if size % multiple:
            raise FieldError(
                name,
                value,
                f"a value making {what} ({size}) a multiple of {multiple} for precision {record.name}",
                detail=source,
            )


def _required_fields(shape_type: type) -> list[str]:
    """The fields of a shape dataclass other than ``name`` that have no default."""
    return [
        f.name
        for f in dataclasses.fields(shape_type)
        if f.name != "name" and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]


def resolve_shape(
    model: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    model_family: str | None = None,
    precision: str | None = None,
    seq_length: int | None = None,
) -> ModelShape:
    """The model shape of ``model`` with the shape hyperparameters ``overrides``, checked by its family's rule.

    This is the one place a shape is made from hyperparameters: the trainer, the planner and the
    submitter all call it (through :func:`platform_spec.hyperparameters.model_shape`).

    Args:
        model: a preset name (its shape, ``overrides`` replacing fields; the name stays the preset's), or a
            family name: a custom shape of that family named so, which needs every field without a
            default in ``overrides``.
        overrides: ``{shape hyperparameter: value}`` (the family's :attr:`ModelFamily.shape_fields`);
            ``None`` values are absent.
        model_family: the family the caller names (the ``model_family`` hyperparameter), or ``None``; it
            must be ``model``'s.
        precision: the training precision, for the GEMM multiples (:func:`check_gemm_dimensions`).
        seq_length: tokens per sequence, for the family's length rule (:attr:`ModelFamily.validate_shape`).

    Returns:
        The shape (a :class:`ModelShape` of the family).

    Raises:
        UnknownModelError: ``model`` (or ``model_family``) names no preset or family.
        FieldError: ``model_family`` is not ``model``'s family; an override the family does not take, or a
            required one missing (named by its hyperparameter name); a shape its family's rule refuses.
    """
    given = {name: value for name, value in (overrides or {}).items() if value is not None}
    registry = _registry()
    family = registry.get(model)
    base = None
    if family is None:
        family = family_of(model)
        base = family.presets[model]
    if model_family is not None and model_family != family.name:
        get_family(model_family)  # an unknown name is refused as such
        raise FieldError(
            "model_family",
            model_family,
            f"{family.name!r}, the family of model {model!r} (for a {model_family} shape set model to one of "
            f"its presets, {', '.join(get_family(model_family).presets)}, or to {model_family!r} for a custom shape)",
        )
    mapping = family.shape_fields
    for name, value in given.items():
        if name not in mapping:
            raise FieldError(
                name,
                value,
                f"no value: model family {family.name!r} has no {name} (its shape hyperparameters: "
                f"{', '.join(mapping)})",
            )
    inverse = {field_name: name for name, field_name in mapping.items()}
    fields = {mapping[name]: value for name, value in given.items()}
    try:
        if base is None:
            required = _required_fields(family.shape_type)
            missing = [f for f in required if f not in fields]
            if missing:
                raise FieldError(
                    inverse.get(missing[0], missing[0]),
                    None,
                    f"a value: model {model!r} is a custom {family.name} shape, which needs "
                    f"{', '.join(inverse.get(f, f) for f in required)} (or set model to one of its presets: "
                    f"{', '.join(family.presets)})",
                )
            shape: ModelShape = family.shape_type(model, **fields)
        else:
            shape = dataclasses.replace(base, **fields) if fields else base
        if family.validate_shape is not None:
            family.validate_shape(shape, precision=precision, seq_length=seq_length)
    except FieldError as error:
        renamed = inverse.get(error.field)
        if renamed is None or renamed == error.field:
            raise
        raise FieldError(renamed, error.value, error.expected, detail=error.detail) from None
    return shape


def shape_from_hf_config(config: Any) -> Any:
    """The custom shape a Hugging Face ``config.json`` (a mapping) describes, read by the family whose
    :attr:`ModelFamily.hf_model_types` has its ``model_type``.

    Raises:
        FieldError: not a JSON object; a ``model_type`` no family reads (field ``model_type``, naming those
            read); or the family's refusal, naming the key.
    """
    if not isinstance(config, Mapping):
        raise FieldError("model_config", type(config).__name__, "a JSON object (a Hugging Face config.json)")
    readers = {t: f for f in _registry().values() if f.from_hf_config is not None for t in f.hf_model_types}
    family = readers.get(config.get("model_type"))  # type: ignore[arg-type]
    if family is None or family.from_hf_config is None:
        raise FieldError(
            "model_type",
            config.get("model_type"),
            "the model_type of an architecture the trainer implements: " + ", ".join(readers),
        )
    return family.from_hf_config(config)


def shape_hyperparameters(shape: Any) -> dict[str, Any]:
    """The hyperparameters naming ``shape`` as a custom shape of its family: ``{"model": family name,
    shape hyperparameter: value, ...}`` (:func:`resolve_shape` of them gives an equal shape, named after
    the family). What ``--model-config`` and the ``model_config`` request field turn a Hugging Face
    ``config.json`` into.

    Raises:
        UnknownModelError: ``shape`` is no registered family's.
    """
    family = family_of_shape(shape)
    out: dict[str, Any] = {"model": family.name}
    for name, field_name in family.shape_fields.items():
        out[name] = getattr(shape, field_name)
    return out


def matmul_params(shape: _DecoderSizes, *, include_embedding: bool = True) -> int:
    """``N`` of a decoder's ``6N`` training FLOPs per token: its block parameters, plus the LM head's ``h*V``
    when ``include_embedding`` (a real matmul, tied or not; the input embedding is a lookup and never counts)."""
    n = shape.block_params
    if include_embedding:
        n += shape.hidden_size * shape.vocab_size
    return n


ATTENTION_FLOP_CONVENTIONS: Mapping[bool, str] = MappingProxyType(
    {
        True: (
            "causal attention counted at half, 6*L*w*s per token (the platform's metrics and planner: "
            "training/metrics.py; as Megatron-LM counts it, megatron/training/training.py "
            "num_floating_point_operations: 'causal mask (only half of the mask is non-zero)')"
        ),
        False: (
            "the full square, 12*L*w*s per token (PaLM, Chowdhery et al. 2022, appendix B; torchtitan, "
            "torchtitan/models/utils.py: 'we follow the convention and do not account for sparsity in causal "
            "attention')"
        ),
    }
)
"""The two common ways to count the attention score and value matmuls of a causal model, by the ``causal``
argument of :func:`attention_flops_per_token` (``L`` blocks, ``w`` query heads x head size, ``s`` tokens per
sequence), each with who uses it: what a benchmark prints next to an MFU so it compares with published ones."""


def attention_flops_per_token(num_layers: int, attention_width: int, seq_length: int, *, causal: bool = True) -> float:
    """Training FLOPs per token of the attention score and value matmuls: ``6 L w s`` causal (fused kernels skip
    the masked half), ``12 L w s`` the full square (PaLM, Chowdhery et al. 2022, appendix B); ``w`` is the
    query heads times the head size (grouped-query attention shares K and V, not the score work).

    Raises:
        ValueError: ``seq_length < 1``.
    """
    if seq_length < 1:
        raise ValueError(f"seq_length must be >= 1, got {seq_length}")
    factor = 6.0 if causal else 12.0
    return factor * num_layers * attention_width * seq_length


def transformer_flops_per_token(
    shape: _DecoderSizes, seq_length: int, *, attention_width: int, include_embedding: bool = True, causal: bool = True
) -> float:
    """Training (forward + backward) FLOPs per token of a decoder-only transformer: ``6N`` (:func:`matmul_params`)
    plus the attention scores (:func:`attention_flops_per_token`); every family's ``flops_per_token``.

    Raises:
        ValueError: ``seq_length < 1``.
    """
    return 6.0 * matmul_params(shape, include_embedding=include_embedding) + attention_flops_per_token(
        shape.num_layers, attention_width, seq_length, causal=causal
    )


_COUNT_SUFFIXES = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3))


def format_count(value: float) -> str:
    """A count (parameters, tokens, tokens/s) as model cards write it: three significant digits and ``K``
    (thousand), ``M`` (million), ``B`` (billion) or ``T`` (trillion): ``8_030_261_248`` -> ``8.03B``,
    ``1_200_000`` -> ``1.2M``, ``350_000`` -> ``350K``, ``999_999`` -> ``1M``, ``45.25`` -> ``45.2``,
    ``0`` -> ``0``; ``nan`` and ``inf`` as Python writes them. The one format of counts in every table."""
    if not math.isfinite(value):
        return str(value)
    rounded = float(f"{value:.3g}")  # rounding first: 999,999 is 1M, not 1e+03K
    for suffix, scale in _COUNT_SUFFIXES:
        if abs(rounded) >= scale:
            scaled = rounded / scale
            return f"{scaled:,.0f}{suffix}" if abs(scaled) >= 1000 else f"{scaled:.3g}{suffix}"
    return f"{rounded:.3g}"


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
