"""Hangs, divergence and the steady-state collective timeout (issue 27), on real 2-process CPU runs.

* the watchdog's limit rule, with an injected clock (no sleeps);
* a hang (a worker of a 2-process run stopped with SIGSTOP: the other rank's watchdog dumps its stacks and flight
  recorder, reports HANG_REASON naming the last step, and the job fails) is run once, through the emulator, in
  tests/devtools/test_run_end_to_end.py (``make demo``'s hang): that test checks the trainer's side too;
* a divergence: learning_rate 10 with weight_decay 10 multiplies the weights by -99 a step (AdamW's decoupled
  decay), so the gradient norm is inf from step 4 on, deterministically on CPU fp32: the steps are skipped,
  counted in skipped_steps, and the run stops after max_nonfinite_steps with NON_FINITE_REASON and no checkpoint
  newer than the last step that trained;
* a checkpoint with NaN parameters is skipped at resume and the older one is used; when none is finite the error
  names each;
* torch's group timeout really changes (a gloo collective that times out after the new, short timeout).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from platform_spec.health import HANG_REASON, NON_FINITE_REASON
from platform_spec.hyperparameters import parse
from training.checkpoint.manager import CheckpointError, CheckpointManager
from training.checkpoint.verify import complete_steps
from training.environment import SageMakerPaths
from training.local import read_failure, read_metrics, run_local
from training.supervision import read_status
from training.watchdog import ProgressClock, Stall, WatchdogLimits

TINY = {
    "model": "gpt-tiny",
    "num_layers": 2,
    "precision": "fp32",
    "batch_size": 4,
    "seq_length": 32,
    "warmup_steps": 0,
    "log_interval": 1,
    "synthetic_data": True,
}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_limit_is_fixed_before_the_first_step_then_follows_the_slowest_recent_step() -> None:
    clock = Clock()
    watch = ProgressClock(WatchdogLimits(first_s=1800.0, floor_s=300.0, factor=5.0), clock=clock)
    assert watch.limit() == (1800.0, "watchdog_first_step_minutes=30, before the first step")
    clock.now += 1700  # setup and resume take long: still within the first limit
    watch.phase("resume", 40)
    watch.phase("step", 40)
    assert watch.overdue() is None
    clock.now += 101
    stall = watch.overdue()
    assert stall is not None and (stall.phase, stall.step, stall.limit_s) == ("step", 40, 1800.0)
    assert stall.report("output/data/watchdog/") == (
        f"{HANG_REASON}: no step completed in 1801 s after step 40 (limit 1800 s: watchdog_first_step_minutes=30, "
        "before the first step); stacks in output/data/watchdog/"
    )
    # the first step completes: from now on max(floor, factor x the slowest of the recent steps)
    assert watch.progress(41) == 101.0
    limit, rule = watch.limit()
    assert limit == 505.0 and "watchdog_step_time_factor=5 x the slowest of the last 1 steps (101.0 s)" in rule
    for _ in range(3):
        watch.phase("step")
        clock.now += 20
        watch.progress(watch.step + 1)
    assert watch.limit()[0] == 505.0  # the slowest of the window, not the newest
    for _ in range(100):  # the 101 s step leaves the 100-step window: the floor applies
        watch.phase("step")
        clock.now += 20
        watch.progress(watch.step + 1)
    assert watch.limit()[0] == 300.0
    watch.phase("step")
    clock.now += 300
    assert watch.overdue() is None
    clock.now += 12
    stall = watch.overdue()
    assert stall.report("x/").startswith(f"{HANG_REASON}: no step completed in 312 s after step 144 (limit 300 s: ")
    # a save not timed yet in this job gets the first limit, counted from the last progress; then its own times
    clock.now -= 312
    watch.phase("save", 144)
    assert watch.limit() == (1800.0, "watchdog_first_step_minutes=30, the first save of this job")
    clock.now += 100
    watch.progress(144)
    watch.phase("save", 150)
    assert watch.limit()[0] == 500.0
    clock.now += 501
    assert watch.overdue().what() == "the checkpoint save of step-150 did not complete in 501 s"


def test_zero_turns_each_limit_off() -> None:
    clock = Clock()
    watch = ProgressClock(WatchdogLimits.from_hyperparameters(parse({"watchdog_first_step_minutes": 0})), clock=clock)
    clock.now += 10**6
    assert watch.limit() is None and watch.overdue() is None
    watch.phase("step")
    watch.progress(1)
    assert watch.limit()[0] == 300.0  # watchdog_minutes' default, 5 minutes
    off = ProgressClock(WatchdogLimits.from_hyperparameters(parse({"watchdog_minutes": 0})), clock=clock)
    off.phase("step")
    off.progress(1)
    clock.now += 10**6
    assert off.overdue() is None
    with pytest.raises(ValueError, match="phase: got 'train', expected one of step, evaluate, save"):
        off.phase("train")
    assert Stall("setup", 0, 5.0, 4.0, "r").what() == "no step completed in 5 s since the start (setting up)"


@pytest.mark.slow
def test_a_diverging_run_skips_its_non_finite_steps_then_stops_with_no_poisoned_checkpoint(tmp_path: Path) -> None:
    base = tmp_path / "diverge"
    hp = {
        **TINY,
        "max_steps": 12,
        "learning_rate": 10.0,
        "min_learning_rate": 0.0,
        "weight_decay": 10.0,
        "checkpoint_interval": 1,
        "keep_checkpoints": 20,
        "max_nonfinite_steps": 3,
    }
    run = run_local(base, hp, nproc=2, timeout=300, env={"OMP_NUM_THREADS": "1"})
    assert run.returncode == 1, run.output[-3000:]
    # rank 0's records (output/data/metrics.jsonl): the printed lines share a pipe with rank 1's output
    lines = {int(m["step"]): m for m in read_metrics(base)}
    assert "skipped_steps=3" in run.output  # and the [metrics] line says it
    assert sorted(lines) == [1, 2, 3, 4, 5, 6]  # stopped at the third non-finite step in a row
    assert [lines[s]["skipped_steps"] for s in range(1, 7)] == [0, 0, 0, 1, 2, 3]
    assert all(lines[s]["grad_norm"] == float("inf") for s in (4, 5, 6))
    report = read_failure(base)
    assert report is not None and report.startswith(
        f"{NON_FINITE_REASON}: steps 4-6 (3 in a row, max_nonfinite_steps=3; their updates were skipped): step 4 loss="
    ), report
    assert "grad_norm=inf" in report and "the newest of this run: step-3" in report
    assert read_status(SageMakerPaths(base)).state == "failed"
    # no checkpoint of a skipped step, none after: the newest is the last step that trained, and it loads finite
    assert complete_steps(base / "checkpoints") == [1, 2, 3]


def _two_checkpoints(directory: Path, poison: tuple[int, ...]) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    manager = CheckpointManager(directory, keep=5, rank=0, local_rank=0, world_size=1)
    for step in (1, 2):
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        if step in poison:
            with torch.no_grad():
                model.weight[0, 1] = float("nan")  # written through the manager, as a diverged run would have
        manager.save(step, model, optimizer, {"step": step})
    return model, optimizer


@pytest.mark.usefixtures("process_group")
def test_resume_skips_a_checkpoint_whose_parameters_are_not_finite(tmp_path: Path) -> None:
    model, optimizer = _two_checkpoints(tmp_path / "one", poison=(2,))
    manager = CheckpointManager(tmp_path / "one", keep=5, rank=0, local_rank=0, world_size=1)
    resumed = manager.load_latest(model, optimizer)
    assert resumed is not None and resumed.step == 1
    assert resumed.skipped == {2: "its model or optimizer state is not finite (NaN/inf in model.weight (1 value))"}, (
        resumed.skipped
    )
    assert torch.isfinite(model.weight).all()

    model, optimizer = _two_checkpoints(tmp_path / "both", poison=(1, 2))
    manager = CheckpointManager(tmp_path / "both", keep=5, rank=0, local_rank=0, world_size=1)
    with pytest.raises(CheckpointError) as caught:
        manager.load_latest(model, optimizer)
    message = str(caught.value)
    assert "step-2: its model or optimizer state is not finite (NaN/inf in model.weight (1 value)" in message
    assert "step-1: its model or optimizer state is not finite (NaN/inf in model.weight" in message


TIMEOUT_WORKER = """
import datetime, pathlib, sys, time
import torch, torch.distributed as dist
from training.train import set_collective_timeout
rank, folder = int(sys.argv[1]), pathlib.Path(sys.argv[2])
store = dist.FileStore(str(folder / "store"), 2)
dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=datetime.timedelta(minutes=30))
dist.barrier()
if rank == 0:
    set_collective_timeout(1 / 60)  # 1 s
    try:
        dist.all_reduce(torch.ones(1))  # rank 1 never joins it
        answer = "completed"
    except RuntimeError as exc:
        answer = str(exc).splitlines()[0]
    (folder / "answer").write_text(answer)
