"""Local sweep runs: every configuration through the container's entry point, one after the other.

Each configuration runs :func:`training.local.start_local` in
``<sweep dir>/runs/<config id>`` (its output appended to ``train.log``) on
CPython's documentation text (:func:`training.corpus.python_docs_corpus`,
prepared once under the sweeps folder) or on given token shards. A
configuration that completed is not run again; one that was interrupted
resumes from its checkpoint.

How a run ended is read from what the trainer declares, never from its
free-text ``[trainer]`` lines: its ``[run]`` records
(:class:`platform_spec.metric_lines.RunRecord`: ``state=finished`` says it
reached ``max_steps``), its ``[metrics]`` lines (the step it reached, for the
progress bar), its exit status and its failure file
(:func:`training.local.read_failure`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from platform_spec import hyperparameters as hpmod
from platform_spec.metric_lines import RunRecord, RunRecordError, parse_line, parse_run_record
from trainctl.sweeps.progress import make_progress
from trainctl.sweeps.state import COMPLETED, FAILED, RUNNING, SKIPPED, STOPPED, Sweep

if TYPE_CHECKING:
    from rich.progress import Progress

STOP_GRACE_S = 150.0
"""Seconds a run gets to checkpoint and exit after SIGTERM before it is killed: more than the entry point
gives its workers (:data:`training.entrypoint.SHUTDOWN_TIMEOUT_S`, within SageMaker's 120 s), so the
entry point's own deadline always acts first."""


def python_docs_shards(sweeps_dir: str | os.PathLike[str]) -> Path:
    """CPython's documentation topics as byte-level token shards, prepared once under ``<sweeps_dir>/_data``."""
    from training.corpus import python_docs_corpus
    from training.prepare import prepare_data

    root = Path(sweeps_dir) / "_data"
    shards = root / "python-docs"
    if not any(shards.glob("shard-*.bin")):
        corpus = python_docs_corpus(root / "python-docs.jsonl")
        prepare_data(shards, [corpus])
    return shards


@dataclass
class RunOutput:
    """What a run's output declared, read line by line (:meth:`read`).

    Attributes:
        last_step: the step of the newest ``[metrics]`` line (0: none yet).
        records: the run's ``[run]`` records, in order (malformed ones, e.g. a line cut short, left out).
    """

    last_step: int = 0
    records: list[RunRecord] = field(default_factory=list)

    def read(self, line: str) -> int | None:
        """Take one output line; returns the step when it is a metric line with one, else None."""
        values = parse_line(line)
        if values is not None:
            if "step" in values:
                self.last_step = int(values["step"])
                return self.last_step
            return None
        with contextlib.suppress(RunRecordError):
            record = parse_run_record(line)
            if record is not None:
                self.records.append(record)
        return None

    @classmethod
    def of(cls, lines: Iterable[str]) -> RunOutput:
        """The declarations of a whole output (e.g. a ``train.log``)."""
        output = cls()
        for line in lines:
            output.read(line)
        return output

    @property
    def finished(self) -> RunRecord | None:
        """The run's ``state=finished`` record (it reached ``max_steps``), or None."""
        return next((r for r in reversed(self.records) if r.state == "finished"), None)


def outcome(returncode: int, output: RunOutput, *, failure: str | None, log: Path) -> tuple[str, str | None]:
    """A finished run's sweep status and reason, from its exit status and what it declared.

    Args:
        returncode: the entry point's exit status.
        output: the run's declarations (:class:`RunOutput`).
        failure: the trainer's one-line failure reason (:func:`training.local.read_failure`), or None.
        log: the run's ``train.log`` (named when there is no better reason).

    Returns:
        ``("Completed", None)``: exit 0 and a ``finished`` record; ``("Stopped", reason)``: exit 0 without one
        (a SIGTERM stop); ``("Failed", reason)``: any other exit status, saying so when training had finished
        (a worker dying at shutdown: SageMaker calls that job Failed too).
    """
    finished = output.finished
    if returncode == 0 and finished is not None:
        return COMPLETED, None
    if returncode == 0:
        return STOPPED, "the run stopped before max_steps (SIGTERM); run the sweep again to resume"
    if finished is not None:  # training completed, then a worker died on the way out (SageMaker: Failed too)
        return FAILED, (
            f"exit status {returncode} after training finished at step {finished.step}: "
            f"{failure or 'a worker crashed at shutdown'}; run the sweep again to resume from the final checkpoint"
        )
    return FAILED, failure or f"exit status {returncode}; see {log}"


def run_local_configs(
    sweep: Sweep, *, data_dir: str | os.PathLike[str] | None = None, progress: Progress | None = None
) -> None:
    """Run every local configuration that has not completed, one after the other.

    Each run writes its output to ``<run dir>/train.log`` (appended on a
    resume). The state is saved after each run. Ctrl-C stops the current run
    as SageMaker would (SIGTERM: it checkpoints), marks it ``Stopped`` and
    re-raises.
    """
    from training.local import read_failure, start_local

    if data_dir is None:
        data = sweep.target.get("data")
        data_dir = python_docs_shards(sweep.directory.parent) if data in (None, "python-docs") else Path(data)
    todo = [c for c in sweep.configs if c.status not in (SKIPPED, COMPLETED)]
    progress = progress or make_progress(False)
    nproc = int(sweep.target.get("nproc", 2))
    with progress:
        overall = progress.add_task(f"sweep {sweep.name}", total=len(todo))
        for config in todo:
            max_steps = int(hpmod.parse(config.hyperparameters).max_steps)
            task = progress.add_task(f"  {config.id}", total=max_steps)
            run_dir = sweep.directory / (config.run_dir or f"runs/{config.id}")
            run_dir.mkdir(parents=True, exist_ok=True)
            config.mark(RUNNING)
            sweep.save()
            output = RunOutput()
            with open(run_dir / "train.log", "a", encoding="utf-8") as log:
                log.write(
                    f"# trainctl sweep {sweep.name}: {config.title} ({datetime.now(UTC).isoformat(timespec='seconds')})\n"
                )
                proc = start_local(run_dir, config.hyperparameters, data_dir=data_dir, nproc=nproc)
                try:
                    assert proc.stdout is not None
                    for line in proc.stdout:
                        log.write(line)
                        step = output.read(line)
                        if step is not None:
                            progress.update(task, completed=step)
                    returncode = proc.wait()
                except KeyboardInterrupt:
                    stop(proc)
                    config.mark(STOPPED, "interrupted (Ctrl-C); run the sweep again to resume from its checkpoint")
                    sweep.save()
                    raise
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
            failure = read_failure(run_dir) if returncode != 0 else None
            config.mark(*outcome(returncode, output, failure=failure, log=run_dir / "train.log"))
            sweep.save()
            progress.update(task, completed=max_steps if output.finished else output.last_step, visible=False)
            progress.advance(overall)


def stop(proc: subprocess.Popen[str]) -> None:
    """Stop a run as SageMaker does (SIGTERM: it checkpoints); kill it after :data:`STOP_GRACE_S`."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


__all__ = ["STOP_GRACE_S", "RunOutput", "outcome", "python_docs_shards", "run_local_configs", "stop"]
