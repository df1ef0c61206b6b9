"""The trainer's hyperparameters, declared once: the fields of :class:`Hyperparameters`.

A field is one hyperparameter: its name (SageMaker's ``HyperParameters`` key, ``SM_HP_<NAME>`` in the container,
``--kebab-name`` as a flag), its type (``| None``: optional), its default and its :class:`Setting` (help, bounds,
choices or grammar, whether it is a model-shape setting or one the planner's estimate depends on). The rest
derives from the fields: :data:`SPECS`, :data:`SHAPE_HYPERPARAMETERS`, :data:`PLANNED_HYPERPARAMETERS`,
:func:`json_schema` (the submitter's request table), the flags of ``trainctl train``/``plan`` and ``python -m
training.train``, and ``planner.PlanInput`` (a subclass). Standard library and :mod:`platform_spec` only: the
container, ``trainctl`` and the submitter Lambda read the same definitions. SageMaker carries every value as a
string (:meth:`Hyperparameters.to_strings`; older SDKs JSON-quote them, :func:`unquote`): :func:`parse` accepts
both, plus native JSON types from a request.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from platform_spec import models, precisions, training_modes
from platform_spec.errors import FieldError

# Allowed values whose facts have their own homes (platform_spec.precisions, platform_spec.models)
PRECISIONS: tuple[str, ...] = precisions.PRECISION_NAMES
CPU_PRECISIONS: tuple[str, ...] = precisions.CPU_PRECISIONS
FP8_SCALINGS: tuple[str, ...] = precisions.SCALINGS
QUANTIZED_PRECISIONS: tuple[str, ...] = precisions.names_where(lambda p: p.quantized)
"""Precisions that quantize their GEMM operands: the fp8 family."""
QUANTIZED_MODEL_INIT_PRECISIONS: tuple[str, ...] = precisions.QUANTIZED_MODEL_INIT_PRECISIONS
"""Precisions whose block weights the trainer stores quantized (``quantized_model_init``): fp8, mxfp8."""
MODEL_PRESETS: tuple[str, ...] = models.preset_names()
MODEL_FAMILIES: tuple[str, ...] = models.family_names()

VALIDATION_CHANNEL = "validation"
"""The input channel the trainer evaluates the validation loss on (``eval_interval``), at
``/opt/ml/input/data/validation``: token shards like ``train``'s, of the same tokenizer."""

INIT_CHANNEL = "init_from"
"""The input channel holding the Hugging Face model folder a run starts from, at ``/opt/ml/input/data/init_from``:
``config.json`` and ``model.safetensors``, or ``model-0000k-of-0000n.safetensors`` with
``model.safetensors.index.json`` (what ``save_pretrained`` writes). The request's ``inputs.init_from`` (an S3
prefix) and ``trainctl train --init-from DIR``; the model's shape is the folder's ``config.json``."""
HF_CONFIG_FILE = "config.json"
"""A Hugging Face model folder's configuration: its shape (:func:`merge_model_config`); also the export's."""
HF_WEIGHTS_FILE = "model.safetensors"
"""The weights of a Hugging Face model folder saved as one file (``save_pretrained``); also the export's."""
HF_INDEX_FILE = "model.safetensors.index.json"
"""The index ``save_pretrained`` writes beside sharded weights (``{"weight_map": {tensor: file}}``)."""


QUANTIZED_MODEL_INIT_SCALINGS: tuple[str, ...] = FP8_SCALINGS[:1]
"""The ``fp8_scaling`` values the trainer stores fp8 block weights quantized with (``quantized_model_init``):
current scaling only; :data:`DELAYED_QUANTIZED_INIT_REFUSAL` says why not delayed."""

DELAYED_QUANTIZED_INIT_REFUSAL = (
    "false with fp8_scaling=delayed (use fp8_scaling=current, the default, or quantized_model_init=false): "
    "TransformerEngine 2.19 quantizes a delayed-scaling weight at its module's initial scale of 1 with no amax yet "
    "and no reduction over the FSDP shards (module/base.py reset_parameters reduces the amax of current-scaling "
    "quantizers only; DelayedScalingRecipeState starts at torch.ones), and its own FSDP2 checkpoint test of delayed "
    "scaling with quantized weights drops _extra_state (NVIDIA/TransformerEngine#1860) and resumes only within "
    "rtol 0.05 / atol 0.1 (tests/pytorch/distributed/fsdp2_tests/run_fsdp2_fused_adam.py, test_dcp_output_parity), "
    "outside the trainer's resume tolerance"
)
"""Why ``quantized_model_init=true`` is refused with ``fp8_scaling=delayed`` (the error's ``expected``)."""


