"""``CreateTrainingJob``'s rules as botocore's SageMaker service model states them (their one home).

botocore ships the SageMaker API model (``botocore/data/sagemaker/<version>/service-2.json``,
the same file the boto3 clients are built from). Its shapes carry what SageMaker
validates: lengths and counts (``min``/``max``), patterns and enums. The
submitter reads its limits from there instead of copying numbers, so a field
this module checks is accepted exactly when SageMaker accepts it:

* **patterns match the whole string** (SageMaker reports them anchored,
  ``^...``; ``re.fullmatch`` here, so ``"name\\n"`` is refused), compiled with
  Java's default semantics, in which the model is written: ``.`` excludes
  Java's line terminators and ``\\s \\d \\w`` are ASCII; ``\\p{L}``-style
  Unicode categories (tag keys and values) are matched by category with
  :mod:`unicodedata`, and ``\\p{Alnum}``-style POSIX classes as Java's ASCII
  ones;
* **lengths** are counted in code points (Python ``len``), as botocore's
  parameter validation counts them.

The model is loaded lazily and once per process, through :func:`shared_loader`,
the botocore data loader the submitter's boto3 clients are also created with
(:meth:`.aws.Clients.create`): after the clients exist, reading a rule costs no
second parse of the 400 kB model. Importing this module loads nothing.

Example::

    rule = string_rule("TrainingJobName")
    rule.accepts("gpt-1b-run-1")            # True
    rule.accepts("a" + "-" * 98 + "b")      # False: 100 characters > max 63
    training_instance_types()               # TrainingInstanceType's enum
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # botocore is imported on first use (cold start)
    from botocore.loaders import Loader
    from botocore.model import ServiceModel, Shape

SERVICE = "sagemaker"
OPERATION = "CreateTrainingJob"

_JAVA_DOT = "[^\\n\\r\\u0085\\u2028\\u2029]"
"""Java's ``.`` without DOTALL: any character but its line terminators (java.util.regex.Pattern)."""

_POSIX_CLASSES = {  # java.util.regex.Pattern, POSIX character classes (US-ASCII only)
    "Lower": "a-z",
    "Upper": "A-Z",
    "Alpha": "a-zA-Z",
    "Digit": "0-9",
    "Alnum": "a-zA-Z0-9",
    "XDigit": "0-9a-fA-F",
    "Space": " \\t\\n\\x0b\\f\\r",
}
_CATEGORY_RE = re.compile(r"[A-Z][a-z]?")
_PLACEHOLDER_BASE = 0xE000  # Unicode private use area: one placeholder per category used
_NEVER = "\uf8ff"  # private use too; stands in for input characters equal to a placeholder


@functools.lru_cache(maxsize=1)
def shared_loader() -> Loader:
    """The botocore data loader shared by the submitter's clients and this module (one per process)."""
    from botocore.loaders import create_loader

    return create_loader()


@functools.lru_cache(maxsize=4)
def service_model(service: str = SERVICE) -> ServiceModel:
    """botocore's ``ServiceModel`` for ``service``, from :func:`shared_loader` (cached)."""
    from botocore.model import ServiceModel

    return ServiceModel(shared_loader().load_service_model(service, "service-2"), service_name=service)


@functools.lru_cache(maxsize=128)
def shape(path: str, operation: str = OPERATION) -> Shape:
    """The model's shape at ``path`` in ``operation``'s input.

    ``path`` is dotted member names; ``member`` steps into a list, ``key`` and
    ``value`` into a map: ``"Tags.member.Key"``, ``"HyperParameters.value"``,
    ``"InputDataConfig.member.DataSource.S3DataSource.S3Uri"``.

    Raises:
        KeyError: no such member (the model changed: the message names the path).
    """
    from botocore.model import ListShape, MapShape, StructureShape

    current: Shape | None = service_model().operation_model(operation).input_shape
    if current is None:
        raise KeyError(f"{operation} has no input in botocore's SageMaker model")
    for part in path.split("."):
        if isinstance(current, ListShape) and part == "member":
            current = current.member
        elif isinstance(current, MapShape) and part in ("key", "value"):
            current = current.key if part == "key" else current.value
        elif isinstance(current, StructureShape) and part in current.members:
            current = current.members[part]
        else:
            raise KeyError(f"{operation} input has no member {path!r} (at {part!r}) in botocore's SageMaker model")
    return current


def bounds(path: str, operation: str = OPERATION) -> tuple[int | None, int | None]:
    """``(min, max)`` of the shape at ``path``: a number's range, a string's length, a list's or map's size."""
    meta = shape(path, operation).metadata
    return meta.get("min"), meta.get("max")


def training_instance_types() -> tuple[str, ...]:
    """The instance types ``CreateTrainingJob`` accepts: the ``TrainingInstanceType`` enum
    (``ResourceConfig.InstanceType``)."""
    return string_rule("ResourceConfig.InstanceType").enum


