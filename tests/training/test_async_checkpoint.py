"""Asynchronous checkpoints (CheckpointManager with DCP's async_save, single process, real DCP folders): the
completion marker never precedes the data, a failed write fails naming the step, a killed write leaves a folder
that resume ignores and removes, and a synchronous save first finishes the one being written; a run that stops
as diverged (the trainer in this process) first finishes the finite save being written.

The 2-process runs of ``test_training_runs`` (``checkpoint_interval=5``, ``async_checkpoint`` on by default) check
the same end to end: interval saves written asynchronously and complete, the SIGTERM save synchronous, the
resumed run bitwise equal to the uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter

from platform_spec.checkpoint_layout import COMPLETE_MARKER, TRAINER_STATE
from training.checkpoint.manager import CheckpointError, CheckpointManager, SaveRecord
from training.checkpoint.verify import complete_steps, step_dirs

pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")

REPO = Path(__file__).resolve().parents[2]


def _model() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(3, 8)).square().mean().backward()
    optimizer.step()
    return model, optimizer


def _manager(directory: Path, saved: list[SaveRecord] | None = None) -> CheckpointManager:
    return CheckpointManager(
        directory,
        keep=2,
        rank=0,
        local_rank=0,
        world_size=1,
        asynchronous=True,
        on_saved=None if saved is None else saved.append,
        log=lambda _: None,
    )


@pytest.fixture
def held_writes(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """DCP's file writes wait until the returned event is set (the background thread blocks in write_data)."""
    release = threading.Event()
    original = FileSystemWriter.write_data

    def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
        assert release.wait(timeout=120), "the test never released the write"
        return original(self, plan, planner)

    monkeypatch.setattr(FileSystemWriter, "write_data", write_data)
    return release


def test_the_marker_is_written_only_after_the_asynchronous_write_finished(
    tmp_path: Path, held_writes: threading.Event
) -> None:
    model, optimizer = _model()
    saved: list[SaveRecord] = []
    manager = _manager(tmp_path, saved)
    path = manager.save(2, model, optimizer, {"data": {"step": 2}}, asynchronous=True)
    weights = [p.detach().clone() for p in model.parameters()]
    with torch.no_grad():  # training goes on: the staged copy, not the live tensors, is written
        for p in model.parameters():
            p.add_(1.0)
    assert manager.pending_step == 2
    assert (path / TRAINER_STATE).is_file()  # the step's own state, written before save returned
    for _ in range(3):  # step boundaries while the write is held: never complete
        assert manager.poll() is None
        assert not (path / COMPLETE_MARKER).exists()
        assert complete_steps(tmp_path) == []
    held_writes.set()
    record = manager.wait()
    assert record is not None and record.step == 2 and record.asynchronous
    assert saved == [record]
    assert 0 <= record.blocking_seconds <= record.write_seconds
    marker = json.loads((path / COMPLETE_MARKER).read_text())
    assert marker["asynchronous"] is True and marker["seconds"] == record.write_seconds
    assert manager.last_save_seconds == record.write_seconds  # the stop margin's estimate: the real write time
    assert complete_steps(tmp_path) == [2]

    fresh, fresh_optimizer = _model()
    with torch.no_grad():
        for p in fresh.parameters():
            p.zero_()
    restarted = _manager(tmp_path)
    assert restarted.last_save_seconds == 0.0
    resumed = restarted.load_latest(fresh, fresh_optimizer)
    assert resumed is not None and resumed.step == 2
    # a restart's stop margin (a capacity block's end before this job's first save) counts the write it resumed
    assert restarted.last_save_seconds == record.write_seconds
    for got, want in zip(fresh.parameters(), weights, strict=True):
        assert torch.equal(got, want)


def test_training_waits_until_the_write_ended_not_until_its_thread_woke(
    tmp_path: Path, held_writes: threading.Event
) -> None:
    """The save's blocking time counts the wait for the write's end, not the waiting thread's wake-up after it (a
    busy host's scheduling delay, injected here): otherwise blocking_seconds could exceed write_seconds."""
    model, optimizer = _model()
    manager = _manager(tmp_path)
    manager.save(2, model, optimizer, {"data": {"step": 2}}, asynchronous=True)
    pending = manager._pending
    assert pending is not None
    held_writes.set()
    ended = pending.future.result(timeout=120)  # the write has ended; the trainer's wait starts after it
    late = threading.Event()
    pending.future.result = lambda timeout=None: (late.wait(0.05), ended)[1]  # type: ignore[method-assign]
    record = manager.wait()
    assert record is not None and record.blocking_seconds == pending.blocking_seconds  # nothing waited
    assert record.blocking_seconds <= record.write_seconds


def test_a_synchronous_save_first_finishes_the_asynchronous_one(tmp_path: Path, held_writes: threading.Event) -> None:
    model, optimizer = _model()
    saved: list[SaveRecord] = []
    manager = _manager(tmp_path, saved)
    manager.save(2, model, optimizer, {"data": {"step": 2}}, asynchronous=True)
    releaser = threading.Timer(0.2, held_writes.set)  # the write ends while the synchronous save waits for it
    releaser.start()
    manager.save(3, model, optimizer, {"data": {"step": 3}})  # e.g. SIGTERM's save
    releaser.join()
    assert [(r.step, r.asynchronous) for r in saved] == [(2, True), (3, False)]
    assert saved[1].blocking_seconds == saved[1].write_seconds
    assert manager.pending_step is None
    assert complete_steps(tmp_path) == [2, 3]


