"""The report's summaries and the convergence divergence, on hand-made metric lines."""

from __future__ import annotations

import math

import pytest

from platform_spec.metric_lines import format_line
from trainctl.reports.analysis import divergences, smooth, smoothing_window, summarise
from trainctl.reports.charts import plot_loss_curves
from trainctl.reports.collection import metrics_by_step
from trainctl.reports.results import ConfigResult
from trainctl.sweeps.state import Sweep, SweepConfig


def _config(index: int, precision: str, batch: str = "4") -> SweepConfig:
    overrides = {"precision": precision, "batch_size": batch}
    return SweepConfig(
        index=index, overrides=overrides, hyperparameters={**overrides, "max_steps": "40"}, status="Completed"
    )


def _result(index: int, precision: str, losses: list[float], batch: str = "4") -> ConfigResult:
    result = ConfigResult(config=_config(index, precision, batch), status="Completed")
    lines = [format_line({"step": s, "loss": v, "tokens_per_sec": 1000.0 + s}) for s, v in enumerate(losses, 1)]
    summarise(result, metrics_by_step(lines), {})
    return result


def test_smooth_is_a_centred_moving_average_clipped_at_the_ends() -> None:
    assert smooth([1.0, 2.0, 3.0, 4.0, 5.0], 2) == [1.0, 1.5, 2.5, 3.5, 4.5]
    assert smooth([1.0, 2.0, 3.0, 4.0, 5.0], 3) == [1.5, 2.0, 3.0, 4.0, 4.5]
    assert smooth([0.0, 0.0, 9.0, 0.0, 0.0], 5)[2] == pytest.approx(1.8)
    assert smooth([4.0, 2.0], 1) == [4.0, 2.0]
    assert [smoothing_window(n) for n in (1, 12, 40, 60, 1000)] == [1, 1, 4, 6, 25]


def test_a_resumed_run_counts_each_step_once_with_its_last_value() -> None:
    lines = [format_line({"step": s, "loss": 5.0 - s / 10}) for s in (1, 2, 3)]
    lines += [
        "[trainer] resumed from step 2",
        format_line({"step": 3, "loss": 4.5}),
        format_line({"step": 4, "loss": 4.4}),
    ]
    steps = metrics_by_step(lines)
    assert [(m["step"], m["loss"]) for m in steps] == [(1, 4.9), (2, 4.8), (3, 4.5), (4, 4.4)]


def test_summary_uses_the_second_half_for_throughput() -> None:
    r = _result(0, "bf16", [5.0] * 40)
    assert r.tokens_per_sec == pytest.approx(1000.0 + 30.5)  # median of steps 21..40
    assert r.final_step == 40 and r.final_loss == 5.0 and math.isnan(r.mfu) and math.isnan(r.peak_memory_gb)


def test_divergence_smooths_over_common_steps_against_the_highest_precision() -> None:
    base = [5.0 - 0.05 * s for s in range(40)]
    noisy = [v + (0.1 if s % 2 else -0.1) + 0.03 for s, v in enumerate(base)]  # alternating noise + 0.03 bias
    results = [
        _result(0, "mxfp8", noisy),
        _result(1, "bf16", base),
        _result(2, "fp8", [v + 0.01 for v in base[:30]]),  # stopped early: 30 common steps
        _result(3, "fp8", base, batch="16"),  # alone in its group: nothing to compare
    ]
    divs = {d.precision: d for d in divergences(results)}
    assert set(divs) == {"mxfp8", "fp8"}
    mx = divs["mxfp8"]
    assert (mx.baseline, mx.group, mx.steps, mx.window, mx.basis) == ("bf16", "bs4", 40, 4, "curves")
    # a full 4-step window cancels the alternating noise (|diff| = 0.03); the clipped ends do not:
    # step 1 averages d0, d1 (0.03), step 2 d0..d2 (-0.1/3 + 0.03), step 40 d37..d39 (0.1/3 + 0.03)
    assert mx.mean_abs == pytest.approx((0.03 * 38 + abs(-0.1 / 3 + 0.03) + (0.1 / 3 + 0.03)) / 40, abs=1e-9)
    assert mx.max_abs == pytest.approx(0.1 / 3 + 0.03, abs=1e-9)
    assert mx.final_rel_pct == pytest.approx(100 * (0.1 / 3 + 0.03) / (sum(base[-3:]) / 3), rel=1e-9)
    fp8 = divs["fp8"]
    assert (fp8.steps, fp8.window) == (30, 3)
    assert fp8.mean_abs == pytest.approx(0.01) and fp8.max_abs == pytest.approx(0.01)
    assert (
        "fp8 vs bf16 (bs4): smoothed loss differs by mean 0.0100, max 0.0100 nats/token over 30 common steps"
        in fp8.sentence()
    )


