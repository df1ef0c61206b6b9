"""The trainer's hyperparameters: names, types, allowed values and defaults.

This module is the single source of truth for what the trainer accepts. It is
pure Python (standard library and :mod:`platform_spec` only) so that the same
definitions are used by

* the container entry point (``/opt/ml/input/config/hyperparameters.json`` and
  ``SM_HP_*`` variables),
* ``trainctl train`` flags,
* the submitter Lambda, which validates a request's ``hyperparameters`` before
  it calls ``CreateTrainingJob``.

Names are snake_case. The published guide's four (``precision``,
``num_layers``, ``batch_size``, ``seq_length``) keep their names and its
defaults (``mxfp8``, preset's layers, ``8``, ``2048``; the guide's ``train.sh``
sets ``NUM_LAYERS=10`` explicitly, see ``GUIDE_DEFAULT_REQUEST``).

Values arrive as strings (SageMaker sends every hyperparameter as a string;
older SageMaker SDKs JSON-quote them, e.g. ``"\\"mxfp8\\""``): :func:`parse`
accepts both, plus native JSON types from a submitter request.

Allowed values that are facts of their own come from their homes: precisions
and the CPU path's from :mod:`platform_spec.precisions`, fp8 scalings from the
registry's formats with a choice of TransformerEngine recipe, model names from the registered model
families (:mod:`platform_spec.models`).

Errors: :class:`HyperparameterError` (a :class:`platform_spec.errors.FieldError`)
names the field, the value received and what was expected.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from platform_spec import models, precisions, training_modes
from platform_spec.errors import FieldError

PRECISIONS: tuple[str, ...] = precisions.PRECISION_NAMES
"""Training precisions (:data:`platform_spec.precisions.PRECISIONS`: each format's dtype, recipe and
hardware rule). fp8/mxfp8/nvfp4 are TransformerEngine recipes on top of bf16 parameters."""

CPU_PRECISIONS: tuple[str, ...] = precisions.CPU_PRECISIONS
"""Precisions the torch-native CPU path runs (the registry's ``cpu`` flag)."""

FP8_SCALINGS: tuple[str, ...] = precisions.SCALINGS
"""TransformerEngine scaling for the formats with a choice of recipe (:data:`platform_spec.precisions.SCALINGS`:
fp8's per-tensor current scaling, the default, or delayed scaling with an amax history)."""

QUANTIZED_PRECISIONS: tuple[str, ...] = precisions.names_where(lambda p: p.quantized)
"""Precisions whose block weights could be stored quantized (``quantized_model_init``): the fp8 family."""

QUANTIZED_MODEL_INIT_REFUSAL: str | None = (
    "false: the trainer image's TransformerEngine 2.10 (nvcr.io/nvidia/pytorch:25.12-py3) cannot train "
    "quantized weights sharded by FSDP2 (FusedAdam support for FSDP2-sharded quantized weights and optimizer "
    "state as DTensors arrived in TransformerEngine 2.14, DCP loading in 2.16; nvfp4 weights have no FSDP2 "
    "all-gather), so weights are kept in high precision with quantized copies"
)
"""Why ``quantized_model_init=true`` is refused (the trainer, the entry point, the submitter and the
planner all apply it through :func:`validate`); ``None`` once the trainer image supports it."""

ACTIVATION_CHECKPOINTING: tuple[str, ...] = training_modes.ACTIVATION_CHECKPOINTING_KINDS
"""The kinds of ``activation_checkpointing``: ``off``, ``full`` (recompute every block in backward) and
``selective`` (written ``selective:N``: every Nth block); the grammar and which blocks each recomputes are
:mod:`platform_spec.training_modes`'."""

GRADIENT_SYNC_MODES: tuple[str, ...] = training_modes.GRADIENT_SYNC_MODES
"""``gradient_sync`` under gradient accumulation: reduce-scatter every micro-batch (sharded accumulation,
less memory) or the last only (unsharded fp32 gradients kept, less traffic); :mod:`platform_spec.training_modes`."""

SHARDING_STRATEGIES: tuple[str, ...] = ("full", "hybrid")
"""``full``: FSDP over all ranks. ``hybrid``: HSDP, shard within a node and
replicate across nodes (the guide's "simplified sharding")."""

MODEL_PRESETS: tuple[str, ...] = models.preset_names()
"""Named model sizes of every registered model family (:func:`platform_spec.models.preset_names`);
their shapes live in the family's folder (``model_families/<family>/``)."""

MODEL_FAMILIES: tuple[str, ...] = models.family_names()
"""The registered model families (``model_family``; as ``model``, a custom shape of that family)."""

SHAPE_HYPERPARAMETERS: tuple[str, ...] = (
    "num_layers",
    "hidden_size",
    "num_heads",
    "num_kv_heads",
    "ffn_hidden_size",
    "vocab_size",
    "rope_base",
    "tied_embeddings",
    "norm_eps",
)
"""The hyperparameters that override the fields of a model shape (``None``: the preset's). Each family takes
those it declares (:attr:`platform_spec.models.ModelFamily.shape_fields`) and refuses the others;
:func:`model_shape` resolves them."""


class HyperparameterError(FieldError):
    """A hyperparameter is missing, unknown or out of range.

    Attributes:
        field: the hyperparameter name (snake_case), e.g. ``"batch_size"``.
        value: the value received (as received).
        expected: a human description of the allowed values.

    Message: ``"hyperparameter '<field>': got <value!r>, expected <expected>"``.
    """

    def __init__(self, field: str, value: Any, expected: str) -> None:
        super().__init__(field, value, expected)

    def format_message(self) -> str:
        return f"hyperparameter {self.field!r}: got {self.value!r}, expected {self.expected}"


@dataclass(frozen=True)
class Hyperparameters:
    """Everything the trainer accepts, with defaults.

    Units: ``batch_size`` is the micro-batch in sequences per GPU;
    ``seq_length`` in tokens; ``learning_rate`` per step; intervals in
    optimizer steps.
    """

    # model
    model: str = "gpt-1b"
    num_layers: int | None = None  # None: the preset's number of blocks
    vocab_size: int | None = None  # None: the preset's, grown to the data's (rounded up to 128) if larger
    model_family: str | None = None  # None: the family of ``model``
    hidden_size: int | None = None  # this and the fields below, None: the preset's (model_shape())
    num_heads: int | None = None
    num_kv_heads: int | None = None
    ffn_hidden_size: int | None = None
    rope_base: float | None = None
    tied_embeddings: bool | None = None
    norm_eps: float | None = None
    # numerics
    precision: str = "mxfp8"
    fp8_scaling: str = FP8_SCALINGS[0]
    quantized_model_init: bool = False
    # batch and sequence
    batch_size: int = 8
    seq_length: int = 2048
    gradient_accumulation_steps: int = 1
    gradient_sync: str = training_modes.DEFAULT_GRADIENT_SYNC
    # memory / parallelism
    activation_checkpointing: str = "off"
    sharding_strategy: str = "full"
    reshard_after_forward: bool = True
    # optimisation (AdamW, fp32 master state, warmup + cosine)
    max_steps: int = 1000
    learning_rate: float = 3e-4
    min_learning_rate: float = 3e-5
    warmup_steps: int = 100
    weight_decay: float = 0.1
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95
    adam_epsilon: float = 1e-8
    max_grad_norm: float = 1.0
    seed: int = 1234
    # data
    synthetic_data: bool = False
    allow_data_change: bool = False  # resume although the data stream changed (training.checkpoint.compare_runs)
    # checkpoints and logging
    checkpoint_interval: int = 500
    keep_checkpoints: int = 3
    log_interval: int = 10

    def to_strings(self) -> dict[str, str]:
        """Render as SageMaker ``HyperParameters`` (every value a string).

        Fields equal to their default are included too, so a job's
        hyperparameters are self-describing; ``None`` fields are left out.
        """
        out: dict[str, str] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None:
                continue
            out[f.name] = format_value(value)
        return out


@dataclass(frozen=True)
class _Spec:
    kind: type
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    optional: bool = False
    help: str = ""
    grammar: Callable[[str], str] | None = None  # a string value's parser: its canonical form, or FieldError
    grammar_expected: str = ""  # what ``grammar`` accepts, in words
    pattern: str | None = None  # the grammar as a regular expression (the JSON Schema's ``pattern``)

    def expected(self) -> str:
        if self.grammar is not None:
            return self.grammar_expected
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        kind = {int: "an integer", float: "a number"}.get(self.kind, "a string")
        lo = "" if self.minimum is None else f" >= {self.minimum:g}"
        hi = "" if self.maximum is None else f" <= {self.maximum:g}"
        both = " and".join(p for p in (lo, hi) if p)
        return kind + both


SPECS: dict[str, _Spec] = {
    "model": _Spec(
        str,
        choices=MODEL_PRESETS + MODEL_FAMILIES,
        help="model size preset, or a family name for a custom shape (every shape field of the family given)",
    ),
    "num_layers": _Spec(int, minimum=1, maximum=512, optional=True, help="transformer blocks (overrides the preset)"),
    "vocab_size": _Spec(
        int,
        minimum=2,
        maximum=1 << 20,
        optional=True,
        help="vocabulary size (default: the preset's, or the data's rounded up to 128 if larger)",
    ),
    "model_family": _Spec(
        str,
        choices=MODEL_FAMILIES,
        optional=True,
        help="model family (default: the family of model; alone, model is this family's custom shape)",
    ),
    "hidden_size": _Spec(int, minimum=1, maximum=1 << 17, optional=True, help="model width (overrides the preset)"),
    "num_heads": _Spec(int, minimum=1, maximum=4096, optional=True, help="attention (query) heads"),
    "num_kv_heads": _Spec(
        int, minimum=1, maximum=4096, optional=True, help="key/value heads (grouped-query attention; llama family)"
    ),
    "ffn_hidden_size": _Spec(int, minimum=1, maximum=1 << 19, optional=True, help="MLP inner width"),
    "rope_base": _Spec(float, minimum=1.0, maximum=1e12, optional=True, help="RoPE base (llama family)"),
    "tied_embeddings": _Spec(
        bool, optional=True, help="the LM head shares the token embedding's weight (llama family)"
    ),
    "norm_eps": _Spec(float, minimum=0.0, maximum=1.0, optional=True, help="RMSNorm epsilon (llama family)"),
    "precision": _Spec(str, choices=PRECISIONS, help="training precision"),
    "fp8_scaling": _Spec(str, choices=FP8_SCALINGS, help="fp8 scaling recipe (precision=fp8)"),
    "quantized_model_init": _Spec(
        bool, help="store weights quantized (TransformerEngine quantized model init; refused with the current image)"
    ),
    "batch_size": _Spec(int, minimum=1, maximum=4096, help="micro-batch, sequences per GPU"),
    "seq_length": _Spec(int, minimum=8, maximum=1 << 20, help="tokens per sequence"),
    "gradient_accumulation_steps": _Spec(int, minimum=1, maximum=4096, help="micro-batches per optimizer step"),
    "activation_checkpointing": _Spec(
        str,
        grammar=lambda value: training_modes.activation_checkpointing(value).name,
        grammar_expected=training_modes.ACTIVATION_CHECKPOINTING_EXPECTED,
        pattern=training_modes.SELECTIVE_PATTERN,
        help="recompute blocks in backward: off, full, or selective:N (every Nth block)",
    ),
    "gradient_sync": _Spec(
        str,
        choices=GRADIENT_SYNC_MODES,
        help="with gradient accumulation: reduce-scatter every micro-batch (less memory) or the last only "
        "(less traffic)",
    ),
    "sharding_strategy": _Spec(str, choices=SHARDING_STRATEGIES, help="FSDP (full) or HSDP (hybrid)"),
    "reshard_after_forward": _Spec(bool, help="free gathered parameters after forward (FSDP2)"),
    "max_steps": _Spec(int, minimum=1, maximum=10**9, help="optimizer steps to run"),
    "learning_rate": _Spec(float, minimum=0.0, maximum=10.0, help="peak learning rate"),
    "min_learning_rate": _Spec(float, minimum=0.0, maximum=10.0, help="learning rate at the end of the cosine"),
    "warmup_steps": _Spec(int, minimum=0, maximum=10**9, help="linear warmup steps"),
    "weight_decay": _Spec(float, minimum=0.0, maximum=10.0, help="AdamW weight decay"),
    "adam_beta1": _Spec(float, minimum=0.0, maximum=0.999999, help="AdamW beta1"),
    "adam_beta2": _Spec(float, minimum=0.0, maximum=0.999999, help="AdamW beta2"),
    "adam_epsilon": _Spec(float, minimum=0.0, maximum=1.0, help="AdamW epsilon"),
    "max_grad_norm": _Spec(float, minimum=0.0, maximum=1e6, help="gradient clipping norm (0: off)"),
    "seed": _Spec(int, minimum=0, maximum=2**31 - 1, help="random seed"),
    "synthetic_data": _Spec(bool, help="random tokens instead of the train channel (benchmarks)"),
    "allow_data_change": _Spec(
        bool, help="resume a checkpoint although its training data, seq_length or seed differ (else refused)"
    ),
    "checkpoint_interval": _Spec(int, minimum=1, maximum=10**9, help="steps between checkpoints"),
    "keep_checkpoints": _Spec(int, minimum=1, maximum=1000, help="complete checkpoints kept"),
    "log_interval": _Spec(int, minimum=1, maximum=10**9, help="steps between metric lines"),
}

assert set(SPECS) == {f.name for f in dataclasses.fields(Hyperparameters)}, "SPECS and Hyperparameters disagree"

GUIDE_DEFAULT_REQUEST: dict[str, str] = {
    "model": "gpt-1b",
    "precision": "mxfp8",
    "num_layers": "10",
    "batch_size": "8",
    "seq_length": "2048",
}
"""The published guide's ``train.sh`` defaults, as hyperparameters."""


def format_value(value: Any) -> str:
    """A hyperparameter value as SageMaker carries it: a string (``true``/``false`` for booleans,
    ``repr`` for floats so they round-trip exactly)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


_ASCII_INT = r"[+-]?[0-9]+\Z"
"""Integers as text: ASCII decimal digits with an optional sign (Python's ``int`` also accepts
underscores and any Unicode decimal digit, which no other reader of these values does). A pattern, compiled
by ``re`` at its first use (and cached there), not at import: ``trainctl plan`` parses no text numbers."""
_ASCII_FLOAT = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z"
"""Numbers as text: ASCII decimal notation with an optional exponent (``3e-4``, ``0.0003``, ``1.``)."""


def unquote(raw: str) -> str:
    """Undo the JSON quoting older SageMaker SDKs apply (``'"mxfp8"'`` -> ``mxfp8``); surrounding blanks
    are dropped. The one rule for values read from a ``hyperparameters.json``."""
    text = raw.strip()
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        try:
            decoded = json.loads(text)
        except json.JSONDecodeError:
            return text
        if isinstance(decoded, str):
            return decoded.strip()
    return text


def coerce(name: str, value: Any) -> Any:
    """Convert one raw value (string or JSON scalar) to the field's type.

    Numbers given as text must be ASCII decimal (``"8"``, ``"+8"``, ``"3e-4"``):
    ``"1_0"`` and other scripts' digits (``"٨"``) are refused, not read as 10 or 8.

    Raises:
        HyperparameterError: unknown name, wrong type, out of range.
    """
    spec = SPECS.get(name)
    if spec is None:
        raise HyperparameterError(name, value, "a known hyperparameter: " + ", ".join(sorted(SPECS)))
    raw = value
    if isinstance(value, str):
        value = unquote(value)
        if spec.optional and value.lower() in ("", "none", "null"):
            return None
    elif value is None:
        if spec.optional:
            return None
        raise HyperparameterError(name, raw, spec.expected())

    if spec.kind is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "on"):
            return True
        if isinstance(value, str) and value.lower() in ("false", "0", "no", "off"):
            return False
        raise HyperparameterError(name, raw, spec.expected())

    if spec.kind is int:
        if isinstance(value, bool):
            raise HyperparameterError(name, raw, spec.expected())
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, str):
            if not re.fullmatch(_ASCII_INT, value):  # int() also takes "1_0" and non-ASCII digits ("٨")
                raise HyperparameterError(name, raw, spec.expected())
            value = int(value, 10)
        if not isinstance(value, int):
            raise HyperparameterError(name, raw, spec.expected())
    elif spec.kind is float:
        if isinstance(value, bool) or (isinstance(value, str) and not re.fullmatch(_ASCII_FLOAT, value)):
            raise HyperparameterError(name, raw, spec.expected())
        try:
            value = float(value)
        except (TypeError, ValueError, OverflowError):
            raise HyperparameterError(name, raw, spec.expected()) from None
        if not math.isfinite(value):
            raise HyperparameterError(name, raw, spec.expected())
    else:
        if not isinstance(value, str):
            raise HyperparameterError(name, raw, spec.expected())
        if spec.grammar is not None:
            try:
                value = spec.grammar(value)
            except FieldError:
                raise HyperparameterError(name, raw, spec.expected()) from None
        elif spec.choices is not None:
            # accept case and -/_ variants people type: "MXFP8", "gpt_1b"
            candidates = {c.lower(): c for c in spec.choices}
            normalised = value.lower()
            if normalised not in candidates:
                normalised = normalised.replace("_", "-")
            if normalised not in candidates:
                raise HyperparameterError(name, raw, spec.expected())
            value = candidates[normalised]

    if spec.minimum is not None and value < spec.minimum:
        raise HyperparameterError(name, raw, spec.expected())
    if spec.maximum is not None and value > spec.maximum:
        raise HyperparameterError(name, raw, spec.expected())
    return value


def parse(values: Mapping[str, Any], *, base: Hyperparameters | None = None) -> Hyperparameters:
    """Build :class:`Hyperparameters` from raw values over ``base`` (default: the defaults).

    Keys may be snake_case or the guide's kebab/upper forms (``seq-length``,
    ``SEQ_LENGTH``). Cross-field rules are checked after every field parses;
    their errors say which of the values involved were not given (defaults).

    Raises:
        HyperparameterError: the first invalid field.
    """
    parsed: dict[str, Any] = {}
    for key, value in values.items():
        name = normalise_name(key)
        parsed[name] = coerce(name, value)
    hp = dataclasses.replace(base or Hyperparameters(), **parsed)
    family = parsed.get("model_family")
    if family is not None and "model" not in parsed and _family_of_model(hp.model) != family:
        hp = dataclasses.replace(hp, model=family)  # model_family alone: a custom shape of that family
    validate(hp, given=parsed.keys())
    return hp


def _family_of_model(model: str) -> str:
    """The family ``model`` (a preset or a family name) belongs to."""
    return model if model in MODEL_FAMILIES else models.family_of(model).name


def merge_model_config(values: Mapping[str, Any], model_config: Any) -> dict[str, Any]:
    """Raw hyperparameter ``values`` (any spelling) with the shape of a Hugging Face ``config.json``
    (``--model-config FILE``, the request's ``model_config``): ``model`` (the family's name: a custom shape)
    and every shape hyperparameter the family takes (:func:`platform_spec.models.shape_hyperparameters`).

    The file is the shape's one source: ``values`` may not set ``model``, ``model_family`` or a shape
    hyperparameter too.

    Raises:
        FieldError: ``model_config.<key>`` for a key the family refuses (``model_config`` itself when it is
            not a JSON object); the hyperparameter's name for one ``values`` sets as well.
    """
    try:
        shape = models.shape_from_hf_config(model_config)
    except FieldError as exc:
        where = "model_config" if exc.field == "model_config" else f"model_config.{exc.field}"
        raise FieldError(where, exc.value, exc.expected, detail=exc.detail) from None
    derived = models.shape_hyperparameters(shape)
    refuse_shape_values(values, derived)
    return {**dict(values), **derived}


def refuse_shape_values(values: Mapping[str, Any], derived: Mapping[str, Any]) -> None:
    """Refuse hyperparameter ``values`` that set the shape a ``model_config`` gives (``derived``, its
    :func:`merge_model_config` hyperparameters): ``model``, ``model_family`` or a shape hyperparameter.

    Raises:
        FieldError: naming the first such hyperparameter.
    """
    for key, value in values.items():
        name = normalise_name(key)
        if name in ("model", "model_family") or name in SHAPE_HYPERPARAMETERS:
            raise FieldError(
                name,
                value,
                "no value: model_config sets the model's shape (its model and "
                + ", ".join(n for n in derived if n != "model")
                + ")",
            )


def model_shape(hp: Hyperparameters) -> models.ModelShape:
    """The model shape ``hp`` describes: the preset (or, for a family name, the custom shape) ``model``
    with the shape hyperparameters (:data:`SHAPE_HYPERPARAMETERS`) that are set, checked by its family's
    one rule for ``precision`` (:func:`platform_spec.models.resolve_shape`). ``vocab_size`` unset is the
    preset's: the trainer may still grow it to its data's.

    Raises:
        HyperparameterError: naming the hyperparameter to change (``model_family``, a shape hyperparameter
            the family does not take or needs, one its rule refuses).
    """
    try:
        return models.resolve_shape(
            hp.model,
            {name: getattr(hp, name) for name in SHAPE_HYPERPARAMETERS},
            model_family=hp.model_family,
            precision=hp.precision,
        )
    except FieldError as exc:
        raise HyperparameterError(
            exc.field, exc.value, exc.expected + (f" ({exc.detail})" if exc.detail else "")
        ) from None


def validate(hp: Hyperparameters, *, given: Collection[str] | None = None) -> models.ModelShape:
    """Cross-field rules.

    Args:
        given: the names the caller set. A value involved in a failed rule that
            is not among them and equals its default is named as a default in
            the error (``warmup_steps`` is 100 unless set, so ``max_steps=10``
            alone fails on it). None: no such notes.

    Returns:
        The model shape the rules checked (:func:`model_shape` of ``hp``), for callers that need it next.

    Raises:
        HyperparameterError: naming the field to change; ``expected`` adds which
            of the values were defaults.
    """

    def defaulted(*names: str) -> str:
        if given is None:
            return ""
        defaults = Hyperparameters()  # only a failed rule names defaults: not built for every check
        notes = [
            f"{name}={format_value(getattr(hp, name))} is its default (not set)"
            for name in names
            if name not in given and getattr(hp, name) == getattr(defaults, name)
        ]
        return "; " + "; ".join(notes) if notes else ""

    if hp.min_learning_rate > hp.learning_rate:
        raise HyperparameterError(
            "min_learning_rate",
            hp.min_learning_rate,
            f"<= learning_rate ({hp.learning_rate:g})" + defaulted("min_learning_rate", "learning_rate"),
        )
    if hp.warmup_steps > hp.max_steps:
        raise HyperparameterError(
            "warmup_steps", hp.warmup_steps, f"<= max_steps ({hp.max_steps})" + defaulted("warmup_steps", "max_steps")
        )
    if hp.quantized_model_init and hp.precision not in QUANTIZED_PRECISIONS:
        raise HyperparameterError(
            "quantized_model_init",
            True,
            f"false unless precision is {_or(QUANTIZED_PRECISIONS)} (got precision={hp.precision})",
        )
    if hp.quantized_model_init and QUANTIZED_MODEL_INIT_REFUSAL is not None:
        raise HyperparameterError("quantized_model_init", True, QUANTIZED_MODEL_INIT_REFUSAL)
    shape = model_shape(hp)  # the model family's one shape rule, for this precision
    try:  # selective:N must recompute at least one of the model's blocks
        training_modes.check_activation_checkpointing_for(hp.activation_checkpointing, shape.num_layers)
    except FieldError as exc:
        note = "" if hp.num_layers is not None else f"; num_layers is the preset's ({shape.num_layers})"
        raise HyperparameterError(
            "activation_checkpointing", hp.activation_checkpointing, exc.expected + note
        ) from None
    return shape


def _or(names: tuple[str, ...]) -> str:
    """``("a", "b", "c")`` -> ``"a, b or c"``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def normalise_name(key: str) -> str:
    """``SEQ_LENGTH``, ``seq-length``, ``--seq-length`` -> ``seq_length``."""
    return key.strip().lstrip("-").replace("-", "_").lower()


