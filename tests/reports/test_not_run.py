"""A configuration the sweep skipped for its memory verdict did not run: the report shows the predicted memory,
"not run" with the planner's verdict and the reason, never a predicted tokens/s as if it had run (issue 14) --
also for a sweep state written before predictions withheld them."""

from __future__ import annotations

import json
from pathlib import Path

from trainctl.reports.collection import collect
from trainctl.reports.markdown import markdown_table
from trainctl.reports.results import ConfigResult, reported_prediction
from trainctl.reports.writer import write_report
from trainctl.sweeps.planning import plan_sweep
from trainctl.sweeps.pruning import SPEED_FIGURES
from trainctl.sweeps.state import SKIPPED, SweepConfig

H100 = {"type": "cuda", "gpus": 8, "name": "NVIDIA H100 80GB HBM3", "gpu": "H100"}
# gpt-1b (24 blocks) at 7K tokens, bf16, no checkpointing on 8x H100: batch 1 fits, 7 is at-risk, 8 does not fit
BASE = {"hyperparameters": {"model": "gpt-1b", "precision": "bf16", "seq_length": 7168}}


def _rows(table: str) -> dict[str, list[str]]:
    """``{config title: cells}`` of a report table."""
    rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| ") and line[2:4].isdigit()]
    return {cells[1]: cells for cells in rows}


def test_skipped_configurations_show_the_verdict_and_no_speed(tmp_path: Path) -> None:
    sweep = plan_sweep("verdicts", ["batch_size=1,7,8"], mode="local", base=BASE, sweeps_dir=tmp_path, device=H100)
    sweep.save()
    fits, risky, oom = sweep.configs
    assert (fits.status, risky.status, oom.status) == ("Pending", SKIPPED, SKIPPED)

    paths = write_report("verdicts", tmp_path / "report", sweeps_dir=tmp_path)
    rows = {r["config"]["batch_size"]: r for r in json.loads(paths.data.read_text())["rows"]}
    assert rows["1"]["predicted"]["tokens_per_second"] == fits.prediction["tokens_per_second"] > 0
    for batch, status in (("7", "at-risk"), ("8", "out-of-memory")):
        predicted = rows[batch]["predicted"]
        assert predicted["status"] == status and predicted["not_run"].startswith(f"not run: {status} (")
        assert {k: predicted[k] for k in SPEED_FIGURES} == dict.fromkeys(SPEED_FIGURES)
        assert predicted["memory_gb_total"] > 0  # the predicted memory stays: it is why it did not run
        assert rows[batch]["tokens_per_sec_measured_over_predicted"] is None

    table = _rows(paths.markdown.read_text())
    assert table["batch_size=7"][2] == "Skipped" and table["batch_size=7"][7] == "not run (at-risk)"
    assert table["batch_size=7"][8] == f"{risky.prediction['memory_gb_total']:.1f}"
    assert table["batch_size=7"][9].startswith("predicted at-risk: ")  # the reason, with the way to accept it
    assert table["batch_size=8"][7] == "not run (out-of-memory)"
    assert table["batch_size=8"][9].startswith("predicted out of memory: ")
    assert table["batch_size=1"][7] == f"{fits.prediction['tokens_per_second']:,.0f}"
    assert paths.throughput_memory.read_bytes().startswith(b"\x89PNG")


def test_an_accepted_risk_and_an_auto_tuned_configuration_show_the_speed_of_what_runs(tmp_path: Path) -> None:
    accepted = plan_sweep(
        "accepted",
        ["batch_size=7"],
        mode="local",
        base={**BASE, "accept_memory_risk": True},
        sweeps_dir=tmp_path,
        device=H100,
    )
    (config,) = accepted.configs
    results = collect(accepted)
    assert results[0].predicted == config.prediction and config.prediction["tokens_per_second"] > 0
    speed = f"{config.prediction['tokens_per_second']:,.0f}"
    assert _rows(markdown_table(accepted, results))["batch_size=7"][7] == f"{speed} (at-risk, accepted)"

    tuned = SweepConfig(
        index=0,
        overrides={"batch_size": "64"},
        hyperparameters={"batch_size": "64"},
        prediction={**config.prediction, "status": "fits", "auto_tune": ["batch_size: 64 -> 8 (smaller micro-batch)"]},
    )
    row = ConfigResult(config=tuned, status="Pending", predicted=reported_prediction(tuned))
    assert _rows(markdown_table(accepted, [row]))["batch_size=64"][7] == f"{speed} (with auto_tune's change)"


def test_a_state_written_before_the_verdicts_does_not_show_a_speed_for_a_skipped_configuration() -> None:
    """Older sweep states kept the planner's tokens/s and MFU for configurations skipped as out of memory, and
    no ``status``: the report withholds them all the same."""
    old = {
        "instance_type": "ml.p5.48xlarge",
        "instance_count": 1,
        "gpu": "H100",
        "world_size": 8,
        "fits": False,
        "memory_gb_total": 94.405,
        "memory_gb_required": 105.596,
        "memory_gb_usable": 81.604,
        "tokens_per_second": 322000.0,
        "tokens_per_second_per_gpu": 40250.0,
        "mfu": 38.1,
        "step_time_s": 0.41,
        "source": "planner.estimate",
    }
    skipped = SweepConfig(
        index=0,
        overrides={"batch_size": "8"},
        hyperparameters={},
        status=SKIPPED,
        reason="predicted out of memory: ...",
    )
    skipped.prediction = old
    shown = reported_prediction(skipped)
    assert shown is not None and shown["status"] == "out-of-memory"
    assert {k: shown[k] for k in SPEED_FIGURES} == dict.fromkeys(SPEED_FIGURES)
    assert shown["not_run"] == "not run: out-of-memory (105.6 GB needed per GPU, 81.6 GB usable)"
    assert skipped.prediction["tokens_per_second"] == 322000.0  # the state itself is not changed
    ran = SweepConfig(index=1, overrides={"batch_size": "1"}, hyperparameters={}, status="Completed", prediction=old)
    assert reported_prediction(ran) == old  # a configuration that ran keeps its figures as recorded
