"""The request's JSON Schema and the README's request table, rendered from the request's rows.

The submitter's request is one table (:data:`.request.FIELDS`, rows of :class:`.fields.Field` whose
SageMaker limits come from botocore's model). This module renders those rows for people and clients,
never for parsing (the function does not import it, so it is not in its deployment package):

* :func:`request_json_schema` -- JSON Schema (draft 2020-12) of the request;
* :func:`readme_table` -- the README's request table (Markdown), one row per field;
* :func:`render_readme` -- a README with the table between its markers replaced;
* ``python -m platform_constructs.submitter.runtime.request_schema --readme [PATH] [--check]`` rewrites
  (or checks) the README's table; ``--schema`` prints the JSON Schema (:func:`main`).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from platform_spec.files import atomic_write_text

from . import request
from .fields import Field, whole_string_pattern

__all__ = [
    "README_BEGIN",
    "README_END",
    "accepted_markdown",
    "main",
    "readme_table",
    "render_readme",
    "request_json_schema",
]

PROG = "python -m platform_constructs.submitter.runtime.request_schema"
README_BEGIN = "<!-- request-fields:begin -->"
README_END = "<!-- request-fields:end -->"
"""The README's markers around the generated request table."""


def request_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the request, generated from the table, for the README and clients.

    SageMaker's limits are filled in from botocore's model; a field accepted only with another
    field's values is a ``dependentSchemas`` entry. Rules that need the deployment (allowed
    instance types, the data bucket, the configured plans) and the cross-field checks are
    described in the ``description`` fields.
    """
    rows = {row.name: row for row in request.FIELDS}
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Training job submission request",
        "type": "object",
        "properties": {name: _field_schema(row) for name, row in rows.items()},
        "additionalProperties": False,
    }
    dependent = {}
    for row in rows.values():
        if row.only_with is not None:
            other = rows[row.only_with.field]
            condition: dict[str, Any] = {"properties": {other.name: {"enum": list(row.only_with.values)}}}
            if other.default not in row.only_with.values:
                condition["required"] = [other.name]  # absent, it takes its default, which is not allowed
            dependent[row.name] = condition
    if dependent:
        schema["dependentSchemas"] = dependent
    return schema


def _field_schema(row: Field) -> dict[str, Any]:
    out: dict[str, Any] = {"type": row.type}
    if row.options():
        out["enum"] = list(row.options())
    if row.type in ("integer", "number"):
        low, high = row.bounds()
        if low is not None:
            out["exclusiveMinimum" if row.exclusive_minimum else "minimum"] = low
        if high is not None:
            out["maximum"] = high
    if row.type == "string":
        out.update(_string_schema(row))
    if row.default is not None and not callable(row.default):
        out["default"] = row.default
    out.update(row.schema() if callable(row.schema) else row.schema)
    out["description"] = row.help + (f"; {row.notes}" if row.notes else "")
    return out


def _string_schema(row: Field) -> dict[str, Any]:
    """A string row's lengths and pattern (its own, else SageMaker's when ECMA-262 can say it)."""
    out: dict[str, Any] = {}
    rule = row.string_rule()
    if rule is not None:
        out["minLength"] = rule.min_length
        if rule.max_length is not None:
            out["maxLength"] = rule.max_length
    if row.pattern is not None:
        out["pattern"] = whole_string_pattern(row.pattern)
    elif rule is not None and rule.pattern is not None and rule.ecma_pattern() is not None:
        out["pattern"] = whole_string_pattern(rule.pattern)
    return out


def accepted_markdown(row: Field) -> str:
    """The README's "accepted" cell of ``row``: its expectation, its parser's limits, ``only_with`` and notes."""
    parts = [row.expected_text()]
    if row.limits is not None:
        parts.append(row.limits())
    if row.only_with is not None:
        parts.append(f"only with `{row.only_with.field}` " + " or ".join(f"`{v}`" for v in row.only_with.values))
    if row.notes:
        parts.append(row.notes)
    return "; ".join(parts)


def readme_table() -> str:
    """The README's request table (Markdown), one row per field of the table, in its order."""
    lines = ["| field | default | meaning | accepted |", "|---|---|---|---|"]
    for row in request.FIELDS:
        cells = (f"`{row.name}`", row.default_markdown(), row.help, accepted_markdown(row))
        lines.append("| " + " | ".join(_markdown_cell(cell) for cell in cells) + " |")
    return "\n".join(lines) + "\n"


_HTML_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")


def _markdown_cell(text: str) -> str:
    """``text`` as one Markdown table cell: pipes escaped, and outside code spans a ``<`` that would
    open an HTML tag (``<region>``)."""
    pieces = text.replace("\n", " ").split("`")
    for i in range(0, len(pieces), 2):  # even pieces are outside code spans
        pieces[i] = _HTML_TAG_START.sub(r"\\<", pieces[i])
    return "`".join(pieces).replace("|", "\\|")


def render_readme(text: str) -> str:
    """``text`` (a README) with the request table between the markers replaced by :func:`readme_table`.

    Raises:
        ValueError: the markers (:data:`README_BEGIN` / :data:`README_END`)
            are missing, repeated or out of order; nothing is replaced.
    """
    begin, end = README_BEGIN, README_END
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"expected one {begin!r} line before one {end!r} line around the request table")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{readme_table()}{end}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m platform_constructs.submitter.runtime.request_schema``: regenerate or check the README's
    request table, or print the request's JSON Schema. Exit status: 0 done (or up to date),
    1 ``--check`` found the table out of date, 2 the README is unreadable or has no markers (nothing
    is written then; the table is replaced atomically: :func:`platform_spec.files.atomic_write_text`)."""
    default = Path(__file__).resolve().parents[3] / "README.md"
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The submitter's request table (runtime/request.py) as README Markdown or JSON Schema.",
    )
    parser.add_argument(
        "--readme",
        nargs="?",
        const=str(default),
        metavar="PATH",
        help=f"rewrite the request table between the markers of PATH (default: {default})",
    )
    parser.add_argument(
        "--check", action="store_true", help="with --readme: change nothing; exit 1 when the table is out of date"
    )
    parser.add_argument("--schema", action="store_true", help="print the request's JSON Schema")
    args = parser.parse_args(argv)
    if args.schema:
        print(json.dumps(request_json_schema(), indent=2))
    if args.readme is None:
        if not args.schema:
            parser.print_usage(sys.stderr)
            return 2
        return 0
    path = Path(args.readme)
    try:
        text = path.read_text(encoding="utf-8")
        updated = render_readme(text)
    except (OSError, ValueError) as exc:
        print(f"{parser.prog}: {path}: {exc}", file=sys.stderr)
        return 2
    if updated == text:
        print(f"{path}: the request table is up to date")
        return 0
    if args.check:
        print(f"{path}: the request table is out of date; run {parser.prog} --readme", file=sys.stderr)
        return 1
    atomic_write_text(path, updated)  # a reader (or a kill mid-write) never sees half a README
    print(f"{path}: request table rewritten")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