@dataclass(frozen=True)
class StringRule:
    """A string shape's constraints, checked as SageMaker checks them (see the module docstring).

    Attributes:
        name: the model's shape name, e.g. ``TrainingJobName``.
        min_length: fewest characters (code points).
        max_length: most characters, or ``None``.
        pattern: the model's pattern (Java syntax, matched whole), or ``None``.
        enum: the values the model allows (``()``: any).
    """

    name: str
    min_length: int = 0
    max_length: int | None = None
    pattern: str | None = None
    enum: tuple[str, ...] = ()

    def accepts(self, value: object) -> bool:
        """Whether SageMaker accepts ``value`` for this shape.

        Raises:
            ValueError: the model's pattern uses Java syntax this module does not
                translate (a test holds every rule the submitter uses to be translatable).
        """
        if not isinstance(value, str) or len(value) < self.min_length:
            return False
        if (self.max_length is not None and len(value) > self.max_length) or (self.enum and value not in self.enum):
            return False
        if self.pattern is None:
            return True
        matcher = compile_pattern(self.pattern)
        if matcher is None:
            raise ValueError(f"{self.name}: cannot translate the model's pattern {self.pattern!r}")
        return matcher(value)

    def length_text(self) -> str:
        """``"1-63 characters"``, ``"at most 256 characters"``, ``"1 or more characters"``."""
        if self.max_length is None:
            return f"{self.min_length} or more characters"
        if self.min_length == 0:
            return f"at most {self.max_length} characters"
        return f"{self.min_length}-{self.max_length} characters"

    def expected(self) -> str:
        """What the rule wants, for refusal messages: length and pattern, with the shape named."""
        pattern = f" matching {self.pattern}" if self.pattern and self.pattern not in (".*", "[\\S\\s]*") else ""
        return f"{self.length_text()}{pattern} (SageMaker's {self.name})"

    def regex(self) -> re.Pattern[str]:
        """A compiled Python regex equal to :meth:`accepts` with ``match`` *or* ``fullmatch``
        (length look-ahead, ``\\Z`` anchor).

        Raises:
            ValueError: the pattern uses ``\\p{...}`` categories (no ``re`` equivalent; use :meth:`accepts`).
        """
        body, categories = _translate(self.pattern) if self.pattern is not None else ("(?s:.*)", ())
        if categories:
            raise ValueError(f"{self.name}: the pattern {self.pattern!r} uses Unicode categories; use accepts()")
        most = "" if self.max_length is None else str(self.max_length)
        return re.compile(f"(?=(?s:.){{{self.min_length},{most}}}\\Z)(?:{body})\\Z", re.ASCII)

    def ecma_pattern(self) -> str | None:
        """The pattern anchored for JSON Schema (ECMA-262), or ``None`` when it uses ``\\p{...}``."""
        if self.pattern is None or "\\p{" in self.pattern or "\\P{" in self.pattern:
            return None
        return f"^(?:{self.pattern})$"


@functools.lru_cache(maxsize=64)
def string_rule(path: str, operation: str = OPERATION) -> StringRule:
    """The :class:`StringRule` of the string shape at ``path`` (see :func:`shape` for paths).

    Raises:
        KeyError: no such member. ValueError: the member is not a string.
    """
    found = shape(path, operation)
    if found.type_name != "string":
        raise ValueError(f"{operation}.{path} is a {found.type_name} in botocore's SageMaker model, not a string")
    meta = found.metadata
    return StringRule(
        found.name, int(meta.get("min", 0)), meta.get("max"), meta.get("pattern"), tuple(meta.get("enum", ()))
    )


@functools.lru_cache(maxsize=16)
def named_string_rule(name: str, service: str = SERVICE) -> StringRule:
    """The :class:`StringRule` of the string shape named ``name`` in botocore's model of ``service``: for a
    string no ``CreateTrainingJob`` input holds (``AvailabilityZone``, of ``DescribeTrainingPlan``'s answer)
    or another service's (``fsx``'s ``LustreFileSystemMountName``).

    Raises:
        botocore.exceptions.NoShapeFoundError: no such shape. ValueError: the shape is not a string.
    """
    found = service_model(service).shape_for(name)
    if found.type_name != "string":
        raise ValueError(f"{service}'s {name} is a {found.type_name} in botocore's model, not a string")
    meta = found.metadata
    return StringRule(
        found.name, int(meta.get("min", 0)), meta.get("max"), meta.get("pattern"), tuple(meta.get("enum", ()))
    )


# --- Java patterns in Python ------------------------------------------------------------------


