"""CloudFormation values as readable text: the one renderer of intrinsic functions.

A synthesized template names what the stack creates through intrinsic
functions (``{"Ref": "Bucket1"}``, ``{"Fn::GetAtt": ["Role1", "Arn"]}``,
``{"Fn::Join": ...}``, ``{"Fn::Sub": ...}``). Three readers turn them into
text, each with its own notation, and all use :func:`render`:

* cdk-nag acknowledgements (:mod:`platform_constructs.acknowledgements`):
  a granular finding names a resource as cdk-nag 3 flattens it,
  ``<LogicalId>`` / ``<LogicalId.Attr>`` (:data:`ANGLE`; cdk-nag 3.0.2,
  ``lib/utils/flatten-cfn-reference.js``, which handles ``Ref``,
  ``Fn::GetAtt``, ``Fn::Join`` and ``Fn::Sub`` and writes anything else as
  JSON, hence :data:`BASIC_FUNCTIONS` and no fallback there: an
  acknowledgement that cdk-nag would not match fails the synth early);
* ``trainctl synth-summary``: stack outputs, the same notation, every
  function this module knows, anything else as compact JSON;
* ``trainctl dashboard``: a dashboard body as the deployed stack will hold
  it, with ``${LogicalId}`` placeholders (:data:`SUB`, ``Fn::Sub``'s own
  syntax) and alarm ARNs spelled out (the ``get_att`` knob).

Pure: no CDK, no third-party import, so the CLI and the tests import it
without a JavaScript runtime. Semantics of the functions: AWS CloudFormation
User Guide, "Intrinsic function reference" (``Fn::Join``, ``Fn::Sub``,
``Fn::Select``, ``Fn::Split``, ``Fn::GetAtt``, ``Ref``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALL_FUNCTIONS",
    "ANGLE",
    "BASIC_FUNCTIONS",
    "SUB",
    "Notation",
    "compact_json",
    "render",
]


@dataclass(frozen=True)
class Notation:
    """How a reference to a resource, attribute or pseudo parameter is written.

    Attributes:
        open: text before the referenced name, e.g. ``"<"``.
        close: text after it, e.g. ``">"``.
    """

    open: str
    close: str

    def reference(self, name: str) -> str:
        """``name`` between :attr:`open` and :attr:`close`, e.g. ``<Bucket1.Arn>``."""
        return f"{self.open}{name}{self.close}"


ANGLE = Notation("<", ">")
"""``<LogicalId>``, ``<LogicalId.Attr>``, ``<AWS::Region>``: cdk-nag's notation for granular findings."""

SUB = Notation("${", "}")
"""``${LogicalId}``, ``${LogicalId.Attr}``, ``${AWS::Region}``: ``Fn::Sub``'s own syntax."""

BASIC_FUNCTIONS: tuple[str, ...] = ("Ref", "Fn::GetAtt", "Fn::Join", "Fn::Sub")
"""The functions cdk-nag 3 flattens itself (besides ``Fn::ImportValue``, which CDK does not
emit for resources of its own stack)."""

GetAttRenderer = Callable[[str, str], str | None]
"""``(logical id, attribute) -> text``, or ``None`` to write the reference in the notation."""

_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")


