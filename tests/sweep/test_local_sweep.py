"""A real local sweep on CPU (see conftest.local_sweep) and its report."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest

from platform_spec.metric_lines import run_records
from trainctl import cli
from trainctl.reports.collection import device_of
from trainctl.sweeps.local_runs import RunOutput, outcome
from trainctl.sweeps.runner import run_local_sweep
from trainctl.sweeps.state import SweepError, load_sweep
from training.local import read_metrics

from .conftest import LOCAL_GRID, LOCAL_NPROC, LOCAL_SET

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sweep")]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _rows(local_sweep) -> list[dict]:
    return json.loads(local_sweep.paths.data.read_text())["rows"]


def test_the_sweep_ran_the_cpu_configs_and_skipped_fp8(local_sweep) -> None:
    configs = local_sweep.result.configs
    assert [(c.title, c.status) for c in configs] == [
        ("precision=fp32 batch_size=1", "Completed"),
        ("precision=fp32 batch_size=2", "Completed"),
        ("precision=bf16 batch_size=1", "Completed"),
        ("precision=bf16 batch_size=2", "Completed"),
        ("precision=fp8 batch_size=1", "Skipped"),
        ("precision=fp8 batch_size=2", "Skipped"),
    ]
    for c in configs[:4]:
        log = local_sweep.result.directory / c.run_dir / "train.log"
        assert "training finished at step 12" in log.read_text()
        # the trainer declared it: a [run] record of each change of state, the last one "finished at step 12 on
        # 1 CPU process" (a resumed run's records follow the first attempt's in the same log)
        records = run_records(log.read_text().splitlines())
        assert {r.state for r in records} >= {"starting", "training", "finished"}
        end = records[-1]
        assert (end.state, end.step, end.saved, end.device, end.world_size) == ("finished", 12, 12, "cpu", LOCAL_NPROC)
        assert end.device_name and records[0].state == "starting"
    # a run that failed at its first attempt did so after training finished (a worker dying at
    # shutdown: the trainer's exit status is non-zero), was reported so, and resumed to completion
    for config_id, reason in local_sweep.first_failures.items():
        assert reason.startswith("exit status ") and "after training finished at step 12" in reason, (config_id, reason)
    # the state on disk says the same
    assert [c.status for c in load_sweep(local_sweep.result.directory).configs] == [c.status for c in configs]


def test_the_report_has_one_row_per_config_with_real_numbers(local_sweep) -> None:
    paths = local_sweep.paths
    for png in (paths.throughput_memory, paths.loss_curves):
        data = png.read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 20_000, png
    table = [line for line in paths.markdown.read_text().splitlines() if line.startswith("| 0")]
    assert len(table) == 6
    assert [line.split(" | ")[2] for line in table] == ["Completed"] * 4 + ["Skipped"] * 2
    assert all("needs an NVIDIA GPU" in line for line in table[4:])
    rows = _rows(local_sweep)
    assert len(rows) == 6
    for row in rows[:4]:
        assert row["tokens_per_sec"] > 0 and row["tokens_per_sec_per_gpu"] > 0
        assert 0.05 < row["peak_memory_gb"] < 8  # peak RSS of a tiny-model process, GB
        assert row["mfu"] is None  # no MFU on CPU
        assert row["final_step"] == 12 and [s for s, _ in row["curve"]] == list(range(1, 13))
        losses = [v for _, v in row["curve"]]
        assert row["final_loss"] == losses[-1]
        # loss falls on real text; a single step at batch 1 is one 128-token window and can be an
        # outlier (a table of symbols), so the second half of the curve is compared, not its last point
        assert losses[0] > 5.5 and statistics.mean(losses[len(losses) // 2 :]) < losses[0] - 1.5, losses
        assert row["device"].startswith("CPU (") and row["device"].endswith(", 1 process")
        assert row["predicted"] is None and row["tokens_per_sec_measured_over_predicted"] is None
    for row in rows[4:]:
        assert row["tokens_per_sec"] is None and row["final_loss"] is None and row["curve"] == []


def test_the_readers_use_the_records_not_the_trainers_words(local_sweep, tmp_path: Path) -> None:
    """The real trainer output with every free-text line reworded (the old readers matched "training finished at
    step N" and "device=cpu (...) world_size=N"): the sweep and the report read the same from it."""
    sweep = local_sweep.result.sweep
    rows = {r["id"]: r for r in _rows(local_sweep)}
    for config in sweep.configs[:4]:
        lines = (sweep.directory / config.run_dir / "train.log").read_text().splitlines()
        reworded = [
            f"[trainer] (reworded line {i})" if line.startswith("[trainer]") else line for i, line in enumerate(lines)
        ]
        assert not any(
            "training finished" in line or "world_size=" in line for line in reworded if not line.startswith("[run]")
        )
        assert RunOutput.of(reworded).finished.step == 12
        assert outcome(0, RunOutput.of(reworded), failure=None, log=tmp_path / "train.log") == ("Completed", None)
        assert device_of(reworded) == rows[config.id]["device"] == device_of(lines)
        # and the free text alone no longer decides anything
        unrecorded = [line for line in lines if not line.startswith("[run]")]
        assert RunOutput.of(unrecorded).finished is None and device_of(unrecorded) is None


def test_tokens_per_second_is_the_steady_state_median_of_the_run(local_sweep) -> None:
    """Cross-check against the trainer's own full-precision metrics file."""
    sweep = local_sweep.result.sweep
    for row, config in zip(_rows(local_sweep)[:4], sweep.configs[:4], strict=True):
        records = read_metrics(sweep.directory / config.run_dir)
        expected = statistics.median(r["tokens_per_sec"] for r in records if r["step"] > 6)
        assert row["tokens_per_sec"] == pytest.approx(expected, rel=1e-3, abs=0.01)
        assert row["peak_memory_gb"] == pytest.approx(max(r["peak_mem_allocated_gb"] for r in records), abs=1e-3)
        assert row["final_loss"] == pytest.approx(records[-1]["loss"], abs=1e-4)


def test_divergence_between_formats_is_stated_as_numbers(local_sweep) -> None:
    data = json.loads(local_sweep.paths.data.read_text())
    divs = data["divergences"]
    assert [(d["precision"], d["baseline"], d["group"]) for d in divs] == [
        ("bf16", "fp32", "bs1"),
        ("bf16", "fp32", "bs2"),
    ]
    rows = {r["id"]: r for r in data["rows"]}
    for d in divs:
        assert d["steps"] == 12 and d["basis"] == "curves" and d["window"] == 1
        other = dict(map(tuple, rows[d["config_id"]]["curve"]))
        base = dict(map(tuple, rows[d["baseline_id"]]["curve"]))
        diffs = [abs(other[s] - base[s]) for s in range(1, 13)]  # window 1: no smoothing
        assert d["max_abs"] == pytest.approx(max(diffs), abs=1e-6)
        assert d["mean_abs"] == pytest.approx(sum(diffs) / 12, abs=1e-6)
        assert math.isfinite(d["final_rel_pct"])
    text = local_sweep.paths.markdown.read_text()
    assert "- bf16 vs fp32 (bs1): smoothed loss differs by mean " in text
    assert f"max {divs[1]['max_abs']:.4f} nats/token over 12 common steps" in text


def test_running_the_sweep_again_runs_nothing_and_a_changed_grid_is_refused(local_sweep, sweeps_dir: Path) -> None:
    directory = local_sweep.result.directory
    logs = sorted(directory.glob("runs/*/train.log"))
    before = [(p, p.stat().st_size, p.stat().st_mtime_ns) for p in logs]
    again = run_local_sweep(
        "cpu-grid",
        LOCAL_GRID,
        sweeps_dir=sweeps_dir,
        set_values=LOCAL_SET,
        nproc=LOCAL_NPROC,
        device={"type": "cpu"},
        progress=False,
    )
    assert [c.status for c in again.configs] == [c.status for c in local_sweep.result.configs]
    assert [(p, p.stat().st_size, p.stat().st_mtime_ns) for p in logs] == before
    with pytest.raises(SweepError, match="different grid"):
        run_local_sweep(
            "cpu-grid",
            {"precision": ["fp32"]},
            sweeps_dir=sweeps_dir,
            set_values=LOCAL_SET,
            nproc=LOCAL_NPROC,
            device={"type": "cpu"},
        )
    with pytest.raises(SweepError, match="different base"):
        run_local_sweep(
            "cpu-grid",
            LOCAL_GRID,
            sweeps_dir=sweeps_dir,
            set_values={**LOCAL_SET, "max_steps": 13},
            nproc=LOCAL_NPROC,
            device={"type": "cpu"},
        )


def test_trainctl_report_cli_prints_the_table(local_sweep, sweeps_dir: Path, tmp_path: Path, capsys) -> None:
    assert cli.main(["report", "cpu-grid", "--dir", str(sweeps_dir), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert out.count("\n| 0") == 6 and out.startswith("| # | config | status | tokens/s")
    assert (tmp_path / "r" / "report.md").is_file() and (tmp_path / "r" / "loss_curves.png").is_file()
    assert cli.main(["report", "no-such-sweep", "--dir", str(sweeps_dir), "--out", str(tmp_path / "x")]) == 2
    assert "no sweep in" in capsys.readouterr().err
