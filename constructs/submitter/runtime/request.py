"""The submission request: a typed, validated model of the function's event, derived from one table.

A request is a JSON object (the Lambda event)::

    {
      "job_name": "gpt-1b-mxfp8-baseline",          # optional
      "client_token": "3f6c1e0a-...",               # optional idempotency key
      "instance_type": "ml.p6-b200.48xlarge",       # default: configuration
      "instance_count": 1,
      "capacity": "training-plan",                  # | spot | on-demand | auto
      "training_plan_arn": "arn:aws:sagemaker:...", # optional, one of the configured plans
      "hyperparameters": {"model": "gpt-1b", "precision": "mxfp8", "num_layers": 10,
                          "batch_size": 8, "seq_length": 2048},
      "inputs": {"train": "s3://<data bucket>/datasets/guide/train/"},
      "max_runtime_hours": 24,
      "max_wait_hours": 48,                         # spot only
      "max_retry_attempts": 3,
      "tags": {"team": "research"},
      "auto_tune": false,
      "dry_run": false
    }

**One table.** The fields are the rows of :data:`platform_spec.request_fields.FIELDS`
(name, JSON type, default, help, constraints, rule reference, fingerprint or
not, JSON-Schema fragment). This module derives from them the parsing
(:func:`parse_request`), the unknown-field check and the fingerprint's domain;
:mod:`.request_schema` renders the same bound rows as the JSON Schema and the
README's request table (``python -m platform_constructs.submitter.runtime.request_schema
--readme`` rewrites it). It binds what the pure table only names:

* ``rule="sagemaker:<path>"`` -> the limit of botocore's model of
  ``CreateTrainingJob`` at ``<path>`` (:mod:`.sagemaker_rules`, matched
  whole-string and by exact length): a string's lengths and pattern, an
  integer's range;
* the named rules of :data:`RULES` (the deployment's default instance type, the
  capacity types of :mod:`platform_spec.capacity`, and the parsers of ``hyperparameters``
  (the trainer's own :mod:`platform_spec.hyperparameters`), ``inputs`` and
  ``tags``);
* the named cross-field checks of :data:`CHECKS`.

So the submitter never accepts what the trainer or SageMaker would reject.

:func:`parse_request` checks the fields in the table's order and returns a
frozen :class:`SubmitRequest` with defaults filled in, or raises an
``InvalidRequest`` :class:`.errors.Refusal` built from one
:class:`platform_spec.errors.FieldError`, naming the first bad field (dotted
path), the value received and what was expected. Dataclasses and explicit
checks rather than pydantic keep the function's cold start short.

**Fingerprint** (:meth:`SubmitRequest.fingerprint`, tag
``platform:request-sha256-v2``): SHA-256 of what the caller *sent* of the rows
marked ``fingerprint``, so that adding an optional field with a default to the
table never changes the fingerprint of a stored job. Fields absent or ``null``
are left out (defaults are never filled in; an empty object counts as absent);
values are canonicalised so that equal values compare equal (hyperparameter
names through :func:`platform_spec.hyperparameters.normalise_name` and values
through the trainer's own :func:`~platform_spec.hyperparameters.format_value`,
numbers by value, input keys resolved to ``s3://`` URIs, maps sorted).
``dry_run``, ``client_token`` and ``job_name`` are not part of what the job is.
A field sent with its default value counts as sent; a field (or hyperparameter)
sent as ``null`` is absent.

**Derived job names** (:func:`derived_job_name`): a request with a
``client_token`` and no ``job_name`` runs as ``job-`` + the first 24 hex digits
of SHA-256(token). That name space is reserved: a ``job_name`` of that form (in
any letter case) is refused unless it is exactly the name derived from the
request's own ``client_token``, so no request can take the name another token
will derive.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from platform_spec import catalogue, models, request_fields, runs
from platform_spec import hyperparameters as hpmod
from platform_spec.capacity import CAPACITY_TYPES
from platform_spec.catalogue import InstanceSpec
from platform_spec.errors import FieldError
from platform_spec.request_fields import (
    CLIENT_TOKEN_PATTERN,
    DERIVED_JOB_NAME_PATTERN,
    MAX_RUNTIME_HOURS,
    RESERVED_TAG_PREFIXES,
    SECONDS_PER_UNIT,
    RequestField,
)

from . import sagemaker_rules as model
from .config import SubmitterConfig, default_allowed_instance_types
from .errors import invalid

CAPACITY_CHOICES: tuple[str, ...] = (*CAPACITY_TYPES, "auto")
"""The ``capacity`` field's values (its rule ``capacity``): the capacity types, or ``auto`` (the
configured fallback order)."""

CLIENT_TOKEN_RE = re.compile(rf"(?:{CLIENT_TOKEN_PATTERN})\Z")
"""The ``client_token`` row's pattern, compiled. ``\\Z`` anchors it, so ``match`` and ``fullmatch`` agree."""
S3_URI_RE = re.compile(r"s3://([a-z0-9][a-z0-9.\-]{1,61}[a-z0-9])/(.*)\Z", re.DOTALL)
DERIVED_JOB_NAME_RE = re.compile(rf"(?:{DERIVED_JOB_NAME_PATTERN})\Z", re.IGNORECASE)
"""The form of the job names derived from a ``client_token`` (:func:`derived_job_name`), matched in
any letter case: reserved for them."""


