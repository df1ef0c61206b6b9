"""Builds the CDK app from configuration: used by ``app.py``, the tests and ``trainctl synth-summary``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from .config import load_config
from .training_platform_stack import TrainingPlatformStack

__all__ = ["CDK_JSON", "cdk_json_context", "create_app"]

CDK_JSON = Path(__file__).resolve().parent.parent / "cdk.json"


def cdk_json_context(path: Path = CDK_JSON) -> dict[str, Any]:
    """The ``context`` block of ``cdk.json`` (feature flags and our keys' defaults)."""
    return dict(json.loads(path.read_text()).get("context", {}))


def create_app(
    *,
    context: Mapping[str, Any] | None = None,
    outdir: str | Path | None = None,
    nag: bool = True,
    environ: Mapping[str, str] | None = None,
    stack_traces: bool | None = None,
) -> tuple[cdk.App, TrainingPlatformStack]:
    """Create the app and its one stack; nothing is synthesized yet.

    ``cdk.json``'s context is loaded here too, so ``python app.py`` and
    in-process synths (tests, ``trainctl synth-summary``) see what the CDK CLI
    sees; context the CLI passes still takes precedence, and ``context``
    overrides ``cdk.json``.

    Args:
        context: context values overriding ``cdk.json`` (e.g. ``{"removalPolicy": "destroy"}``).
        outdir: cloud assembly directory. Default: ``CDK_OUTDIR`` or a temporary folder.
        nag: register cdk-nag's ``AwsSolutionsChecks`` as a validation plugin
            (synth then fails on any unacknowledged finding).
        environ: environment for account/region. Default: ``os.environ``.
        stack_traces: record construct stack traces. Default: CDK's default
            (on unless ``aws:cdk:disable-stack-trace`` is set).

    Raises:
        stacks.config.ConfigError: a context value is invalid.
    """
    merged = cdk_json_context()
    merged.update(context or {})
    app = cdk.App(
        context=merged,
        outdir=str(outdir) if outdir is not None else None,
        stack_traces=stack_traces,
    )
    config = load_config(app.node, environ)
    stack = TrainingPlatformStack(app, config.stack_name, config=config)
    if nag:
        cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))
    return app, stack
