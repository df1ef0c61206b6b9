"""Running a sweep end to end: define it (:mod:`trainctl.sweeps.planning`), save its state, then run
every configuration locally (:mod:`trainctl.sweeps.local_runs`) or submit them as training jobs
(:mod:`trainctl.sweeps.submission`) and wait for them (:mod:`trainctl.sweeps.jobs`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainctl.sweeps.jobs import wait_for_jobs
from trainctl.sweeps.local_runs import run_local_configs
from trainctl.sweeps.planning import plan_sweep
from trainctl.sweeps.progress import make_progress
from trainctl.sweeps.state import (
    ACTIVE_STATUSES,
    COMPLETED,
    DEFAULT_SWEEPS_DIR,
    FAILED,
    REJECTED,
    SKIPPED,
    STOPPED,
    SUBMIT_ERROR,
    Sweep,
    SweepConfig,
)
from trainctl.sweeps.submission import check_submitter, submit_configs


@dataclass
class SweepResult:
    """What a sweep run left.

    Attributes:
        sweep: the sweep (its configurations carry statuses and reasons).
        directory: the sweep folder (``sweep.json``, ``runs/``).
        answers: AWS: one submitter answer per submission of this run.
        still_active: AWS: configurations whose jobs were still running when waiting stopped.
        timed_out: AWS: waiting ended at the timeout.
    """

    sweep: Sweep
    directory: Path
    answers: list[dict[str, Any]] = field(default_factory=list)
    still_active: list[SweepConfig] = field(default_factory=list)
    timed_out: bool = False

    @property
    def configs(self) -> list[SweepConfig]:
        return self.sweep.configs

    @property
    def skipped(self) -> list[SweepConfig]:
        return self.sweep.by_status(SKIPPED)

    @property
    def failed(self) -> list[SweepConfig]:
        return self.sweep.by_status(FAILED, REJECTED, SUBMIT_ERROR, STOPPED)

    @property
    def completed(self) -> list[SweepConfig]:
        return self.sweep.by_status(COMPLETED)

    def counts(self) -> dict[str, int]:
        return self.sweep.counts()


def run_local_sweep(
    name: str,
    grid: Mapping[str, Sequence[Any]] | Sequence[str] | None,
    base: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    *,
    sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR,
    set_values: Sequence[str] | Mapping[str, Any] | None = None,
    nproc: int = 2,
    data_dir: str | os.PathLike[str] | None = None,
    device: Mapping[str, Any] | None = None,
    progress: bool | None = None,
) -> SweepResult:
    """Run a sweep locally: every configuration through the container's entry point, one after another.

    Defaults: :data:`~trainctl.sweeps.planning.LOCAL_BASE_HYPERPARAMETERS` (gpt-tiny, 60 steps of 128-token
    sequences) on CPython's documentation text, ``nproc`` CPU processes per run
    (gloo) when there is no GPU. Running it again resumes: completed
    configurations are kept, the others run (from their checkpoints).

    Example::

        result = run_local_sweep("cpu-demo", {"precision": ["fp32", "bf16"], "batch_size": [2, 4]},
                                 set_values={"max_steps": 40}, sweeps_dir=".sweeps")
        paths = trainctl.reports.writer.write_report(result.directory, "reports/cpu-demo")

    Raises:
        SweepError, HyperparameterError: see :func:`~trainctl.sweeps.planning.plan_sweep`.
        KeyboardInterrupt: after stopping the current run (its state saved).
    """
    sweep = plan_sweep(
        name,
        grid,
        mode="local",
        base=base,
        set_values=set_values,
        sweeps_dir=sweeps_dir,
        nproc=nproc,
        data_dir=data_dir,
        device=device,
    )
    sweep.save()
    run_local_configs(sweep, data_dir=data_dir, progress=make_progress(progress))
    return SweepResult(sweep=sweep, directory=sweep.directory)


def run_aws_sweep(
    name: str,
    grid: Mapping[str, Sequence[Any]] | Sequence[str] | None,
    base: str | os.PathLike[str] | Mapping[str, Any] | None = None,
    *,
    sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR,
    set_values: Sequence[str] | Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    function: str | None = None,
    region: str | None = None,
    wait: bool = True,
    timeout: float = 3600.0,
    poll_interval: float = 30.0,
    dry_run: bool = False,
    progress: bool | None = None,
) -> SweepResult:
    """Submit a sweep as SageMaker training jobs through the job submitter, then wait for them.

    Args:
        env: the environment of the in-process submitter and of the
            ``DescribeTrainingJob`` polling (default: the process environment;
            e.g. :attr:`devtools.local_aws.client.LocalAws.env`).
        function: invoke this deployed submitter function instead of the in-process one.
        wait: poll until every job is terminal or ``timeout`` seconds pass.
        dry_run: validate and choose capacity for each configuration; create
            nothing and write no state (the answers are in ``SweepResult.answers``).

    Raises:
        SweepError, HyperparameterError: see :func:`~trainctl.sweeps.planning.plan_sweep`; in process without
            ``AWS_ENDPOINT_URL`` (never real AWS, see :func:`~trainctl.sweeps.submission.check_submitter`); an
            incomplete submitter environment; ``function``'s region or credentials missing.
    """
    sweep = plan_sweep(
        name,
        grid,
        mode="aws",
        base=base,
        set_values=set_values,
        sweeps_dir=sweeps_dir,
        env=env,
        submitter=function or "in-process",
    )
    region = check_submitter(env, function, region)  # before any state is written or request sent
    if dry_run:
        answers = submit_configs(
            sweep, env=env, function=function, region=region, dry_run=True, progress=make_progress(progress)
        )
        return SweepResult(sweep=sweep, directory=sweep.directory, answers=answers)
    sweep.save()
    answers = submit_configs(sweep, env=env, function=function, region=region, progress=make_progress(progress))
    result = SweepResult(sweep=sweep, directory=sweep.directory, answers=answers)
    if wait and any(c.status in ACTIVE_STATUSES for c in sweep.configs):
        result.still_active = wait_for_jobs(
            sweep,
            env=env,
            region=region,
            timeout=timeout,
            poll_interval=poll_interval,
            progress=make_progress(progress),
        )
        result.timed_out = bool(result.still_active)
    return result


__all__ = ["SweepResult", "run_aws_sweep", "run_local_sweep"]
