"""Sweep reports: throughput, memory and convergence of every configuration, side by side.

``trainctl report NAME --out DIR`` (or :func:`write_report`) reads a sweep's
state (:mod:`trainctl.sweep`), collects each configuration's measurements and
writes to ``DIR``:

* ``report.md``: one table row per configuration -- skipped, rejected, failed
  and running ones included, with their reasons: status, tokens/s, MFU, peak
  memory, final loss, and the planner's prediction next to the measurement
  (measured / predicted); then the convergence check, in numbers;
* ``throughput_memory.png``: tokens/s (bars, coloured by precision) and peak
  memory (line, right axis) per configuration -- the guide's figure;
* ``loss_curves.png``: loss against step per precision, one panel per
  combination of the other grid values, with each format's divergence from the
  baseline format written on the panel;
* ``report.json``: the same rows and divergences as data.

Where the numbers come from
---------------------------
* Local runs: the run's ``train.log`` (its ``[metrics]`` lines, read with
  :func:`platform_spec.metric_lines.parse_line`).
* Training jobs: ``DescribeTrainingJob`` (status, ``FailureReason``,
  ``FinalMetricDataList``: SageMaker's last value of each ``MetricDefinitions``
  regex), and the job's log streams in CloudWatch Logs
  (``/aws/sagemaker/TrainingJobs``, streams ``<job>/algo-N-...``) read with the
  same ``parse_line`` for per-step loss curves. When the logs are not readable
  the report says so and uses the final values.

Summaries (per configuration)
-----------------------------
* tokens/s (whole job) and MFU: the median over the metric lines of the second
  half of the logged steps -- the steady state; the first steps include
  start-up and compilation. With final values only: the final value.
* peak memory: the largest ``peak_mem_allocated_gb`` logged (per GPU; on CPU
  the process's peak resident set size).
* final loss: the loss of the last logged step.
* planner ratio: measured / predicted tokens/s and peak memory, where the
  planner made a prediction for the hardware the configuration ran on (AWS
  jobs; not CPU runs: the planner models GPUs).

Convergence divergence
----------------------
Configurations that differ only in precision are compared with the baseline
format of their group: the highest precision present (fp32, else bf16, else
fp16, ...). Both loss curves are smoothed with a moving average of
``window`` steps (centred, clipped at the ends; a tenth of the common steps, at least 1, at most 25) and
compared over their common steps: mean and max absolute difference (nats per
token), and the final smoothed loss's relative difference.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from platform_spec.metric_lines import FIELDS, parse_line
from platform_spec.precisions import PRECISION_NAMES, PRECISIONS
from trainctl.sweep import (
    ACTIVE_STATUSES,
    COMPLETED,
    DEFAULT_SWEEPS_DIR,
    SKIPPED,
    Sweep,
    SweepConfig,
    aws_client,
    load_sweep,
)

SAGEMAKER_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
METRIC_TO_FIELD: dict[str, str] = {metric: name for name, metric, _ in FIELDS}
"""SageMaker metric name (``train:loss``) -> metric-line field (``loss``)."""

PRECISION_ORDER: tuple[str, ...] = PRECISION_NAMES
"""Baseline preference for the convergence check (the registry's order): the first present wins."""

PRECISION_COLORS: dict[str, str] = {p.name: p.color for p in PRECISIONS}
"""Each precision's colour in the figures (the registry's)."""
MAX_SMOOTHING_WINDOW = 25


# --- collection ----------------------------------------------------------------------------------


@dataclass
class ConfigResult:
    """One configuration's measurements and the planner's prediction.

    Attributes:
        config: the sweep configuration.
        status: its status now (for jobs: ``DescribeTrainingJob``'s, else the sweep state's).
        reason: why it was skipped / refused / failed (``FailureReason`` for jobs).
        source: where the numbers come from (e.g. ``"train.log (60 metric lines)"``).
        curve: ``[(step, loss)]`` from metric lines (empty with final values only).
        final_step: the last step logged or reported.
        tokens_per_sec: whole job, steady state (see the module docstring); NaN if unknown.
        tokens_per_sec_per_gpu: per GPU (per CPU process on CPU).
        mfu: percent; NaN on CPU or unknown GPUs.
        peak_memory_gb: peak allocated per GPU (CPU: peak RSS per process), GB (1e9 bytes).
        final_loss: cross-entropy of the last logged step, nats/token.
        device: e.g. ``"CPU (x86_64), 2 processes"`` or ``"1x ml.p6-b200.48xlarge (8x B200)"``.
        predicted: the planner's figures (:func:`trainctl.sweep.prediction_of`) or None.
        comparable: the prediction is for the hardware the measurement ran on.
    """

    config: SweepConfig
    status: str
    reason: str | None = None
    source: str = "none"
    curve: list[tuple[int, float]] = field(default_factory=list)
    final_step: int | None = None
    tokens_per_sec: float = math.nan
    tokens_per_sec_per_gpu: float = math.nan
    mfu: float = math.nan
    peak_memory_gb: float = math.nan
    final_loss: float = math.nan
    device: str | None = None
    predicted: dict[str, Any] | None = None
    comparable: bool = False

    @property
    def measured(self) -> bool:
        return math.isfinite(self.tokens_per_sec) or math.isfinite(self.final_loss) or math.isfinite(self.peak_memory_gb)

    @property
    def tokens_ratio(self) -> float:
        """Measured / predicted tokens/s (NaN without a comparable prediction)."""
        return _ratio(self.tokens_per_sec, (self.predicted or {}).get("tokens_per_second")) if self.comparable else math.nan

    @property
    def memory_ratio(self) -> float:
        """Measured / predicted peak memory per GPU (NaN without a comparable prediction)."""
        return _ratio(self.peak_memory_gb, (self.predicted or {}).get("memory_gb_total")) if self.comparable else math.nan

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.config.id,
            "config": self.config.overrides,
            "label": self.config.label,
            "status": self.status,
            "reason": self.reason,
            "source": self.source,
            "device": self.device,
            "final_step": self.final_step,
            "tokens_per_sec": _num(self.tokens_per_sec),
            "tokens_per_sec_per_gpu": _num(self.tokens_per_sec_per_gpu),
            "mfu": _num(self.mfu),
            "peak_memory_gb": _num(self.peak_memory_gb),
            "final_loss": _num(self.final_loss),
            "predicted": self.predicted,
            "prediction_comparable": self.comparable,
            "tokens_per_sec_measured_over_predicted": _num(self.tokens_ratio),
            "memory_measured_over_predicted": _num(self.memory_ratio),
            "job_name": self.config.job_name,
            "run_dir": self.config.run_dir,
            "curve": [[s, v] for s, v in self.curve],
        }


