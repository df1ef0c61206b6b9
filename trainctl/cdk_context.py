"""The ``-c/--context KEY=VALUE`` flag shared by the commands that synthesize the CDK app.

Values stay strings, exactly as ``cdk synth -c`` passes them; ``stacks.config``
parses and validates them (lists as JSON or comma-separated).
"""

from __future__ import annotations

import argparse


def context_item(text: str) -> tuple[str, str]:
    """argparse type: ``"KEY=VALUE"`` -> ``(KEY, VALUE)``.

    Raises:
        argparse.ArgumentTypeError: no ``=`` or an empty key.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. removalPolicy=destroy")
    return key.strip(), value


def add_context_argument(parser: argparse.ArgumentParser, example: str) -> None:
    """Add the repeatable ``-c/--context KEY=VALUE`` flag (parsed into ``args.context``: a list of pairs)."""
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        type=context_item,
        default=[],
        metavar="KEY=VALUE",
        help=f"context value overriding cdk.json (repeatable), e.g. -c {example}",
    )
