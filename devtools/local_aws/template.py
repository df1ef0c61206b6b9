"""The platform's synthesized CloudFormation template, whose policies the emulator enforces
(:mod:`devtools.local_aws.principals`), cached across emulator starts.

The template is the app's own (:func:`stacks.platform_app.create_app` with ``cdk.json``'s context, for the emulator's
account and region; no cdk-nag, no asset bundling: neither changes a policy). Synthesis takes about 6.5 s and
``make test`` starts a dozen emulators, so :func:`platform_template` keeps it under ``.cache/local-aws/`` keyed by what
determines it: the sources under ``stacks/``, ``constructs/`` and ``platform_spec/``, ``app.py``, ``cdk.json``, this
module, the aws-cdk-lib version, the region and the context given on top of ``cdk.json``'s (VPC mode: ``{"vpc": "create",
"fsxLustre": {...}}``). Concurrent starts synthesize once: the first holds a file lock, the others wait for it and
read its file. One template per key is kept (the default one and each context's), the newest
:data:`KEPT` of them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devtools.local_aws.stack import ACCOUNT_ID
from platform_spec.files import atomic_write_text

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache" / "local-aws"
SOURCES = ("stacks", "constructs", "platform_spec", "app.py", "cdk.json", "devtools/local_aws/template.py")
"""What the template is synthesized from, and how (this module), relative to the repository root (with aws-cdk-lib's
version)."""
KEPT = 4
"""Templates kept in the cache (the default and a few contexts' that tests start emulators with)."""


def template_key(region: str, root: Path = REPO_ROOT, context: Mapping[str, Any] | None = None) -> str:
    """A digest of everything that determines the template (:data:`SOURCES`, aws-cdk-lib's version, ``region``,
    ``context``)."""
    from importlib.metadata import version

    given = json.dumps(dict(context or {}), sort_keys=True)
    digest = hashlib.sha256(f"{version('aws-cdk-lib')}\0{region}\0{ACCOUNT_ID}\0{given}".encode())
    for source in SOURCES:
        path = root / source
        files = sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts) if path.is_dir() else [path]
        for file in files:
            digest.update(str(file.relative_to(root)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def availability_zones(region: str) -> list[str]:
    """The emulator's availability zones of ``region``: moto's, as its ``DescribeAvailabilityZones`` answers (not
    always ``a``, ``b``, ``c``: ap-northeast-1 has ``a``, ``c``, ``d``). Imports moto's EC2 (about 0.7 s)."""
    from moto.ec2.models import ec2_backends

    return [zone.name for zone in ec2_backends[ACCOUNT_ID][region].describe_availability_zones()]


def synthesize(region: str, context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Synthesize the app for the emulator's account and ``region`` with ``context`` over ``cdk.json``'s; returns
    the stack's template.

    The region's availability zones are moto's (:func:`availability_zones`), given as the context entry the CDK
    CLI fills from ``DescribeAvailabilityZones`` (``availability-zones:account=...:region=...``): without it a created VPC's subnets
    would name CDK's placeholders (``dummy1a``), which no training plan's block is in.

    Raises:
        stacks.config.ConfigError: a context value is invalid.
    """
    import tempfile

    from stacks.platform_app import create_app

    zones = availability_zones(region)
    with tempfile.TemporaryDirectory(prefix="local-aws-synth-") as outdir:
        app, stack = create_app(
            context={
                f"availability-zones:account={ACCOUNT_ID}:region={region}": zones,
                **(context or {}),
                "aws:cdk:bundling-stacks": [],
            },
            outdir=outdir,
            nag=False,
            environ={"CDK_DEFAULT_ACCOUNT": ACCOUNT_ID, "CDK_DEFAULT_REGION": region},
            stack_traces=False,
        )
        app.synth()
        template: dict[str, Any] = json.loads((Path(outdir) / f"{stack.stack_name}.template.json").read_text())
        return template


def platform_template(
    region: str, *, cache_dir: Path = CACHE_DIR, context: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The platform's template for ``region`` and ``context`` (over ``cdk.json``'s): from the cache when its key
    matches, else synthesized and cached.

    Raises:
        OSError: the cache folder cannot be written.
        stacks.config.ConfigError: ``cdk.json`` or ``context`` holds an invalid value.
    """
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"template-{template_key(region, context=context)}.json"
    with open(cache_dir / "synth.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if path.exists():
                cached: dict[str, Any] = json.loads(path.read_text())
                return cached
            template = synthesize(region, context)
            kept = sorted(cache_dir.glob("template-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
            for stale in kept[KEPT - 1 :]:
                stale.unlink(missing_ok=True)
            atomic_write_text(path, json.dumps(template))
            return template
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def load_template(path: str | os.PathLike[str]) -> Mapping[str, Any]:
    """A template file given explicitly (``--template``).

    Raises:
        OSError: it cannot be read. ValueError: it is not a template (JSON with ``Resources``).
    """
    data = json.loads(Path(path).read_text())
    if not isinstance(data, dict) or not isinstance(data.get("Resources"), dict):
        raise ValueError(f"{path}: expected a CloudFormation template (a JSON object with Resources)")
    return data