def quantized_model_init_refusal(precision: str, fp8_scaling: str = FP8_SCALINGS[0]) -> str | None:
    """Why ``quantized_model_init=true`` is refused with ``precision`` and ``fp8_scaling`` (the ``expected`` of
    the error), or None where the trainer stores that format's block weights quantized: one rule, applied by the
    trainer, the entry point, the submitter and the planner through :func:`validate`.

    A format that does not quantize: "false unless precision is ..."; a quantized format the trainer does not
    store quantized: its registry record's
    :attr:`~platform_spec.precisions.Precision.quantized_model_init_refusal` (nvfp4, with the upstream source);
    a format with a choice of scaling (fp8) with a scaling outside :data:`QUANTIZED_MODEL_INIT_SCALINGS`:
    :data:`DELAYED_QUANTIZED_INIT_REFUSAL` (``fp8_scaling`` is ignored by formats of one recipe, as in training).

    Raises:
        platform_spec.precisions.UnknownPrecisionError: ``precision`` is not a precision.
    """
    record = precisions.get_precision(precision)
    if not record.quantized:
        return (
            f"false unless precision is {_or(precisions.QUANTIZED_MODEL_INIT_PRECISIONS)} (got precision={precision})"
        )
    if precision in precisions.SCALED_PRECISIONS and fp8_scaling not in QUANTIZED_MODEL_INIT_SCALINGS:
        return DELAYED_QUANTIZED_INIT_REFUSAL
    return record.quantized_model_init_refusal


class HyperparameterError(FieldError):
    """A hyperparameter is missing, unknown or out of range: ``field`` is its snake_case name, ``value`` the
    value as received, ``expected`` the allowed values in words. Message: ``"hyperparameter '<field>': got
    <value!r>, expected <expected>"``."""

    def format_message(self) -> str:
        return f"hyperparameter {self.field!r}: got {self.value!r}, expected {self.expected}"


_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")  # booleans as text, any case

_ASCII_INT = r"[+-]?[0-9]+\Z"
"""Integers as text: ASCII decimal digits with an optional sign (Python's ``int`` also accepts
underscores and any Unicode decimal digit, which no other reader of these values does)."""
_ASCII_FLOAT = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z"
"""Numbers as text: ASCII decimal notation with an optional exponent (``3e-4``, ``0.0003``, ``1.``)."""


