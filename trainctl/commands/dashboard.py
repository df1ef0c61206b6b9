"""``trainctl dashboard --out FILE``: the platform dashboard as JSON, a PNG of its layout, and the alarms.

Synthesizes the CDK app in-process (``cdk.json`` context plus ``-c`` overrides;
cdk-nag and asset bundling off: ``trainctl synth-summary`` runs the checks) with
the default environment ``cdk synth`` would give it
(:func:`trainctl.cdk_context.synth_environment`: the region from ``AWS_REGION``,
``AWS_DEFAULT_REGION``, the profile, else us-east-1), so it refuses what
``npx cdk synth`` refuses, then

* writes the dashboard body to ``FILE`` as plain JSON: CloudFormation
  intrinsics inside it are rendered readably, ``${LogicalId}`` for a ``Ref``,
  ``${LogicalId.Attr}`` for a ``Fn::GetAtt``, ``${AWS::Region}`` for a
  pseudo parameter, and an alarm's ARN as
  ``arn:aws:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:<AlarmName>``;
* renders ``FILE`` with suffix ``.png``: every widget as a labelled box at its
  grid position (24 columns), coloured by type, so the layout can be reviewed
  without an AWS account;
* lists the alarms: name, metric or expression, threshold, actions.

Python API for demos: :func:`export_dashboard`.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from platform_constructs import intrinsics
from trainctl.cdk_context import add_context_argument

HELP = "Write the platform dashboard body as JSON, render a PNG preview of its layout, and list the alarms."

GRID_COLUMNS = 24
"""CloudWatch dashboards are 24 columns wide."""

_COMPARISONS = {
    "GreaterThanOrEqualToThreshold": ">=",
    "GreaterThanThreshold": ">",
    "LessThanThreshold": "<",
    "LessThanOrEqualToThreshold": "<=",
}


@dataclass(frozen=True)
class AlarmSummary:
    """One alarm as deployed.

    Attributes:
        name: ``AlarmName``.
        kind: ``metric``, ``math`` or ``composite``.
        watches: the metric (``namespace name{dims} statistic/period``), the math
            expression with its inputs, or the composite rule with alarm names.
        threshold: e.g. ``>= 1 for 2 of 3 x 300 s (missing data: notBreaching)``; for a composite, the rule.
        actions: ``ALARM -> <topic>`` / ``OK -> <topic>`` entries.
        description: ``AlarmDescription``.
    """

    name: str
    kind: str
    watches: str
    threshold: str
    actions: tuple[str, ...]
    description: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "watches": self.watches,
            "threshold": self.threshold,
            "actions": list(self.actions),
            "description": self.description,
        }


class DashboardExport(NamedTuple):
    """What :func:`export_dashboard` wrote: ``(json_path, png_path, alarms)``."""

    json_path: Path
    png_path: Path
    alarms: list[AlarmSummary]


# -- rendering the template ----------------------------------------------------------------------


def render_intrinsic(value: Any, names: Mapping[str, str] | None = None) -> str:
    """A CloudFormation value as readable text (see the module docstring), by
    :func:`platform_constructs.intrinsics.render` in ``Fn::Sub`` notation.

    Args:
        value: a template value: a string, a number, ``Ref``, ``Fn::GetAtt``, ``Fn::Join`` or ``Fn::Sub``.
        names: alarm logical ID -> ``AlarmName``; ``Fn::GetAtt [id, Arn]`` of such an
            alarm renders as its ARN. Default: no alarm is known by name.

    Raises:
        ValueError: another intrinsic (e.g. ``Fn::If``), which the deployed value depends on.
    """
    names = dict(names or {})

    def alarm_arn(logical_id: str, attribute: str) -> str | None:
        if attribute == "Arn" and logical_id in names:
            return f"arn:aws:cloudwatch:${{AWS::Region}}:${{AWS::AccountId}}:alarm:{names[logical_id]}"
        return None

    return intrinsics.render(value, notation=intrinsics.SUB, get_att=alarm_arn, functions=intrinsics.BASIC_FUNCTIONS)


def _alarm_names(template: Mapping[str, Any]) -> dict[str, str]:
    return {
        logical_id: resource["Properties"]["AlarmName"]
        for logical_id, resource in template.get("Resources", {}).items()
        if resource["Type"] in ("AWS::CloudWatch::Alarm", "AWS::CloudWatch::CompositeAlarm")
        and isinstance(resource["Properties"].get("AlarmName"), str)
    }


def dashboard_bodies(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Every dashboard of ``template`` as ``{logical id: body (plain JSON)}``.

    Raises:
        ValueError: a body does not render to JSON.
    """
    names = _alarm_names(template)
    bodies = {}
    for logical_id, resource in template.get("Resources", {}).items():
        if resource["Type"] != "AWS::CloudWatch::Dashboard":
            continue
        text = render_intrinsic(resource["Properties"]["DashboardBody"], names)
        try:
            bodies[logical_id] = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"dashboard {logical_id}: the rendered body is not JSON ({exc})") from None
    return bodies


