"""Collecting a sweep's measurements, one :class:`~trainctl.reports.results.ConfigResult` per configuration.

Where the numbers come from
---------------------------
* Local runs: the run's ``train.log``: its ``[metrics]`` lines, read with
  :func:`platform_spec.metric_lines.parse_line`, and its ``[run]`` records
  (:func:`platform_spec.metric_lines.run_records`: the device it trained on).
* Training jobs: ``DescribeTrainingJob`` (status, ``FailureReason``,
  ``FinalMetricDataList``: SageMaker's last value of each ``MetricDefinitions``
  regex), and the job's log streams in CloudWatch Logs
  (``/aws/sagemaker/TrainingJobs``, streams ``<job>/algo-N-...``) read with the
  same ``parse_line`` for per-step loss curves. When the logs are not readable
  the report says so and uses the final values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from platform_spec.metric_lines import FIELDS, SAGEMAKER_LOG_GROUP, parse_line, run_records
from trainctl.reports.analysis import summarise
from trainctl.reports.results import ConfigResult, reported_prediction
from trainctl.sweeps.jobs import aws_client
from trainctl.sweeps.state import ACTIVE_STATUSES, SKIPPED, Sweep, SweepConfig

if TYPE_CHECKING:
    from botocore.client import BaseClient

METRIC_TO_FIELD: dict[str, str] = {metric: name for name, metric, _ in FIELDS}
"""SageMaker metric name (``train:loss``) -> metric-line field (``loss``)."""


def metrics_by_step(lines: Sequence[str]) -> list[dict[str, float]]:
    """The ``[metrics]`` lines of ``lines`` as dicts, one per step, in step order: a step's training line and
    its validation line (``validation_loss``) merged; of a field written twice for a step the last value wins
    (a resumed run repeats the steps after its checkpoint)."""
    by_step: dict[int, dict[str, float]] = {}
    for line in lines:
        values = parse_line(line)
        if values and "step" in values and math.isfinite(values["step"]):
            by_step.setdefault(int(values["step"]), {}).update(values)
    return [by_step[s] for s in sorted(by_step)]


def device_of(lines: Sequence[str]) -> str | None:
    """Where a run trained, from its newest ``[run]`` record that names a device: ``"CPU (x86_64), 2 processes"``
    or ``"8x NVIDIA B200"``; None when no record says (an output from before the run was set up)."""
    record = next((r for r in reversed(run_records(lines)) if r.device is not None), None)
    if record is None:
        return None
    name, world = record.device_name or record.device, record.world_size or 1
    processes = "1 process" if world == 1 else f"{world} processes"
    return f"CPU ({name}), {processes}" if record.device == "cpu" else f"{world}x {name}"


def collect_local(sweep: Sweep, config: SweepConfig) -> ConfigResult:
    """Read a local run's ``train.log``: its metric lines and its ``[run]`` records (the device)."""
    result = ConfigResult(
        config=config, status=config.status, reason=config.reason, predicted=reported_prediction(config)
    )
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
    result.device = device_of(lines)
    device = sweep.target.get("device") or {}
    # a prediction exists only for a known local GPU (the planner models GPUs, not CPUs)
    result.comparable = bool(config.prediction) and device.get("type") == "cuda"
    return result


def job_log_lines(logs: BaseClient, job_name: str, log_group: str = SAGEMAKER_LOG_GROUP) -> list[str]:
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


def collect_job(sweep: Sweep, config: SweepConfig, sagemaker: BaseClient, logs: BaseClient) -> ConfigResult:
    """``DescribeTrainingJob`` + the job's CloudWatch Logs for one configuration."""
    result = ConfigResult(
        config=config, status=config.status, reason=config.reason, predicted=reported_prediction(config)
    )
    if not config.job_name or config.status in (SKIPPED, "Pending", "Rejected", "SubmitError"):
        return result
    try:
        job = sagemaker.describe_training_job(TrainingJobName=config.job_name)
    except Exception as exc:
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
    except Exception as exc:
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
    pred = result.predicted or {}
    result.comparable = (
        bool(pred) and pred.get("instance_type") == instance_type and pred.get("instance_count") == count
    )
    return result


def collect(sweep: Sweep, *, env: Mapping[str, str] | None = None, region: str | None = None) -> list[ConfigResult]:
    """Every configuration's :class:`~trainctl.reports.results.ConfigResult`, in grid order (none left out).

    Args:
        env: AWS sweeps: the environment for the boto3 clients (default: the
            process environment; ``AWS_ENDPOINT_URL`` honoured).
    """
    if sweep.mode == "local":
        return [collect_local(sweep, c) for c in sweep.configs]
    sagemaker = aws_client("sagemaker", env, region)
    logs = aws_client("logs", env, region)
    return [collect_job(sweep, c, sagemaker, logs) for c in sweep.configs]


__all__ = [
    "METRIC_TO_FIELD",
    "collect",
    "collect_job",
    "collect_local",
    "device_of",
    "job_log_lines",
    "metrics_by_step",
]
