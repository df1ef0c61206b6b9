"""Shared fixtures of the trainer tests.

The multi-process runs (torchrun, 2 CPU processes, gloo) are expensive, so they
share session fixtures and every test that uses them is marked
``@pytest.mark.xdist_group("trainer-runs")``: with ``--dist loadgroup`` they run
on one worker and each run happens once per session.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch.distributed as dist

from training.corpus import python_docs_corpus
from training.data import prepare_data
from training.local import LocalRun, run_local

# gpt-tiny (2 of its 4 blocks, to keep the suite fast) on byte-level CPython docs:
# 20 optimizer steps of 2 processes x 8 sequences x 64 tokens.
# warmup_steps=2 so that the first two steps' learning rates do not depend on max_steps
# (the 1-process and multi-node comparisons run 2 steps of the same schedule).
REFERENCE_HP: dict[str, object] = {
    "model": "gpt-tiny",
    "num_layers": 2,
    "precision": "fp32",
    "batch_size": 8,
    "seq_length": 64,
    "max_steps": 20,
    "warmup_steps": 2,
    "learning_rate": 3e-3,
    "min_learning_rate": 3e-4,
    "log_interval": 1,
    "checkpoint_interval": 5,
    "keep_checkpoints": 2,
    "seed": 1234,
}


@pytest.fixture(scope="session")
def pydocs_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CPython's documentation topics as byte-level token shards."""
    root = tmp_path_factory.mktemp("pydocs")
    corpus = python_docs_corpus(root / "corpus.jsonl")
    return prepare_data(root / "shards", [corpus]).output_dir


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory, pydocs_shards: Path) -> tuple[Path, LocalRun]:
    """One uninterrupted 20-step run through the entry point (2 CPU processes)."""
    base = tmp_path_factory.mktemp("reference")
    run = run_local(base, REFERENCE_HP, data_dir=pydocs_shards, nproc=2, timeout=600)
    assert run.returncode == 0, run.output[-4000:]
    return base, run


@pytest.fixture(scope="module")
def process_group(tmp_path_factory: pytest.TempPathFactory):
    """A one-process gloo group (FSDP2 and DCP need one), torn down after the module."""
    if dist.is_initialized():  # pragma: no cover - another module left one behind
        pytest.skip("a default process group already exists in this process")
    store = dist.FileStore(str(tmp_path_factory.mktemp("pg") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()