def _metric_text(props: Mapping[str, Any], names: Mapping[str, str]) -> str:
    dims = ",".join(f"{d['Name']}={render_intrinsic(d['Value'], names)}" for d in props.get("Dimensions", []))
    stat = props.get("Statistic") or props.get("ExtendedStatistic") or props.get("Stat")
    return f"{props['Namespace']} {props['MetricName']}{{{dims}}} {stat}/{props['Period']}s"


def alarm_summaries(template: Mapping[str, Any]) -> list[AlarmSummary]:
    """Every alarm and composite alarm of ``template``, in template order."""
    names = _alarm_names(template)
    resources = template.get("Resources", {})

    def actions(props: Mapping[str, Any]) -> tuple[str, ...]:
        out = []
        for key, state in (("AlarmActions", "ALARM"), ("OKActions", "OK"), ("InsufficientDataActions", "INSUFFICIENT_DATA")):
            for action in props.get(key, []):
                target = action.get("Ref") if isinstance(action, dict) else None
                if target in resources and resources[target]["Type"] == "AWS::SNS::Topic":
                    display = resources[target].get("Properties", {}).get("DisplayName")
                    label = f"SNS topic '{display}'" if isinstance(display, str) else f"SNS topic {target}"
                else:
                    label = render_intrinsic(action, names)
                out.append(f"{state} -> {label}")
        return tuple(out)

    found = []
    for logical_id, resource in resources.items():
        props = resource.get("Properties", {})
        if resource["Type"] == "AWS::CloudWatch::CompositeAlarm":
            rule = render_intrinsic(props["AlarmRule"], names)
            rule = re.sub(r'"arn:aws:cloudwatch:\$\{AWS::Region\}:\$\{AWS::AccountId\}:alarm:([^"]+)"', r"\1", rule)
            found.append(
                AlarmSummary(
                    name=props.get("AlarmName", logical_id),
                    kind="composite",
                    watches=rule,
                    threshold="ALARM while the rule holds",
                    actions=actions(props),
                    description=props.get("AlarmDescription", ""),
                )
            )
            continue
        if resource["Type"] != "AWS::CloudWatch::Alarm":
            continue
        if "Metrics" in props:
            expression = next(q for q in props["Metrics"] if "Expression" in q)
            inputs = [
                f"{q['Id']} = {_metric_text({**q['MetricStat']['Metric'], 'Statistic': q['MetricStat']['Stat'], 'Period': q['MetricStat']['Period']}, names)}"
                for q in props["Metrics"]
                if "MetricStat" in q
            ]
            kind, watches = "math", f"{expression['Expression']} where " + "; ".join(inputs)
            period = expression.get("Period") or props["Metrics"][-1].get("MetricStat", {}).get("Period")
        else:
            kind, watches, period = "metric", _metric_text(props, names), props.get("Period")
        evaluations = props["EvaluationPeriods"]
        datapoints = props.get("DatapointsToAlarm", evaluations)
        threshold = (
            f"{_COMPARISONS.get(props['ComparisonOperator'], props['ComparisonOperator'])} {props['Threshold']:g} "
            f"for {datapoints} of {evaluations} x {period} s (missing data: {props.get('TreatMissingData', 'missing')})"
        )
        found.append(
            AlarmSummary(
                name=props.get("AlarmName", logical_id),
                kind=kind,
                watches=watches,
                threshold=threshold,
                actions=actions(props),
                description=props.get("AlarmDescription", ""),
            )
        )
    return found


