"""Writing a sweep's report: ``report.md``, ``throughput_memory.png``, ``loss_curves.png`` and ``report.json``
(:func:`write_report`), and what ``trainctl report`` prints (:func:`write_and_print`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from trainctl.output_paths import folder_problem, os_error_text, output_error
from trainctl.reports.analysis import Divergence, divergences
from trainctl.reports.charts import plot_loss_curves, plot_throughput_memory
from trainctl.reports.collection import collect
from trainctl.reports.markdown import markdown_table, render_markdown
from trainctl.reports.results import ConfigResult
from trainctl.sweeps.state import DEFAULT_SWEEPS_DIR, Sweep, SweepError, load_sweep


@dataclass(frozen=True)
class ReportPaths:
    """The files a report wrote."""

    directory: Path
    markdown: Path
    throughput_memory: Path
    loss_curves: Path
    data: Path


@dataclass
class Report:
    """A sweep's collected results (see :func:`build_report`)."""

    sweep: Sweep
    results: list[ConfigResult]
    divergences: list[Divergence]

    def table(self) -> str:
        return markdown_table(self.sweep, self.results)


def build_report(
    name_or_dir: str | os.PathLike[str] | Sweep,
    *,
    sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR,
    env: Mapping[str, str] | None = None,
    region: str | None = None,
) -> Report:
    """Collect a sweep's results and divergences (no files written).

    Raises:
        SweepError: no such sweep.
    """
    sweep = name_or_dir if isinstance(name_or_dir, Sweep) else load_sweep(name_or_dir, sweeps_dir)
    results = collect(sweep, env=env, region=region)
    return Report(sweep=sweep, results=results, divergences=divergences(results))


def write_report(
    name_or_dir: str | os.PathLike[str] | Sweep,
    out_dir: str | os.PathLike[str],
    *,
    sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR,
    env: Mapping[str, str] | None = None,
    region: str | None = None,
) -> ReportPaths:
    """Write ``report.md``, ``throughput_memory.png``, ``loss_curves.png`` and ``report.json`` to ``out_dir``.

    Args:
        name_or_dir: a sweep name (under ``sweeps_dir``), a sweep folder, or a :class:`~trainctl.sweeps.state.Sweep`.
        env: AWS sweeps: environment for the boto3 clients (default: the process's).

    Raises:
        SweepError: no such sweep.
    """
    report = build_report(name_or_dir, sweeps_dir=sweeps_dir, env=env, region=region)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = ReportPaths(
        directory=out,
        markdown=out / "report.md",
        throughput_memory=out / "throughput_memory.png",
        loss_curves=out / "loss_curves.png",
        data=out / "report.json",
    )
    plot_throughput_memory(report.sweep, report.results, paths.throughput_memory)
    plot_loss_curves(report.sweep, report.results, report.divergences, paths.loss_curves)
    figures = {"throughput_memory": paths.throughput_memory.name, "loss_curves": paths.loss_curves.name}
    paths.markdown.write_text(
        render_markdown(report.sweep, report.results, report.divergences, figures), encoding="utf-8"
    )
    data = {
        "sweep": report.sweep.name,
        "mode": report.sweep.mode,
        "grid": report.sweep.grid,
        "target": report.sweep.target,
        "rows": [r.to_json() for r in report.results],
        "divergences": [d.to_json() for d in report.divergences],
    }
    paths.data.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    return paths


def write_and_print(
    name_or_dir: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    sweeps_dir: str | os.PathLike[str] | None = None,
    region: str | None = None,
) -> int:
    """``trainctl report``: write the report (:func:`write_report`), print its table and the files written;
    return the exit status: 0, or 2 (one line on stderr) when there is no such sweep or ``out_dir`` cannot be a
    folder (checked before anything is read or written), 1 when a file cannot be read or written."""
    problem = folder_problem(out_dir)
    if problem is not None:
        print(f"trainctl report: {output_error('--out', out_dir, problem)}", file=sys.stderr)
        return 2
    try:
        paths = write_report(name_or_dir, out_dir, sweeps_dir=sweeps_dir or DEFAULT_SWEEPS_DIR, region=region)
    except SweepError as exc:
        print(f"trainctl report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # what only reading or writing can tell: no permission, a full disk
        print(f"trainctl report: {os_error_text(exc)}", file=sys.stderr)
        return 1
    text = paths.markdown.read_text(encoding="utf-8")
    table = "\n".join(line for line in text.splitlines() if line.startswith("|"))
    print(table)
    print(f"\nwrote {paths.markdown}, {paths.throughput_memory}, {paths.loss_curves}, {paths.data}")
    return 0


__all__ = ["Report", "ReportPaths", "build_report", "write_and_print", "write_report"]