def test_final_values_only_are_compared_as_final_values() -> None:
    a = ConfigResult(config=_config(0, "bf16"), status="Completed")
    b = ConfigResult(config=_config(1, "fp8"), status="Completed")
    summarise(a, [], {"loss": 3.0, "tokens_per_sec": 10.0})
    summarise(b, [], {"loss": 3.3})
    (d,) = divergences([a, b])
    assert d.basis == "final values" and d.max_abs == pytest.approx(0.3) and d.final_rel_pct == pytest.approx(10.0)
    assert a.final_step == 40  # a completed job without a step metric ran max_steps
    assert "final values only" in d.sentence()


def _evaluated(index: int, precision: str, offset: float) -> ConfigResult:
    """40 logged steps, a validation line after every 10th (the trainer's separate line of the same step)."""
    result = ConfigResult(config=_config(index, precision), status="Completed")
    lines = []
    for s in range(1, 41):
        lines.append(format_line({"step": s, "loss": 5.0 - s / 20, "tokens_per_sec": 1000.0}))
        if s % 10 == 0:
            lines.append(format_line({"step": s, "validation_loss": 5.2 - s / 25 + offset}))
    summarise(result, metrics_by_step(lines), {})
    return result


def test_validation_curves_are_read_compared_across_formats_and_drawn(tmp_path) -> None:
    base, quantized = _evaluated(0, "bf16", 0.0), _evaluated(1, "mxfp8", 0.05)
    # a step's two lines merge: its training values stay, the validation loss joins them
    assert base.curve[9] == (10, 4.5) and len(base.curve) == 40
    assert base.validation_curve == [(10, 4.8), (20, 4.4), (30, 4.0), (40, 3.6)]
    assert base.final_validation_loss == pytest.approx(3.6) and base.final_loss == pytest.approx(3.0)
    divs = {d.loss: d for d in divergences([base, quantized])}
    assert set(divs) == {"training", "validation"}
    validation = divs["validation"]
    assert (validation.steps, validation.basis, validation.mean_abs) == (4, "curves", pytest.approx(0.05))
    assert "smoothed validation loss differs by mean 0.0500" in validation.sentence()
    assert divs["training"].max_abs == 0.0 and "smoothed loss differs" in divs["training"].sentence()
    assert quantized.to_json()["validation_curve"][-1] == [40, pytest.approx(3.65)]
    # final values only: validation:loss of FinalMetricDataList
    job = ConfigResult(config=_config(2, "fp8"), status="Completed")
    summarise(job, [], {"loss": 3.0, "validation_loss": 3.7})
    assert job.final_validation_loss == 3.7 and job.validation_curve == []

    sweep = Sweep(name="v", mode="local", grid={"precision": ["bf16", "mxfp8"]}, base={}, target={}, directory=tmp_path)
    path = plot_loss_curves(sweep, [base, quantized, job], list(divs.values()), tmp_path / "loss.png")
    assert path.read_bytes().startswith(b"\x89PNG")
