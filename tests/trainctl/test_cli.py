"""The trainctl entry point: every subcommand registers, and the shared -c flag parses strictly."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from trainctl.cdk_context import context_item
from trainctl.cli import COMMANDS, build_parser


def test_every_listed_subcommand_is_registered():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(sub.choices) == sorted(COMMANDS)


def test_help_does_not_import_heavy_modules():
    # `trainctl --help` must stay fast: no torch, aws_cdk or boto3 at import time.
    code = (
        "import sys; from trainctl.cli import build_parser; build_parser();"
        "print(','.join(m for m in ('torch', 'aws_cdk', 'boto3', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("removalPolicy=destroy", ("removalPolicy", "destroy")),
        ('trainingPlanArns=["a=b"]', ("trainingPlanArns", '["a=b"]')),
        ("key=", ("key", "")),
    ],
)
def test_context_item_parses_key_value(text, expected):
    assert context_item(text) == expected


@pytest.mark.parametrize("text", ["removalPolicy", "=destroy", " =x"])
def test_context_item_rejects_malformed(text):
    with pytest.raises(argparse.ArgumentTypeError, match="expected KEY=VALUE"):
        context_item(text)