@functools.lru_cache(maxsize=256)
def compile_pattern(pattern: str) -> Callable[[str], bool] | None:
    """A whole-string matcher for a model pattern (Java syntax), or ``None`` when it cannot be translated.

    Translated: ``.`` (Java's: no line terminators), ``\\s \\S \\d \\D \\w \\W``
    (ASCII, as Java's defaults), ``\\p{Alnum}``-style POSIX classes (ASCII),
    and Unicode general categories ``\\p{L}``, ``\\p{Lu}``, ``\\p{N}``, ``\\p{Z}`` ...
    Categories are matched by rewriting each input character of a category the
    pattern names into a private-use placeholder that the translated pattern
    holds in place of ``\\p{...}``; this is exact when no literal character of
    the pattern belongs to such a category (checked; otherwise ``None``).
    Not translated (``None``): ``\\P{...}``, class intersections ``&&``,
    nested classes, and possessive quantifiers.
    """
    try:
        translated, categories = _translate(pattern)
    except ValueError:
        return None
    try:
        compiled = re.compile(translated, re.ASCII)
    except re.error:
        return None
    if not categories:
        return lambda value: compiled.fullmatch(value) is not None

    def matcher(value: str) -> bool:
        return compiled.fullmatch(_rewrite(value, categories)) is not None

    return matcher


def _rewrite(value: str, categories: tuple[str, ...]) -> str:
    out = []
    for char in value:
        code = ord(char)
        if _PLACEHOLDER_BASE <= code < _PLACEHOLDER_BASE + len(categories):
            out.append(_NEVER)  # a private-use character in the input is not a category placeholder
            continue
        category = unicodedata.category(char)
        for index, wanted in enumerate(categories):
            if category.startswith(wanted):
                out.append(chr(_PLACEHOLDER_BASE + index))
                break
        else:
            out.append(char)
    return "".join(out)


_TOKEN_RE = re.compile(r"\\[pP](?:\{[^}]*\})?|\\[\s\S]|&&|\[\^?|[\s\S]")
"""One unit of a Java pattern: a ``\\p{...}`` class, an escape, ``&&``, a class opening, or one character."""


def _translate(pattern: str) -> tuple[str, tuple[str, ...]]:
    """Java pattern -> (Python pattern, Unicode categories used). Raises ValueError when unsupported."""
    categories: list[str] = []
    literals: list[str] = []
    out: list[str] = []
    in_class = False
    for match in _TOKEN_RE.finditer(pattern):
        token, at = match.group(), match.start()
        if token == "\\":
            raise ValueError("trailing backslash")
        if token[0] == "\\":
            out.append(_escape(token, in_class, categories, literals))
        elif in_class:
            if token[0] == "[" or token == "&&":
                raise ValueError("nested class or intersection")
            in_class = token != "]"
            literals.extend(c for c in token if c not in "^-]")
            out.append(token)
        else:
            in_class = token[0] == "["
            out.append(_outside_class(token, pattern, at, literals))
    if in_class:
        raise ValueError("unterminated class")
    for literal in literals:
        category = unicodedata.category(literal)
        if any(category.startswith(c) for c in categories):
            raise ValueError(f"literal {literal!r} is in a category the pattern also names")
    return "".join(out), tuple(categories)


def _escape(token: str, in_class: bool, categories: list[str], literals: list[str]) -> str:
    """An escape: ``\\p{Name}`` (a POSIX class, ASCII, or a Unicode category: a placeholder), else as written."""
    if token[1] not in "pP":
        if token[1].isalnum() and token[1] not in "sSdDwWtnrfe0xu":
            raise ValueError(f"escape {token}")
        if not token[1].isalnum():
            literals.append(token[1])
        return token
    if token[1] == "P" or not token.endswith("}") or token[2:3] != "{":
        raise ValueError("negated or malformed \\p class")
    name = token[3:-1]
    if name in _POSIX_CLASSES:
        body = _POSIX_CLASSES[name]
    elif not _CATEGORY_RE.fullmatch(name):
        raise ValueError(f"unknown class \\p{{{name}}}")
    elif any(name.startswith(c) or c.startswith(name) for c in categories if c != name):
        raise ValueError("overlapping categories")
    else:
        if name not in categories:
            categories.append(name)
        body = chr(_PLACEHOLDER_BASE + categories.index(name))
    return body if in_class else f"[{body}]"


def _outside_class(token: str, pattern: str, at: int, literals: list[str]) -> str:
    """A token outside a class: ``.`` is Java's, a possessive quantifier is refused, the rest as written."""
    if token == ".":
        return _JAVA_DOT
    if token == "+" and at > 0 and pattern[at - 1] in "*+?}" and pattern[at - 2 : at - 1] != "\\":
        raise ValueError("possessive quantifier")
    if token[0] != "[":
        literals.extend(c for c in token if c not in "()|*+?{},^$" and not c.isdigit())
    return token
