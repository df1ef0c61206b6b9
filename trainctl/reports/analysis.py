"""A sweep report's figures: each configuration's summary, and each format's loss against its baseline.

Summaries (per configuration, :func:`summarise`)
-----------------------------------------------
* tokens/s (whole job) and MFU: the median over the metric lines of the second
  half of the logged steps -- the steady state; the first steps include
  start-up and compilation. With final values only: the final value.
* peak memory: the largest ``peak_mem_allocated_gb`` logged (per GPU; on CPU
  the process's peak resident set size).
* final loss: the loss of the last logged step.
* planner ratio: measured / predicted tokens/s and peak memory, where the
  planner made a prediction for the hardware the configuration ran on (AWS
  jobs; not CPU runs: the planner models GPUs).

Convergence divergence (:func:`divergences`)
--------------------------------------------
Configurations that differ only in precision are compared with the baseline
format of their group: the highest precision present (fp32, else bf16, else
fp16, ...: the precision registry's order). Both loss curves are smoothed with a moving average of
``window`` steps (centred, clipped at the ends; a tenth of the common steps, at least 1, at most 25) and
compared over their common steps: mean and max absolute difference (nats per
token), and the final smoothed loss's relative difference. The validation loss (``eval_interval``: the
``validation_loss`` lines, ``validation:loss`` in final values) is compared the same way, where the
configurations evaluated one: the held-out loss tells a converging format from one that fits worse.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from platform_spec.precisions import PRECISION_NAMES
from trainctl.reports.results import ConfigResult, json_number
from trainctl.sweeps.state import COMPLETED, SweepConfig, slug_part

MAX_SMOOTHING_WINDOW = 25

PRECISION_ORDER: tuple[str, ...] = PRECISION_NAMES
"""Baseline preference for the convergence check (the registry's order): the first present wins."""


def median_finite(values: Iterable[object]) -> float:
    """The median of those ``values`` that are real numbers with a finite float value (bools, strings,
    None, NaN, infinities and integers too large for a float are passed over); NaN if there are none."""
    finite = []
    for value in values:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            with contextlib.suppress(OverflowError):
                if math.isfinite(number := float(value)):
                    finite.append(number)
    return statistics.median(finite) if finite else math.nan


def summarise(result: ConfigResult, steps: Sequence[Mapping[str, float]], final: Mapping[str, float]) -> None:
    """Fill ``result``'s summary figures from per-step metric lines, else from final values."""
    if steps:
        last = int(steps[-1]["step"])
        steady = [m for m in steps if m["step"] > last / 2] or [steps[-1]]
        result.tokens_per_sec = median_finite([m.get("tokens_per_sec", math.nan) for m in steady])
        result.tokens_per_sec_per_gpu = median_finite([m.get("tokens_per_sec_per_gpu", math.nan) for m in steady])
        result.mfu = median_finite([m.get("mfu", math.nan) for m in steady])
        memory = [m["peak_mem_allocated_gb"] for m in steps if math.isfinite(m.get("peak_mem_allocated_gb", math.nan))]
        result.peak_memory_gb = max(memory) if memory else math.nan
        result.curve = _curve(steps, "loss")
        result.validation_curve = _curve(steps, "validation_loss")
        result.final_loss = steps[-1].get("loss", math.nan)
        result.final_validation_loss = result.validation_curve[-1][1] if result.validation_curve else math.nan
        result.final_step = last
        return
    if final:
        result.tokens_per_sec = final.get("tokens_per_sec", math.nan)
        result.tokens_per_sec_per_gpu = final.get("tokens_per_sec_per_gpu", math.nan)
        result.mfu = final.get("mfu", math.nan)
        result.peak_memory_gb = final.get("peak_mem_allocated_gb", math.nan)
        result.final_loss = final.get("loss", math.nan)
        result.final_validation_loss = final.get("validation_loss", math.nan)
        step = final.get("step")
        if isinstance(step, (int, float)) and math.isfinite(step):
            result.final_step = int(step)
        elif result.status == COMPLETED:  # a completed job ran max_steps
            result.final_step = _max_steps(result.config)


def _curve(steps: Sequence[Mapping[str, float]], field: str) -> list[tuple[int, float]]:
    """``[(step, value)]`` of the steps whose metric lines have a finite ``field``."""
    return [(int(m["step"]), float(m[field])) for m in steps if field in m and math.isfinite(m[field])]


def _max_steps(config: SweepConfig) -> int | None:
    try:
        return int(config.hyperparameters.get("max_steps", ""))
    except ValueError:
        return None


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
        loss: ``"training"`` or ``"validation"`` (the held-out loss of ``eval_interval``).
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
    loss: str = "training"

    def sentence(self) -> str:
        where = "" if self.group == "all" else f" ({self.group})"
        kind = "" if self.loss == "training" else f"{self.loss} "
        if self.basis == "curves":
            return (
                f"{self.precision} vs {self.baseline}{where}: smoothed {kind}loss differs by mean {self.mean_abs:.4f}, "
                f"max {self.max_abs:.4f} nats/token over {self.steps} common steps (moving average of {self.window}); "
                f"final smoothed loss {self.final:.4f} vs {self.baseline_final:.4f} ({self.final_rel_pct:+.2f} %)"
            )
        return (
            f"{self.precision} vs {self.baseline}{where}: final {kind}loss {self.final:.4f} vs {self.baseline_final:.4f} "
            f"(|difference| {self.max_abs:.4f} nats/token, {self.final_rel_pct:+.2f} %; final values only, no per-step curves)"
        )

    def to_json(self) -> dict[str, Any]:
        return {k: (json_number(v) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


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
    """The configuration's grid values other than precision: configurations that share it are compared."""
    return tuple((k, v) for k, v in config.overrides.items() if k != "precision")


def group_label(key: Sequence[tuple[str, str]]) -> str:
    """A group's label (``bs4 ac-off``); ``all`` when precision is the only axis."""
    return " ".join(slug_part(k, v) for k, v in key) or "all"


LOSSES: dict[str, tuple[str, str]] = {
    "training": ("curve", "final_loss"),
    "validation": ("validation_curve", "final_validation_loss"),
}
"""The losses compared across formats: name -> the :class:`ConfigResult` attributes of its curve and final value."""


def divergences(results: Sequence[ConfigResult]) -> list[Divergence]:
    """Each format against the baseline format of its group (see the module docstring), for the training loss,
    then for the validation loss of the groups whose configurations evaluated one."""
    out: list[Divergence] = []
    for loss, (curve, final) in LOSSES.items():
        groups: dict[tuple[tuple[str, str], ...], list[ConfigResult]] = {}
        for r in results:
            if getattr(r, curve) or math.isfinite(getattr(r, final)):
                groups.setdefault(group_key(r.config), []).append(r)
        for key, members in groups.items():
            precisions = {r.config.precision for r in members}
            if len(precisions) < 2:
                continue
            base_precision = next((p for p in PRECISION_ORDER if p in precisions), sorted(precisions)[0])
            baseline = next(r for r in members if r.config.precision == base_precision)
            for r in members:
                if r is baseline:
                    continue
                out.append(_compare(group_label(key), baseline, r, loss))
    return out


def _compare(group: str, base: ConfigResult, other: ConfigResult, loss: str = "training") -> Divergence:
    curve, final = LOSSES[loss]
    base_curve, other_curve = getattr(base, curve), getattr(other, curve)
    common = sorted(set(dict(base_curve)) & set(dict(other_curve)))
    if len(common) >= 2:
        b, o = dict(base_curve), dict(other_curve)
        window = smoothing_window(len(common))
        sb, so = smooth([b[s] for s in common], window), smooth([o[s] for s in common], window)
        diffs = [abs(x - y) for x, y in zip(so, sb, strict=True)]
        return Divergence(
            group=group,
            precision=other.config.precision,
            baseline=base.config.precision,
            config_id=other.config.id,
            baseline_id=base.config.id,
            steps=len(common),
            window=window,
            mean_abs=sum(diffs) / len(diffs),
            max_abs=max(diffs),
            final=so[-1],
            baseline_final=sb[-1],
            final_rel_pct=100.0 * (so[-1] - sb[-1]) / sb[-1] if sb[-1] else math.nan,
            basis="curves",
            loss=loss,
        )
    fb, fo = getattr(base, final), getattr(other, final)
    diff = abs(fo - fb) if math.isfinite(fb) and math.isfinite(fo) else math.nan
    return Divergence(
        group=group,
        precision=other.config.precision,
        baseline=base.config.precision,
        config_id=other.config.id,
        baseline_id=base.config.id,
        steps=0,
        window=1,
        mean_abs=diff,
        max_abs=diff,
        final=fo,
        baseline_final=fb,
        final_rel_pct=100.0 * (fo - fb) / fb if math.isfinite(diff) and fb else math.nan,
        basis="final values",
        loss=loss,
    )


__all__ = [
    "LOSSES",
    "MAX_SMOOTHING_WINDOW",
    "PRECISION_ORDER",
    "Divergence",
    "divergences",
    "group_key",
    "group_label",
    "smooth",
    "smoothing_window",
    "summarise",
]
