"""A sweep report's Markdown: one table row per configuration (none left out), the figures, the convergence
check in numbers, what did not complete and how every number is computed."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from trainctl.reports.analysis import Divergence
from trainctl.reports.results import ConfigResult, format_tokens_per_second
from trainctl.sweeps.state import COMPLETED, Sweep


def _fmt(value: float, spec: str, missing: str = "-") -> str:
    return format(value, spec) if isinstance(value, (int, float)) and math.isfinite(value) else missing


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _prediction_cells(r: ConfigResult, sweep: Sweep) -> tuple[str, str]:
    pred = r.predicted
    if not pred:
        if sweep.mode == "local" and (sweep.target.get("device") or {}).get("type") != "cuda":
            return "n/a (CPU run)", "n/a (CPU run)"
        return "-", "-"
    mem = _fmt(pred.get("memory_gb_total", math.nan), ".1f")
    speed = pred.get("tokens_per_second")
    if speed is None:  # skipped: the planner's verdict, no speed as if it had run
        return f"not run ({pred.get('status') or 'skipped'})", mem
    tps = format_tokens_per_second(speed)
    if pred.get("auto_tune"):
        tps += " (with auto_tune's change)"
    elif pred.get("status") == "at-risk":
        tps += " (at-risk, accepted)"
    if r.comparable and math.isfinite(r.tokens_ratio):
        tps += f" ({r.tokens_ratio:.2f}x)"
    if r.comparable and math.isfinite(r.memory_ratio):
        mem += f" ({r.memory_ratio:.2f}x)"
    return tps, mem


def _mfu_cell(r: ConfigResult, sweep: Sweep) -> str:
    if math.isfinite(r.mfu):
        return f"{r.mfu:.1f}"
    if r.measured and sweep.mode == "local" and (sweep.target.get("device") or {}).get("type") != "cuda":
        return "n/a (CPU)"
    return "-"


def _notes_cell(r: ConfigResult) -> str:
    if r.reason:
        return r.reason
    if r.status == COMPLETED:
        return f"{r.final_step} steps; {r.source}" if r.final_step else r.source
    return r.source if r.source != "none" else ""


def markdown_table(sweep: Sweep, results: Sequence[ConfigResult]) -> str:
    """The report's table: one row per configuration, none left out."""
    header = (
        "| # | config | status | tokens/s | MFU (%) | peak memory (GB) | final loss "
        "| planner tokens/s (measured/predicted) | planner memory GB (measured/predicted) | notes |"
    )
    rows = [header, "|" + "---|" * 10]
    for r in results:
        pred_tps, pred_mem = _prediction_cells(r, sweep)
        rows.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    r.config.id.split("-", 1)[0],
                    r.config.title,
                    r.status,
                    format_tokens_per_second(r.tokens_per_sec),
                    _mfu_cell(r, sweep),
                    _fmt(r.peak_memory_gb, ".3f" if r.peak_memory_gb < 10 else ".1f"),
                    _loss_cell(r),
                    pred_tps,
                    pred_mem,
                    _notes_cell(r),
                )
            )
            + " |"
        )
    return "\n".join(rows)


def _loss_cell(r: ConfigResult) -> str:
    """The final training loss, and the final validation loss where the configuration evaluated one."""
    cell = _fmt(r.final_loss, ".4f")
    if math.isfinite(r.final_validation_loss):
        cell += f" (validation {r.final_validation_loss:.4f})"
    return cell


def _describe_base(sweep: Sweep) -> str:
    hp = sweep.base if sweep.mode == "local" else sweep.base.get("hyperparameters", {})
    keys = [
        k
        for k in (
            "model",
            "num_layers",
            "precision",
            "batch_size",
            "seq_length",
            "max_steps",
            "activation_checkpointing",
        )
        if k in hp and k not in sweep.grid
    ]
    return ", ".join(f"{k}={hp[k]}" for k in keys) or "(defaults)"