def _num(value: float) -> float | None:
    return round(value, 6) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _ratio(measured: float, predicted: Any) -> float:
    if not isinstance(predicted, (int, float)) or not predicted or not math.isfinite(measured):
        return math.nan
    return measured / float(predicted)


def metrics_by_step(lines: Sequence[str]) -> list[dict[str, float]]:
    """The ``[metrics]`` lines of ``lines`` as dicts, one per step (the last line of a step wins:
    a resumed run repeats the steps after its checkpoint), in step order."""
    by_step: dict[int, dict[str, float]] = {}
    for line in lines:
        values = parse_line(line)
        if values and "step" in values and math.isfinite(values["step"]):
            by_step[int(values["step"])] = values
    return [by_step[s] for s in sorted(by_step)]


def _median_finite(values: Sequence[float]) -> float:
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return statistics.median(finite) if finite else math.nan


def summarise(result: ConfigResult, steps: Sequence[Mapping[str, float]], final: Mapping[str, float]) -> None:
    """Fill ``result``'s summary figures from per-step metric lines, else from final values."""
    if steps:
        last = int(steps[-1]["step"])
        steady = [m for m in steps if m["step"] > last / 2] or [steps[-1]]
        result.tokens_per_sec = _median_finite([m.get("tokens_per_sec", math.nan) for m in steady])
        result.tokens_per_sec_per_gpu = _median_finite([m.get("tokens_per_sec_per_gpu", math.nan) for m in steady])
        result.mfu = _median_finite([m.get("mfu", math.nan) for m in steady])
        memory = [m["peak_mem_allocated_gb"] for m in steps if math.isfinite(m.get("peak_mem_allocated_gb", math.nan))]
        result.peak_memory_gb = max(memory) if memory else math.nan
        result.curve = [(int(m["step"]), float(m["loss"])) for m in steps if "loss" in m and math.isfinite(m["loss"])]
        result.final_loss = steps[-1].get("loss", math.nan)
        result.final_step = last
        return
    if final:
        result.tokens_per_sec = final.get("tokens_per_sec", math.nan)
        result.tokens_per_sec_per_gpu = final.get("tokens_per_sec_per_gpu", math.nan)
        result.mfu = final.get("mfu", math.nan)
        result.peak_memory_gb = final.get("peak_mem_allocated_gb", math.nan)
        result.final_loss = final.get("loss", math.nan)
        step = final.get("step")
        if isinstance(step, (int, float)) and math.isfinite(step):
            result.final_step = int(step)
        elif result.status == COMPLETED:  # a completed job ran max_steps
            result.final_step = _max_steps(result.config)


