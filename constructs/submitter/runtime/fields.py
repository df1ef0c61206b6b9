"""Fields of the function's events: one row per key, from which parsing, refusals and documentation derive.

The submission request (:data:`.request.FIELDS`) and each job-API action (:data:`.actions.ACTIONS`) are
tables of :class:`Field` rows; :func:`parse` checks an event against one, in its order, and a refusal names
the field, the value and the expectation (:class:`platform_spec.errors.FieldError`). SageMaker's limits are
read from botocore's model (``sagemaker``, :mod:`.sagemaker_rules`), never copied here. The request's JSON
Schema and the README's request table are rendered from the same rows (:mod:`.request_schema`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from platform_spec.errors import FieldError

from . import sagemaker_rules as model

JsonType = Literal["string", "integer", "number", "boolean", "object"]
"""A field's JSON type (JSON Schema's names). ``integer`` also takes an integral number (``2.0``)."""

SECONDS_PER_UNIT: Mapping[str, int] = MappingProxyType({"hours": 3600})
"""Units of duration fields. SageMaker takes durations in whole seconds, so such a value must come to at
least one second."""

Parser = Callable[[Any, Any], tuple[Any, Any]]
"""``(value, configuration) -> (parsed value, canonical form for the fingerprint)``; raises :class:`FieldError`
naming the (dotted) field."""

ABSENT_OBJECT: Mapping[str, Any] = MappingProxyType({})
"""What an object field's parser receives for the field absent or ``null``, told apart by identity from an
empty object the event sent (``model_config: {}`` names no model and is refused)."""


@dataclass(frozen=True)
class OnlyWith:
    """A field accepted only when an earlier ``field`` has one of ``values``; ``noun`` is what the refusal
    says there is none of (``"no plan with capacity 'spot' (training-plan or auto only)"``)."""

    field: str
    values: tuple[str, ...]
    noun: str = "value"


@dataclass(frozen=True)
class Check:
    """A cross-field check, run once its row and the rows it ``needs`` are parsed: ``run(values parsed so far,
    configuration)`` raises :class:`FieldError`, or returns ``{field: value}`` for fields it completes from
    another (``model_config`` gives ``hyperparameters`` its shape), else ``None``."""

    run: Callable[[Mapping[str, Any], Any], Mapping[str, Any] | None]
    needs: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class Field:
    """One key of an event.

    Attributes:
        name: the JSON key (snake_case); type: its JSON type (:data:`JsonType`).
        help: what the field is, one line (the schema's ``description``, the README's meaning).
        default: the value of an absent field: a literal, or a function of the configuration; ``None``: none.
        default_text: the default in words, when it is not a literal (README, e.g. ``"derived"``).
        minimum, maximum: a number's range (inclusive; ``exclusive_minimum`` refuses the minimum itself).
        unit: a number's unit, e.g. ``"hours"``; a unit in :data:`SECONDS_PER_UNIT` makes it a duration
            of at least one whole second.
        choices: the allowed strings.
        pattern: a regular expression a string must match whole (Python and ECMA-262 alike).
        expected: the refusal's "expected ..." for a value that breaks the row's rules (for objects: for a
            value that is no JSON object). ``{length}`` and ``{shape}`` are replaced with the SageMaker
            string rule's length (``1-63``) and shape name (``TrainingJobName``).
        sagemaker: the member of botocore's model whose limits apply: ``<path>`` in ``CreateTrainingJob``'s
            input, or ``<Operation>:<path>`` (:func:`.sagemaker_rules.shape`): a string's lengths, pattern
            and enum, a number's range (the stricter of the row's and the model's).
        parse: the field's own :data:`Parser` (an object field's is required), run after the checks above.
        limits: the limits its parser applies, in words, for the README.
        only_with: the field is accepted only with another field's values (:class:`OnlyWith`).
        checks: cross-field checks (:class:`Check`).
        blank_is_absent: an empty string is absent (the default applies), as ``null`` is.
        fingerprint: part of what a submitted job is: hashed, when sent, into the request's fingerprint.
        notes: further rules in words, for the README and the schema's description (Markdown).
        schema: a JSON-Schema fragment merged into the field's generated one (or a function returning it).
    """

    name: str
    type: JsonType
    help: str = ""
    default: Any = None
    default_text: str | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    unit: str = ""
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    expected: str = ""
    sagemaker: str | None = None
    parse: Parser | None = None
    limits: Callable[[], str] | None = None
    only_with: OnlyWith | None = None
    checks: tuple[Check, ...] = ()
    blank_is_absent: bool = False
    fingerprint: bool = True
    notes: str = ""
    schema: Mapping[str, Any] | Callable[[], Mapping[str, Any]] = field(default_factory=dict)

    def string_rule(self) -> model.StringRule | None:
        """SageMaker's rule of a string row with ``sagemaker`` (``None`` otherwise)."""
        if self.sagemaker is None or self.type != "string":
            return None
        return model.string_rule(*_member(self.sagemaker))

    def bounds(self) -> tuple[float | None, float | None]:
        """``(minimum, maximum)`` of a number row (``None``: unbounded): the stricter of the row's and the model's."""
        low, high = self.minimum, self.maximum
        if self.sagemaker is not None and self.type in ("integer", "number"):
            model_low, model_high = model.bounds(*_member(self.sagemaker))
            if model_low is not None:
                low = model_low if low is None else max(low, model_low)
            if model_high is not None:
                high = model_high if high is None else min(high, model_high)
        return low, high

    def options(self) -> tuple[str, ...]:
        """The allowed strings: the row's choices, else its SageMaker enum (``()``: any)."""
        rule = self.string_rule()
        return self.choices or (rule.enum if rule is not None else ())

    def expected_text(self) -> str:
        """What the value must be, in words: the refusals' "expected ..." and the README's rule.

        Integers: ``"an integer from 1 to 256"``; numbers: ``"a number of hours > 0 and <= 672"``;
        booleans: ``"true or false"``; strings: ``"one of ..."``, else the row's ``expected`` (with the
        SageMaker rule's ``{length}`` and ``{shape}``), else the rule's own; objects: the row's ``expected``.
        """
        if self.type == "boolean":
            return "true or false"
        if self.type in ("integer", "number"):
            return self._number_text()
        if self.type == "object":
            return self.expected or "a JSON object"
        options = self.options()
        if options:
            return "one of " + ", ".join(options)
        rule = self.string_rule()
        if rule is None:
            return self.expected or "a string"
        if not self.expected:
            return rule.expected()
        length = f"{rule.min_length}-{rule.max_length}" if rule.max_length is not None else f"{rule.min_length} or more"
        return self.expected.replace("{length}", length).replace("{shape}", rule.name)

    def _number_text(self) -> str:
        low, high = self.bounds()
        if self.type == "integer" and low is not None and high is not None:
            return f"an integer from {_number(low)} to {_number(high)}"
        kind = "an integer" if self.type == "integer" else f"a number of {self.unit}" if self.unit else "a number"
        parts = []
        if low is not None:
            parts.append(f"{'>' if self.exclusive_minimum else '>='} {_number(low)}")
        if high is not None:
            parts.append(f"<= {_number(high)}")
        return " ".join([kind, " and ".join(parts)]) if parts else kind

    def default_markdown(self) -> str:
        """The default as the README shows it: :attr:`default_text`, the literal in backticks (JSON; a string
        bare, an integral number without ``.0``), or ``-`` for none."""
        if self.default_text is not None:
            return self.default_text
        if self.default is None:
            return "-"
        if isinstance(self.default, str):
            return f"`{self.default}`"
        if isinstance(self.default, float) and self.default.is_integer():
            return f"`{int(self.default)}`"
        return f"`{json.dumps(self.default)}`"


