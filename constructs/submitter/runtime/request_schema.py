"""The request's JSON Schema and the README's request table, rendered from the request field table.

The submitter's request is one table (:data:`platform_spec.request_fields.FIELDS`), bound to
botocore's model and the runtime's named rules by :mod:`.request` (:func:`.request.bound_rule`). This
module renders those same bound rows for people and clients, never for parsing (the function does not
import it, so it is not in its deployment package):

* :func:`request_json_schema` -- JSON Schema (draft 2020-12) of the request;
* :func:`readme_table` -- the README's request table (Markdown), one row per field;
* :func:`render_readme` -- a README with the table between its markers replaced;
* ``python -m platform_constructs.submitter.runtime.request_schema --readme [PATH] [--check]`` rewrites
  (or checks) the README's table; ``--schema`` prints the JSON Schema (:func:`main`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from platform_spec import request_fields
from platform_spec.files import atomic_write_text
from platform_spec.request_fields import RequestField

from .request import bound_rule, expected_text, field_choices, field_range, whole_string_pattern

__all__ = ["accepted_markdown", "main", "readme_table", "render_readme", "request_json_schema"]

PROG = "python -m platform_constructs.submitter.runtime.request_schema"


def request_json_schema() -> dict[str, Any]:
    """JSON Schema (draft 2020-12) of the request, generated from the table, for the README and clients.

    SageMaker's limits are filled in from botocore's model; a field accepted only with another
    field's values is a ``dependentSchemas`` entry. Rules that need the deployment (allowed
    instance types, the data bucket, the configured plans) and the cross-field checks are
    described in the ``description`` fields.
    """
    rows = request_fields.FIELDS
    properties = {row.name: _field_schema(row) for row in rows}
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Training job submission request",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    dependent = {}
    for row in rows:
        if row.only_with is not None:
            other = request_fields.get_field(row.only_with.field, rows)
            condition: dict[str, Any] = {"properties": {other.name: {"enum": list(row.only_with.values)}}}
            if other.default not in row.only_with.values:
                condition["required"] = [other.name]  # absent, it takes its default, which is not allowed
            dependent[row.name] = condition
    if dependent:
        schema["dependentSchemas"] = dependent
    return schema


def _field_schema(row: RequestField) -> dict[str, Any]:
    rule = bound_rule(row)
    out: dict[str, Any] = {"type": row.type}
    choices = field_choices(row, rule)
    if choices:
        out["enum"] = list(choices)
    if row.type in ("integer", "number"):
        low, high = field_range(row, rule)
        if low is not None:
            out["exclusiveMinimum" if row.exclusive_minimum else "minimum"] = low
        if high is not None:
            out["maximum"] = high
    if row.type == "string":
        string_rule = rule.string_rule() if rule.string_rule is not None else None
        if string_rule is not None:
            out["minLength"] = string_rule.min_length
            if string_rule.max_length is not None:
                out["maxLength"] = string_rule.max_length
        if row.pattern is not None:
            out["pattern"] = whole_string_pattern(row.pattern)
        elif string_rule is not None and string_rule.pattern is not None and string_rule.ecma_pattern() is not None:
            out["pattern"] = whole_string_pattern(string_rule.pattern)
    if row.default is not None:
        out["default"] = row.default
    if rule.schema is not None:
        _merge(out, rule.schema())
    _merge(out, row.schema)
    out["description"] = row.help + (f"; {row.notes}" if row.notes else "")
    return out


def _merge(into: dict[str, Any], extra: Mapping[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = dict(value) if isinstance(value, Mapping) else value


def accepted_markdown(row: RequestField) -> str:
    """The README's "accepted" cell of ``row``: its expectation, bound limits, ``only_with`` and notes."""
    rule = bound_rule(row)
    parts = [expected_text(row, rule)]
    if rule.limits is not None:
        parts.append(rule.limits())
    if row.only_with is not None:
        parts.append(f"only with `{row.only_with.field}` " + " or ".join(f"`{v}`" for v in row.only_with.values))
    if row.notes:
        parts.append(row.notes)
    return "; ".join(parts)


def readme_table() -> str:
    """The README's request table (Markdown), one row per field of the table, in its order."""
    lines = ["| field | default | meaning | accepted |", "|---|---|---|---|"]
    for row in request_fields.FIELDS:
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
        ValueError: the markers (:data:`platform_spec.request_fields.README_BEGIN` / ``README_END``)
            are missing, repeated or out of order; nothing is replaced.
    """
    begin, end = request_fields.README_BEGIN, request_fields.README_END
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
    import argparse
    import sys
    from pathlib import Path

    default = Path(__file__).resolve().parents[3] / "README.md"
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="The submitter's request table (platform_spec/request_fields.py) as README Markdown or JSON Schema.",
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
