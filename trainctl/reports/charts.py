"""A sweep report's figures: tokens/s and peak memory per configuration (the guide's figure), and the loss
curves per precision with each format's divergence from its baseline. Drawn with matplotlib (Agg), imported
when a figure is drawn."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from platform_spec.precisions import PRECISIONS
from trainctl.reports.analysis import PRECISION_ORDER, Divergence, group_key, group_label, smooth, smoothing_window
from trainctl.reports.results import ConfigResult, format_tokens_per_second
from trainctl.sweeps.state import SKIPPED, Sweep

PRECISION_COLORS: dict[str, str] = {p.name: p.color for p in PRECISIONS}
"""Each precision's colour in the figures (the registry's)."""


def _status_words(status: str) -> str:
    """``InProgress`` -> ``in progress``."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", status).lower()


def _precision_rank(precision: str) -> int:
    return PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)


def _color(precision: str) -> str:
    return PRECISION_COLORS.get(precision, "#7F7F7F")


def _memory_label(sweep: Sweep) -> str:
    if sweep.mode == "local" and (sweep.target.get("device") or {}).get("type") != "cuda":
        return "peak memory per process (GB, RSS)"
    return "peak memory per GPU (GB)"


def _device_caption(sweep: Sweep, results: Sequence[ConfigResult]) -> str:
    devices = sorted({r.device for r in results if r.device})
    if devices:
        return ", ".join(devices)
    if sweep.mode == "aws":
        return f"{sweep.target.get('instance_count', 1)}x {sweep.target.get('instance_type')}"
    return str((sweep.target.get("device") or {}).get("type", "local"))


def _pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (imported when a figure is drawn)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    _pyplot().close(fig)
    return path


def plot_throughput_memory(sweep: Sweep, results: Sequence[ConfigResult], path: Path) -> Path:
    """Bars of tokens/s (left axis, coloured by precision) and a line of peak memory (right axis)
    per configuration; configurations without a measurement are labelled with their status."""
    n = len(results)
    fig, ax = _pyplot().subplots(figsize=(max(7.5, 0.95 * n + 3.5), 5.4), dpi=130)
    has_pred = _throughput_bars(ax, sweep, results)
    _memory_line(ax.twinx(), sweep, results)
    handles = _throughput_legend(results, has_pred)
    fig.legend(handles=handles, loc="lower center", fontsize=8, ncol=min(len(handles), 4), frameon=False)
    ax.set_title(
        f"Sweep {sweep.name}: throughput and peak memory per configuration\n{_device_caption(sweep, results)}",
        fontsize=11,
    )
    rows = math.ceil(len(handles) / min(len(handles), 4))
    fig.tight_layout(rect=(0, 0.035 * rows + 0.02, 1, 1))
    return _save(fig, path)