JOB_NAME = Field(
    "job_name",
    "string",
    help="the SageMaker training job's name",
    sagemaker="TrainingJobName",
    expected="{length} letters, digits and hyphens, starting and ending with a letter or digit (SageMaker's {shape})",
)
"""The job-name row of the request and of the actions that name a job (its wording is the request's)."""


def names(rows: Iterable[Field]) -> tuple[str, ...]:
    """The rows' names, in order."""
    return tuple(row.name for row in rows)


def _member(ref: str) -> tuple[str, str]:
    """``"<path>"`` or ``"<Operation>:<path>"`` -> ``(path, operation)``."""
    operation, _, path = ref.rpartition(":")
    return path, operation or model.OPERATION


def _number(number: float) -> str:
    """``2419200``, ``672``, ``0.5``: integral values without exponent or ``.0``, others exactly."""
    return str(int(number)) if float(number).is_integer() else repr(float(number))


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


# --- a table is well formed ------------------------------------------------------------------------

_NAME_RE = re.compile(r"[a-z][a-z0-9_]*\Z")


def check_table(rows: Iterable[Field]) -> None:
    """Check that every row can be parsed and documented: unique snake_case names, rules that fit the type, an
    object field's parser, and :class:`OnlyWith` / :class:`Check` naming other rows (an ``only_with`` one
    earlier, its ``values`` among that row's choices).

    Raises:
        ValueError: naming the row and what is wrong.
    """
    rows = tuple(rows)
    seen: dict[str, Field] = {}
    for row in rows:
        where = f"request field {row.name!r}"
        if not _NAME_RE.match(row.name):
            raise ValueError(f"{where}: expected a snake_case name")
        if row.name in seen:
            raise ValueError(f"{where}: the name appears twice")
        problem = _type_problem(row) or _reference_problem(row, seen, names(rows))
        if problem:
            raise ValueError(f"{where}: {problem}")
        seen[row.name] = row


