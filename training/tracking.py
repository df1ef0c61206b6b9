"""Experiment tracking on rank 0: every metric line's values as TensorBoard scalars and MLflow metrics.

Turned on by the job, never by a hyperparameter (:mod:`platform_spec.tracking`):

* **TensorBoard** when ``<base>/input/config/tensorboardoutputconfig.json`` exists (SageMaker writes it for a job
  with ``TensorBoardOutputConfig``): event files (``torch.utils.tensorboard.SummaryWriter``, the ``tensorboard``
  package's format) go to its ``LocalPath``, which SageMaker uploads to ``S3OutputPath`` while the job runs. A
  ``LocalPath`` under ``/opt/ml`` is taken relative to the base directory, so a local run writes beside its
  other outputs.
* **MLflow** when ``MLFLOW_TRACKING_URI`` is set (the submitter sets it, with ``MLFLOW_EXPERIMENT_NAME`` and
  ``MLFLOW_RUN_NAME``, for a request with ``mlflow``): one run per job, each value logged with the metric line's
  step. An ARN tracking URI is resolved by the ``sagemaker-mlflow`` plugin (training/requirements.txt).

Scalars are named as the metric line names them (``loss``, ``validation_loss``, ``tokens_per_sec``,
``tflops_per_gpu``, ``mfu``, ``peak_mem_allocated_gb`` ...; ``step`` is the x axis, not a scalar); ``nan``
(MFU on a CPU) is left out. A target that fails (a tracking server unreachable, a full disk) must not stop
training: its first error is printed once as a ``[tracking]`` line in the job's log, the target is dropped for
the rest of the job, and the metric lines, ``MetricDefinitions`` and the other target go on.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, TextIO

from platform_spec.tracking import (
    DEFAULT_TENSORBOARD_LOCAL_PATH,
    MLFLOW_EXPERIMENT_ENV,
    MLFLOW_RUN_NAME_ENV,
    MLFLOW_TRACKING_URI_ENV,
)

from .environment import DEFAULT_BASE_DIR, SageMakerPaths

__all__ = ["MetricSinks", "tensorboard_dir"]

MLFLOW_HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
"""The MLflow client's retry count and per-request timeout (s) unless the job sets its own: its defaults (7
retries with exponential backoff, 120 s each) would hold a training step for many minutes on a dead server."""


class _Sink(Protocol):
    name: str

    def log(self, values: Mapping[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def tensorboard_dir(paths: SageMakerPaths) -> Path | None:
    """The folder for TensorBoard event files, or ``None`` when the job asked for none.

    Raises:
        ValueError: the config file is not a JSON object with a string ``LocalPath`` (names the file).
    """
    config = paths.tensorboard_config_file
    if not config.is_file():
        return None
    try:
        data = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{config}: expected a JSON object with LocalPath ({exc})") from None
    local = data.get("LocalPath", DEFAULT_TENSORBOARD_LOCAL_PATH) if isinstance(data, dict) else None
    if not isinstance(local, str) or not local.startswith("/"):
        raise ValueError(f"{config}: got LocalPath {local!r}; expected an absolute path")
    if local == DEFAULT_BASE_DIR or local.startswith(DEFAULT_BASE_DIR + "/"):
        return paths.base_dir / local[len(DEFAULT_BASE_DIR) :].lstrip("/")
    return Path(local)


class _TensorBoard:
    name = "tensorboard"

    def __init__(self, folder: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.folder = folder
        self.writer = SummaryWriter(log_dir=str(folder))

    def log(self, values: Mapping[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)
        self.writer.flush()  # SageMaker uploads what is on disk; a killed job keeps every line logged

    def close(self) -> None:
        self.writer.close()


class _Mlflow:
    name = "mlflow"

    def __init__(self, environ: Mapping[str, str]) -> None:
        for key, value in MLFLOW_HTTP_LIMITS.items():
            os.environ.setdefault(key, value)
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=environ[MLFLOW_TRACKING_URI_ENV])
        experiment_name = environ.get(MLFLOW_EXPERIMENT_ENV)
        experiment_id = "0"  # MLflow's default experiment
        if experiment_name:
            found = self.client.get_experiment_by_name(experiment_name)
            experiment_id = found.experiment_id if found else self.client.create_experiment(experiment_name)
        run = self.client.create_run(experiment_id, run_name=environ.get(MLFLOW_RUN_NAME_ENV) or None)
        self.run_id = run.info.run_id

    def log(self, values: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = _millis()
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _millis() -> int:
    import time

    return int(time.time() * 1000)


class MetricSinks:
    """The job's tracking targets (rank 0 only; other ranks get none). :meth:`log` never raises.

    Args:
        paths: the container layout (the TensorBoard config file).
        rank: this process's rank.
        environ: the MLflow variables (default ``os.environ``).
        stream: where the ``[tracking]`` lines go (default stdout, the job's log).
    """

    def __init__(
        self,
        paths: SageMakerPaths,
        *,
        rank: int,
        environ: Mapping[str, str] | None = None,
        stream: TextIO | None = None,
    ) -> None:
        self.stream = stream or sys.stdout
        self.sinks: list[_Sink] = []
        self.failed: dict[str, str] = {}
        if rank != 0:
            return
        env = os.environ if environ is None else environ
        folder = self._try("tensorboard", lambda: tensorboard_dir(paths))
        if folder is not None:
            self._add("tensorboard", lambda: _TensorBoard(folder))
        if env.get(MLFLOW_TRACKING_URI_ENV):
            self._add("mlflow", lambda: _Mlflow(env))

    def _try(self, name: str, make: Any) -> Any:
        try:
            return make()
        except Exception as exc:  # a tracking target never stops training
            self._fail(name, exc)
            return None

    def _add(self, name: str, make: Any) -> None:
        sink = self._try(name, make)
        if sink is not None:
            self.sinks.append(sink)
            print(f"[tracking] {name}: on", file=self.stream, flush=True)

    def _fail(self, name: str, exc: BaseException) -> None:
        self.failed[name] = f"{type(exc).__name__}: {exc}"
        print(
            f"[tracking] {name} failed and is off for the rest of the job ({self.failed[name]}); training goes on, "
            "its metrics stay in the log, metrics.jsonl and MetricDefinitions",
            file=self.stream,
            flush=True,
        )

    def log(self, values: Mapping[str, Any]) -> None:
        """Log one metric line's values (``step`` the x axis; ``nan`` and non-numbers left out)."""
        if not self.sinks:
            return
        step = int(values["step"])
        scalars = {
            k: float(v)
            for k, v in values.items()
            if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        }
        for sink in list(self.sinks):
            try:
                sink.log(scalars, step)
            except Exception as exc:  # warn once, drop the target, keep training
                self.sinks.remove(sink)
                self._fail(sink.name, exc)

    def close(self) -> None:
        """Flush and close every target (an MLflow run ends ``FINISHED``); failures are reported, not raised."""
        for sink in self.sinks:
            try:
                sink.close()
            except Exception as exc:
                self._fail(sink.name, exc)
        self.sinks = []
