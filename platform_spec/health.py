"""How a run that does not end is told from a healthy one: the failure reports the trainer writes and the
platform reads, and the limits both sides hold a run to.

The trainer stops itself on three kinds of trouble and says which, heading its one-line failure report
(``<base>/output/failure``, which SageMaker carries as ``FailureReason: "AlgorithmError: <report>"``) with one
of the phrases below; the run continuation (:func:`platform_spec.runs.decide`) reads that phrase, never the
rest of the line, to judge the segment:

* :data:`HANG_REASON`: the trainer's watchdog saw no completed step within its limit (a wedged collective,
  a stuck rank). The state on disk is the last checkpoint, which is sound: the run continues on a new
  segment (new instances), bounded by ``no-progress``.
* :data:`NON_FINITE_REASON`: the loss or gradient norm was not finite for too many steps in a row. No
  checkpoint holds a non-finite update, but the same data and state would diverge again: the run fails.
* :data:`PREFLIGHT_REASON`: the start-up check of the network path failed (an EFA instance whose NCCL
  does not use EFA). The image or the instance is wrong, not the weather: the run fails, naming it.

The platform also watches from outside (a trainer stopped whole, a node frozen): a job whose newest step is
older than its request's ``stall_minutes`` is stopped with ``StopTrainingJob`` (it checkpoints on SIGTERM)
and the run continues (:data:`STALL_STOP_REASON` in the run's decision).

Before the trainer starts, SageMaker's own infrastructure health check (``InfraCheckConfig``, the request field
``infra_check``: :func:`platform_spec.catalogue.default_infra_check`) tests the instances; a job that fails it ends
``Failed`` with :data:`INFRA_CHECK_ERROR` heading its ``FailureReason``, having never trained, and the run continues
on new instances as after a capacity failure (:data:`platform_spec.runs.CAPACITY_FAILURE_TYPES`).

Pure Python, standard library only.
"""

from __future__ import annotations

import math
from datetime import datetime

__all__ = [
    "DEFAULT_STALL_MINUTES",
    "HANG_REASON",
    "INFRA_CHECK_ERROR",
    "MIN_STALL_MINUTES",
    "NON_FINITE_REASON",
    "PREFLIGHT_REASON",
    "STALL_STOP_REASON",
    "STEP_METRIC",
    "TRAINER_FAILURE_KINDS",
    "is_stalled",
    "stall_age_s",
    "trainer_failure_kind",
]

HANG_REASON = "no training step completed within the watchdog's limit"
"""Heads the trainer's report when its watchdog fires: ``"<HANG_REASON>: <what it waited for, from which
step, how long, where the stacks are>"``."""

NON_FINITE_REASON = "the loss or gradient norm was not finite for too many steps in a row"
"""Heads the trainer's report when it stops on non-finite values: ``"<NON_FINITE_REASON>: <steps, values>"``."""

PREFLIGHT_REASON = "the pre-flight check of the network failed"
"""Heads the trainer's report when its start-up check of the network path fails."""

INFRA_CHECK_ERROR = "InfraCheckError"
"""The error type heading the ``FailureReason`` of a job whose infrastructure health check failed
(``"InfraCheckError: <message>"``, as :func:`platform_spec.runs.failure_reason` writes SageMaker's). AWS publishes
neither this error type nor the message: "A SageMaker-provided health check tests the health of instance hardware
and cluster network connectivity" is all the API Reference says (InfraCheckConfig,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_InfraCheckConfig.html), and no FailureReason of a
failed check was found in AWS's documentation or public issues. The name is the platform's choice, in the form of
SageMaker's ``CapacityError`` and ``InsufficientCapacityError``; the emulator fails a job with it. Should SageMaker
write another, such a segment is judged ``failed`` (not retried) and its run can be continued by hand
(``continue_run``): the safe way to be wrong."""

STALL_STOP_REASON = "no training step for longer than the run's stall_minutes"
"""Heads the reason of a run decision on a segment that the platform stopped because its newest step was
older than the request's ``stall_minutes``."""

TRAINER_FAILURE_KINDS: dict[str, str] = {
    "hang": HANG_REASON,
    "non-finite": NON_FINITE_REASON,
    "preflight": PREFLIGHT_REASON,
}
"""The platform's name of each kind of failure the trainer declares -> the phrase heading its report."""


def trainer_failure_kind(report: str) -> str | None:
    """The kind (a key of :data:`TRAINER_FAILURE_KINDS`) of the trainer's failure report ``report`` (the text of
    ``output/failure``; a ``FailureReason`` without SageMaker's ``AlgorithmError:`` head), else ``None``."""
    for name, phrase in TRAINER_FAILURE_KINDS.items():
        if report.startswith(phrase):
            return name
    return None


# --- the outside watch: a run's request field ``stall_minutes`` ---------------------------------------

STEP_METRIC = "train:step"
"""The ``MetricDefinitions`` metric whose newest datapoint dates a job's newest step (one a ``[metrics]`` line,
every ``log_interval`` steps: :data:`platform_spec.metric_lines.FIELDS`); SageMaker publishes it to CloudWatch in
:data:`platform_spec.metric_lines.SAGEMAKER_METRIC_NAMESPACE` with the dimension
:data:`platform_spec.metric_lines.TRAINING_JOB_DIMENSION` (as the SageMaker Python SDK's
``TrainingJobAnalytics`` reads it)."""

DEFAULT_STALL_MINUTES = 30.0
"""``stall_minutes`` of a run request that sends none. The outside watch is the backstop of the trainer's own
watchdog (which dumps stacks and exits first on a wedged collective): it catches what stops the whole trainer
(a frozen node, a process stopped whole, a watchdog that never fires). 30 minutes stays under NCCL's default
30-minute collective timeout plus the continuation's 5-minute tick, and leaves a healthy job's slow moments
room: a first step that compiles and loads a large checkpoint, a synchronous checkpoint save of tens of GB,
and a ``log_interval`` of slow steps."""
MIN_STALL_MINUTES = 10.0
"""The least ``stall_minutes`` but 0 (off). The newest step is seen through CloudWatch: SageMaker extracts
``train:step`` from the job's log and publishes it at a one-minute granularity ("Amazon SageMaker AI metrics in
Amazon CloudWatch", https://docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html), after the log
reaches CloudWatch Logs, so the newest datapoint lags the line by minutes; a step line comes every
``log_interval`` steps, and the continuation looks only every tick (5 minutes by default). A shorter limit would
stop healthy jobs on these delays alone."""


def stall_age_s(*, newest_step_at: datetime | None, training_since: datetime | None, now: datetime) -> float | None:
    """Seconds since a training job's newest step, as the outside watch judges it: from ``newest_step_at`` (the
    newest ``train:step`` datapoint's time), else, before any step, from ``training_since`` (when the job
    entered the secondary status ``Training``); ``None`` when neither is known. Never negative (a datapoint
    stamped a little after ``now`` counts as now). All times aware."""
    since = newest_step_at if newest_step_at is not None else training_since
    if since is None:
        return None
    return max(0.0, (now - since).total_seconds())


def is_stalled(age_s: float | None, stall_minutes: float) -> bool:
    """Whether a job whose newest step is ``age_s`` seconds old (:func:`stall_age_s`) is stalled under
    ``stall_minutes`` (0: the watch is off, never stalled)."""
    if age_s is None or not stall_minutes > 0 or not math.isfinite(stall_minutes):
        return False
    return age_s > stall_minutes * 60.0
