"""What ``trainctl sweep`` prints and its exit status: one table row per configuration, then what to do next.

Exit status (:func:`sweep_and_summarise`): 0 every configuration that was not
skipped completed (AWS with ``wait=False``: submitted; ``dry_run``:
validated); 1 some failed, were refused, could not be submitted or stopped, or
every configuration was skipped (nothing to run); 2 bad input, or no submitter
to use (in process without ``AWS_ENDPOINT_URL``; a function without a region
or credentials); 3 jobs still running at ``timeout``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from platform_spec.errors import FieldError
from trainctl.output_paths import folder_problem, output_error
from trainctl.sweeps.runner import SweepResult
from trainctl.sweeps.state import DEFAULT_SWEEPS_DIR, PENDING, REJECTED, SKIPPED, SUBMIT_ERROR, Sweep, SweepError

if TYPE_CHECKING:
    from rich.console import Console

EXIT_OK = 0
EXIT_NOT_COMPLETED = 1
EXIT_BAD_INPUT = 2
EXIT_STILL_RUNNING = 3


def iter_rows(sweep: Sweep) -> Iterator[tuple[str, str, str, str]]:
    """``(id, grid values, status, job name / run folder / reason)`` per configuration, for summaries."""
    for c in sweep.configs:
        where = (
            c.job_name
            if sweep.mode == "aws" and c.status not in (SKIPPED,)
            else (c.run_dir if c.status != SKIPPED else "")
        )
        yield c.id, c.title, c.status, (c.reason or where or "")


def sweep_and_summarise(
    name: str,
    grid: Sequence[str] | Mapping[str, Sequence[Any]] | None,
    *,
    base: str | os.PathLike[str] | None = None,
    set_values: Sequence[str] | None = None,
    local: bool = False,
    function: str | None = None,
    dry_run: bool = False,
    sweeps_dir: str | os.PathLike[str] | None = None,
    nproc: int = 2,
    data_dir: str | os.PathLike[str] | None = None,
    region: str | None = None,
    wait: bool = True,
    timeout: float = 3600.0,
    poll_interval: float = 30.0,
    progress: bool | None = None,
) -> int:
    """Run a sweep (locally, or as training jobs; ``dry_run``: expand, prune and validate only), print its
    table and what to do next; return the exit status (module docstring).

    Errors (a bad grid, base or name; no submitter to use) are one line on stderr, ``trainctl sweep: ...``,
    with exit status 2 and nothing written or sent.
    """
    from rich.console import Console

    from platform_spec.hyperparameters import HyperparameterError
    from trainctl.submitter_client import SubmitError
    from trainctl.sweeps.planning import plan_sweep
    from trainctl.sweeps.runner import run_aws_sweep, run_local_sweep

    directory = Path(sweeps_dir) if sweeps_dir is not None else DEFAULT_SWEEPS_DIR
    problem = folder_problem(directory)
    if problem is not None:  # before a sweep state is written or a run started
        print(f"trainctl sweep: {output_error('--dir', directory, problem)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if local and data_dir is not None and not Path(data_dir).is_dir():
        what = "is a file" if Path(data_dir).exists() else "does not exist"
        refusal = FieldError("--data", str(data_dir), "a folder of token shards (trainctl prepare-data)", detail=what)
        print(f"trainctl sweep: {refusal}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        if local and dry_run:
            sweep = plan_sweep(
                name,
                grid,
                mode="local",
                base=base,
                set_values=set_values,
                sweeps_dir=directory,
                nproc=nproc,
                data_dir=data_dir,
            )
            result = SweepResult(sweep=sweep, directory=sweep.directory)
        elif local:
            result = run_local_sweep(
                name,
                grid,
                base,
                sweeps_dir=directory,
                set_values=set_values,
                nproc=nproc,
                data_dir=data_dir,
                progress=progress,
            )
        else:
            result = run_aws_sweep(
                name,
                grid,
                base,
                sweeps_dir=directory,
                set_values=set_values,
                function=function,
                region=region,
                wait=wait,
                timeout=timeout,
                poll_interval=poll_interval,
                dry_run=dry_run,
                progress=progress,
            )
    except (SweepError, HyperparameterError, SubmitError) as exc:
        print(f"trainctl sweep: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    # Everything printed here is data (names, grid values, refusal reasons, paths): never rich markup or
    # emoji codes, so a reason naming `tags.aws:x:` is printed as it is, not as an emoji.
    console = Console(markup=False, emoji=False, highlight=False)
    report_hint = f"trainctl report {result.sweep.name}" + (f" --dir {sweeps_dir}" if sweeps_dir is not None else "")
    return summarise(result, console=console, dry_run=dry_run, timeout=timeout, report_hint=report_hint)


def summarise(result: SweepResult, *, console: Console, dry_run: bool, timeout: float, report_hint: str) -> int:
    """Print ``result``'s table on ``console`` and what went wrong on stderr; return the exit status
    (module docstring)."""
    from rich.table import Table

    sweep = result.sweep
    answers = {a["config"]: a for a in result.answers}
    table = Table(title=f"sweep {sweep.name} ({sweep.mode}{', dry run' if dry_run else ''})")
    for column in ("config", "grid values", "status", "job / run / reason"):
        table.add_column(column, overflow="fold")
    for config_id, title, status, detail in iter_rows(sweep):
        answer = answers.get(config_id)
        if dry_run and answer:
            status, detail = (
                answer["status"],
                answer.get("reason")
                or f"{answer.get('training_job_name')} ({(answer.get('capacity') or {}).get('type', '')})",
            )
        elif dry_run and status == PENDING:
            status = "would run"
        table.add_row(config_id, title, status, detail)
    console.print(table)
    if all(c.status == SKIPPED for c in sweep.configs):
        print(
            f"trainctl sweep: every configuration of {sweep.name} was skipped (see the reasons above); nothing to run",
            file=sys.stderr,
        )
        return EXIT_NOT_COMPLETED
    if dry_run:
        unanswered = [a for a in result.answers if a["status"] in (REJECTED, SUBMIT_ERROR)]
        if unanswered:
            print(
                f"trainctl sweep: {len(unanswered)} configuration(s) would not run; first: "
                f"{unanswered[0]['config']}: {unanswered[0].get('reason')}",
                file=sys.stderr,
            )
            return EXIT_NOT_COMPLETED
        return EXIT_OK
    console.print(f"state: {sweep.state_file}   report: {report_hint} --out reports/{sweep.name}")
    if result.timed_out:
        print(
            f"trainctl sweep: {len(result.still_active)} job(s) still running after {timeout:g} s; "
            "run the same command again to keep waiting",
            file=sys.stderr,
        )
        return EXIT_STILL_RUNNING
    not_submitted = sweep.by_status(SUBMIT_ERROR)
    if not_submitted:
        pending = sweep.by_status(PENDING)
        print(
            f"trainctl sweep: {len(not_submitted)} configuration(s) could not be submitted"
            + (f" and {len(pending)} were not sent" if pending else "")
            + f": {not_submitted[0].reason}; run the same command again to retry",
            file=sys.stderr,
        )
    if result.failed or sweep.by_status(PENDING):
        return EXIT_NOT_COMPLETED
    return EXIT_OK


__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_NOT_COMPLETED",
    "EXIT_OK",
    "EXIT_STILL_RUNNING",
    "iter_rows",
    "summarise",
    "sweep_and_summarise",
]