def _type_problem(row: Field) -> str | None:
    """What of ``row``'s rules does not fit its type, or ``None``."""
    if row.type not in ("string", "integer", "number", "boolean", "object"):
        return f"type {row.type!r}; expected string, integer, number, boolean or object"
    if row.choices and row.type != "string":
        return "choices need type string"
    if (row.minimum is not None or row.maximum is not None or row.unit) and row.type not in ("integer", "number"):
        return "a range or unit needs type integer or number"
    if row.pattern is not None:
        if row.type != "string":
            return "a pattern needs type string"
        re.compile(row.pattern)
    if row.default is not None and not callable(row.default) and not _fits(row.type, row.default):
        return f"default {row.default!r} is not a JSON {row.type}"
    if row.type == "object" and row.parse is None:
        return "an object field needs a rule that parses it"
    return None


def _reference_problem(row: Field, earlier: Mapping[str, Field], every: Sequence[str]) -> str | None:
    """What of ``row``'s references to other rows is wrong, or ``None``."""
    if row.only_with is not None:
        other = earlier.get(row.only_with.field)
        if other is None:
            return f"only_with names {row.only_with.field!r}, which is not an earlier field"
        unknown = [v for v in row.only_with.values if other.choices and v not in other.choices]
        if unknown:
            return f"only_with values {unknown} are not choices of {other.name!r}"
    for check in row.checks:
        missing = [n for n in check.needs if n not in every]
        if missing:
            return f"check {check.run.__name__!r} needs unknown fields {missing}"
    return None


def _fits(kind: str, value: Any) -> bool:
    if kind == "boolean":
        return isinstance(value, bool)
    if kind in ("integer", "number"):
        ok = (int,) if kind == "integer" else (int, float)
        return isinstance(value, ok) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    return isinstance(value, Mapping)


# --- parsing ------------------------------------------------------------------------------------------

_ABSENT = object()


