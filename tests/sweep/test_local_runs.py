"""How a local sweep run ended comes from what the trainer declares (its ``[run]`` records, metric lines, exit
status and failure file), never from its free-text ``[trainer]`` lines: transcripts whose free text is
reworded, removed or left without the records. (The real trainer's output is in test_local_sweep.py.)"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from platform_spec.metric_lines import RunRecord, format_line, format_run_record
from trainctl.sweeps.local_runs import RunOutput, outcome, run_local_configs
from trainctl.sweeps.planning import plan_sweep
from trainctl.sweeps.state import COMPLETED, FAILED, STOPPED, load_sweep
from training.environment import SageMakerPaths

CPU = {"device": "cpu", "device_name": "x86_64", "world_size": 2}
FINISHED_TEXT = "[trainer] training finished at step 12\n"


def transcript(
    *, finished_record: bool = True, finished_text: str | None = FINISHED_TEXT, steps: int = 12
) -> list[str]:
    """What a 12-step CPU run prints (entry point, trainer, records, metrics), with the end as asked."""
    lines = [
        "[entrypoint] base directory /tmp/run\n",
        "[trainer] model=gpt-tiny layers=2 hidden=256 device=cpu (x86_64) world_size=2 precision=fp32\n",
        format_run_record(RunRecord("starting", step=0, **CPU)) + "\n",
        format_run_record(RunRecord("training", step=0, **CPU)) + "\n",
    ]
    lines += [
        format_line({"step": s, "loss": 6.0 - s / 10, "tokens_per_sec": 1000.0}) + "\n" for s in range(1, steps + 1)
    ]
    lines.append("[trainer] checkpoint /tmp/run/checkpoints/step-12 (end of training, 0.1 s)\n")
    if finished_record:
        lines.append(format_run_record(RunRecord("finished", step=steps, saved=steps, **CPU)) + "\n")
    if finished_text is not None:
        lines.append(finished_text)
    return lines


@pytest.mark.parametrize(
    "finished_text",
    [FINISHED_TEXT, "[trainer] done: reached max_steps=12\n", "[trainer] training complete (12 steps)\n", None],
    ids=["as today", "reworded", "other words", "no line"],
)
def test_a_run_that_declared_it_finished_completed_whatever_its_free_text_says(
    finished_text: str | None, tmp_path: Path
) -> None:
    output = RunOutput.of(transcript(finished_text=finished_text))
    assert output.last_step == 12 and output.finished is not None and output.finished.step == 12
    assert outcome(0, output, failure=None, log=tmp_path / "train.log") == (COMPLETED, None)


def test_the_free_text_alone_does_not_complete_a_run(tmp_path: Path) -> None:
    """The old reader matched "training finished at step N"; without the record the run did not finish."""
    output = RunOutput.of(transcript(finished_record=False))
    assert output.finished is None and output.last_step == 12
    status, reason = outcome(0, output, failure=None, log=tmp_path / "train.log")
    assert status == STOPPED and reason == "the run stopped before max_steps (SIGTERM); run the sweep again to resume"


def test_a_record_cut_short_is_not_a_finish(tmp_path: Path) -> None:
    lines = transcript(finished_record=False, finished_text=None)
    lines.append('[run] state=finished step=12 device=cpu device_name="x86')  # the log ends mid-record
    output = RunOutput.of(lines)
    assert output.finished is None
    assert outcome(0, output, failure=None, log=tmp_path / "train.log")[0] == STOPPED


def test_a_crash_after_the_finish_says_so_and_other_failures_name_the_reason(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    finished = RunOutput.of(transcript(finished_text="[trainer] bye\n"))
    assert outcome(1, finished, failure=None, log=log) == (
        FAILED,
        "exit status 1 after training finished at step 12: a worker crashed at shutdown; run the sweep again to "
        "resume from the final checkpoint",
    )
    assert outcome(-6, finished, failure="RuntimeError on rank 1", log=log)[1].startswith(
        "exit status -6 after training finished at step 12: RuntimeError on rank 1;"
    )
    broken = RunOutput.of(transcript(finished_record=False)[:6])
    assert outcome(1, broken, failure="CUDA out of memory at step 3", log=log) == (
        FAILED,
        "CUDA out of memory at step 3",
    )
    assert outcome(1, broken, failure=None, log=log) == (FAILED, f"exit status 1; see {log}")


class FakeRun:
    """A started entry point as ``training.local.start_local`` returns it: output lines and an exit status."""

    def __init__(self, lines: list[str], returncode: int) -> None:
        self.stdout: Iterator[str] = iter(lines)
        self.returncode = returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode

    def poll(self) -> int:
        return self.returncode

    def kill(self) -> None:  # pragma: no cover - the run has exited
        raise AssertionError("an exited run is not killed")


def test_a_sweep_marks_its_runs_from_their_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import training.local

    ends = {
        # config title -> (output, exit status, failure file)
        "precision=fp32 batch_size=1": (transcript(finished_text="[trainer] all 12 steps done\n"), 0, None),
        "precision=fp32 batch_size=2": (transcript(finished_record=False), 0, None),
        "precision=bf16 batch_size=1": (transcript(finished_text=None), 1, None),
        "precision=bf16 batch_size=2": (
            transcript(finished_record=False, finished_text=None)[:7],
            1,
            "DataError: shard-00000.bin is empty",
        ),
    }
    started: list[str] = []

    def start_local(run_dir: Path, hyperparameters: dict, **kwargs) -> FakeRun:
        title = f"precision={hyperparameters['precision']} batch_size={hyperparameters['batch_size']}"
        started.append(title)
        lines, code, failure = ends[title]
        if failure:
            paths = SageMakerPaths(Path(run_dir))
            paths.failure_file.parent.mkdir(parents=True, exist_ok=True)
            paths.failure_file.write_text(failure + "\n")
        return FakeRun(lines, code)

    monkeypatch.setattr(training.local, "start_local", start_local)
    sweep = plan_sweep(
        "records",
        {"precision": ["fp32", "bf16"], "batch_size": [1, 2]},
        mode="local",
        set_values={"max_steps": 12},
        sweeps_dir=tmp_path,
        device={"type": "cpu"},
        data_dir=tmp_path / "shards",
    )
    sweep.save()
    run_local_configs(sweep, data_dir=tmp_path / "shards")

    assert started == list(ends)
    saved = {c.title: (c.status, c.reason) for c in load_sweep("records", tmp_path).configs}
    assert saved == {
        "precision=fp32 batch_size=1": (COMPLETED, None),
        "precision=fp32 batch_size=2": (
            STOPPED,
            "the run stopped before max_steps (SIGTERM); run the sweep again to resume",
        ),
        "precision=bf16 batch_size=1": (
            FAILED,
            "exit status 1 after training finished at step 12: a worker crashed at shutdown; run the sweep again to "
            "resume from the final checkpoint",
        ),
        "precision=bf16 batch_size=2": (FAILED, "DataError: shard-00000.bin is empty"),
    }
    log = (tmp_path / "records" / "runs" / "01-fp32-bs1" / "train.log").read_text()
    assert (
        log.startswith("# trainctl sweep records: precision=fp32 batch_size=1 (")
        and "[run] state=finished step=12" in log
    )
    # a completed configuration is not run again; the others are
    started.clear()
    run_local_configs(load_sweep("records", tmp_path), data_dir=tmp_path / "shards")
    assert started == list(ends)[1:]


def test_the_state_file_is_json_a_reader_can_use_mid_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While a run is in flight the state says InProgress (and is whole JSON), so a report mid-sweep works."""
    import training.local

    seen: list[str] = []

    def start_local(run_dir: Path, hyperparameters: dict, **kwargs) -> FakeRun:
        state = json.loads((tmp_path / "mid" / "sweep.json").read_text())
        seen.append(next(c["status"] for c in state["configs"] if c["run_dir"] == f"runs/{Path(run_dir).name}"))
        return FakeRun(transcript(), 0)

    monkeypatch.setattr(training.local, "start_local", start_local)
    sweep = plan_sweep(
        "mid",
        {"precision": ["fp32"]},
        mode="local",
        set_values={"max_steps": 12},
        sweeps_dir=tmp_path,
        device={"type": "cpu"},
        data_dir=tmp_path / "shards",
    )
    sweep.save()
    run_local_configs(sweep, data_dir=tmp_path / "shards")
    assert seen == ["InProgress"] and load_sweep("mid", tmp_path).configs[0].status == COMPLETED


def test_stop_sends_sigterm_and_waits_for_the_checkpoint() -> None:
    """Ctrl-C during a sweep stops the run as SageMaker does: SIGTERM, then the run's own exit."""
    import sys

    from trainctl.sweeps.local_runs import stop

    code = "import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\nprint('ready', flush=True)\ntime.sleep(60)\n"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    stop(proc)
    assert proc.returncode == 7  # it handled SIGTERM itself: not killed