else:
    while not (folder / "answer").exists():  # never joins rank 0's all-reduce
        time.sleep(0.1)
"""


def test_the_steady_state_timeout_really_shortens_a_gloo_collective(tmp_path: Path) -> None:
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": repo, "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen([sys.executable, "-c", TIMEOUT_WORKER, str(rank), str(tmp_path)], env=env, cwd=repo)
        for rank in (0, 1)
    ]
    try:
        codes = [p.wait(timeout=120) for p in procs]  # with the 30-minute setup timeout rank 0 would still wait
    finally:
        for p in procs:
            p.kill()
            p.wait()
    message = (tmp_path / "answer").read_text()
    assert "Timed out" in message and "1000ms" in message, (message, codes)


def test_a_synchronous_save_after_asynchronous_ones_is_held_to_their_write_time(tmp_path: Path) -> None:
    """An asynchronous save's phase times only its staging (the planner's Llama 3 70B on 1 x p6-b200: 3.3 s staged,
    313.6 s written); the save at the end of training is synchronous and writes as long, so its limit must follow
    the write, not max(watchdog_minutes 5, 5 x 3.3 s) = 300 s."""
    from training.checkpoint.manager import SaveRecord
    from training.train import Trainer
    from training.watchdog import Watchdog

    clock = Clock()
    trainer = Trainer(parse({"precision": "fp32"}), SageMakerPaths(tmp_path))
    trainer.watchdog = Watchdog(trainer.watchdog.limits, lambda stall: None, clock=clock)
    trainer.save_reasons = {}
    watch = trainer.watchdog
    watch.phase("step", 0)
    clock.now += 2.0
    watch.progress(1)
    watch.phase("save", 500)  # the interval save: staged, written in the background
    clock.now += 3.3
    watch.progress(500)
    trainer.saved(SaveRecord(500, tmp_path / "step-500", True, blocking_seconds=3.3, write_seconds=313.6))
    watch.phase("save", 1000)  # the end of training's synchronous save
    limit, rule = watch.limit()
    assert limit == pytest.approx(5 * 313.6) and "(313.6 s)" in rule
    clock.now += 320.0
    assert watch.overdue() is None
    with pytest.raises(ValueError, match="observe: got 'export', expected one of step, evaluate, save"):
        watch.observe("export", 1.0)


def test_a_save_refuses_a_non_finite_optimizer_state_that_resume_would_skip(tmp_path: Path) -> None:
    """Finite parameters with an inf in AdamW's exp_avg_sq (a gradient element above ~1.8e19 squares to inf while
    the gradient norm stays finite): resume skips such a checkpoint (test_resume_skips_...), and once the platform
    keeps only the newest complete checkpoint under the synced prefix it would be the only one, so it is never
    written."""
    from training.train import Trainer, TrainingDiverged

    trainer = Trainer(parse({"precision": "fp32"}), SageMakerPaths(tmp_path))
    trainer.world_size, trainer.step = 1, 7
    trainer.model = torch.nn.Linear(4, 3)
    trainer.optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=0.1)
    trainer.model(torch.ones(2, 4)).sum().backward()
    trainer.optimizer.step()
    trainer.refuse_non_finite_state()  # all finite: saved
    trainer.optimizer.state[trainer.model.weight]["exp_avg_sq"][0, 0] = float("inf")
    assert torch.isfinite(trainer.model.weight).all()
    with pytest.raises(TrainingDiverged) as caught:
        trainer.refuse_non_finite_state()
    assert str(caught.value) == (
        f"{NON_FINITE_REASON}: the state after step 7 is not finite (rank 0: NaN/inf in optimizer.0.exp_avg_sq "
        "(1 value)); checkpoint step-7 was not written"
    )


def test_a_hang_before_the_process_group_exists_names_the_workers_own_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watchdog runs from the start (rendezvous, weight load): a hang there is reported by every worker
    under its torchrun RANK, not all as rank 0 into one stacks file, each also printing the [run] line."""
    from training import train

    reported: list[int] = []
    monkeypatch.setattr(train, "act_on_hang", lambda stall, *, rank, **_: reported.append(rank))
    trainer = train.Trainer(parse({"precision": "fp32"}), SageMakerPaths(tmp_path), {"RANK": "3", "LOCAL_RANK": "1"})
    trainer._on_hang(Stall("setup", 0, 1801.0, 1800.0, "watchdog_first_step_minutes=30, before the first step"))
    assert reported == [3]