def _max_steps(config: SweepConfig) -> int | None:
    try:
        return int(config.hyperparameters.get("max_steps", ""))
    except ValueError:
        return None


_DEVICE_RE = re.compile(r"device=(\w+) \(([^)]*)\) world_size=(\d+)")


def collect_local(sweep: Sweep, config: SweepConfig) -> ConfigResult:
    """Read a local run's ``train.log``."""
    result = ConfigResult(config=config, status=config.status, reason=config.reason)
    if config.status == SKIPPED or not config.run_dir:
        return result
    log = sweep.directory / config.run_dir / "train.log"
    if not log.is_file():
        result.source = "no train.log yet"
        return result
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    steps = metrics_by_step(lines)
    summarise(result, steps, {})
    result.source = f"train.log ({len(steps)} metric lines)"
    for line in reversed(lines):
        match = _DEVICE_RE.search(line)
        if match:
            kind, name, world = match.groups()
            result.device = f"CPU ({name}), {world} processes" if kind == "cpu" else f"{world}x {name}"
            break
    device = sweep.target.get("device") or {}
    result.predicted = config.prediction
    # a prediction exists only for a known local GPU (the planner models GPUs, not CPUs)
    result.comparable = bool(config.prediction) and device.get("type") == "cuda"
    return result


def job_log_lines(logs: Any, job_name: str, log_group: str = SAGEMAKER_LOG_GROUP) -> list[str]:
    """Every log event of the job's streams (``<job>/...``) in ``log_group``, oldest first per stream.

    Raises:
        botocore.exceptions.ClientError: the logs cannot be read (e.g. no such group, access denied).
    """
    streams: list[str] = []
    kwargs: dict[str, Any] = {"logGroupName": log_group, "logStreamNamePrefix": f"{job_name}/"}
    while True:
        page = logs.describe_log_streams(**kwargs)
        streams += [s["logStreamName"] for s in page.get("logStreams", [])]
        if not page.get("nextToken"):
            break
        kwargs["nextToken"] = page["nextToken"]
    lines: list[str] = []
    for stream in sorted(streams):
        token = None
        while True:
            args: dict[str, Any] = {"logGroupName": log_group, "logStreamName": stream, "startFromHead": True}
            if token:
                args["nextToken"] = token
            page = logs.get_log_events(**args)
            lines += [e["message"] for e in page.get("events", [])]
            nxt = page.get("nextForwardToken")
            if not page.get("events") or not nxt or nxt == token:
                break
            token = nxt
    return lines


