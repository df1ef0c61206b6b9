"""Shared fixtures of the trainer tests.

The multi-process runs (torchrun, CPU processes, gloo) are expensive, so they share session fixtures,
and the tests that use one are in one xdist group (with ``--dist loadgroup`` a group runs on one worker,
so each run happens once per session): ``trainer-runs`` (``reference_run``), ``trainer-llama``
(``test_llama_run.llama_run``) and ``trainer-workers`` (``two_process_results``).

Every test runs with ``OMP_NUM_THREADS=1`` (``tests/conftest.py``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from training.corpus import python_docs_corpus
from training.local import LocalRun, run_local
from training.prepare import prepare_data

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


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def pydocs_shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """CPython's documentation topics as byte-level token shards."""
    root = tmp_path_factory.mktemp("pydocs")
    corpus = python_docs_corpus(root / "corpus.jsonl")
    return prepare_data(root / "shards", [corpus]).output_dir


@pytest.fixture(scope="session")
def validation_shards(pydocs_shards: Path) -> Path:
    """A validation set in the train channel's format and tokenizer: the corpus's last 40 topics as shards."""
    root = pydocs_shards.parent
    topics = (root / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[-40:]
    (root / "validation.jsonl").write_text("\n".join(topics) + "\n", encoding="utf-8")
    return prepare_data(root / "validation", [root / "validation.jsonl"]).output_dir


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory, pydocs_shards: Path) -> tuple[Path, LocalRun]:
    """One uninterrupted 20-step run through the entry point (2 CPU processes)."""
    base = tmp_path_factory.mktemp("reference")
    run = run_local(base, REFERENCE_HP, data_dir=pydocs_shards, nproc=2, timeout=600)
    assert run.returncode == 0, run.output[-4000:]
    return base, run


@pytest.fixture(scope="session")
def two_process_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The results of ``two_process_worker.py``: the trainer's build on 2 gloo processes (FSDP2), for the
    gradient-sync and the initial-weights checks; one torchrun launch for both."""
    work = tmp_path_factory.mktemp("two-processes")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            str(Path(__file__).with_name("two_process_worker.py")),
            str(work / "out.pt"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=work,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return torch.load(work / "out.pt")