def test_once_the_watchdog_fired_the_main_thread_leaves_the_status_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow phase rather than a stuck one: the main thread moves on while the watchdog's thread dumps the flight
    recorders (up to a minute) before os._exit; a checkpoint it marks complete meanwhile (Trainer.saved) must not
    replace the hang's report in the status record with a reasonless one."""
    from training import train
    from training.checkpoint.manager import SaveRecord

    def act_on_hang(stall: Stall, *, write_status, **_: object) -> None:  # type: ignore[no-untyped-def]
        write_status(stall.report("output/data/watchdog/"))  # the dumps and os._exit would follow

    monkeypatch.setattr(train, "act_on_hang", act_on_hang)
    trainer = train.Trainer(parse({"precision": "fp32"}), SageMakerPaths(tmp_path), {})
    trainer.save_reasons = {}
    stall = Stall("save", 500, 301.0, 300.0, "watchdog_minutes=5")
    trainer._on_hang(stall)
    trainer.saved(SaveRecord(500, tmp_path / "step-500", True, blocking_seconds=3.0, write_seconds=310.0))
    trainer.write_status("stopped", "SIGTERM/SIGINT received")
    status = read_status(SageMakerPaths(tmp_path))
    assert status is not None and (status.state, status.reason) == ("failed", stall.report("output/data/watchdog/"))