def collect_job(sweep: Sweep, config: SweepConfig, sagemaker: Any, logs: Any) -> ConfigResult:
    """``DescribeTrainingJob`` + the job's CloudWatch Logs for one configuration."""
    result = ConfigResult(config=config, status=config.status, reason=config.reason, predicted=config.prediction)
    if not config.job_name or config.status in (SKIPPED, "Pending", "Rejected", "SubmitError"):
        return result
    try:
        job = sagemaker.describe_training_job(TrainingJobName=config.job_name)
    except Exception as exc:  # noqa: BLE001 - shown in the report
        result.reason = f"DescribeTrainingJob failed: {exc}"
        return result
    result.status = job.get("TrainingJobStatus", config.status)
    if job.get("FailureReason"):
        result.reason = job["FailureReason"]
    elif result.status in ACTIVE_STATUSES or result.status == "Stopped":
        transitions = job.get("SecondaryStatusTransitions") or []
        message = transitions[-1].get("StatusMessage") if transitions else None
        result.reason = f"{job.get('SecondaryStatus', result.status)}" + (f": {message}" if message else "")
    resource = job.get("ResourceConfig") or {}
    instance_type, count = resource.get("InstanceType"), resource.get("InstanceCount", 1)
    final = {
        METRIC_TO_FIELD[m["MetricName"]]: float(m["Value"])
        for m in job.get("FinalMetricDataList") or []
        if m.get("MetricName") in METRIC_TO_FIELD
    }
    steps: list[dict[str, float]] = []
    logs_note = ""
    try:
        steps = metrics_by_step(job_log_lines(logs, config.job_name))
    except Exception as exc:  # noqa: BLE001 - fall back to FinalMetricDataList
        logs_note = f"; CloudWatch Logs unreadable ({type(exc).__name__})"
    summarise(result, steps, final)
    if steps:
        result.source = f"CloudWatch Logs ({len(steps)} metric lines)"
    elif final:
        result.source = f"FinalMetricDataList (no per-step log lines{logs_note or ' in CloudWatch Logs'})"
    else:
        result.source = "no metrics yet" + logs_note
    from platform_spec import catalogue

    try:
        gpu = catalogue.get_instance(instance_type).gpu_spec.name if instance_type else None
    except KeyError:
        gpu = None
    per = catalogue.get_instance(instance_type).gpus_per_instance if gpu else None
    result.device = f"{count}x {instance_type} ({(per or 0) * count}x {gpu})" if gpu else instance_type
    pred = config.prediction or {}
    result.comparable = bool(pred) and pred.get("instance_type") == instance_type and pred.get("instance_count") == count
    return result


def collect(sweep: Sweep, *, env: Mapping[str, str] | None = None, region: str | None = None) -> list[ConfigResult]:
    """Every configuration's :class:`ConfigResult`, in grid order (none left out).

    Args:
        env: AWS sweeps: the environment for the boto3 clients (default: the
            process environment; ``AWS_ENDPOINT_URL`` honoured).
    """
    if sweep.mode == "local":
        return [collect_local(sweep, c) for c in sweep.configs]
    sagemaker = aws_client("sagemaker", env, region)
    logs = aws_client("logs", env, region)
    return [collect_job(sweep, c, sagemaker, logs) for c in sweep.configs]


