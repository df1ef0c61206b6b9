"""Shared helpers for planner tests: the guide's benchmark setup as a PlanInput factory."""

from __future__ import annotations

import pytest

from planner import PlanInput


def guide_input(**changes) -> PlanInput:
    """The guide's measured setup: gpt-1b blocks (24 x 2048), mxfp8, sequence 8192, 8x B200, TE FSDP example."""
    base = {
        "model": "gpt-1b",
        "num_layers": None,
        "precision": "mxfp8",
        "seq_length": 8192,
        "batch_size": 1,
        "activation_checkpointing": "off",
        "instance_type": "ml.p6-b200.48xlarge",
        "blocks_only": True,
    }
    base.update(changes)
    return PlanInput(**base)


@pytest.fixture(scope="session")
def make_input():
    return guide_input
