"""Shared fixtures of the sweep tests.

* ``local_sweep``: one real local sweep on CPU (gpt-tiny with 2 blocks on
  CPython's docs, 12 steps of 64-token sequences, 1 process per run) over
  precision=fp32,bf16,fp8 x batch_size=1,2 -- 4 runs, 2 configurations skipped
  (fp8 needs a GPU) -- and its report: four launches of the entry point, most of each the start-up
  of torchrun and its two workers.
* ``aws``: one `trainctl local-aws` emulator.

Every test module is in xdist group ``sweep`` (one worker, when grouping works;
see ``local_sweep`` for when it does not).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from devtools.local_aws.client import LocalAws

LOCAL_GRID = {"precision": ["fp32", "bf16", "fp8"], "batch_size": [1, 2]}
LOCAL_SET = {"num_layers": 2, "seq_length": 64, "max_steps": 12, "warmup_steps": 2, "log_interval": 1}
LOCAL_NPROC = 1
"""Processes per run of the local sweep: the sweep is what these tests test (the trainer's multi-process runs are
the training tests')."""

# gpt-1b with the guide's 10 layers at 8K tokens on 8x H100: batch 1-4 fit, 64 does not,
# mxfp8 does not run on Hopper.
P5_BASE_REQUEST: dict[str, Any] = {
    "instance_type": "ml.p5.48xlarge",
    "instance_count": 1,
    "capacity": "on-demand",
    "hyperparameters": {"model": "gpt-1b", "num_layers": 10, "precision": "bf16", "seq_length": 8192, "max_steps": 100},
    "inputs": {"train": "datasets/guide/train/"},
    "max_runtime_hours": 2,
}

AT_RISK_BASE: dict[str, Any] = {
    **P5_BASE_REQUEST,
    "hyperparameters": {"model": "gpt-1b", "precision": "bf16", "seq_length": 7168},
}
"""gpt-1b (24 blocks) at 7K tokens, bf16 on 8x H100: batch 1 fits, batch 7 is ``at-risk``, batch 8 out of memory
(the planner's verdicts; the sweeps skip ``at-risk`` unless the base accepts the risk)."""


@pytest.fixture(scope="session")
def shared_dir(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Path:
    """A folder every xdist worker of this session sees (the session's base temp); per-run without xdist."""
    if worker_id == "master":
        return tmp_path_factory.mktemp("shared")
    shared = tmp_path_factory.getbasetemp().parent / "sweep-shared"
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def sweeps_dir(shared_dir: Path) -> Path:
    return shared_dir / "sweeps"


@pytest.fixture(scope="session")
def local_sweep(shared_dir: Path, sweeps_dir: Path) -> SimpleNamespace:
    """The sweep runs once per session even when its tests land on different xdist workers.

    ``xdist_group`` does not keep them together with pytest 9.2 and pytest-xdist 3.8
    (pytest-dev/pytest-xdist#1386: loadgroup's node-id suffix no longer takes effect),
    so the first worker runs the sweep under a file lock and the others reuse it
    (the pattern of pytest-xdist's docs, with ``fcntl`` instead of ``filelock``).

    A configuration that fails is run again once, as a user would re-run the sweep
    (``first_failures`` keeps the first attempt's reasons; see the test that checks them).
    """
    import fcntl

    from trainctl.reports.writer import write_report
    from trainctl.sweeps.runner import SweepResult, run_local_sweep
    from trainctl.sweeps.state import load_sweep

    report_dir = shared_dir / "report"
    with open(shared_dir / "local-sweep.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if (report_dir / "report.json").is_file():
                sweep = load_sweep("cpu-grid", sweeps_dir)
                result = SweepResult(sweep=sweep, directory=sweep.directory)
            else:
                result = run_local_sweep(
                    "cpu-grid",
                    LOCAL_GRID,
                    sweeps_dir=sweeps_dir,
                    set_values=LOCAL_SET,
                    nproc=LOCAL_NPROC,
                    device={"type": "cpu"},
                    progress=False,
                )
                first_failures = {c.id: c.reason for c in result.failed}
                (shared_dir / "first-attempt-failures.json").write_text(json.dumps(first_failures))
                if first_failures:
                    # what a user does: run the sweep again; failed configurations resume from their checkpoints
                    result = run_local_sweep(
                        "cpu-grid",
                        LOCAL_GRID,
                        sweeps_dir=sweeps_dir,
                        set_values=LOCAL_SET,
                        nproc=LOCAL_NPROC,
                        device={"type": "cpu"},
                        progress=False,
                    )
                write_report("cpu-grid", report_dir, sweeps_dir=sweeps_dir)
            first_failures = json.loads((shared_dir / "first-attempt-failures.json").read_text())
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    from trainctl.reports.writer import ReportPaths

    paths = ReportPaths(
        directory=report_dir,
        markdown=report_dir / "report.md",
        throughput_memory=report_dir / "throughput_memory.png",
        loss_curves=report_dir / "loss_curves.png",
        data=report_dir / "report.json",
    )
    return SimpleNamespace(result=result, paths=paths, first_failures=first_failures)


@pytest.fixture(scope="session")
def aws():
    with LocalAws() as emulator:
        yield emulator


@pytest.fixture(scope="session")
def env(aws) -> dict[str, str]:
    return {**aws.env, "AWS_MAX_ATTEMPTS": "2"}