def render_markdown(
    sweep: Sweep, results: Sequence[ConfigResult], divs: Sequence[Divergence], figures: Mapping[str, str]
) -> str:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    if sweep.mode == "local":
        device = sweep.target.get("device") or {}
        where = (
            f"local runs through the container entry point on {device.get('type', 'cpu').upper()} "
            f"({sweep.target.get('nproc', 2)} processes, gloo)"
            if device.get("type") != "cuda"
            else f"local runs on {device.get('gpus')}x {device.get('name') or device.get('gpu')}"
        )
        data = (
            "CPython's documentation topics (byte-level tokens)"
            if sweep.target.get("data") in (None, "python-docs")
            else sweep.target.get("data")
        )
        where += f"; data: {data}"
    else:
        where = (
            f"SageMaker training jobs on {sweep.target.get('instance_count', 1)}x {sweep.target.get('instance_type')} "
            f"({sweep.target.get('gpu')}), submitted through the job submitter ({sweep.target.get('submitter', 'in-process')}); "
            f"jobs tagged sweep={sweep.name}"
        )
    grid = "; ".join(f"{k} = {', '.join(v)}" for k, v in sweep.grid.items())
    lines = [
        f"# Sweep `{sweep.name}`",
        "",
        f"- Where: {where}",
        f"- Base: {_describe_base(sweep)}",
        f"- Grid: {grid} ({len(results)} configurations: "
        + ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items()))
        + ")",
        f"- Generated: {datetime.now(UTC).isoformat(timespec='seconds')} by `trainctl report`",
        "",
        markdown_table(sweep, results),
        "",
        "## Throughput and memory",
        "",
        f"![tokens/s and peak memory per configuration]({figures['throughput_memory']})",
        "",
        "## Convergence",
        "",
        f"![loss curves per precision]({figures['loss_curves']})",
        "",
    ]
    if divs:
        lines += [f"- {d.sentence()}" for d in divs]
    elif len({r.config.precision for r in results}) < 2:
        lines.append("- The grid has one precision: no format comparison.")
    else:
        lines.append("- No two formats with loss data share the other grid values yet: no divergence to state.")
    missing_curves = [r for r in results if r.measured and not r.curve]
    if missing_curves:
        lines.append(
            "- No per-step loss curve for "
            + ", ".join(r.config.id for r in missing_curves)
            + ": their final values (FinalMetricDataList) are used."
        )
    problems = [r for r in results if r.status != COMPLETED]
    if problems:
        lines += ["", "## Not completed", ""]
        lines += [
            f"- `{r.config.id}` ({r.config.title}): **{r.status}**: {_cell(r.reason or r.source)}" for r in problems
        ]
    lines += [
        "",
        "## How the numbers are computed",
        "",
        "- tokens/s (whole job) and MFU: median over the metric lines of the second half of the logged steps "
        "(steady state); with final values only, the final value. MFU is n/a on CPU (no vendor dense peak).",
        "- peak memory: the largest `peak_mem_allocated_gb` logged, per GPU (CPU: peak resident set size per process), GB = 1e9 bytes.",
        "- final loss: training cross-entropy of the last logged step, nats/token.",
        "- planner: `planner.estimate` for the configuration on the sweep's hardware; the ratio is measured / predicted "
        "(shown where the run was on that hardware). A configuration skipped for its memory verdict (`out-of-memory`, "
        "or `at-risk` without `accept_memory_risk`) did not run: it shows the predicted memory and `not run` with the "
        "verdict instead of a speed; one run with `auto_tune` shows the prediction of the changed configuration.",
        "- convergence: formats that differ only in precision, compared with the group's highest precision; centred "
        "moving average over a tenth of the common steps; mean/max absolute difference over the common steps.",
        "",
    ]
    return "\n".join(lines)


__all__ = ["markdown_table", "render_markdown"]