@dataclass(frozen=True)
class Setting:
    """How one hyperparameter is read, checked and documented: a :class:`Hyperparameters` field's metadata
    (:func:`_declare`), its ``name``, ``kind`` (``bool``, ``int``, ``float``, ``str``), ``optional`` and
    ``default`` filled in from the field (:data:`SPECS`). ``choices`` accept case and ``-``/``_`` variants;
    ``minimum``/``maximum`` are inclusive; ``grammar`` returns a string's canonical form (or raises
    ``FieldError``), accepting ``grammar_expected`` (words) and ``pattern`` (the JSON Schema's). ``metavar``: the
    value in a flag's usage, declared with a grammar, else filled in (:func:`_metavar`). ``shape``: a model-shape setting (its family maps it to a shape field,
    :attr:`platform_spec.models.ModelFamily.shape_fields`); it and a ``planner`` setting are what the planner's
    estimate depends on (``planner.PlanInput``, ``trainctl plan``'s flags).
    """

    help: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    grammar: Callable[[str], str] | None = None
    grammar_expected: str = ""
    pattern: str | None = None
    metavar: str | None = None
    shape: bool = False
    planner: bool = False
    name: str = ""
    kind: type = str
    optional: bool = False
    default: Any = None

    @property
    def flag(self) -> str:
        """The command-line flag: ``--batch-size``."""
        return "--" + self.name.replace("_", "-")

    def expected(self) -> str:
        """The allowed values, in words (every refusal says it)."""
        if self.grammar is not None:
            return self.grammar_expected
        if self.choices:
            return "one of " + ", ".join(self.choices)
        if self.kind is bool:
            return "true or false"
        kind = {int: "an integer", float: "a number"}.get(self.kind, "a string")
        lo = "" if self.minimum is None else f" >= {_exact(self.minimum)}"
        hi = "" if self.maximum is None else f" <= {_exact(self.maximum)}"
        return kind + " and".join(p for p in (lo, hi) if p)

    def read(self, value: Any) -> Any:
        """``value`` (unquoted text or a JSON scalar) as this setting's kind, in its bounds.

        Raises:
            ValueError: (or ``TypeError``, ``OverflowError``) not a value of this setting.
        """
        reader: Callable[[Any], Any] = {bool: _read_bool, int: _read_int, float: _read_float}.get(
            self.kind, self._read_text
        )
        result = reader(value)
        if (self.minimum is not None and result < self.minimum) or (self.maximum is not None and result > self.maximum):
            raise ValueError(value)
        return result

    def _read_text(self, value: Any) -> str:
        if not isinstance(value, str):
            raise ValueError(value)
        if self.grammar is not None:
            return self.grammar(value)
        if self.choices is None:
            return value
        candidates = {c.lower(): c for c in self.choices}
        for form in (value.lower(), value.lower().replace("_", "-")):  # what people type: "MXFP8", "gpt_1b"
            if form in candidates:
                return candidates[form]
        raise ValueError(value)


def _exact(number: float) -> str:
    """A bound as written, never rounded: ``1048576``, ``1000000000``, ``0.999999`` (``:g`` wrote ``1.04858e+06``)."""
    return str(int(number)) if float(number).is_integer() else repr(float(number))


def _read_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE + _FALSE:
        return value.lower() in _TRUE
    raise ValueError(value)


