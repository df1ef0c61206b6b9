"""Fixtures of the development tools' tests (the AWS emulator, the demo).

* ``aws``: one `trainctl local-aws` emulator, started as the README starts it
  (``--env-file`` in a folder that does not exist yet). Tests using it are in
  xdist group ``trainctl-aws``.
* ``VPC_FSX_CONTEXT``: the VPC-mode emulators' CDK context.
* ``wait_until``: polls a condition (the emulator's jobs and events run in other threads and processes).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.local_aws.client import LocalAws

REPO = Path(__file__).resolve().parents[2]
VPC_FSX_CONTEXT: dict[str, Any] = {"vpc": "create", "fsxLustre": {}}
"""The VPC-mode context of ``test_vpc_mode`` and ``test_vpc_end_to_end`` (a created VPC in three zones, a file
system with every default): one context, so ``make test`` synthesizes its template once (the emulator's cache)."""


@pytest.fixture(scope="session")
def aws_env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's emulator writes its env file: ``.demo/aws.env`` of a fresh folder (no ``.demo/`` yet)."""
    return tmp_path_factory.mktemp("fresh-clone") / ".demo" / "aws.env"


@pytest.fixture(scope="session")
def aws(aws_env_file: Path) -> Iterator[LocalAws]:
    with LocalAws(plans=str(REPO / "examples" / "plans.json"), env_file=aws_env_file) as emulator:
        yield emulator


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = 90.0, interval: float = 0.2) -> Any:
    """Poll ``predicate`` until it returns something true, and return that; ``AssertionError`` naming ``what``
    after ``timeout`` seconds (the emulator's jobs and events run in other threads and processes)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"not within {timeout:g} s: {what}")