def test_a_failed_asynchronous_write_fails_naming_the_step_and_leaves_no_marker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(FileSystemWriter, "write_data", write_data)
    model, optimizer = _model()
    manager = _manager(tmp_path)
    path = manager.save(4, model, optimizer, {"data": {"step": 4}}, asynchronous=True)
    with pytest.raises(CheckpointError, match=r"the asynchronous save of step-4 \(step 4\) failed: .*No space left"):
        manager.wait()
    assert not (path / COMPLETE_MARKER).exists()
    assert complete_steps(tmp_path) == []


def test_a_refused_asynchronous_save_on_a_synchronous_manager(tmp_path: Path) -> None:
    model, optimizer = _model()
    manager = CheckpointManager(tmp_path, keep=1, rank=0, local_rank=0, world_size=1)
    with pytest.raises(ValueError, match="asynchronous=False"):
        manager.save(1, model, optimizer, {}, asynchronous=True)
    assert step_dirs(tmp_path) == {}


KILLED_DURING_WRITE = """
import os, signal, sys, threading
import torch
from torch.distributed.checkpoint.filesystem import FileSystemWriter
from training.checkpoint.manager import CheckpointManager
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
optimizer = torch.optim.AdamW(model.parameters())
manager = CheckpointManager(sys.argv[1], keep=2, rank=0, local_rank=0, world_size=1, asynchronous=True)
manager.save(1, model, optimizer, {"data": {"step": 1}})
writing = threading.Event()
def write_data(self, plan, planner):
    writing.set()
    threading.Event().wait()  # the write never ends: the process is killed in it
FileSystemWriter.write_data = write_data
manager.save(2, model, optimizer, {"data": {"step": 2}}, asynchronous=True)
writing.wait()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_run_killed_during_an_asynchronous_write_resumes_the_previous_checkpoint(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", KILLED_DURING_WRITE, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]
    assert sorted(step_dirs(tmp_path)) == [1, 2]  # step-2 was being written
    assert not (tmp_path / "step-2" / COMPLETE_MARKER).exists()
    assert complete_steps(tmp_path) == [1]

    model, optimizer = _model()
    manager = _manager(tmp_path)
    resumed = manager.load_latest(model, optimizer)
    assert resumed is not None and resumed.step == 1  # the unfinished step-2 is never a candidate
    assert manager.remove_incomplete() == [2]
    assert sorted(step_dirs(tmp_path)) == [1]


@pytest.mark.usefixtures("process_group")
def test_a_diverging_run_finishes_the_finite_save_being_written_before_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer in this process (1 rank): learning_rate 10 with weight_decay 10 makes the gradient norm inf
    from step 4 (test_watchdog's divergence); step 3's interval save is asynchronous and its write is held until
    the manager is asked to wait for it. The run stops at step 5 as diverged, and step-3 (finite, staged before
    the non-finite steps) is marked complete instead of being left for the next resume to delete."""
    import signal as signals

    from platform_spec.health import NON_FINITE_REASON
    from platform_spec.hyperparameters import parse
    from training.environment import SageMakerPaths
    from training.train import Trainer, TrainingDiverged

    release = threading.Event()
    original_write, original_wait = FileSystemWriter.write_data, CheckpointManager.wait

    def write_data(self, plan, planner):  # type: ignore[no-untyped-def]
        release.wait(timeout=120)
        return original_write(self, plan, planner)

    def wait(self):  # type: ignore[no-untyped-def]
        if self.pending_step is not None:
            release.set()  # the write ends only once the trainer waits for it
        return original_wait(self)

    monkeypatch.setattr(FileSystemWriter, "write_data", write_data)
    monkeypatch.setattr(CheckpointManager, "wait", wait)
    for name, value in {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}.items():
        monkeypatch.setenv(name, value)
    previous = {sig: signals.getsignal(sig) for sig in (signals.SIGTERM, signals.SIGINT)}  # the trainer's replace them
    hp = parse(
        {
            "model": "gpt-tiny",
            "num_layers": 2,
            "precision": "fp32",
            "batch_size": 4,
            "seq_length": 32,
            "warmup_steps": 0,
            "synthetic_data": True,
            "max_steps": 12,
            "learning_rate": 10.0,
            "min_learning_rate": 0.0,
            "weight_decay": 10.0,
            "checkpoint_interval": 3,
            "max_nonfinite_steps": 2,
        }
    )
    trainer = Trainer(hp, SageMakerPaths(tmp_path))
    try:
        with pytest.raises(TrainingDiverged) as caught:
            trainer.run()
    finally:
        release.set()
        for sig, handler in previous.items():
            signals.signal(sig, handler)
    assert trainer.step == 5 and trainer.checkpoints.pending_step is None
    assert complete_steps(tmp_path / "checkpoints") == [3]
    report = str(caught.value)
    assert report.startswith(f"{NON_FINITE_REASON}: steps 4-5 (2 in a row"), report
    assert "the newest of this run: step-3" in report