# --- convergence ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Divergence:
    """One format's loss against its group's baseline format.

    Attributes:
        group: the other grid values shared by both (``"bs4"``; ``"all"`` when precision is the only axis).
        precision, baseline: the formats compared.
        config_id, baseline_id: their configurations.
        steps: common steps compared (0 with final values only).
        window: moving-average window, steps.
        mean_abs, max_abs: mean / max |smoothed loss - baseline smoothed loss|, nats/token.
        final, baseline_final: final (smoothed) losses.
        final_rel_pct: ``100 * (final - baseline_final) / baseline_final``.
        basis: ``"curves"`` or ``"final values"``.
    """

    group: str
    precision: str
    baseline: str
    config_id: str
    baseline_id: str
    steps: int
    window: int
    mean_abs: float
    max_abs: float
    final: float
    baseline_final: float
    final_rel_pct: float
    basis: str

    def sentence(self) -> str:
        where = "" if self.group == "all" else f" ({self.group})"
        if self.basis == "curves":
            return (
                f"{self.precision} vs {self.baseline}{where}: smoothed loss differs by mean {self.mean_abs:.4f}, "
                f"max {self.max_abs:.4f} nats/token over {self.steps} common steps (moving average of {self.window}); "
                f"final smoothed loss {self.final:.4f} vs {self.baseline_final:.4f} ({self.final_rel_pct:+.2f} %)"
            )
        return (
            f"{self.precision} vs {self.baseline}{where}: final loss {self.final:.4f} vs {self.baseline_final:.4f} "
            f"(|difference| {self.max_abs:.4f} nats/token, {self.final_rel_pct:+.2f} %; final values only, no per-step curves)"
        )

    def to_json(self) -> dict[str, Any]:
        return {k: (_num(v) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Centred moving average: element ``i`` is the mean of ``values[i - window // 2 : i - window // 2 + window]``,
    the window clipped at both ends (so the curve does not lag the raw losses)."""
    n = len(values)
    prefix = [0.0]
    for v in values:
        prefix.append(prefix[-1] + v)
    out: list[float] = []
    for i in range(n):
        lo = max(0, i - window // 2)
        hi = min(n, i - window // 2 + window)
        out.append((prefix[hi] - prefix[lo]) / (hi - lo))
    return out


def smoothing_window(steps: int) -> int:
    """A tenth of the steps, at least 1, at most :data:`MAX_SMOOTHING_WINDOW`."""
    return max(1, min(MAX_SMOOTHING_WINDOW, round(steps / 10)))


def group_key(config: SweepConfig) -> tuple[tuple[str, str], ...]:
    return tuple((k, v) for k, v in config.overrides.items() if k != "precision")


def group_label(key: Sequence[tuple[str, str]]) -> str:
    from trainctl.sweep import _slug_part

    return " ".join(_slug_part(k, v) for k, v in key) or "all"


def divergences(results: Sequence[ConfigResult]) -> list[Divergence]:
    """Each format against the baseline format of its group (see the module docstring)."""
    groups: dict[tuple[tuple[str, str], ...], list[ConfigResult]] = {}
    for r in results:
        if r.curve or math.isfinite(r.final_loss):
            groups.setdefault(group_key(r.config), []).append(r)
    out: list[Divergence] = []
    for key, members in groups.items():
        precisions = {r.config.precision for r in members}
        if len(precisions) < 2:
            continue
        base_precision = next((p for p in PRECISION_ORDER if p in precisions), sorted(precisions)[0])
        baseline = next(r for r in members if r.config.precision == base_precision)
        for r in members:
            if r is baseline:
                continue
            out.append(_compare(group_label(key), baseline, r))
    return out


def _compare(group: str, base: ConfigResult, other: ConfigResult) -> Divergence:
    common = sorted(set(dict(base.curve)) & set(dict(other.curve)))
    if len(common) >= 2:
        b, o = dict(base.curve), dict(other.curve)
        window = smoothing_window(len(common))
        sb, so = smooth([b[s] for s in common], window), smooth([o[s] for s in common], window)
        diffs = [abs(x - y) for x, y in zip(so, sb)]
        return Divergence(
            group=group, precision=other.config.precision, baseline=base.config.precision,
            config_id=other.config.id, baseline_id=base.config.id, steps=len(common), window=window,
            mean_abs=sum(diffs) / len(diffs), max_abs=max(diffs), final=so[-1], baseline_final=sb[-1],
            final_rel_pct=100.0 * (so[-1] - sb[-1]) / sb[-1] if sb[-1] else math.nan, basis="curves",
        )
    fb, fo = base.final_loss, other.final_loss
    diff = abs(fo - fb) if math.isfinite(fb) and math.isfinite(fo) else math.nan
    return Divergence(
        group=group, precision=other.config.precision, baseline=base.config.precision,
        config_id=other.config.id, baseline_id=base.config.id, steps=0, window=1,
        mean_abs=diff, max_abs=diff, final=fo, baseline_final=fb,
        final_rel_pct=100.0 * (fo - fb) / fb if math.isfinite(diff) and fb else math.nan, basis="final values",
    )


# --- figures -------------------------------------------------------------------------------------


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


def plot_throughput_memory(sweep: Sweep, results: Sequence[ConfigResult], path: Path) -> Path:
    """Bars of tokens/s (left axis, coloured by precision) and a line of peak memory (right axis)
    per configuration; configurations without a measurement are labelled with their status."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    n = len(results)
    fig, ax = plt.subplots(figsize=(max(7.5, 0.95 * n + 3.5), 5.4), dpi=130)
    xs = list(range(n))
    tps = [r.tokens_per_sec for r in results]
    finite_tps = [v for v in tps if math.isfinite(v)]
    preds = [(r.predicted or {}).get("tokens_per_second") if r.predicted else None for r in results]
    top = max(finite_tps + [p for p in preds if isinstance(p, (int, float)) and sweep.mode == "aws"] or [1.0])
    for x, r in zip(xs, results):
        if math.isfinite(r.tokens_per_sec):
            ax.bar(x, r.tokens_per_sec, width=0.65, color=_color(r.config.precision), edgecolor="black", linewidth=0.4)
            if r.tokens_per_sec > top * 0.12:  # inside the bar, clear of the memory line's labels
                ax.text(x, r.tokens_per_sec - top * 0.015, _fmt_tps(r.tokens_per_sec), ha="center", va="top", fontsize=8,
                        color="white", fontweight="bold")
            else:
                ax.text(x, r.tokens_per_sec + top * 0.015, _fmt_tps(r.tokens_per_sec), ha="center", va="bottom", fontsize=8)
        else:
            ax.bar(x, top * 0.04, width=0.65, color="none", edgecolor="#999999", hatch="///", linewidth=0.6)
            ax.text(x, top * 0.06, _status_words(r.status), ha="center", va="bottom", rotation=90, fontsize=8, color="#555555")
    has_pred = False
    if sweep.mode == "aws":
        for x, p, r in zip(xs, preds, results):
            if isinstance(p, (int, float)) and (r.predicted or {}).get("fits"):  # no speed for a config that does not fit
                ax.plot([x - 0.32, x + 0.32], [p, p], color="black", linestyle="--", linewidth=1.2)
                has_pred = True
    ax.set_ylim(0, top * 1.6)
    ax.set_ylabel("throughput (tokens/s, whole job)")
    from matplotlib.ticker import FuncFormatter

    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xticks(xs)
    ax.set_xticklabels([r.config.label for r in results], rotation=30, ha="right", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)

    ax2 = ax.twinx()
    mem_x = [x for x, r in zip(xs, results) if math.isfinite(r.peak_memory_gb)]
    mem_y = [r.peak_memory_gb for r in results if math.isfinite(r.peak_memory_gb)]
    if mem_y:
        # NaN breaks the line at configurations without a measurement
        ax2.plot(xs, [r.peak_memory_gb for r in results], color="#222222", marker="o", linewidth=1.6, markersize=5)
        for x, y in zip(mem_x, mem_y):
            ax2.annotate(f"{y:.2f} GB" if y < 10 else f"{y:.1f} GB", (x, y), textcoords="offset points", xytext=(0, 7),
                         ha="center", fontsize=7.5, color="#222222")
        # memory lives in the upper band (64-94 % of the height), clear of the bars (<= 62.5 %)
        high = max(mem_y) * 1.2
        ax2.set_ylim(-2.17 * max(mem_y), high)
        from matplotlib.ticker import MaxNLocator

        ticks = [t for t in MaxNLocator(nbins=4).tick_values(0, max(mem_y)) if 0 <= t <= high]
        ax2.set_yticks(ticks)
    else:
        ax2.set_ylim(0, 1)
    ax2.set_ylabel(_memory_label(sweep))

    precisions = [p for p in PRECISION_ORDER if any(r.config.precision == p and math.isfinite(r.tokens_per_sec) for r in results)]
    handles = [Patch(facecolor=_color(p), edgecolor="black", linewidth=0.4, label=f"tokens/s ({p})") for p in precisions]
    handles.append(Line2D([], [], color="#222222", marker="o", label="peak memory"))
    if has_pred:
        handles.append(Line2D([], [], color="black", linestyle="--", label="planner prediction (tokens/s)"))
    if any(not math.isfinite(r.tokens_per_sec) for r in results):
        handles.append(Patch(facecolor="none", edgecolor="#999999", hatch="///", label="not measured (status)"))
    fig.legend(handles=handles, loc="lower center", fontsize=8, ncol=min(len(handles), 4), frameon=False)
    ax.set_title(f"Sweep {sweep.name}: throughput and peak memory per configuration\n{_device_caption(sweep, results)}", fontsize=11)
    rows = math.ceil(len(handles) / min(len(handles), 4))
    fig.tight_layout(rect=(0, 0.035 * rows + 0.02, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_loss_curves(sweep: Sweep, results: Sequence[ConfigResult], divs: Sequence[Divergence], path: Path) -> Path:
    """Loss against step, one panel per combination of the non-precision grid values, one line per
    precision (thin: raw, bold: smoothed), with the divergences from the baseline on each panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple[tuple[str, str], ...], list[ConfigResult]] = {}
    for r in results:
        groups.setdefault(group_key(r.config), []).append(r)
    # a panel per group with anything run or submitted; groups skipped entirely are named below
    all_skipped = [k for k, members in groups.items() if all(r.status == SKIPPED for r in members)]
    keys = [k for k in groups if k not in all_skipped] or list(groups)[:1]
    ncols = min(3, len(keys))
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.6 * ncols, 4.3 * nrows), dpi=130, squeeze=False)
    for ax in axes.flat[len(keys):]:
        ax.axis("off")
    for ax, key in zip(axes.flat, keys):
        label = group_label(key)
        drawn = False
        styles = iter(["-", "--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1))])
        for r in sorted(groups[key], key=lambda r: _precision_rank(r.config.precision)):
            color = _color(r.config.precision)
            if r.curve:
                steps = [s for s, _ in r.curve]
                losses = [v for _, v in r.curve]
                window = smoothing_window(len(losses))
                style = next(styles, "-")
                if window > 1:
                    ax.plot(steps, losses, color=color, alpha=0.25, linewidth=0.8)
                ax.plot(steps, smooth(losses, window), color=color, linewidth=1.8, linestyle=style,
                        label=f"{r.config.precision} ({r.config.id})" + (f", avg of {window}" if window > 1 else ""))
                drawn = True
            elif math.isfinite(r.final_loss):
                ax.scatter([r.final_step or 0], [r.final_loss], color=color, marker="D", zorder=3,
                           label=f"{r.config.precision} final ({r.config.id})")
                drawn = True
        notes = [d for d in divs if d.group == label]
        text = "\n".join(
            f"{d.precision} vs {d.baseline}: mean |Δ| {d.mean_abs:.3f}, max {d.max_abs:.3f}" if d.basis == "curves"
            else f"{d.precision} vs {d.baseline}: final |Δ| {d.max_abs:.3f} (final values only)"
            for d in notes
        )
        absent = [r for r in groups[key] if not r.curve and not math.isfinite(r.final_loss)]
        if drawn and absent:
            text = "\n".join(filter(None, [text, "not plotted: " + ", ".join(f"{r.config.precision} ({_status_words(r.status)})" for r in absent)]))
        if not drawn:
            statuses = ", ".join(f"{r.config.precision}: {_status_words(r.status)}" for r in groups[key])
            ax.text(0.5, 0.5, f"no loss data\n{statuses}", ha="center", va="center", transform=ax.transAxes, fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
        else:
            ax.legend(fontsize=8, loc="upper right")
            ax.set_xlabel("step")
            ax.set_ylabel("training loss (nats/token)")
            ax.grid(alpha=0.3)
        if text:
            ax.text(0.02, 0.03, text, transform=ax.transAxes, fontsize=8, va="bottom",
                    bbox={"boxstyle": "round", "facecolor": "white", "alpha": 0.85, "edgecolor": "#cccccc"})
        ax.set_title("all configurations" if label == "all" else label, fontsize=10)
    fig.suptitle(f"Sweep {sweep.name}: loss per precision (convergence check; Δ in nats/token, smoothed)", fontsize=11)
    skipped_groups = [group_label(k) for k in all_skipped if k in groups and k not in keys]
    if skipped_groups:
        fig.text(0.5, 0.005, "no panel (every configuration skipped): " + ", ".join(skipped_groups), ha="center",
                 va="bottom", fontsize=8, color="#555555")
        fig.tight_layout(rect=(0, 0.03, 1, 1))
    else:
        fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# --- Markdown ------------------------------------------------------------------------------------


def _fmt_tps(value: float) -> str:
    if not math.isfinite(value):
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


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
    tps = _fmt_tps(pred.get("tokens_per_second", math.nan))
    mem = _fmt(pred.get("memory_gb_total", math.nan), ".1f")
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
            "| " + " | ".join(
                _cell(c)
                for c in (
                    r.config.id.split("-", 1)[0],
                    r.config.title,
                    r.status,
                    _fmt_tps(r.tokens_per_sec),
                    _mfu_cell(r, sweep),
                    _fmt(r.peak_memory_gb, ".3f" if r.peak_memory_gb < 10 else ".1f"),
                    _fmt(r.final_loss, ".4f"),
                    pred_tps,
                    pred_mem,
                    _notes_cell(r),
                )
            ) + " |"
        )
    return "\n".join(rows)


def _describe_base(sweep: Sweep) -> str:
    hp = sweep.base if sweep.mode == "local" else sweep.base.get("hyperparameters", {})
    keys = [k for k in ("model", "num_layers", "precision", "batch_size", "seq_length", "max_steps", "activation_checkpointing")
            if k in hp and k not in sweep.grid]
    return ", ".join(f"{k}={hp[k]}" for k in keys) or "(defaults)"


def render_markdown(sweep: Sweep, results: Sequence[ConfigResult], divs: Sequence[Divergence], figures: Mapping[str, str]) -> str:
    counts: dict[str, int] = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    if sweep.mode == "local":
        device = sweep.target.get("device") or {}
        where = (
            f"local runs through the container entry point on {device.get('type', 'cpu').upper()} "
            f"({sweep.target.get('nproc', 2)} processes, gloo)" if device.get("type") != "cuda"
            else f"local runs on {device.get('gpus')}x {device.get('name') or device.get('gpu')}"
        )
        data = "CPython's documentation topics (byte-level tokens)" if sweep.target.get("data") in (None, "python-docs") else sweep.target.get("data")
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
        + ", ".join(f"{n} {s.lower()}" for s, n in sorted(counts.items())) + ")",
        f"- Generated: {datetime.now(timezone.utc).isoformat(timespec='seconds')} by `trainctl report`",
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
            "- No per-step loss curve for " + ", ".join(r.config.id for r in missing_curves)
            + ": their final values (FinalMetricDataList) are used."
        )
    problems = [r for r in results if r.status != COMPLETED]
    if problems:
        lines += ["", "## Not completed", ""]
        lines += [f"- `{r.config.id}` ({r.config.title}): **{r.status}**: {_cell(r.reason or r.source)}" for r in problems]
    lines += [
        "",
        "## How the numbers are computed",
        "",
        "- tokens/s (whole job) and MFU: median over the metric lines of the second half of the logged steps "
        "(steady state); with final values only, the final value. MFU is n/a on CPU (no vendor dense peak).",
        "- peak memory: the largest `peak_mem_allocated_gb` logged, per GPU (CPU: peak resident set size per process), GB = 1e9 bytes.",
        "- final loss: training cross-entropy of the last logged step, nats/token.",
        "- planner: `planner.estimate` for the configuration on the sweep's hardware; the ratio is measured / predicted "
        "(shown where the run was on that hardware).",
        "- convergence: formats that differ only in precision, compared with the group's highest precision; centred "
        "moving average over a tenth of the common steps; mean/max absolute difference over the common steps.",
        "",
    ]
    return "\n".join(lines)


# --- the report ----------------------------------------------------------------------------------


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


def build_report(name_or_dir: str | os.PathLike[str] | Sweep, *, sweeps_dir: str | os.PathLike[str] = DEFAULT_SWEEPS_DIR,
                 env: Mapping[str, str] | None = None, region: str | None = None) -> Report:
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
        name_or_dir: a sweep name (under ``sweeps_dir``), a sweep folder, or a :class:`~trainctl.sweep.Sweep`.
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
    paths.markdown.write_text(render_markdown(report.sweep, report.results, report.divergences, figures), encoding="utf-8")
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


__all__ = [
    "ConfigResult",
    "Divergence",
    "Report",
    "ReportPaths",
    "build_report",
    "collect",
    "divergences",
    "job_log_lines",
    "markdown_table",
    "metrics_by_step",
    "smooth",
    "write_report",
]