def _read_int(value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(_ASCII_INT, value):  # int() also takes "1_0" and "٨"
        return int(value, 10)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(value)


def _read_float(value: Any) -> float:
    if isinstance(value, bool) or (isinstance(value, str) and not re.fullmatch(_ASCII_FLOAT, value)):
        raise ValueError(value)
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(value)
    return number


def _declare(default: Any, about: str, **rules: Any) -> Any:
    """A :class:`Hyperparameters` field: its default and its :class:`Setting` (``about`` is its help)."""
    return dataclasses.field(default=default, metadata={"setting": Setting(about, **rules)})


MIN_COLLECTIVE_TIMEOUT_MINUTES = 1.0
"""The shortest steady-state collective timeout (``collective_timeout_minutes``) other than 0 (off)."""


@dataclass(frozen=True)
class Hyperparameters:
    """Everything the trainer accepts, with defaults: one field per hyperparameter, its :class:`Setting` as
    metadata. Units: ``batch_size`` is the micro-batch in sequences per GPU; ``seq_length`` in tokens;
    ``learning_rate`` per step; intervals in optimizer steps.
    """

    # model: the shape settings (None: the preset's; model_shape())
    model: str = _declare(
        "gpt-1b",
        "model size preset, or a family name for a custom shape (every shape field of the family given)",
        choices=MODEL_PRESETS + MODEL_FAMILIES,
        planner=True,
    )
    model_family: str | None = _declare(
        None,
        "model family (default: the family of model; alone, model is this family's custom shape)",
        choices=MODEL_FAMILIES,
        planner=True,
    )
    num_layers: int | None = _declare(
        None, "transformer blocks (overrides the preset)", minimum=1, maximum=512, shape=True
    )
    hidden_size: int | None = _declare(
        None, "model width (overrides the preset)", minimum=1, maximum=1 << 17, shape=True
    )
    num_heads: int | None = _declare(None, "attention (query) heads", minimum=1, maximum=4096, shape=True)
    num_kv_heads: int | None = _declare(
        None, "key/value heads (grouped-query attention; llama family)", minimum=1, maximum=4096, shape=True
    )
    ffn_hidden_size: int | None = _declare(None, "MLP inner width", minimum=1, maximum=1 << 19, shape=True)
    vocab_size: int | None = _declare(
        None,
        "vocabulary size (unset: the preset's, or the data's rounded up to 128 if larger)",
        minimum=2,
        maximum=1 << 20,
        shape=True,
    )
    rope_base: float | None = _declare(None, "RoPE base (llama family)", minimum=1.0, maximum=1e12, shape=True)
    tied_embeddings: bool | None = _declare(
        None, "the LM head shares the token embedding's weight (llama family)", shape=True
    )
    norm_eps: float | None = _declare(None, "RMSNorm epsilon (llama family)", minimum=0.0, maximum=1.0, shape=True)
    head_dim: int | None = _declare(
        None, "head size (llama family; unset: hidden_size / num_heads)", minimum=2, maximum=4096, shape=True
    )
    qkv_bias: bool | None = _declare(None, "biases on the Q, K and V projections (llama family: Qwen2)", shape=True)
    qk_norm: bool | None = _declare(None, "RMSNorm over each query and key head (llama family: Qwen3)", shape=True)
    rope_scaling_factor: float | None = _declare(
        None, "llama3 RoPE scaling factor (llama family; unset: no scaling)", minimum=1.0, maximum=1e6, shape=True
    )
    rope_low_freq_factor: float | None = _declare(
        None, "llama3 RoPE scaling low_freq_factor (llama family)", minimum=0.0, maximum=1e6, shape=True
    )
    rope_high_freq_factor: float | None = _declare(
        None, "llama3 RoPE scaling high_freq_factor (llama family)", minimum=0.0, maximum=1e6, shape=True
    )
    rope_original_max_positions: int | None = _declare(
        None,
        "llama3 RoPE scaling original_max_position_embeddings (llama family)",
        minimum=1,
        maximum=1 << 24,
        shape=True,
    )
    sliding_window: int | None = _declare(
        None,
        "attention window in tokens (llama family: Mistral); at least seq_length, where it never binds "
        "(unset: full causal attention)",
        minimum=1,
        maximum=1 << 24,
        shape=True,
    )
    # numerics
    precision: str = _declare("mxfp8", "training precision", choices=PRECISIONS, planner=True)
    fp8_scaling: str = _declare(FP8_SCALINGS[0], "fp8 scaling recipe (precision=fp8)", choices=FP8_SCALINGS)
    quantized_model_init: bool = _declare(
        False,
        "store block weights quantized (TransformerEngine quantized_model_init, FusedAdam with fp32 master "
        f"weights; precision {' or '.join(QUANTIZED_MODEL_INIT_PRECISIONS)}, fp8 with fp8_scaling "
        f"{' or '.join(QUANTIZED_MODEL_INIT_SCALINGS)})",
        planner=True,
    )
    # batch and sequence
    batch_size: int = _declare(8, "micro-batch, sequences per GPU", minimum=1, maximum=4096, planner=True)
    seq_length: int = _declare(2048, "tokens per sequence", minimum=8, maximum=1 << 20, planner=True)
    gradient_accumulation_steps: int = _declare(
        1, "micro-batches per optimizer step", minimum=1, maximum=4096, planner=True
    )
    # memory / parallelism
    activation_checkpointing: str = _declare(
        "off",
        "recompute blocks in backward: off, full, or selective:N (every Nth block)",
        grammar=lambda value: training_modes.activation_checkpointing(value).name,
        grammar_expected=training_modes.ACTIVATION_CHECKPOINTING_EXPECTED,
        pattern=training_modes.SELECTIVE_PATTERN,
        metavar="{off,full,selective:N}",
        planner=True,
    )
    gradient_sync: str = _declare(
        training_modes.DEFAULT_GRADIENT_SYNC,
        "with gradient accumulation: reduce-scatter every micro-batch (less memory) or the last only (less traffic)",
        choices=training_modes.GRADIENT_SYNC_MODES,
        planner=True,
    )
    # full: FSDP over all ranks; hybrid: HSDP, shard within a node, replicate across (the guide's "simplified sharding")
    sharding_strategy: str = _declare("full", "FSDP (full) or HSDP (hybrid)", choices=("full", "hybrid"), planner=True)
    reshard_after_forward: bool = _declare(True, "free gathered parameters after forward (FSDP2)", planner=True)
    # optimisation (AdamW, fp32 master state, warmup + cosine)
    max_steps: int = _declare(1000, "optimizer steps to run", minimum=1, maximum=10**9)
    learning_rate: float = _declare(3e-4, "peak learning rate", minimum=0.0, maximum=10.0)
    min_learning_rate: float = _declare(3e-5, "learning rate at the end of the cosine", minimum=0.0, maximum=10.0)
    warmup_steps: int = _declare(100, "linear warmup steps", minimum=0, maximum=10**9)
    weight_decay: float = _declare(0.1, "AdamW weight decay", minimum=0.0, maximum=10.0)
    adam_beta1: float = _declare(0.9, "AdamW beta1", minimum=0.0, maximum=0.999999)
    adam_beta2: float = _declare(0.95, "AdamW beta2", minimum=0.0, maximum=0.999999)
    adam_epsilon: float = _declare(1e-8, "AdamW epsilon", minimum=0.0, maximum=1.0)
    max_grad_norm: float = _declare(1.0, "gradient clipping norm (0: off)", minimum=0.0, maximum=1e6)
    seed: int = _declare(1234, "random seed", minimum=0, maximum=2**31 - 1)
    # data
    synthetic_data: bool = _declare(False, "random tokens instead of the train channel (benchmarks)")
    allow_data_change: bool = _declare(  # training.checkpoint.compare.compare_runs
        False, "resume a checkpoint although its training data, seq_length or seed differ (else refused)"
    )
    # evaluation (the validation channel; training.evaluation)
    eval_interval: int = _declare(
        0,
        "optimizer steps between validation-loss evaluations on the validation channel, and after the last step "
        "(0: off)",
        minimum=0,
        maximum=10**9,
        planner=True,
    )
    eval_batches: int = _declare(
        16,
        "micro-batches each rank evaluates per evaluation (the same batch_size x seq_length sequences each time)",
        minimum=1,
        maximum=1 << 20,
        planner=True,
    )
    # checkpoints and logging
    checkpoint_interval: int = _declare(500, "steps between checkpoints", minimum=1, maximum=10**9, planner=True)
    keep_checkpoints: int = _declare(3, "complete checkpoints kept", minimum=1, maximum=1000)
    async_checkpoint: bool = _declare(
        True,
        "write interval checkpoints in the background (DCP async_save; marked complete once written); the save "
        "at a stop or at the end stays synchronous",
    )
    log_interval: int = _declare(10, "steps between metric lines", minimum=1, maximum=10**9)
    # pre-flight (training.preflight)
    preflight_seconds: float = _declare(
        5.0,
        "at most this many seconds measuring all-gather and reduce-scatter bus bandwidth at FSDP's per-block "
        "sizes before the first step (0: skip)",
        minimum=0.0,
        maximum=600.0,
    )
    # failure detection (training.watchdog; platform_spec.health's reports)
    watchdog_first_step_minutes: float = _declare(
        30.0,
        "minutes without progress before the first optimizer step completes (setup, weight load, resume, first "
        "step), and for an evaluation, checkpoint save or export not yet timed in this job, after which the "
        "watchdog fails the run as hung (0: no limit)",
        minimum=0.0,
        maximum=10080.0,
    )
    watchdog_minutes: float = _declare(
        5.0,
        "the watchdog's limit after the first step, in minutes without progress (a completed step, evaluation "
        "or save): at least this, or watchdog_step_time_factor x the slowest recent step (evaluation, save) if "
        "longer (0: no limit after the first step)",
        minimum=0.0,
        maximum=10080.0,
    )
    watchdog_step_time_factor: float = _declare(
        5.0,
        "the watchdog's limit after the first step as a multiple of the slowest of the last 100 step times "
        "(of that phase's times for an evaluation or a checkpoint save)",
        minimum=1.0,
        maximum=1000.0,
    )
    max_nonfinite_steps: int = _declare(
        5,
        "consecutive optimizer steps whose loss or gradient norm is not finite (each skipped, no update) after "
        "which the run stops as diverged",
        minimum=1,
        maximum=10**6,
    )
    collective_timeout_minutes: float = _declare(
        10.0,
        "timeout of the default process group's collectives once the first step has completed (setup keeps 30 "
        "minutes; 0: keep 30 minutes; else at least 1)",
        minimum=0.0,
        maximum=1440.0,
    )

    def to_strings(self) -> dict[str, str]:
        """Render as SageMaker ``HyperParameters`` (every value a string): fields equal to their default too,
        so a job's hyperparameters are self-describing; ``None`` fields are left out."""
        return {name: format_value(value) for name in SPECS if (value := getattr(self, name)) is not None}


def _metavar(name: str, kind: type, choices: tuple[str, ...] | None) -> str:
    """A flag's value as usage shows it: its choices as argparse writes them (``{bf16,fp8}``, ``{true,false}``),
    else the name upper-cased (``BATCH_SIZE``)."""
    if kind is bool:
        choices = ("true", "false")
    return "{" + ",".join(choices) + "}" if choices else name.upper()


def _settings() -> dict[str, Setting]:
    """Each field's :class:`Setting` with its name, kind, optionality (``| None``), default and metavar filled
    in."""
    hints = typing.get_type_hints(Hyperparameters)
    out: dict[str, Setting] = {}
    for field in dataclasses.fields(Hyperparameters):
        kinds = typing.get_args(hints[field.name]) or (hints[field.name],)
        kind = next(k for k in kinds if k is not type(None))
        setting = field.metadata["setting"]
        out[field.name] = dataclasses.replace(
            setting,
            name=field.name,
            kind=kind,
            optional=type(None) in kinds,
            default=field.default,
            metavar=setting.metavar or _metavar(field.name, kind, setting.choices),
        )
    return out


SPECS: Mapping[str, Setting] = _settings()
"""Every hyperparameter's :class:`Setting`, by name, in declaration order."""

SHAPE_HYPERPARAMETERS: tuple[str, ...] = tuple(name for name, spec in SPECS.items() if spec.shape)
"""The hyperparameters that override the fields of a model shape (``None``: the preset's). Each family takes
those it declares (:attr:`platform_spec.models.ModelFamily.shape_fields`) and refuses the others;
:func:`model_shape` resolves them."""

PLANNED_HYPERPARAMETERS: tuple[str, ...] = tuple(name for name, spec in SPECS.items() if spec.planner or spec.shape)
"""The hyperparameters the planner's estimate depends on: the model and its shape, numerics, batch, memory
modes and sharding."""

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


def lookup(name: str, value: Any) -> Setting:
    """The :class:`Setting` of hyperparameter ``name``; raises :class:`HyperparameterError` for an unknown name
    (listing the known ones; ``value``: what was given)."""
    spec = SPECS.get(name)
    if spec is None:
        raise HyperparameterError(name, value, "a known hyperparameter: " + ", ".join(sorted(SPECS)))
    return spec


def coerce(name: str, value: Any) -> Any:
    """Convert one raw value (string or JSON scalar) to the field's type (:meth:`Setting.read`). Numbers as
    text must be ASCII decimal (``"8"``, ``"+8"``, ``"3e-4"``: ``"1_0"`` and other scripts' digits, ``"٨"``, are
    refused). An optional hyperparameter reads ``None``, ``""``, ``"none"`` and ``"null"`` as unset.

    Raises:
        HyperparameterError: unknown name, wrong type, out of range.
    """
    spec = lookup(name, value)
    text = unquote(value) if isinstance(value, str) else value
    if text is None or (spec.optional and isinstance(text, str) and text.lower() in ("", "none", "null")):
        if spec.optional:
            return None
        raise HyperparameterError(name, value, spec.expected())
    try:
        return spec.read(text)
    except (ValueError, TypeError, OverflowError):
        raise HyperparameterError(name, value, spec.expected()) from None


def parse(values: Mapping[str, Any], *, base: Hyperparameters | None = None) -> Hyperparameters:
    """Build :class:`Hyperparameters` from raw values over ``base`` (default: the defaults). Keys may be
    snake_case or the guide's kebab/upper forms (``seq-length``, ``SEQ_LENGTH``). Cross-field rules are checked
    after every field parses; their errors say which of the values involved were not given (defaults).

    Raises:
        HyperparameterError: the first invalid field.
    """
    parsed: dict[str, Any] = {}
    for key, value in values.items():
        name = normalise_name(key)
        parsed[name] = coerce(name, value)
    hp = dataclasses.replace(base or Hyperparameters(), **parsed)
    family = parsed.get("model_family")
    if family is not None and "model" not in parsed and hp.model not in (family, *models.get_family(family).presets):
        hp = dataclasses.replace(hp, model=family)  # model_family alone: a custom shape of that family
    validate(hp, given=parsed.keys())
    return hp


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
    """The model shape ``hp`` describes: the preset (or, for a family name, the custom shape) ``model`` with
    the shape hyperparameters that are set, checked by its family's one rule for ``precision`` and ``seq_length``
    (:func:`platform_spec.models.resolve_shape`). ``vocab_size`` unset is the preset's (the trainer may grow it).

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
            seq_length=hp.seq_length,
        )
    except FieldError as exc:
        raise HyperparameterError(
            exc.field, exc.value, exc.expected + (f" ({exc.detail})" if exc.detail else "")
        ) from None


def validate(hp: Hyperparameters, *, given: Collection[str] | None = None) -> models.ModelShape:
    """Cross-field rules.

    Args:
        given: the names the caller set. A value involved in a failed rule that is not among them and equals
            its default is named as a default in the error (``warmup_steps`` is 100 unless set, so
            ``max_steps=10`` alone fails on it). None: no such notes.

    Returns:
        The model shape the rules checked (:func:`model_shape` of ``hp``), for callers that need it next.

    Raises:
        HyperparameterError: naming the field to change; ``expected`` adds which of the values were defaults.
    """

    def defaulted(*names: str) -> str:
        if given is None:
            return ""
        notes = [
            f"{name}={format_value(getattr(hp, name))} is its default (not set)"
            for name in names
            if name not in given and getattr(hp, name) == SPECS[name].default
        ]
        return "; " + "; ".join(notes) if notes else ""

    if hp.min_learning_rate > hp.learning_rate:
        raise HyperparameterError(
            "min_learning_rate",
            hp.min_learning_rate,
            f"<= learning_rate ({format_value(hp.learning_rate)})" + defaulted("min_learning_rate", "learning_rate"),
        )
    if hp.warmup_steps > hp.max_steps:
        raise HyperparameterError(
            "warmup_steps", hp.warmup_steps, f"<= max_steps ({hp.max_steps})" + defaulted("warmup_steps", "max_steps")
        )
    if 0 < hp.collective_timeout_minutes < MIN_COLLECTIVE_TIMEOUT_MINUTES:
        raise HyperparameterError(
            "collective_timeout_minutes",
            hp.collective_timeout_minutes,
            f"0 (keep setup's 30 minutes) or at least {MIN_COLLECTIVE_TIMEOUT_MINUTES:g} minute: a shorter timeout "
            "aborts healthy collectives that wait on a slower rank (a checkpoint write, the evaluation)",
        )
    refusal = quantized_model_init_refusal(hp.precision, hp.fp8_scaling) if hp.quantized_model_init else None
    if refusal is not None:
        raise HyperparameterError("quantized_model_init", True, refusal)
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
        if spec.default is not None:
            prop["default"] = spec.default
        props[name] = prop
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Trainer hyperparameters",
        "type": "object",
        "properties": props,
        "additionalProperties": False,
    }


__all__ = [
    "CPU_PRECISIONS",
    "DELAYED_QUANTIZED_INIT_REFUSAL",
    "FP8_SCALINGS",
    "GUIDE_DEFAULT_REQUEST",
    "INIT_CHANNEL",
    "MODEL_FAMILIES",
    "MODEL_PRESETS",
    "PLANNED_HYPERPARAMETERS",
    "PRECISIONS",
    "QUANTIZED_MODEL_INIT_PRECISIONS",
    "QUANTIZED_MODEL_INIT_SCALINGS",
    "QUANTIZED_PRECISIONS",
    "SHAPE_HYPERPARAMETERS",
    "SPECS",
    "VALIDATION_CHANNEL",
    "HyperparameterError",
    "Hyperparameters",
    "Setting",
    "coerce",
    "format_value",
    "from_environment",
    "json_schema",
    "lookup",
    "merge_model_config",
    "model_shape",
    "normalise_name",
    "parse",
    "quantized_model_init_refusal",
    "refuse_shape_values",
    "unquote",
    "validate",
]