def parse(
    event: Any, rows: Sequence[Field], config: Any, *, unknown: str = "a known request field"
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(values, sent)`` of ``event`` checked against ``rows`` in their order: every row's value (default filled
    in) and the canonical form of the ``fingerprint`` rows sent (not ``null``). ``unknown`` is the expectation
    of a key that is no row's name (its refusal lists the rows).

    Raises:
        FieldError: the first bad field (or key).
    """
    if not isinstance(event, Mapping):
        raise FieldError("", type(event).__name__, "a JSON object with the request fields")
    known = names(rows)
    for key in event:
        if not isinstance(key, str) or key not in known:
            raise FieldError(str(key), event[key], f"{unknown} (one of: {', '.join(known)})")
    values: dict[str, Any] = {}
    sent: dict[str, Any] = {}
    pending = [(row.name, check) for row in rows for check in row.checks]
    for row in rows:
        value, canonical = _parse_field(row, event.get(row.name), values, config)
        values[row.name] = value
        if row.fingerprint and canonical is not _ABSENT:
            sent[row.name] = canonical
        pending = _run_ready_checks(pending, values, config)
    return values, sent


def _run_ready_checks(pending: list[tuple[str, Check]], values: dict[str, Any], config: Any) -> list[tuple[str, Check]]:
    """Run the checks whose row and needs are parsed (their completions replace values); the rest wait."""
    waiting = []
    for name, check in pending:
        if name in values and all(n in values for n in check.needs):
            values.update(check.run(values, config) or {})
        else:
            waiting.append((name, check))
    return waiting


def _parse_field(row: Field, raw: Any, values: Mapping[str, Any], config: Any) -> tuple[Any, Any]:
    """``(value, canonical form for the fingerprint, or _ABSENT)`` of one row. Raises FieldError."""
    if row.type == "object":
        if raw is None:
            raw = ABSENT_OBJECT
        if not isinstance(raw, Mapping) or row.parse is None:
            raise FieldError(row.name, raw, row.expected_text())
        value, canonical = row.parse(raw, config)
        return value, (canonical if canonical else _ABSENT)
    if raw is None or (row.blank_is_absent and raw == ""):
        return (row.default(config) if callable(row.default) else row.default), _ABSENT
    value = _typed(row, raw)
    if row.only_with is not None:
        other = values[row.only_with.field]
        if other not in row.only_with.values:
            allowed = " or ".join(row.only_with.values)
            raise FieldError(
                row.name, raw, f"no {row.only_with.noun} with {row.only_with.field} {other!r} ({allowed} only)"
            )
    if not _within(row, value):
        raise FieldError(row.name, value if row.type in ("integer", "string") else raw, row.expected_text())
    return row.parse(value, config) if row.parse is not None else (value, value)


def _typed(row: Field, raw: Any) -> Any:
    """``raw`` as the row's JSON type (an integral number as an integer). Raises FieldError."""
    value = int(raw) if row.type == "integer" and isinstance(raw, float) and raw.is_integer() else raw
    kinds: dict[str, tuple[type, ...]] = {"string": (str,), "boolean": (bool,), "integer": (int,)}
    fits = isinstance(value, kinds.get(row.type, (int, float))) and (row.type == "boolean") == isinstance(value, bool)
    if not fits:
        raise FieldError(row.name, value, row.expected_text())
    if row.type != "number":
        return value
    try:
        return float(value)
    except OverflowError:  # an integer beyond a float's range
        raise FieldError(row.name, raw, row.expected_text()) from None


def _within(row: Field, value: Any) -> bool:
    """Whether a typed scalar meets the row's range, choices, pattern and SageMaker rule."""
    if row.type in ("integer", "number"):
        low, high = row.bounds()
        fine = isinstance(value, int) or math.isfinite(value)  # math.isfinite(10**400) overflows
        if fine and low is not None:
            fine = value > low if row.exclusive_minimum else value >= low
        if fine and high is not None:
            fine = value <= high
        if fine and row.unit in SECONDS_PER_UNIT:
            fine = round(value * SECONDS_PER_UNIT[row.unit]) >= 1  # SageMaker counts whole seconds
        return fine
    if row.type == "string":
        rule = row.string_rule()
        options = row.options()
        return (
            (not options or value in options)
            and (row.pattern is None or re.fullmatch(row.pattern, value) is not None)
            and (rule is None or rule.accepts(value))
        )
    return True
