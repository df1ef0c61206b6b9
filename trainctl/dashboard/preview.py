"""A PNG preview of a dashboard's layout: every widget as a labelled box at its grid position, coloured by
type, so the layout can be reviewed without an AWS account. Drawn with matplotlib (Agg)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

GRID_COLUMNS = 24
"""CloudWatch dashboards are 24 columns wide."""


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
    for kind, name in (
        ("metric", "metric graph / single value"),
        ("log", "Logs Insights"),
        ("alarm", "alarm status"),
        ("text", "section header"),
    ):
        face, edge = _STYLES[kind]
        fig.text(
            legend_x,
            top_y,
            "  " + name + "  ",
            fontsize=9,
            va="center",
            bbox={"facecolor": "#3c4043" if kind == "text" else face, "edgecolor": edge, "boxstyle": "round,pad=0.3"},
            color="white" if kind == "text" else "#202124",
        )
        legend_x += 0.03 + 0.0052 * len(name)

    for widget in widgets:
        x, y, w, h = widget["x"], widget["y"], widget["width"], widget["height"]
        kind = widget.get("type", "metric")
        face, edge = _STYLES.get(kind, _STYLES["metric"])
        label, heading, details = _widget_lines(widget)
        is_header = kind == "text"
        ax.add_patch(
            FancyBboxPatch(
                (x + 0.06, y + 0.06),
                w - 0.12,
                h - 0.12,
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
            ax.text(
                x + 0.22,
                top,
                "\n".join(lines),
                fontsize=7.5,
                color="#3c4043",
                va="top",
                family="monospace",
                linespacing=1.35,
            )

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


__all__ = ["GRID_COLUMNS", "render_layout_png"]
