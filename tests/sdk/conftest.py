"""Fixtures of the SageMaker Python SDK tests (``trainctl.sdk``): one emulator for the folder.

* ``aws``: ``LocalAws`` seeded with ``examples/plans.json`` (one active plan of two
  ``ml.p6-b200.48xlarge``), jobs not executed unless a test switches execution on
  (``aws.set_run_jobs(True)``); after each test running jobs are completed (the plan's instances
  freed) and execution is off again.
* ``platform``: ``Platform.from_env(aws.env)`` (the submitter's handler in this process).
* ``tiny``: the request of the README's example (gpt-tiny on synthetic data, fp32: the CPU runs it).

Every module here is in xdist group ``sdk`` (one worker, one emulator).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.local_aws.client import LocalAws

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def aws() -> Iterator[LocalAws]:
    with LocalAws(plans=str(REPO / "examples" / "plans.json")) as emulator:
        yield emulator


@pytest.fixture(autouse=True)
def _reset_emulator(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "aws" in request.fixturenames:
        emulator = request.getfixturevalue("aws")
        emulator.set_run_jobs(False)
        emulator.complete_active_jobs()


@pytest.fixture(scope="session")
def platform(aws: LocalAws) -> Any:
    from trainctl.sdk import Platform

    return Platform.from_env(aws.env)


@pytest.fixture
def tiny() -> dict[str, Any]:
    """The README example's request, with a fresh client_token."""
    return {
        "client_token": f"sdk-{uuid.uuid4()}",
        "capacity": "on-demand",
        "instance_type": "ml.p5.48xlarge",
        "hyperparameters": {
            "model": "gpt-tiny",
            "num_layers": 1,
            "precision": "fp32",
            "batch_size": 2,
            "seq_length": 32,
            "max_steps": 4,
            "warmup_steps": 1,
            "log_interval": 1,
            "checkpoint_interval": 2,
            "synthetic_data": True,
        },
        "max_runtime_hours": 1,
    }
