"""The trainer's tracking targets, read back with each tool's own reader: TensorBoard's EventAccumulator and
MLflow's MlflowClient on a local file store (the managed tracking server cannot run here; the client is the same)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from training.environment import SageMakerPaths
from training.tracking import MetricSinks, tensorboard_dir

LINES = [
    {"step": 1, "loss": 10.5, "tokens_per_sec": 1200.0, "tflops_per_gpu": 0.5, "mfu": math.nan,
     "peak_mem_allocated_gb": 0.25},
    {"step": 2, "loss": 9.75, "tokens_per_sec": 1300.0, "tflops_per_gpu": 0.6, "mfu": math.nan,
     "peak_mem_allocated_gb": 0.25},
    {"step": 2, "validation_loss": 9.9},
]  # fmt: skip


def _paths(tmp_path: Path, local_path: str | None) -> SageMakerPaths:
    paths = SageMakerPaths(tmp_path / "opt_ml")
    if local_path is not None:
        paths.config_dir.mkdir(parents=True)
        paths.tensorboard_config_file.write_text(json.dumps({"LocalPath": local_path}))
    return paths


def test_tensorboard_event_files_hold_every_metric_by_step(tmp_path: Path) -> None:
    paths = _paths(tmp_path, "/opt/ml/output/tensorboard")
    sinks = MetricSinks(paths, rank=0, environ={}, stream=io.StringIO())
    for values in LINES:
        sinks.log(values)
    sinks.close()
    folder = tensorboard_dir(paths)
    assert folder == paths.base_dir / "output" / "tensorboard"
    events = EventAccumulator(str(folder))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == [
        "loss",
        "peak_mem_allocated_gb",
        "tflops_per_gpu",
        "tokens_per_sec",
        "validation_loss",
    ]  # fmt: skip  (mfu nan on a CPU: left out)
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 10.5), (2, 9.75)]
    assert [(e.step, round(e.value, 4)) for e in events.Scalars("validation_loss")] == [(2, 9.9)]


def test_no_config_file_and_no_tracking_uri_means_no_target_and_other_ranks_log_nothing(tmp_path: Path) -> None:
    assert MetricSinks(_paths(tmp_path, None), rank=0, environ={}).sinks == []
    uri = (tmp_path / "mlruns").as_uri()
    other = MetricSinks(_paths(tmp_path / "b", "/opt/ml/output/tb"), rank=1, environ={"MLFLOW_TRACKING_URI": uri})
    assert other.sinks == []


def test_mlflow_run_holds_every_metric_by_step_under_the_jobs_experiment_and_run_name(
    tmp_path: Path, monkeypatch
) -> None:
    from mlflow import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the brief's file:// store (mlflow 3 keeps it opt-in)

    uri = (tmp_path / "mlruns").as_uri()
    env = {"MLFLOW_TRACKING_URI": uri, "MLFLOW_EXPERIMENT_NAME": "fp8-study", "MLFLOW_RUN_NAME": "job-1"}
    sinks = MetricSinks(_paths(tmp_path, None), rank=0, environ=env, stream=io.StringIO())
    for values in LINES:
        sinks.log(values)
    sinks.close()
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("fp8-study")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.run_name == "job-1" and run.info.status == "FINISHED"
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")] == [(1, 10.5), (2, 9.75)]
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "validation_loss")] == [(2, 9.9)]
    assert "mfu" not in run.data.metrics


def test_a_tracking_server_that_fails_is_reported_once_and_training_goes_on(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    out = io.StringIO()
    sinks = MetricSinks(_paths(tmp_path, "/opt/ml/output/tensorboard"), rank=0, environ={"MLFLOW_TRACKING_URI": uri},
                        stream=out)  # fmt: skip
    mlflow_sink = next(s for s in sinks.sinks if s.name == "mlflow")
    mlflow_sink.run_id = "no-such-run"  # the server lost the run: every call fails
    for values in LINES:
        sinks.log(values)  # never raises
    sinks.close()
    failures = [line for line in out.getvalue().splitlines() if "failed" in line]
    assert len(failures) == 1 and failures[0].startswith("[tracking] mlflow failed"), out.getvalue()
    assert "mlflow" in sinks.failed
    events = EventAccumulator(str(tmp_path / "opt_ml" / "output" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == [1, 2]  # the other target went on


def test_an_unreachable_tracking_server_at_start_is_reported_not_raised(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    out = io.StringIO()
    sinks = MetricSinks(_paths(tmp_path, None), rank=0, environ={"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"},
                        stream=out)  # fmt: skip
    assert sinks.sinks == [] and "mlflow" in sinks.failed
    assert out.getvalue().startswith("[tracking] mlflow failed and is off for the rest of the job")
