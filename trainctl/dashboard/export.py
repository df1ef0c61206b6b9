"""The platform's dashboard exported from the CDK app: synthesized in process, written as JSON with a PNG
preview of its layout beside it, and its alarms listed.

The app is synthesized with ``cdk.json`` context plus overrides (cdk-nag and
asset bundling off: ``trainctl synth-summary`` runs the checks) in the default
environment ``cdk synth`` would give it
(:func:`trainctl.cdk_context.synth_environment`: the region from
``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile, else us-east-1), so it
refuses what ``npx cdk synth`` refuses.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from trainctl.dashboard.preview import render_layout_png
from trainctl.dashboard.template import AlarmSummary, alarm_summaries, dashboard_bodies
from trainctl.output_paths import file_problem, os_error_text, output_error

if TYPE_CHECKING:
    from rich.console import Console


class DashboardExport(NamedTuple):
    """What :func:`export_dashboard` wrote: ``(json_path, png_path, alarms)``."""

    json_path: Path
    png_path: Path
    alarms: list[AlarmSummary]


def synthesize_template(
    context: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, Any], str]:
    """Synthesize the app (cdk-nag off, no asset bundling) into a temporary folder; returns ``(template, stack name)``.

    Args:
        context: context overrides on top of ``cdk.json``.
        environ: the app's environment variables (account and region). Default: this
            process's, as the CDK CLI would hand them to the app
            (:func:`trainctl.cdk_context.synth_environment`).

    Raises:
        stacks.config.ConfigError: a context value is invalid.
        trainctl.cdk_context.CdkEnvironmentError: the AWS config files cannot be read.
    """
    from stacks.platform_app import create_app
    from trainctl.cdk_context import synth_environment

    if environ is None:
        environ = synth_environment()

    # Lambda packages are not needed to read the template: skip bundling them (CDK's own switch)
    merged = {"aws:cdk:bundling-stacks": [], **dict(context or {})}
    with tempfile.TemporaryDirectory(prefix="trainctl-dashboard-") as outdir:
        app, stack = create_app(context=merged, outdir=outdir, nag=False, environ=environ, stack_traces=False)
        app.synth()
        template = json.loads((Path(outdir) / f"{stack.stack_name}.template.json").read_text())
    return template, stack.stack_name


def export_dashboard(
    out_path: str | Path,
    *,
    context: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    template: Mapping[str, Any] | None = None,
) -> DashboardExport:
    """Write the dashboard JSON to ``out_path`` and its layout PNG beside it; return them and the alarms.

    Args:
        out_path: the JSON file (the PNG gets the same name with suffix ``.png``).
        context: context overrides on top of ``cdk.json`` (e.g. ``{"trainingPlanArns": [...]}``).
        environ: environment for account/region. Default: this process's, as the CDK
            CLI would hand them to the app (:func:`trainctl.cdk_context.synth_environment`).
        template: an already synthesized template to read instead of synthesizing.

    Raises:
        stacks.config.ConfigError: a context value is invalid.
        trainctl.cdk_context.CdkEnvironmentError: the AWS config files cannot be read.
        ValueError: the template holds no dashboard, or more than one.
    """
    stack_name = "TrainingPlatform"
    if template is None:
        template, stack_name = synthesize_template(context, environ)
    bodies = dashboard_bodies(template)
    if len(bodies) != 1:
        raise ValueError(f"expected one dashboard in the template, found {len(bodies)}: {sorted(bodies)}")
    (body,) = bodies.values()
    json_path = Path(out_path)
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(body, indent=2) + "\n")
    png_path = json_path.with_suffix(".png")
    render_layout_png(body, png_path, title=f"{stack_name} dashboard: layout preview ({len(body['widgets'])} widgets)")
    return DashboardExport(json_path, png_path, alarm_summaries(template))


def print_alarms(alarms: Sequence[AlarmSummary], console: Console | None = None) -> None:
    """The alarms as a rich table (names and expressions as they are: never read as markup or emoji codes)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = console or Console()
    table = Table(title=f"{len(alarms)} alarms", title_justify="left", show_lines=True)
    table.add_column("Alarm", overflow="fold")
    table.add_column("Watches (metric or expression)", overflow="fold")
    table.add_column("Threshold", overflow="fold")
    table.add_column("Actions", overflow="fold")
    for alarm in alarms:
        table.add_row(Text.assemble(alarm.name, "\n", (alarm.kind, "dim")), Text(alarm.watches), Text(alarm.threshold),
                      Text("\n".join(alarm.actions) or "-"))  # fmt: skip
    console.print(table)


def export_and_print(
    out_path: str | Path, *, context: Mapping[str, Any] | None = None, json_alarms: bool = False
) -> int:
    """``trainctl dashboard``: export the dashboard (:func:`export_dashboard`) and print where it went and the
    alarms (a table, or JSON with ``json_alarms``); return the exit status: 0, or 2 with the configuration
    error on one line (an invalid context value, unreadable AWS config files) or ``out_path`` that cannot be
    a file (a folder, a file among its parents: checked before the synth), 1 when writing fails."""
    from rich.console import Console
    from rich.markup import escape

    from stacks.config import ConfigError
    from trainctl.cdk_context import CdkEnvironmentError

    console = Console()
    problem = file_problem(out_path)
    if problem is not None:  # before the synth, which takes a while
        print(f"trainctl dashboard: {output_error('--out', out_path, problem, folder=False)}", file=sys.stderr)
        return 2
    try:
        result = export_dashboard(out_path, context=context)
    except (ConfigError, CdkEnvironmentError) as exc:
        console.print(f"[red]configuration error:[/red] {escape(str(exc))}")
        return 2
    except OSError as exc:  # what only writing can tell: no permission, a full disk
        print(f"trainctl dashboard: {os_error_text(exc)}", file=sys.stderr)
        return 1
    if json_alarms:
        print(json.dumps([a.to_dict() for a in result.alarms], indent=2))
        return 0
    body = json.loads(result.json_path.read_text())
    console.print(f"dashboard body: {result.json_path} ({len(body['widgets'])} widgets)", markup=False, emoji=False)
    console.print(f"layout preview: {result.png_path}", markup=False, emoji=False)
    print_alarms(result.alarms, console)
    return 0


__all__ = ["DashboardExport", "export_and_print", "export_dashboard", "print_alarms", "synthesize_template"]
