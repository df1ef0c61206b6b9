"""One configuration's result in a sweep report: its measurements next to the planner's prediction."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainctl.sweeps.pruning import SPEED_FIGURES, not_run_reason
from trainctl.sweeps.state import SKIPPED, SweepConfig


@dataclass
class ConfigResult:
    """One configuration's measurements and the planner's prediction.

    Attributes:
        config: the sweep configuration.
        status: its status now (for jobs: ``DescribeTrainingJob``'s, else the sweep state's).
        reason: why it was skipped / refused / failed (``FailureReason`` for jobs).
        source: where the numbers come from (e.g. ``"train.log (60 metric lines)"``).
        curve: ``[(step, loss)]`` from metric lines (empty with final values only).
        validation_curve: ``[(step, validation loss)]`` from the validation lines (``eval_interval``; empty
            without evaluation or with final values only).
        final_step: the last step logged or reported.
        tokens_per_sec: whole job, steady state (see the module docstring); NaN if unknown.
        tokens_per_sec_per_gpu: per GPU (per CPU process on CPU).
        mfu: percent; NaN on CPU or unknown GPUs.
        peak_memory_gb: peak allocated per GPU (CPU: peak RSS per process), GB (1e9 bytes).
        final_loss: cross-entropy of the last logged step, nats/token.
        final_validation_loss: the last validation loss, nats/token; NaN without evaluation.
        device: e.g. ``"CPU (x86_64), 2 processes"`` or ``"1x ml.p6-b200.48xlarge (8x B200)"``.
        predicted: the planner's figures (:func:`trainctl.sweeps.pruning.prediction_of`) as the report shows
            them (:func:`reported_prediction`: no speed figures for a configuration that did not run), or None.
        comparable: the prediction is for the hardware the measurement ran on.
    """

    config: SweepConfig
    status: str
    reason: str | None = None
    source: str = "none"
    curve: list[tuple[int, float]] = field(default_factory=list)
    validation_curve: list[tuple[int, float]] = field(default_factory=list)
    final_step: int | None = None
    tokens_per_sec: float = math.nan
    tokens_per_sec_per_gpu: float = math.nan
    mfu: float = math.nan
    peak_memory_gb: float = math.nan
    final_loss: float = math.nan
    final_validation_loss: float = math.nan
    device: str | None = None
    predicted: dict[str, Any] | None = None
    comparable: bool = False

    @property
    def measured(self) -> bool:
        return (
            math.isfinite(self.tokens_per_sec) or math.isfinite(self.final_loss) or math.isfinite(self.peak_memory_gb)
        )

    @property
    def tokens_ratio(self) -> float:
        """Measured / predicted tokens/s (NaN without a comparable prediction)."""
        return (
            ratio(self.tokens_per_sec, (self.predicted or {}).get("tokens_per_second")) if self.comparable else math.nan
        )

    @property
    def memory_ratio(self) -> float:
        """Measured / predicted peak memory per GPU (NaN without a comparable prediction)."""
        return (
            ratio(self.peak_memory_gb, (self.predicted or {}).get("memory_gb_total")) if self.comparable else math.nan
        )

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
            "tokens_per_sec": json_number(self.tokens_per_sec),
            "tokens_per_sec_per_gpu": json_number(self.tokens_per_sec_per_gpu),
            "mfu": json_number(self.mfu),
            "peak_memory_gb": json_number(self.peak_memory_gb),
            "final_loss": json_number(self.final_loss),
            "final_validation_loss": json_number(self.final_validation_loss),
            "predicted": self.predicted,
            "prediction_comparable": self.comparable,
            "tokens_per_sec_measured_over_predicted": json_number(self.tokens_ratio),
            "memory_measured_over_predicted": json_number(self.memory_ratio),
            "job_name": self.config.job_name,
            "run_dir": self.config.run_dir,
            "curve": [[s, v] for s, v in self.curve],
            "validation_curve": [[s, v] for s, v in self.validation_curve],
        }


def reported_prediction(config: SweepConfig) -> dict[str, Any] | None:
    """The planner's prediction of ``config`` as a report shows it, or None without one.

    A configuration the sweep skipped did not run: its speed figures
    (:data:`trainctl.sweeps.pruning.SPEED_FIGURES`) are ``None`` and ``not_run`` says why, from the
    planner's memory verdict ``status`` -- also for a state written before predictions withheld them
    (whose verdict, without ``status``, was ``out-of-memory`` when it did not fit: the sweep skipped only
    those then).
    """
    prediction = config.prediction
    if not prediction:
        return None
    out = dict(prediction)
    if config.status != SKIPPED:
        return out
    status = out.get("status") or ("fits" if out.get("fits") else "out-of-memory")
    out["status"] = status
    out.update(dict.fromkeys(SPEED_FIGURES))
    if not out.get("not_run"):
        required, usable = out.get("memory_gb_required"), out.get("memory_gb_usable")
        if isinstance(required, (int, float)) and isinstance(usable, (int, float)):
            out["not_run"] = not_run_reason(status, float(required), float(usable))
        else:
            out["not_run"] = f"not run: {status}"
    return out


def json_number(value: float) -> float | None:
    """A figure for ``report.json``: rounded to 6 decimals; None for NaN, infinities and non-numbers."""
    return round(value, 6) if isinstance(value, (int, float)) and math.isfinite(value) else None


def ratio(measured: float, predicted: Any) -> float:
    """``measured / predicted``; NaN when either is missing, zero or not finite."""
    if not isinstance(predicted, (int, float)) or not predicted or not math.isfinite(measured):
        return math.nan
    return measured / float(predicted)


def format_tokens_per_second(value: float) -> str:
    """Tokens/s as the tables and figures write it: ``51,234`` (>= 100), ``42.5``, ``-`` when unknown."""
    if not math.isfinite(value):
        return "-"
    return f"{value:,.0f}" if value >= 100 else f"{value:.1f}"


__all__ = ["ConfigResult", "format_tokens_per_second", "json_number", "ratio", "reported_prediction"]