def test_a_stop_inside_a_run_of_non_finite_steps_carries_the_run_to_the_resume(tmp_path: Path) -> None:
    """SIGTERM (or a capacity block's end) at step 6 of a run of non-finite steps 4-6: the stop's save holds the
    last finite state, and the resumed segment goes on counting from 3 instead of 0, so a stop cannot reset the
    max_nonfinite_steps count (nor an interval save be taken inside the run after the resume)."""
    from training.checkpoint.verify import trainer_state_problems
    from training.data import SyntheticSampler
    from training.train import Trainer, learning_rate

    hp = parse({"precision": "fp32", "max_steps": 20, "warmup_steps": 2})

    def trainer() -> Trainer:
        made = Trainer(hp, SageMakerPaths(tmp_path), {})
        made.optimizer = torch.optim.AdamW(torch.nn.Linear(2, 2).parameters())
        made.scheduler = torch.optim.lr_scheduler.LambdaLR(
            made.optimizer, lambda e: learning_rate(e + 1, hp) / hp.learning_rate
        )
        made.scaler = None
        made.sampler = SyntheticSampler(
            vocab_size=16, seq_length=4, batch_size=2, grad_accum=1, rank=0, world_size=1, seed=1
        )
        made.run_record = dict  # type: ignore[method-assign]
        return made

    stopped = trainer()
    for _ in range(6):
        stopped.optimizer.step()
        stopped.scheduler.step()
    stopped.step = 6
    stopped.non_finite_steps = [(4, 3.5, float("inf")), (5, float("nan"), float("nan")), (6, 2.0, float("inf"))]
    state = json.loads(json.dumps(stopped.trainer_state(), allow_nan=False))  # strict JSON: no NaN or Infinity
    assert trainer_state_problems(state, 6) == []
    resumed = trainer()
    resumed.restore_trainer_state(state)
    assert [(s, str(loss), str(norm)) for s, loss, norm in resumed.non_finite_steps] == [
        (4, "3.5", "inf"),
        (5, "nan", "nan"),
        (6, "2.0", "inf"),
    ]
    bad = {**state, "non_finite_steps": [[7, "inf", "inf"]]}
    assert trainer_state_problems(bad, 6) == [
        "trainer_state.json field 'non_finite_steps': got [[7, 'inf', 'inf']], expected a list of [step 1..6, "
        '"loss", "grad_norm"] (values as text, e.g. "inf")'
    ]