def _throughput_bars(ax: Any, sweep: Sweep, results: Sequence[ConfigResult]) -> bool:
    """The tokens/s bars (a hatched stub with the status where nothing was measured) and, for jobs, the
    planner's predictions as dashes; whether any prediction was drawn."""
    from matplotlib.ticker import FuncFormatter

    xs = list(range(len(results)))
    finite_tps = [r.tokens_per_sec for r in results if math.isfinite(r.tokens_per_sec)]
    preds = [(r.predicted or {}).get("tokens_per_second") if r.predicted else None for r in results]
    top = max(finite_tps + [p for p in preds if isinstance(p, (int, float)) and sweep.mode == "aws"] or [1.0])
    for x, r in zip(xs, results, strict=True):
        if math.isfinite(r.tokens_per_sec):
            ax.bar(x, r.tokens_per_sec, width=0.65, color=_color(r.config.precision), edgecolor="black", linewidth=0.4)
            inside = r.tokens_per_sec > top * 0.12  # inside the bar, clear of the memory line's labels
            ax.text(
                x,
                r.tokens_per_sec + (-1 if inside else 1) * top * 0.015,
                format_tokens_per_second(r.tokens_per_sec),
                ha="center",
                va="top" if inside else "bottom",
                fontsize=8,
                **({"color": "white", "fontweight": "bold"} if inside else {}),
            )
        else:
            ax.bar(x, top * 0.04, width=0.65, color="none", edgecolor="#999999", hatch="///", linewidth=0.6)
            ax.text(
                x,
                top * 0.06,
                _status_words(r.status),
                ha="center",
                va="bottom",
                rotation=90,
                fontsize=8,
                color="#555555",
            )
    # a configuration that did not run has no predicted speed (None)
    drawn = [(x, p) for x, p in zip(xs, preds, strict=True) if sweep.mode == "aws" and isinstance(p, (int, float))]
    for x, p in drawn:
        ax.plot([x - 0.32, x + 0.32], [p, p], color="black", linestyle="--", linewidth=1.2)
    ax.set_ylim(0, top * 1.6)
    ax.set_ylabel("throughput (tokens/s, whole job)")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xticks(xs)
    ax.set_xticklabels([r.config.label for r in results], rotation=30, ha="right", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    return bool(drawn)


def _memory_line(ax2: Any, sweep: Sweep, results: Sequence[ConfigResult]) -> None:
    """Peak memory per configuration on the right axis, in the upper band of the figure."""
    from matplotlib.ticker import MaxNLocator

    mem = [(x, r.peak_memory_gb) for x, r in enumerate(results) if math.isfinite(r.peak_memory_gb)]
    if mem:
        # NaN breaks the line at configurations without a measurement
        xs = list(range(len(results)))
        ax2.plot(xs, [r.peak_memory_gb for r in results], color="#222222", marker="o", linewidth=1.6, markersize=5)
        for x, y in mem:
            ax2.annotate(
                f"{y:.2f} GB" if y < 10 else f"{y:.1f} GB",
                (x, y),
                textcoords="offset points",
                xytext=(0, 7),
                ha="center",
                fontsize=7.5,
                color="#222222",
            )
        # memory lives in the upper band (64-94 % of the height), clear of the bars (<= 62.5 %)
        highest = max(y for _, y in mem)
        high = highest * 1.2
        ax2.set_ylim(-2.17 * highest, high)
        ax2.set_yticks([t for t in MaxNLocator(nbins=4).tick_values(0, highest) if 0 <= t <= high])
    else:
        ax2.set_ylim(0, 1)
    ax2.set_ylabel(_memory_label(sweep))


def _throughput_legend(results: Sequence[ConfigResult], has_pred: bool) -> list[Any]:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    precisions = [
        p for p in PRECISION_ORDER if any(r.config.precision == p and math.isfinite(r.tokens_per_sec) for r in results)
    ]
    handles: list[Any] = [
        Patch(facecolor=_color(p), edgecolor="black", linewidth=0.4, label=f"tokens/s ({p})") for p in precisions
    ]
    handles.append(Line2D([], [], color="#222222", marker="o", label="peak memory"))
    if has_pred:
        handles.append(Line2D([], [], color="black", linestyle="--", label="planner prediction (tokens/s)"))
    if any(not math.isfinite(r.tokens_per_sec) for r in results):
        handles.append(Patch(facecolor="none", edgecolor="#999999", hatch="///", label="not measured (status)"))
    return handles


def plot_loss_curves(sweep: Sweep, results: Sequence[ConfigResult], divs: Sequence[Divergence], path: Path) -> Path:
    """Loss against step, one panel per combination of the non-precision grid values, one line per
    precision (thin: raw, bold: smoothed; circles: the validation loss where the runs evaluated one), with the
    divergences from the baseline on each panel."""
    groups: dict[tuple[tuple[str, str], ...], list[ConfigResult]] = {}
    for r in results:
        groups.setdefault(group_key(r.config), []).append(r)
    # a panel per group with anything run or submitted; groups skipped entirely are named below
    all_skipped = [k for k, members in groups.items() if all(r.status == SKIPPED for r in members)]
    keys = [k for k in groups if k not in all_skipped] or list(groups)[:1]
    ncols = min(3, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = _pyplot().subplots(nrows, ncols, figsize=(5.6 * ncols, 4.3 * nrows), dpi=130, squeeze=False)
    for ax in axes.flat[len(keys) :]:
        ax.axis("off")
    for ax, key in zip(axes.flat[: len(keys)], keys, strict=True):
        _loss_panel(ax, groups[key], [d for d in divs if d.group == group_label(key)], group_label(key))
    fig.suptitle(f"Sweep {sweep.name}: loss per precision (convergence check; Δ in nats/token, smoothed)", fontsize=11)
    skipped_groups = [group_label(k) for k in all_skipped if k in groups and k not in keys]
    if skipped_groups:
        fig.text(
            0.5,
            0.005,
            "no panel (every configuration skipped): " + ", ".join(skipped_groups),
            ha="center",
            va="bottom",
            fontsize=8,
            color="#555555",
        )
        fig.tight_layout(rect=(0, 0.03, 1, 1))
    else:
        fig.tight_layout()
    return _save(fig, path)


def _loss_panel(ax: Any, members: Sequence[ConfigResult], notes: Sequence[Divergence], label: str) -> None:
    """One group's panel: its loss curves (or final losses), the divergences ``notes`` and what is not plotted."""
    drawn = _loss_lines(ax, members)
    text = "\n".join(
        f"{d.precision} vs {d.baseline}{_kind(d)}: mean |Δ| {d.mean_abs:.3f}, max {d.max_abs:.3f}"
        if d.basis == "curves"
        else f"{d.precision} vs {d.baseline}{_kind(d)}: final |Δ| {d.max_abs:.3f} (final values only)"
        for d in notes
    )
    absent = [r for r in members if not r.curve and not math.isfinite(r.final_loss)]
    if drawn and absent:
        not_plotted = "not plotted: " + ", ".join(f"{r.config.precision} ({_status_words(r.status)})" for r in absent)
        text = "\n".join(filter(None, [text, not_plotted]))
    if not drawn:
        statuses = ", ".join(f"{r.config.precision}: {_status_words(r.status)}" for r in members)
        ax.text(0.5, 0.5, f"no loss data\n{statuses}", ha="center", va="center", transform=ax.transAxes, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    else:
        ax.legend(fontsize=8, loc="upper right")
        ax.set_xlabel("step")
        validation = any(r.validation_curve or math.isfinite(r.final_validation_loss) for r in members)
        ax.set_ylabel("loss (nats/token)" + ("; circles: validation" if validation else ", training"))
        ax.grid(alpha=0.3)
    if text:
        ax.text(
            0.02,
            0.03,
            text,
            transform=ax.transAxes,
            fontsize=8,
            va="bottom",
            bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "edgecolor": "#cccccc"},
        )
    ax.set_title("all configurations" if label == "all" else label, fontsize=10)


def _kind(divergence: Divergence) -> str:
    """`` (validation)`` for a validation-loss divergence, else nothing."""
    return "" if divergence.loss == "training" else f" ({divergence.loss})"


def _validation_points(ax: Any, r: ConfigResult, color: str) -> bool:
    """``r``'s validation losses as circles joined by a thin line (or its final one); whether any was drawn."""
    points = r.validation_curve or (
        [(r.final_step or 0, r.final_validation_loss)] if math.isfinite(r.final_validation_loss) else []
    )
    if points:
        ax.plot(
            [s for s, _ in points],
            [v for _, v in points],
            color=color,
            marker="o",
            markersize=4,
            linewidth=0.9,
            label=f"{r.config.precision} validation ({r.config.id})",
        )
    return bool(points)


def _loss_lines(ax: Any, members: Sequence[ConfigResult]) -> bool:
    """Each precision's loss curve (raw and smoothed) or final loss, and its validation losses; whether anything
    was drawn."""
    drawn = False
    styles = iter(["-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1))])
    for r in sorted(members, key=lambda r: _precision_rank(r.config.precision)):
        color = _color(r.config.precision)
        if r.curve:
            steps = [s for s, _ in r.curve]
            losses = [v for _, v in r.curve]
            window = smoothing_window(len(losses))
            style = next(styles, "-")
            if window > 1:
                ax.plot(steps, losses, color=color, alpha=0.25, linewidth=0.8)
            ax.plot(
                steps,
                smooth(losses, window),
                color=color,
                linewidth=1.8,
                linestyle=style,
                label=f"{r.config.precision} ({r.config.id})" + (f", avg of {window}" if window > 1 else ""),
            )
            drawn = True
        elif math.isfinite(r.final_loss):
            ax.scatter(
                [r.final_step or 0],
                [r.final_loss],
                color=color,
                marker="D",
                zorder=3,
                label=f"{r.config.precision} final ({r.config.id})",
            )
            drawn = True
        drawn = _validation_points(ax, r, color) or drawn
    return drawn


__all__ = ["PRECISION_COLORS", "plot_loss_curves", "plot_throughput_memory"]
