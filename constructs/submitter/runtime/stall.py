"""The run continuation's outside watch: a run's segment whose newest step is older than the request's
``stall_minutes`` is stopped, so that the run continues on a new segment (:mod:`platform_spec.health`).

A segment is watched while it reads ``InProgress`` in the secondary status ``Training``. Its newest step is the
newest datapoint of the ``train:step`` algorithm metric SageMaker publishes from the job's ``[metrics]`` lines
(its ``MetricDefinitions``; namespace :data:`platform_spec.metric_lines.SAGEMAKER_METRIC_NAMESPACE`, dimension
:data:`platform_spec.metric_lines.TRAINING_JOB_DIMENSION`), read with one ``GetMetricData`` over the time since
the job entered ``Training`` (its newest ``SecondaryStatusTransitions`` entry of that status), at most
:data:`WINDOW_S`; before any step the age counts from that entry. A datapoint is stamped with the start of its
one-minute period, so an age is at most a minute high; and the metric lags the log line by CloudWatch's
delivery, which :data:`platform_spec.health.MIN_STALL_MINUTES` leaves room for.

A stalled segment is stopped in two writes, in this order: the run's stall record
(:meth:`.ledger.RunLedger.stall_key`, once: a later tick that finds it stops again, which is safe) and then
``StopTrainingJob`` (the trainer checkpoints on SIGTERM, within SageMaker's 120 s). The segment's end,
``Stopped`` with secondary status ``Stopped``, is then decided with that record
(:func:`platform_spec.runs.decide`'s ``stalled``): ``continue`` bounded by ``no-progress``, not the ``stopped``
of a caller's stop.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools import Logger

from platform_spec import health
from platform_spec import runs as spec
from platform_spec.metric_lines import SAGEMAKER_METRIC_NAMESPACE, TRAINING_JOB_DIMENSION

from . import settings
from .aws import Clients
from .config import SubmitterConfig
from .ledger import RunLedger, RunRecord
from .training_job import stop_job, utc

logger = Logger(service=settings.CONTINUATION_SERVICE_NAME)

WINDOW_S = 14 * 24 * 3600
"""The longest look back for the newest ``train:step`` datapoint (seconds): CloudWatch keeps one-minute
datapoints for 15 days ("Amazon CloudWatch concepts", Metrics retention,
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_concepts.html), and ``GetMetricData``
takes a 60 s period only within them."""
PERIOD_S = 60
"""``GetMetricData``'s period (seconds): the algorithm metrics' one-minute granularity."""


@dataclass(frozen=True)
class StepAge:
    """How long a segment in training has gone without a step.

    Attributes:
        age_s: seconds since its newest step (or since it entered ``Training``, before any step).
        newest_step: the newest ``train:step`` value, or ``None`` before any.
        newest_step_at: that datapoint's time (aware), or ``None``.
        stall_minutes: the run's limit (0: the watch is off).
        stopped: the segment was found stalled and the stop was sent (or it was stopping already).
    """

    age_s: float
    newest_step: int | None
    newest_step_at: datetime | None
    stall_minutes: float
    stopped: bool = False


def stall_minutes_of(request: Mapping[str, Any]) -> float:
    """The run's ``stall_minutes`` from its submission event (``run.json``'s request, as sent; parsed and
    checked when it was submitted): its value, or :data:`platform_spec.health.DEFAULT_STALL_MINUTES` when absent
    or ``null``; 0 is off."""
    value = request.get("stall_minutes")
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return health.DEFAULT_STALL_MINUTES
    return float(value)


def training_since(description: Mapping[str, Any]) -> datetime | None:
    """When the job last entered the secondary status ``Training`` (``SecondaryStatusTransitions``), else ``None``."""
    for transition in reversed(description.get("SecondaryStatusTransitions") or []):
        if transition.get("Status") == "Training":
            return utc(transition.get("StartTime"))
    return None


class MetricDataUnavailable(RuntimeError):
    """``GetMetricData`` answered without saying whether a job's step metric has datapoints: a result whose
    ``StatusCode`` is ``InternalError`` or ``Forbidden`` ("GetMetricData", Amazon CloudWatch API Reference,
    ``MetricDataResult``, https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_MetricDataResult.html).
    No datapoint in such an answer is not "no step": the segment is not judged, and the tick's retry or the next
    tick reads it again."""


READABLE_STATUS_CODES = ("Complete", "PartialData")
"""``MetricDataResult.StatusCode`` values whose datapoints can be trusted as far as they go: ``Complete``, and
``PartialData`` (the rest follows with ``NextToken``; newest first with ``ScanBy: TimestampDescending``)."""


def newest_step(cloudwatch: Any, job_name: str, *, start: datetime, end: datetime) -> tuple[int, datetime] | None:
    """``(step, time)`` of the newest ``train:step`` datapoint of ``job_name`` between ``start`` and ``end``
    (``GetMetricData``, one-minute periods, the period's ``Maximum``; newest first, following ``NextToken``), else
    ``None``.

    Raises:
        MetricDataUnavailable: a page without datapoints whose result's ``StatusCode`` is not one of
            :data:`READABLE_STATUS_CODES` (CloudWatch's ``InternalError``, ``Forbidden``).
        botocore.exceptions.ClientError: the call failed.
    """
    query = {
        "Id": "step",
        "MetricStat": {
            "Metric": {
                "Namespace": SAGEMAKER_METRIC_NAMESPACE,
                "MetricName": health.STEP_METRIC,
                "Dimensions": [{"Name": TRAINING_JOB_DIMENSION, "Value": job_name}],
            },
            "Period": PERIOD_S,
            "Stat": "Maximum",
        },
        "ReturnData": True,
    }
    kwargs: dict[str, Any] = {
        "MetricDataQueries": [query],
        "StartTime": start,
        "EndTime": end,
        "ScanBy": "TimestampDescending",
    }
    while True:
        page = cloudwatch.get_metric_data(**kwargs)
        points = [
            (stamp, value)
            for result in page.get("MetricDataResults") or []
            for stamp, value in zip(result.get("Timestamps") or [], result.get("Values") or [], strict=False)
        ]
        if points:
            stamp, value = max(points, key=lambda point: point[0])
            when = utc(stamp)
            assert when is not None
            return int(value), when
        unreadable = [
            f"{result.get('StatusCode')}: {'; '.join(m.get('Value', '') for m in result.get('Messages') or [])}"
            for result in page.get("MetricDataResults") or []
            if result.get("StatusCode") not in READABLE_STATUS_CODES
        ]
        if unreadable:
            raise MetricDataUnavailable(
                f"GetMetricData of {health.STEP_METRIC} for training job {job_name!r} answered "
                f"{', '.join(unreadable)}: its newest step is not known, the segment is not judged this time"
            )
        token = page.get("NextToken")
        if not token:
            return None
        kwargs["NextToken"] = token


def watch_segment(
    claim: RunRecord,
    index: int,
    description: Mapping[str, Any],
    *,
    clients: Clients,
    config: SubmitterConfig,
    now: datetime,
) -> StepAge | None:
    """Judge the run's running segment ``index`` (``description``: its ``DescribeTrainingJob``) and stop it when
    its newest step is older than the run's ``stall_minutes`` (module docstring).

    Returns:
        The segment's :class:`StepAge`, or ``None`` when it is not ``InProgress`` / ``Training`` (or its entry
        into ``Training`` is not known).

    Raises:
        botocore.exceptions.ClientError: ``GetMetricData``, the record's write or ``StopTrainingJob`` failed (the
            tick's retry, or the next tick, watches again).
        MetricDataUnavailable: CloudWatch could not say whether the job has a newer step (likewise).
    """
    if description.get("TrainingJobStatus") != "InProgress" or description.get("SecondaryStatus") != "Training":
        return None
    since = training_since(description)
    if since is None:
        return None
    name = str(description["TrainingJobName"])
    start = max(since, now - timedelta(seconds=WINDOW_S)) - timedelta(seconds=PERIOD_S)
    found = newest_step(clients.cloudwatch, name, start=start, end=now)
    step, step_at = found if found is not None else (None, None)
    age = health.stall_age_s(newest_step_at=step_at, training_since=since, now=now)
    assert age is not None
    minutes = stall_minutes_of(claim.request)
    if not health.is_stalled(age, minutes):
        return StepAge(age, step, step_at, minutes)
    newest = (
        f"its newest step ({step}) was logged at {spec.format_time(step_at)}"
        if step_at
        else (f"no step since it began training at {spec.format_time(since)}")
    )
    reason = f"{newest}, {age / 60:.1f} min before {spec.format_time(now)}, over stall_minutes {minutes:g}"
    store = RunLedger.of(clients, config)
    record = {
        "run_id": claim.run.run_id, "segment": index, "training_job_name": name, "newest_step": step,
        "newest_step_at": spec.format_time(step_at) if step_at else None, "training_since": spec.format_time(since),
        "age_s": round(age, 3), "stall_minutes": minutes, "stopped_at": spec.format_time(now), "reason": reason,
    }  # fmt: skip
    store.create(store.stall_key(claim, index), record)  # once; a retry finds it and stops again
    sent = stop_job(clients, name)
    logger.warning(
        "segment stalled: stopped", extra={"run_id": claim.run.run_id, "segment": index, "reason": reason, "sent": sent}
    )
    return StepAge(age, step, step_at, minutes, stopped=True)
