"""Check data against botocore's service models (request *and* response shapes).

botocore validates a client's request parameters before sending them
(``parameter_validation``: required members, unknown members, types and
``min``). This module applies the same model to any value - in particular to
*responses*, which botocore never validates - and checks more of it:
``max`` (lengths, counts, ranges), ``enum`` and ``pattern`` (where the model's
regex is one Python understands), and required members of nested structures.

Used by the ``trainctl local-aws`` emulator (every request to and response
from its training-plan operations and ``DescribeTrainingJob`` is checked) and
by tests.

Example::

    errors = validate_output("sagemaker", "DescribeTrainingPlan", response)
    assert not errors, errors
"""

from __future__ import annotations

import datetime as _dt
import functools
import re
from typing import Any

import botocore.session
from botocore.model import OperationModel, Shape
from botocore.validate import ParamValidator


@functools.lru_cache(maxsize=8)
def service_model(service: str) -> Any:
    """botocore's ``ServiceModel`` for ``service`` (cached)."""
    return botocore.session.get_session().get_service_model(service)


def operation_model(service: str, operation: str) -> OperationModel:
    return service_model(service).operation_model(operation)


def validate_input(service: str, operation: str, params: dict[str, Any]) -> list[str]:
    """Problems of ``params`` as the request of ``operation`` (empty list: valid)."""
    shape = operation_model(service, operation).input_shape
    return _validate_both(params, shape)


def validate_output(service: str, operation: str, response: dict[str, Any]) -> list[str]:
    """Problems of ``response`` as the answer of ``operation`` (``ResponseMetadata`` is ignored)."""
    shape = operation_model(service, operation).output_shape
    body = {k: v for k, v in response.items() if k != "ResponseMetadata"}
    return _validate_both(body, shape)


def validate_shape(value: Any, shape: Shape, path: str = "") -> list[str]:
    """Problems of ``value`` against ``shape`` beyond botocore's own checks (see module docstring)."""
    errors: list[str] = []
    _walk(value, shape, path or shape.name, errors)
    return errors


def _validate_both(value: dict[str, Any], shape: Shape | None) -> list[str]:
    if shape is None:
        return [] if not value else [f"expected no members, got {sorted(value)}"]
    report = ParamValidator().validate(value, shape)
    errors = (
        [line.strip() for line in report.generate_report().splitlines() if line.strip()] if report.has_errors() else []
    )
    errors = [e for e in errors if not e.startswith("Invalid type for parameter") or "timestamp" not in e]
    for problem in validate_shape(value, shape):
        if problem not in errors:
            errors.append(problem)
    return errors


@functools.lru_cache(maxsize=2048)
def _compiled(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None  # Java-only syntax (\p{L} ...): left to the service


def _walk(value: Any, shape: Shape, path: str, errors: list[str]) -> None:
    kind = shape.type_name
    if kind in _CHECKS:
        _CHECKS[kind](value, shape, path, errors)
    elif kind in _SCALARS:
        types, label, bounded = _SCALARS[kind]
        # bool is an int to Python, a number to no service model
        if isinstance(value, bool) != (kind == "boolean") or not isinstance(value, types):
            errors.append(f"{path}: expected {label}, got {type(value).__name__}")
        elif bounded:
            _bounds(value, shape.metadata, path, "value", errors)


def _structure(value: Any, shape: Shape, path: str, errors: list[str]) -> None:
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object, got {type(value).__name__}")
        return
    if getattr(shape, "is_document_type", False):
        return
    for name in shape.metadata.get("required", []):
        if name not in value:
            errors.append(f"{path}: missing required member {name}")
    for name, member_value in value.items():
        member = shape.members.get(name)
        if member is None:
            errors.append(f"{path}: unknown member {name}")
        else:
            _walk(member_value, member, f"{path}.{name}", errors)


def _list(value: Any, shape: Shape, path: str, errors: list[str]) -> None:
    if not isinstance(value, (list, tuple)):
        errors.append(f"{path}: expected a list, got {type(value).__name__}")
        return
    _bounds(len(value), shape.metadata, path, "length", errors)
    for i, item in enumerate(value):
        _walk(item, shape.member, f"{path}[{i}]", errors)


def _map(value: Any, shape: Shape, path: str, errors: list[str]) -> None:
    if not isinstance(value, dict):
        errors.append(f"{path}: expected a map, got {type(value).__name__}")
        return
    _bounds(len(value), shape.metadata, path, "entries", errors)
    for k, v in value.items():
        _walk(k, shape.key, f"{path}<key {k!r}>", errors)
        _walk(v, shape.value, f"{path}[{k!r}]", errors)


def _string(value: Any, shape: Shape, path: str, errors: list[str]) -> None:
    meta = shape.metadata
    if not isinstance(value, str):
        errors.append(f"{path}: expected a string, got {type(value).__name__}")
        return
    _bounds(len(value), meta, path, "length", errors)
    enum = meta.get("enum")
    if enum and value not in enum:
        errors.append(f"{path}: {value!r} is not one of {enum}")
    pattern = meta.get("pattern")
    compiled = _compiled(pattern) if pattern else None
    if compiled is not None and compiled.fullmatch(value) is None:
        errors.append(f"{path}: {value!r} does not match pattern {pattern!r}")


_CHECKS = {"structure": _structure, "list": _list, "map": _map, "string": _string}
_SCALARS: dict[str, tuple[tuple[type, ...], str, bool]] = {
    # kind: (Python types accepted, what a message calls it, whether min / max bound the value)
    "integer": ((int,), "an integer", True),
    "long": ((int,), "an integer", True),
    "float": ((int, float), "a number", True),
    "double": ((int, float), "a number", True),
    "boolean": ((bool,), "a boolean", False),
    "timestamp": ((_dt.datetime, int, float, str), "a timestamp", False),
    "blob": ((bytes, bytearray, str), "bytes", False),
}


def _bounds(number: float, meta: dict[str, Any], path: str, what: str, errors: list[str]) -> None:
    if "min" in meta and number < meta["min"]:
        errors.append(f"{path}: {what} {number} < min {meta['min']}")
    if "max" in meta and number > meta["max"]:
        errors.append(f"{path}: {what} {number} > max {meta['max']}")