def __getattr__(name: str) -> Any:
    # JOB_NAME_RE is derived from botocore's model on first use, not at import (cold start)
    if name == "JOB_NAME_RE":
        return model.string_rule("TrainingJobName").regex()
    if name == "REQUEST_FIELDS":
        return request_fields.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def token_digest(token: str) -> str:
    """SHA-256 (hex) of a ``client_token``: its job's ``platform:client-token-sha256`` tag, its record's key."""
    return hashlib.sha256(token.encode()).hexdigest()


def derived_job_name(client_token: str) -> str:
    """The job name of a request with ``client_token`` and no ``job_name``: ``job-`` + 24 hex of
    SHA-256(token), a function of the token alone (see the module docstring)."""
    return f"job-{token_digest(client_token)[:24]}"


def job_name_expected() -> str:
    """What a job name must be, with the model's limits (the ``job_name`` row's expectation)."""
    return expected_text(request_fields.get_field("job_name"))


@dataclass(frozen=True, kw_only=True)
class SubmitRequest:
    """A validated request with defaults applied: one attribute per field of the table.

    Attributes:
        hyperparameters: the trainer's hyperparameters (:class:`platform_spec.hyperparameters.Hyperparameters`).
        instance_type: SageMaker ML instance type, e.g. ``ml.p6-b200.48xlarge``.
        instance_count: instances (nodes) for the job, >= 1.
        capacity: ``training-plan`` | ``spot`` | ``on-demand`` | ``auto``.
        training_plan_arn: the plan to use, or ``None`` to choose among the configured ones.
        inputs: channel name -> ``s3://`` URI (resolved; relative keys are made absolute under the data bucket).
        max_runtime_hours: ``StoppingCondition.MaxRuntimeInSeconds`` / 3600.
        max_wait_hours: spot only: ``MaxWaitTimeInSeconds`` / 3600 (>= ``max_runtime_hours``), or ``None``.
        max_retry_attempts: ``RetryStrategy.MaximumRetryAttempts``.
        tags: caller's tags (merged with the platform's).
        job_name: the caller's job name, or ``None`` to derive one.
        client_token: idempotency key, or ``None``.
        auto_tune: apply the planner's change when the configuration is predicted not to fit.
        dry_run: validate, choose capacity and estimate, but create nothing.
        extras: the values of table rows this class has no attribute for (fields added to the table
            since); read them, like any field, with :meth:`value`.
        sent: the ``fingerprint`` rows the caller sent (not ``null``), canonicalised; what
            :meth:`fingerprint` hashes.
    """

    hyperparameters: hpmod.Hyperparameters
    instance_type: str
    instance_count: int
    capacity: str
    training_plan_arn: str | None
    inputs: Mapping[str, str]
    max_runtime_hours: float
    max_wait_hours: float | None
    max_retry_attempts: int
    tags: Mapping[str, str]
    job_name: str | None
    client_token: str | None
    auto_tune: bool
    dry_run: bool
    extras: Mapping[str, Any] = field(default_factory=dict)
    sent: Mapping[str, Any] = field(default_factory=dict)

    @property
    def run(self) -> runs.RunSpec | None:
        """The request's ``run`` (:class:`platform_spec.runs.RunSpec`), or ``None``."""
        spec = self.extras.get("run")
        return spec if isinstance(spec, runs.RunSpec) else None

    @property
    def segment(self) -> int | None:
        """For a request with ``run``: the index of the segment its ``job_name`` names (the submitter sets
        it to :func:`platform_spec.runs.segment_job_name`: 1 for the caller's request, the next ones for
        the run continuation); ``None`` otherwise."""
        run = self.run
        parsed = runs.parse_segment_job_name(self.job_name) if run is not None and self.job_name else None
        return parsed[1] if parsed is not None and run is not None and parsed[0] == run.run_id else None

    def value(self, name: str) -> Any:
        """The parsed value (default filled in) of the request field ``name``.

        Raises:
            KeyError: no such field.
        """
        if name in self.extras:
            return self.extras[name]
        if name in _FIELD_ATTRIBUTES:
            return getattr(self, name)
        raise KeyError(f"no request field {name!r} in this request")

    @property
    def max_runtime_seconds(self) -> int:
        return max(1, round(self.max_runtime_hours * 3600))

    def spot_wait_seconds(self) -> int:
        """``MaxWaitTimeInSeconds`` for spot: the request's, else twice the runtime capped at 28 days."""
        hours = self.max_wait_hours
        if hours is None:
            hours = min(2 * self.max_runtime_hours, MAX_RUNTIME_HOURS)
        return max(self.max_runtime_seconds, round(hours * 3600))

    def fingerprint(self) -> str:
        """SHA-256 (hex) of :attr:`sent`: equal for requests that send the same job (module docstring).

        The value of the ``platform:request-sha256-v2`` tag. Pinned by a golden
        test: changing what it hashes needs a new version (:data:`.training_job.FINGERPRINT_VERSION`).
        """
        blob = json.dumps({"request": dict(self.sent)}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


_FIELD_ATTRIBUTES: frozenset[str] = frozenset(f.name for f in dataclasses.fields(SubmitRequest)) - {"extras", "sent"}


# --- what the table names, bound ----------------------------------------------------------------

Parser = Callable[[Mapping[str, Any], SubmitterConfig], tuple[Any, Any]]
"""A structured field's parser: ``(the JSON object, configuration) -> (value, canonical form)``;
raises :class:`FieldError` naming the (dotted) field."""


@dataclass(frozen=True)
class FieldRule:
    """What the runtime adds to a row whose ``rule`` names it (each part optional).

    Attributes:
        string_rule: a string's SageMaker rule (lengths, pattern), checked after the row's own pattern.
        bounds: an integer's or number's ``(min, max)``; the stricter of these and the row's apply.
        choices: the allowed strings.
        default: the value of an absent field, from the configuration.
        parse: a structured (object) field's :data:`Parser`.
        schema: a JSON-Schema fragment merged into the field's.
        limits: the bound limits in words, for the README (structured fields).
    """

    string_rule: Callable[[], model.StringRule] | None = None
    bounds: Callable[[], tuple[int | None, int | None]] | None = None
    choices: Callable[[], tuple[str, ...]] | None = None
    default: Callable[[SubmitterConfig], Any] | None = None
    parse: Parser | None = None
    schema: Callable[[], dict[str, Any]] | None = None
    limits: Callable[[], str] | None = None


Check = Callable[[Mapping[str, Any], SubmitterConfig], Mapping[str, Any] | None]
"""A cross-field check: ``(values parsed so far, configuration)``; raises :class:`FieldError`. It returns
``None``, or ``{field: value}`` for fields it completes from another (``model_config`` gives
``hyperparameters`` its shape), which replace their parsed values."""

SAGEMAKER_RULE_PREFIX = "sagemaker:"
_NO_RULE = FieldRule()


def bound_rule(row: RequestField) -> FieldRule:
    """The runtime's rule for ``row`` (:data:`RULES`, or a ``sagemaker:<path>`` limit of botocore's model).

    Raises:
        LookupError: the row names a rule the runtime does not bind.
    """
    if row.rule is None:
        return _NO_RULE
    if row.rule.startswith(SAGEMAKER_RULE_PREFIX):
        path = row.rule[len(SAGEMAKER_RULE_PREFIX) :]
        if row.type == "string":
            return FieldRule(string_rule=lambda: model.string_rule(path))
        if row.type in ("integer", "number"):
            return FieldRule(bounds=lambda: model.bounds(path))
        raise LookupError(
            f"request field {row.name!r}: a SageMaker rule applies to strings and numbers, not {row.type}"
        )
    try:
        return RULES[row.rule]
    except KeyError:
        raise LookupError(
            f"request field {row.name!r} names rule {row.rule!r}, which the runtime does not bind "
            f"(bound: {', '.join(sorted(RULES))}, or {SAGEMAKER_RULE_PREFIX}<CreateTrainingJob member>)"
        ) from None


def field_range(row: RequestField, rule: FieldRule) -> tuple[float | None, float | None]:
    """``(minimum, maximum)`` of a number row (``None``: unbounded): the stricter of the row's and its rule's."""
    low, high = row.minimum, row.maximum
    if rule.bounds is not None:
        model_low, model_high = rule.bounds()
        if model_low is not None:
            low = model_low if low is None else max(low, model_low)
        if model_high is not None:
            high = model_high if high is None else min(high, model_high)
    return low, high


def field_choices(row: RequestField, rule: FieldRule) -> tuple[str, ...]:
    """The allowed strings of a row (its rule's, else its own; ``()``: any)."""
    return rule.choices() if rule.choices is not None else row.choices


def expected_text(row: RequestField, rule: FieldRule | None = None) -> str:
    """What ``row``'s value must be, in words: the refusals' "expected ..." and the README's rule.

    Integers: ``"an integer from 1 to 256"``; numbers: ``"a number of hours > 0 and <= 672"``;
    booleans: ``"true or false"``; strings: ``"one of ..."``, else the row's ``expected`` (with a
    SageMaker rule's ``{length}`` and ``{shape}``), else the rule's own; objects: the row's ``expected``.
    """
    rule = bound_rule(row) if rule is None else rule
    if row.type == "boolean":
        return "true or false"
    if row.type in ("integer", "number"):
        low, high = field_range(row, rule)
        if row.type == "integer":
            if low is not None and high is not None:
                return f"an integer from {_number_text(low)} to {_number_text(high)}"
            kind = "an integer"
        else:
            kind = f"a number of {row.unit}" if row.unit else "a number"
        parts = []
        if low is not None:
            parts.append(f"{'>' if row.exclusive_minimum else '>='} {_number_text(low)}")
        if high is not None:
            parts.append(f"<= {_number_text(high)}")
        return " ".join([kind, " and ".join(parts)]) if parts else kind
    if row.type == "object":
        return row.expected or "a JSON object"
    choices = field_choices(row, rule)
    if choices:
        return "one of " + ", ".join(choices)
    string_rule = rule.string_rule() if rule.string_rule is not None else None
    if row.expected:
        if string_rule is None:
            return row.expected
        most = string_rule.max_length
        length = f"{string_rule.min_length}-{most}" if most is not None else f"{string_rule.min_length} or more"
        return row.expected.replace("{length}", length).replace("{shape}", string_rule.name)
    return string_rule.expected() if string_rule is not None else "a string"


def _number_text(number: float) -> str:
    """``2419200``, ``672``, ``0.5``: integral values without exponent or ``.0``, others exactly."""
    return str(int(number)) if float(number).is_integer() else repr(float(number))


# --- parsing -----------------------------------------------------------------------------------


def parse_request(event: Any, config: SubmitterConfig) -> SubmitRequest:
    """Validate ``event`` field by field, in the table's order, and apply defaults.

    Instance types are checked against the configuration, ``CreateTrainingJob``'s
    enum and the catalogue afterwards (:func:`check_instance`).

    Raises:
        Refusal: code ``InvalidRequest``, naming the first bad field (:func:`.errors.invalid`).
        LookupError: the table names a rule or check the runtime does not bind (a programming error).
    """
    try:
        return _parse(event, config, request_fields.FIELDS)
    except FieldError as error:
        raise invalid(error) from None


_ABSENT = object()
_ABSENT_OBJECT: Mapping[str, Any] = MappingProxyType({})
"""What an object field's parser receives for the field absent or ``null`` (an empty mapping, told apart
by identity from an empty object the request sent: ``model_config: {}`` names no model and is refused)."""
_CHECKED_TABLE: list[Sequence[RequestField] | None] = [None]


def _parse(event: Any, config: SubmitterConfig, rows: Sequence[RequestField]) -> SubmitRequest:
    if not isinstance(event, Mapping):
        raise FieldError("", type(event).__name__, "a JSON object with the request fields")
    if rows is not _CHECKED_TABLE[0]:  # once per table (tests may patch in another), not per request
        request_fields.check_table(rows)
        _CHECKED_TABLE[0] = rows
    known = request_fields.names(rows)
    for key in event:
        if not isinstance(key, str) or key not in known:
            raise FieldError(str(key), event[key], "a known request field (one of: " + ", ".join(known) + ")")
    values: dict[str, Any] = {}
    sent: dict[str, Any] = {}
    pending = [(row.name, check) for row in rows for check in row.checks]
    for row in rows:
        value, canonical = _parse_field(row, event.get(row.name), values, config)
        values[row.name] = value
        if row.fingerprint and canonical is not _ABSENT:
            sent[row.name] = canonical
        ready = [(name, check) for name, check in pending if name in values and all(n in values for n in check.needs)]
        for item in ready:
            pending.remove(item)
            settled = _bound_check(item[1].name)(values, config)
            if settled:
                values.update(settled)
    attributes = {k: v for k, v in values.items() if k in _FIELD_ATTRIBUTES}
    extras = {k: v for k, v in values.items() if k not in _FIELD_ATTRIBUTES}
    return SubmitRequest(**attributes, extras=MappingProxyType(extras), sent=sent)


def _bound_check(name: str) -> Check:
    try:
        return CHECKS[name]
    except KeyError:
        raise LookupError(
            f"request check {name!r} is not bound by the runtime (bound: {', '.join(sorted(CHECKS))})"
        ) from None


def _parse_field(row: RequestField, raw: Any, values: Mapping[str, Any], config: SubmitterConfig) -> tuple[Any, Any]:
    """``(value, canonical form for the fingerprint, or _ABSENT)`` of one row. Raises FieldError."""
    rule = bound_rule(row)
    name = row.name
    if row.type == "object":
        if raw is None:
            raw = _ABSENT_OBJECT
        if not isinstance(raw, Mapping):
            raise FieldError(name, raw, expected_text(row, rule))
        if rule.parse is None:
            raise LookupError(f"request field {name!r} is an object; its rule {row.rule!r} has no parser")
        value, canonical = rule.parse(raw, config)
        return value, (canonical if canonical else _ABSENT)
    if raw is None or (row.blank_is_absent and raw == ""):
        return (rule.default(config) if rule.default is not None else row.default), _ABSENT
    value = _typed(row, rule, raw)
    if row.only_with is not None:
        other = values[row.only_with.field]
        if other not in row.only_with.values:
            allowed = " or ".join(row.only_with.values)
            raise FieldError(
                name, raw, f"no {row.only_with.noun} with {row.only_with.field} {other!r} ({allowed} only)"
            )
    _constrain(row, rule, raw, value)
    return value, value


def _typed(row: RequestField, rule: FieldRule, raw: Any) -> Any:
    """``raw`` as the row's JSON type (an integral number as an integer). Raises FieldError."""
    if row.type == "string":
        if not isinstance(raw, str):
            raise FieldError(row.name, raw, "a string")
        return raw
    if row.type == "boolean":
        if not isinstance(raw, bool):
            raise FieldError(row.name, raw, "true or false")
        return raw
    if row.type == "integer":
        value = int(raw) if isinstance(raw, float) and raw.is_integer() else raw
        if isinstance(value, bool) or not isinstance(value, int):
            raise FieldError(row.name, value, expected_text(row, rule))
        return value
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise FieldError(row.name, raw, expected_text(row, rule))
    try:
        return float(raw)
    except OverflowError:  # an integer beyond a float's range
        raise FieldError(row.name, raw, expected_text(row, rule)) from None


def _constrain(row: RequestField, rule: FieldRule, raw: Any, value: Any) -> None:
    """The row's range, choices, pattern and bound rule. Raises FieldError."""
    if row.type in ("integer", "number"):
        low, high = field_range(row, rule)
        fine = isinstance(value, int) or math.isfinite(value)  # math.isfinite(10**400) overflows
        if fine and low is not None:
            fine = value > low if row.exclusive_minimum else value >= low
        if fine and high is not None:
            fine = value <= high
        if fine and row.unit in SECONDS_PER_UNIT:
            fine = round(value * SECONDS_PER_UNIT[row.unit]) >= 1  # SageMaker counts whole seconds
        if not fine:
            raise FieldError(row.name, value if row.type == "integer" else raw, expected_text(row, rule))
    elif row.type == "string":
        choices = field_choices(row, rule)
        fine = (not choices or value in choices) and (
            row.pattern is None or re.fullmatch(row.pattern, value) is not None
        )
        if fine and rule.string_rule is not None:
            fine = rule.string_rule().accepts(value)
        if not fine:
            raise FieldError(row.name, value, expected_text(row, rule))


# --- checks across fields (named in the table) ----------------------------------------------------


def _derived_job_name_reserved(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """A ``job_name`` of the derived form is only the request's own token's (module docstring)."""
    job_name, client_token = values["job_name"], values["client_token"]
    if job_name is None or not DERIVED_JOB_NAME_RE.fullmatch(job_name):
        return
    own = derived_job_name(client_token) if client_token is not None else None
    if job_name != own:
        raise FieldError(
            "job_name", job_name,
            "a name not of the form job-<24 hex digits>, which is reserved for the names derived from a "
            + (f"client_token (this request's client_token derives {own!r}; leave job_name out to use it)"
               if own else "client_token (this request has none)"),
        )  # fmt: skip


def _run_names_its_jobs(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """A run names its segments (``<run_id>-seg-NNN``) and keys them by its run id: no ``job_name`` or
    ``client_token`` with it."""
    if values["run"] is None:
        return
    run_id = values["run"].run_id
    for name in ("job_name", "client_token"):
        if values[name] is not None:
            raise FieldError(
                name,
                values[name],
                f"no {name} with run: the run's segments are named {runs.segment_job_name(run_id, 1)}, "
                f"{runs.segment_job_name(run_id, 2)}, ... and run.run_id is the key a retry is matched on",
            )


def _train_channel(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """The trainer reads the ``train`` channel unless it makes synthetic data."""
    if not values["hyperparameters"].synthetic_data and "train" not in values["inputs"]:
        raise FieldError(
            "inputs.train", None, "an s3:// URI for the train channel (or hyperparameters.synthetic_data true)"
        )


def _wait_covers_runtime(values: Mapping[str, Any], config: SubmitterConfig) -> None:
    """SageMaker's ``MaxWaitTimeInSeconds`` counts the run too: at least ``MaxRuntimeInSeconds``."""
    wait, runtime = values["max_wait_hours"], values["max_runtime_hours"]
    if wait is not None and wait < runtime:
        raise FieldError("max_wait_hours", wait, f">= max_runtime_hours ({runtime:g})")


def _model_config_shape(values: Mapping[str, Any], config: SubmitterConfig) -> Mapping[str, Any] | None:
    """A ``model_config`` gives the hyperparameters its shape (the file is the shape's one source, so
    ``hyperparameters`` may not set one too), checked with the request's precision by the family's rule."""
    derived = values["model_config"]
    if not derived:
        return None
    hp: hpmod.Hyperparameters = values["hyperparameters"]
    try:
        hpmod.refuse_shape_values(_shape_values(hp), derived)
    except FieldError as exc:
        raise FieldError(f"hyperparameters.{exc.field}", exc.value, exc.expected) from None
    try:
        return {"hyperparameters": hpmod.parse(derived, base=hp)}
    except hpmod.HyperparameterError as exc:
        raise FieldError(
            "model_config",
            f"{exc.field} {exc.value!r}",
            f"a shape the trainer runs with hyperparameters.precision {hp.precision}: {exc.field} {exc.expected}",
        ) from None


def _shape_values(hp: hpmod.Hyperparameters) -> dict[str, Any]:
    """The shape hyperparameters (and ``model``, unless it is the default) that ``hp`` sets."""
    names = ("model_family", *hpmod.SHAPE_HYPERPARAMETERS)
    out = {name: getattr(hp, name) for name in names if getattr(hp, name) is not None}
    if hp.model != hpmod.Hyperparameters().model:
        out["model"] = hp.model
    return out


# --- the structured fields --------------------------------------------------------------------------


def _model_config(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """A Hugging Face ``config.json`` as the hyperparameters of its shape (``model`` and the shape
    hyperparameters, :func:`platform_spec.hyperparameters.merge_model_config`); canonical: those, formatted
    (two files of one shape are one job)."""
    if raw is _ABSENT_OBJECT:
        return None, {}
    derived = hpmod.merge_model_config({}, raw)  # {} too: a config.json names its model_type
    return derived, {name: hpmod.format_value(value) for name, value in sorted(derived.items())}


def _model_config_schema() -> dict[str, Any]:
    types = sorted({t for name in models.family_names() for t in models.get_family(name).hf_model_types})
    return {"required": ["model_type"], "properties": {"model_type": {"enum": types}}}


def _run(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[runs.RunSpec | None, dict[str, Any]]:
    """The run (:func:`platform_spec.runs.parse_run`); canonical: its JSON form, the deadline in UTC."""
    if raw is _ABSENT_OBJECT:
        return None, {}
    return runs.parse_run(raw)


def _run_schema() -> dict[str, Any]:
    return {
        "required": ["run_id"],
        "additionalProperties": False,
        "properties": {
            "run_id": {"type": "string", "pattern": whole_string_pattern(runs.RUN_ID_PATTERN)},
            "max_segments": {"type": ["integer", "null"], "minimum": 1, "maximum": runs.MAX_SEGMENTS},
            "deadline": {"type": ["string", "null"], "format": "date-time"},
            "max_instance_hours": {"type": ["number", "null"], "exclusiveMinimum": 0},
        },
    }


def _hyperparameters(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[hpmod.Hyperparameters, dict[str, str]]:
    """The parsed hyperparameters and the canonical form of those sent (name -> ``format_value``)."""
    values: dict[str, Any] = {}
    nulls: set[str] = set()
    for key, value in raw.items():
        if not isinstance(key, str):
            raise FieldError("hyperparameters", key, "string keys")
        name = hpmod.normalise_name(key)
        where = f"hyperparameters.{name}"
        if name in values or name in nulls:
            raise FieldError(where, key, f"{name!r} given once (it appears under two spellings)")
        if value is None:
            # null is absent, as for the request's own fields (a known name all the same)
            if name not in hpmod.SPECS:
                raise FieldError(where, key, "a known hyperparameter: " + ", ".join(sorted(hpmod.SPECS)))
            nulls.add(name)
            continue
        if not isinstance(value, (str, int, float, bool)):
            expected = hpmod.SPECS[name].expected() if name in hpmod.SPECS else "a known hyperparameter"
            raise FieldError(where, value, expected)
        try:
            values[name] = hpmod.coerce(name, value)
        except hpmod.HyperparameterError as exc:
            raise FieldError(f"hyperparameters.{exc.field}", exc.value, exc.expected) from None
        except (OverflowError, ValueError, TypeError):
            # e.g. an integer too large for a float field
            raise FieldError(where, value, hpmod.SPECS[name].expected()) from None
    try:
        parsed = hpmod.parse(values)
    except hpmod.HyperparameterError as exc:
        raise FieldError(f"hyperparameters.{exc.field}", exc.value, exc.expected) from None
    canonical = {name: hpmod.format_value(value) for name, value in sorted(values.items()) if value is not None}
    return parsed, canonical


def _hyperparameters_schema() -> dict[str, Any]:
    return {k: v for k, v in hpmod.json_schema().items() if k != "$schema"}


def _inputs(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[dict[str, str], dict[str, str]]:
    """Channel -> ``s3://`` URI, keys resolved under the data bucket; canonical: sorted."""
    most = model.bounds("InputDataConfig")[1]
    if most is not None and len(raw) > most:
        raise FieldError(
            "inputs", f"{len(raw)} channels", f"at most {most} channels (SageMaker's InputDataConfig limit)"
        )
    channel_rule = model.string_rule("InputDataConfig.member.ChannelName")
    uri_rule = model.string_rule("InputDataConfig.member.DataSource.S3DataSource.S3Uri")
    prefixes = config.input_prefixes()
    resolved: dict[str, str] = {}
    for channel, uri in raw.items():
        if not isinstance(channel, str) or not channel_rule.accepts(channel):
            raise FieldError("inputs", channel, f"channel names of {channel_rule.expected()}")
        where = f"inputs.{channel}"
        if not isinstance(uri, str) or not uri.strip():
            raise FieldError(where, uri, "an s3:// URI or a key prefix under the data bucket")
        if not uri.startswith("s3://"):
            if "://" in uri:
                raise FieldError(where, uri, "an s3:// URI or a key prefix under the data bucket")
            uri = f"s3://{config.data_bucket}/{uri.lstrip('/')}"
        if (
            S3_URI_RE.fullmatch(uri) is None
            or any(ord(c) < 32 or ord(c) == 127 for c in uri)
            or not uri_rule.accepts(uri)
        ):
            raise FieldError(where, uri, f"an s3://bucket/key URI without control characters, {uri_rule.length_text()}")
        if not any(uri.startswith(p) for p in prefixes):
            raise FieldError(where, uri, "a URI under " + " or ".join(prefixes))
        resolved[channel] = uri
    return resolved, dict(sorted(resolved.items()))


def _inputs_schema() -> dict[str, Any]:
    channel = model.string_rule("InputDataConfig.member.ChannelName")
    uri = model.string_rule("InputDataConfig.member.DataSource.S3DataSource.S3Uri")
    return {
        "maxProperties": model.bounds("InputDataConfig")[1],
        "propertyNames": {
            "minLength": channel.min_length,
            "maxLength": channel.max_length,
            "pattern": whole_string_pattern(channel.pattern or ".*"),
        },
        "additionalProperties": {"type": "string", "maxLength": uri.max_length},
    }


def _inputs_limits() -> str:
    channel = model.string_rule("InputDataConfig.member.ChannelName")
    uri = model.string_rule("InputDataConfig.member.DataSource.S3DataSource.S3Uri")
    return (
        f"at most {model.bounds('InputDataConfig')[1]} channels (SageMaker's InputDataConfig), named with "
        f"{channel.length_text()} matching `{channel.pattern}` (SageMaker's {channel.name}); URIs of "
        f"{uri.length_text()} without control characters"
    )


_TAG_TEXT = "letters, digits, spaces and _ . : / = + - @"


def _tags(raw: Mapping[str, Any], config: SubmitterConfig) -> tuple[dict[str, str], dict[str, str]]:
    """The caller's tags; canonical: sorted."""
    key_rule, value_rule = model.string_rule("Tags.member.Key"), model.string_rule("Tags.member.Value")
    tags: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(key, str) or not key_rule.accepts(key):
            raise FieldError(
                "tags", key, f"tag keys of {key_rule.length_text()}: {_TAG_TEXT} (SageMaker's {key_rule.name})"
            )
        where = f"tags.{key}"
        if key.lower().startswith(RESERVED_TAG_PREFIXES):
            raise FieldError(
                where, key, "a key not starting with " + " or ".join(RESERVED_TAG_PREFIXES) + " (reserved)"
            )
        taken = next((k for k in config.platform_tags if k.lower() == key.lower()), None)
        if taken is not None:
            # tag keys are case-sensitive: "project" next to the platform's "Project" would split reports by it
            raise FieldError(
                where, value, f"no value: the platform sets tag {taken!r} (keys are compared in any letter case)"
            )
        if not isinstance(value, str) or not value_rule.accepts(value):
            raise FieldError(
                where, value, f"a string of {value_rule.length_text()}: {_TAG_TEXT} (SageMaker's {value_rule.name})"
            )
        tags[key] = value
    return tags, dict(sorted(tags.items()))


def _any_case(prefix: str) -> str:
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in prefix)


def _tags_schema() -> dict[str, Any]:
    key, value = model.string_rule("Tags.member.Key"), model.string_rule("Tags.member.Value")
    reserved = "^(?:" + "|".join(_any_case(p) for p in RESERVED_TAG_PREFIXES) + ")"
    return {
        "maxProperties": model.bounds("Tags")[1],
        "propertyNames": {"minLength": key.min_length, "maxLength": key.max_length, "not": {"pattern": reserved}},
        "additionalProperties": {"type": "string", "maxLength": value.max_length},
    }


def _tags_limits() -> str:
    key, value = model.string_rule("Tags.member.Key"), model.string_rule("Tags.member.Value")
    return (
        f"keys of {key.length_text()}, values of {value.length_text()}: {_TAG_TEXT} (SageMaker's {key.name} and "
        f"{value.name}); at most {model.bounds('Tags')[1]} tags in all, the platform's included"
    )


RULES: Mapping[str, FieldRule] = MappingProxyType({
    "instance_type": FieldRule(
        default=lambda config: config.default_instance_type,
        schema=lambda: {"enum": list(model.training_instance_types())},
    ),
    "capacity": FieldRule(choices=lambda: CAPACITY_CHOICES),
    "hyperparameters": FieldRule(parse=_hyperparameters, schema=_hyperparameters_schema),
    "model_config": FieldRule(parse=_model_config, schema=_model_config_schema),
    "inputs": FieldRule(parse=_inputs, schema=_inputs_schema, limits=_inputs_limits),
    "tags": FieldRule(parse=_tags, schema=_tags_schema, limits=_tags_limits),
    "run": FieldRule(parse=_run, schema=_run_schema),
})  # fmt: skip
"""The named rules the table's rows reference (besides ``sagemaker:<path>``)."""

CHECKS: Mapping[str, Check] = MappingProxyType({
    "derived_job_name_reserved": _derived_job_name_reserved,
    "model_config_shape": _model_config_shape,
    "run_names_its_jobs": _run_names_its_jobs,
    "train_channel": _train_channel,
    "wait_covers_runtime": _wait_covers_runtime,
})  # fmt: skip
"""The named cross-field checks the table's rows reference."""


# --- instance types ----------------------------------------------------------------------------------


def allowed_instance_types(config: SubmitterConfig) -> tuple[str, ...]:
    """Instance types requests may use: the configured ones (none configured: all) among those a
    deployment may allow (:func:`.config.default_allowed_instance_types`: catalogue types the trainer
    image runs on that ``CreateTrainingJob`` accepts), in the configured order (else the catalogue's)."""
    deployable = default_allowed_instance_types()
    if not config.allowed_instance_types:
        return deployable
    return tuple(t for t in config.allowed_instance_types if t in deployable)


def check_instance(request: SubmitRequest, config: SubmitterConfig) -> InstanceSpec:
    """Check the instance type against ``CreateTrainingJob``, the configuration and the catalogue
    (:mod:`platform_spec.catalogue`).

    Returns:
        The catalogue's instance entry.

    Raises:
        Refusal: ``InvalidRequest`` on ``instance_type`` (not accepted by
        ``CreateTrainingJob`` / host CPUs the trainer image is not built for /
        not allowed / unknown to the planner) or
        ``hyperparameters.precision`` (the instance's GPU cannot run it).
    """
    try:
        return _check_instance(request, config)
    except FieldError as error:
        raise invalid(error) from None


def _check_instance(request: SubmitRequest, config: SubmitterConfig) -> InstanceSpec:
    instance_type = request.instance_type
    if instance_type not in model.training_instance_types():
        raise FieldError(
            "instance_type",
            instance_type,
            "an instance type CreateTrainingJob accepts (SageMaker's TrainingInstanceType)",
        )
    architecture = catalogue.host_architecture_problem(instance_type)
    if architecture is not None:
        raise FieldError(
            "instance_type", instance_type,
            f"an instance type the trainer image runs on ({architecture}): one of "
            + ", ".join(allowed_instance_types(config)),
        )  # fmt: skip
    allowed = allowed_instance_types(config)
    if instance_type not in allowed:
        raise FieldError("instance_type", instance_type, "one of the allowed types: " + ", ".join(allowed))
    instance = catalogue.get_instance(instance_type)  # allowed types are catalogue types
    precision = request.hyperparameters.precision
    if not catalogue.supports_precision(instance.gpu, precision):
        supported = catalogue.supported_precisions(instance.gpu)
        raise FieldError(
            "hyperparameters.precision",
            precision,
            f"a precision {instance.gpu} on {instance_type} supports: {', '.join(supported)}",
        )
    return instance


# --- JSON Schema helpers (the schema itself: :mod:`.request_schema`) --------------------------------------


def whole_string_pattern(pattern: str) -> str:
    """A whole-string pattern for JSON Schema, whose ``pattern`` searches: ``^(?:...)(?![\\s\\S])``.

    The end is a look-ahead for no character rather than ``$``, which Python's ``re`` (the
    ``jsonschema`` package's engine) also matches before a trailing newline; it means the same in
    ECMA-262. A pattern already anchored with ``^...$`` is re-anchored so.
    """
    body = (
        pattern[1:-1] if pattern.startswith("^") and pattern.endswith("$") and not pattern.endswith("\\$") else pattern
    )
    return f"^(?:{body})(?![\\s\\S])"