def compact_json(value: Any) -> str:
    """``value`` as JSON without spaces (``JSON.stringify``'s form): a fallback for :func:`render`."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class _Renderer:
    """:func:`render`'s options, and a method per intrinsic function: its text, or ``None`` when its argument
    is malformed (then ``fallback``)."""

    notation: Notation
    get_att: GetAttRenderer | None
    functions: Collection[str]
    fallback: Callable[[Any], str] | None

    def visit(self, node: Any) -> str:
        if isinstance(node, str):
            return node
        if isinstance(node, (bool, int, float)):
            return json.dumps(node)
        if isinstance(node, dict) and len(node) == 1:
            ((function, argument),) = node.items()
            method = _FUNCTIONS.get(function) if function in self.functions else None
            text = None if method is None else method(self, argument)
            if text is not None:
                return text
        if self.fallback is not None:
            return self.fallback(node)
        expected = ", ".join(self.functions)
        raise ValueError(f"cannot render {node!r}; expected a string, a number, or one of {expected}")

    def reference(self, name: str) -> str:
        logical_id, dot, attribute = name.partition(".")
        if dot and self.get_att is not None:
            custom = self.get_att(logical_id, attribute)
            if custom is not None:
                return custom
        return self.notation.reference(name)

    def ref(self, argument: Any) -> str | None:
        return self.notation.reference(argument) if isinstance(argument, str) else None

    def getatt(self, argument: Any) -> str | None:
        if isinstance(argument, str) and "." in argument:
            return self.reference(argument)
        return self.reference(f"{argument[0]}.{argument[1]}") if _is_pair(argument, str, str) else None

    def join(self, argument: Any) -> str | None:
        return argument[0].join(self.visit(part) for part in argument[1]) if _is_pair(argument, str, list) else None

    def sub(self, argument: Any) -> str | None:
        if isinstance(argument, str):
            argument = [argument, {}]
        if not _is_pair(argument, str, dict):
            return None
        template, variables = argument

        def variable(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"  # ${!Literal} is written as the literal ${Literal}
            name = name.strip()
            return self.visit(variables[name]) if name in variables else self.reference(name)

        return _SUB_VARIABLE.sub(variable, template)

    def select(self, argument: Any) -> str | None:
        if not (isinstance(argument, list) and len(argument) == 2):
            return None
        index, items = argument
        if isinstance(index, str) and index.isdigit():
            index = int(index)  # Fn::Select takes the index as an integer or a string of one
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            return None
        if not isinstance(items, list):
            return self.notation.reference(f"select {index} of {self.visit(items)}")
        return self.visit(items[index]) if index < len(items) else None

    def split(self, argument: Any) -> str | None:
        pair = _is_pair(argument, str, object)
        return self.notation.reference(f"split {self.visit(argument[1])} on {argument[0]!r}") if pair else None


_FUNCTIONS: dict[str, Callable[[_Renderer, Any], str | None]] = {
    "Ref": _Renderer.ref,
    "Fn::GetAtt": _Renderer.getatt,
    "Fn::Join": _Renderer.join,
    "Fn::Sub": _Renderer.sub,
    "Fn::Select": _Renderer.select,
    "Fn::Split": _Renderer.split,
}

ALL_FUNCTIONS: tuple[str, ...] = tuple(_FUNCTIONS)
"""Every function :func:`render` knows: :data:`BASIC_FUNCTIONS`, ``Fn::Select`` and ``Fn::Split``."""


def render(
    value: Any,
    *,
    notation: Notation = ANGLE,
    get_att: GetAttRenderer | None = None,
    functions: Collection[str] = ALL_FUNCTIONS,
    fallback: Callable[[Any], str] | None = None,
) -> str:
    """A CloudFormation value (as in a template's JSON) as text.

    Strings are returned as they are, numbers and booleans in their JSON
    spelling. ``Ref`` and ``Fn::GetAtt`` (list or ``"Id.Attr"`` form) become
    ``notation`` references; ``Fn::Join`` joins its rendered parts;
    ``Fn::Sub`` writes its template with each ``${Name}`` rendered as that
    variable (from its map, else as a ``Ref`` / ``Fn::GetAtt`` of ``Name``)
    and each ``${!Literal}`` as the literal ``${Literal}``; ``Fn::Select`` of
    a literal list picks the element, of anything else it is written
    ``<select i of ...>``; ``Fn::Split`` is written ``<split ... on 'sep'>``
    (both in ``notation``).

    Args:
        value: the value: a string, number, boolean or one-key intrinsic mapping.
        notation: how references are written. Default: :data:`ANGLE` (``<Id.Attr>``).
        get_att: renders particular attributes another way (e.g. an alarm's
            ``Arn`` as the ARN it will have); ``None`` from it, or no
            ``get_att``, writes the reference in ``notation``. Applies to
            ``Fn::GetAtt`` and to ``${Id.Attr}`` inside ``Fn::Sub``.
            Default: every attribute is written in ``notation``.
        functions: the intrinsic functions rendered; any other (and any value
            of another shape: a list, ``null``, a malformed function) goes to
            ``fallback``. Default: :data:`ALL_FUNCTIONS`.
        fallback: renders what ``functions`` do not cover, at whatever depth it
            occurs (e.g. :func:`compact_json`). Default: such a value raises.

    Raises:
        ValueError: a value outside ``functions`` (or malformed) and no ``fallback``;
            the message names the value and the functions expected.
    """
    return _Renderer(notation, get_att, functions, fallback).visit(value)


def _is_pair(argument: Any, first: type, second: type) -> bool:
    return (
        isinstance(argument, list) and len(argument) == 2
        and isinstance(argument[0], first) and isinstance(argument[1], second)
    )  # fmt: skip