def from_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The ``SM_HP_<NAME>`` variables of ``environ`` as ``{name: value}``."""
    prefix = "SM_HP_"
    return {k[len(prefix) :].lower(): v for k, v in environ.items() if k.startswith(prefix)}


def json_schema() -> dict[str, Any]:
    """A JSON Schema (draft 2020-12) of the hyperparameters object, for docs and clients."""
    props: dict[str, Any] = {}
    defaults = Hyperparameters()
    for name, spec in SPECS.items():
        kind = {bool: "boolean", int: "integer", float: "number", str: "string"}[spec.kind]
        prop: dict[str, Any] = {"type": [kind, "string"] if kind != "string" else "string", "description": spec.help}
        if spec.choices:
            prop["enum"] = list(spec.choices)
        if spec.pattern is not None:
            prop["pattern"] = f"^{spec.pattern}$"
        if spec.minimum is not None:
            prop["minimum"] = spec.minimum
        if spec.maximum is not None:
            prop["maximum"] = spec.maximum
        default = getattr(defaults, name)
        if default is not None:
            prop["default"] = default
        props[name] = prop
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Trainer hyperparameters",
        "type": "object",
        "properties": props,
        "additionalProperties": False,
    }


__all__ = [
    "ACTIVATION_CHECKPOINTING",
    "CPU_PRECISIONS",
    "FP8_SCALINGS",
    "GRADIENT_SYNC_MODES",
    "GUIDE_DEFAULT_REQUEST",
    "MODEL_FAMILIES",
    "MODEL_PRESETS",
    "PRECISIONS",
    "QUANTIZED_MODEL_INIT_REFUSAL",
    "QUANTIZED_PRECISIONS",
    "SHAPE_HYPERPARAMETERS",
    "SHARDING_STRATEGIES",
    "SPECS",
    "HyperparameterError",
    "Hyperparameters",
    "coerce",
    "format_value",
    "from_environment",
    "json_schema",
    "merge_model_config",
    "model_shape",
    "normalise_name",
    "parse",
    "refuse_shape_values",
    "unquote",
    "validate",
]