# -- the layout preview --------------------------------------------------------------------------

_STYLES = {
    "text": ("#e8eaed", "#5f6368"),
    "metric": ("#d2e3fc", "#1a73e8"),
    "log": ("#fde7c8", "#e37400"),
    "alarm": ("#fad2cf", "#c5221f"),
}
_KINDS = {"text": "Text", "metric": "Metric graph", "log": "Logs Insights", "alarm": "Alarm status"}


def _widget_lines(widget: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    """``(kind label, title, detail lines)`` for one widget."""
    kind = widget.get("type", "?")
    props = widget.get("properties", {})
    if kind == "text":
        plain = re.sub(r"\*\*|`", "", props.get("markdown", ""))
        lines = [line.strip() for line in plain.splitlines() if line.strip()]
        title = lines[0].lstrip("# ").strip() if lines else ""
        return "", title, lines[1:]
    label = _KINDS.get(kind, kind)
    title = props.get("title", "")
    details: list[str] = []
    if kind == "metric":
        if props.get("view") == "singleValue":
            label = "Single value"
            names = []
            for entry in props.get("metrics", []):
                options = entry[-1] if entry and isinstance(entry[-1], dict) else {}
                names.append(options.get("label") or next((p for p in entry[1:2] if isinstance(p, str)), "?"))
            return label, title, [", ".join(dict.fromkeys(names))]
        for entry in props.get("metrics", []):
            spec = entry[-1] if entry and isinstance(entry[-1], dict) else {}
            if "expression" in spec:
                match = re.search(r"\{(.*?)\}\s*MetricName=\\?\"([^\"\\]+)", spec["expression"])
                if match:
                    schema = match.group(1).replace('"', "")
                    details.append(f"SEARCH {match.group(2)} by {schema.split(',', 1)[-1]}")
                else:
                    details.append(spec["expression"])
            else:
                names = [part for part in entry if isinstance(part, str)]
                if len(names) >= 2:
                    dims = names[2:]
                    pairs = ", ".join(f"{dims[i]}={dims[i + 1]}" for i in range(0, len(dims) - 1, 2))
                    details.append(f"{names[1]}" + (f" ({pairs})" if pairs else ""))
        if props.get("stacked"):
            label += ", stacked"
    elif kind == "log":
        query = props.get("query", "")
        sources = re.findall(r"SOURCE '([^']+)'", query)
        details.append("Logs Insights on " + ", ".join(sources))
        body = [part.strip() for part in query.split("\n|")[1:]]  # CDK joins the query lines with "\n| "
        details.extend(part for part in body if part.startswith(("filter", "stats", "parse")))
    elif kind == "alarm":
        alarms = [a.rsplit(":alarm:", 1)[-1] for a in props.get("alarms", [])]
        details.append(f"{len(alarms)} alarms: " + ", ".join(alarms))
    return label, title, details


def render_layout_png(body: Mapping[str, Any], path: str | Path, *, title: str = "Dashboard layout") -> Path:
    """Draw the widgets of a dashboard ``body`` as labelled boxes at their grid positions.

    One grid column is 0.62 inch and one grid row 0.34 inch at 110 dpi (a
    24-column dashboard is about 1640 px wide).

    Raises:
        ValueError: a widget lacks ``x``, ``y``, ``width`` or ``height``.
    """
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    widgets = list(body.get("widgets", []))
    for index, widget in enumerate(widgets):
        missing = [k for k in ("x", "y", "width", "height") if k not in widget]
        if missing:
            raise ValueError(f"widget {index} has no {', '.join(missing)}; expected positions (CDK sets them)")
    rows = max((w["y"] + w["height"] for w in widgets), default=1)
    col_in, row_in = 0.62, 0.34
    fig = plt.figure(figsize=(GRID_COLUMNS * col_in, rows * row_in + 0.6), dpi=110)
    ax = fig.add_axes((0, 0, 1, rows * row_in / (rows * row_in + 0.6)))
    ax.set_xlim(0, GRID_COLUMNS)
    ax.set_ylim(rows, 0)
    ax.axis("off")
    top_y = 1 - 0.3 / (rows * row_in + 0.6)
    fig.text(0.01, top_y, title, fontsize=15, fontweight="bold", va="center")
    legend_x = 0.55
    for kind, name in (("metric", "metric graph / single value"), ("log", "Logs Insights"), ("alarm", "alarm status"), ("text", "section header")):
        face, edge = _STYLES[kind]
        fig.text(legend_x, top_y, "  " + name + "  ", fontsize=9, va="center",
                 bbox={"facecolor": "#3c4043" if kind == "text" else face, "edgecolor": edge, "boxstyle": "round,pad=0.3"},
                 color="white" if kind == "text" else "#202124")
        legend_x += 0.03 + 0.0052 * len(name)

    for widget in widgets:
        x, y, w, h = widget["x"], widget["y"], widget["width"], widget["height"]
        kind = widget.get("type", "metric")
        face, edge = _STYLES.get(kind, _STYLES["metric"])
        label, heading, details = _widget_lines(widget)
        is_header = kind == "text"
        ax.add_patch(
            FancyBboxPatch(
                (x + 0.06, y + 0.06), w - 0.12, h - 0.12,
                boxstyle="round,pad=0,rounding_size=0.12",
                facecolor="#3c4043" if is_header else face,
                edgecolor=edge,
                linewidth=1.2,
            )
        )
        chars = max(12, int(w * 8.6))  # monospace 7.5 pt: ~8.6 characters fit one column
        if is_header:
            ax.text(x + 0.3, y + 0.2, heading, fontsize=12, fontweight="bold", color="white", va="top")
            if details:
                text = textwrap.shorten(" ".join(details), width=int(chars * 1.05), placeholder=" ...")
                ax.text(x + 0.3, y + 0.95, text, fontsize=8.5, color="#e8eaed", va="top")
            continue
        ax.text(x + 0.22, y + 0.25, label.upper(), fontsize=6.5, color=edge, fontweight="bold", va="top")
        wrapped = textwrap.wrap(heading, width=int(chars * 0.9)) or [""]
        ax.text(x + 0.22, y + 0.75, "\n".join(wrapped[:2]), fontsize=9, fontweight="bold", color="#202124", va="top")
        top = y + 0.75 + 0.42 * min(len(wrapped), 2) + 0.15
        room = max(0, int((y + h - 0.25 - top) / 0.36))
        lines: list[str] = []
        for detail in details:
            lines.extend(textwrap.wrap(detail, width=chars, subsequent_indent="  ") or [""])
        if len(lines) > room:
            lines = lines[: max(room - 1, 0)] + ([f"... {len(lines) - room + 1} more"] if room else [])
        if lines:
            ax.text(x + 0.22, top, "\n".join(lines), fontsize=7.5, color="#3c4043", va="top", family="monospace", linespacing=1.35)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# -- the whole export ----------------------------------------------------------------------------


def synthesize_template(context: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> tuple[dict[str, Any], str]:
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


def print_alarms(alarms: Sequence[AlarmSummary], console: Any = None) -> None:
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="FILE", help="dashboard JSON file; the layout PNG is written beside it (FILE with .png)")
    add_context_argument(parser, '\'trainingPlanArns=["arn:..."]\'')
    parser.add_argument("--json-alarms", action="store_true", help="print the alarms as JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from rich.markup import escape

    from trainctl.cdk_context import CdkEnvironmentError

    console = Console()
    context = dict(args.context)
    from stacks.config import ConfigError

    try:
        result = export_dashboard(args.out, context=context)
    except (ConfigError, CdkEnvironmentError) as exc:
        console.print(f"[red]configuration error:[/red] {escape(str(exc))}")
        return 2
    if args.json_alarms:
        print(json.dumps([a.to_dict() for a in result.alarms], indent=2))
        return 0
    body = json.loads(result.json_path.read_text())
    console.print(f"dashboard body: {result.json_path} ({len(body['widgets'])} widgets)", markup=False, emoji=False)
    console.print(f"layout preview: {result.png_path}", markup=False, emoji=False)
    print_alarms(result.alarms, console)
    return 0
