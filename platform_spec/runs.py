"""Runs: one training carried across several SageMaker training jobs (segments), and how each is judged.

A run is asked for by a submission's ``run`` field (:func:`parse_run`): a run id and an optional
budget. Segment ``i`` (from 1) is the training job :func:`segment_job_name` ``(run_id, i)``, tagged
:data:`TAG_RUN_ID` and :data:`TAG_RUN_SEGMENT`; every segment checkpoints to the run's one prefix,
``s3://<checkpoint bucket>/`` + :func:`run_checkpoint_prefix` ``(run_id)``, so each resumes from the last.

When a segment ends, :func:`decide` judges it from **declared state**, not from the job's status
alone: SageMaker reports both "reached ``max_steps``" and "stopped cleanly at the end of its capacity
block" as ``Completed``, so the newest complete checkpoint's step (the trainer's ``.complete`` marker
and its ``trainer_state.json``: :mod:`platform_spec.checkpoint_layout`) tells them apart.

Decisions (:data:`DECISIONS`), in the order they are tried:

==========================  =================================================================================
``stale-event``             the event is not of the run's newest segment, or that segment was already decided:
                            nothing is done. (The run's newest, undecided segment that has not ended yet,
                            ``InProgress`` / ``Stopping``, is not decided at all: the continuation raises
                            ``SegmentNotEnded`` so that the event is retried, and the scheduled tick decides
                            the segment once it reads ended.)
``finished``                newest complete step >= ``max_steps`` and the segment ``Completed`` or ``Stopped``
``failed``                  the segment ``Failed`` for a reason that is neither capacity nor the trainer's hang
                            report (a code bug is not retried forever; the trainer's non-finite and pre-flight
                            reports say so in the reason), or after its last checkpoint reached ``max_steps``
                            (the final export failed)
``stopped``                 the run was stopped (its stop marker), or the segment was stopped by a caller's
                            ``StopTrainingJob`` (``Stopped`` with secondary status ``Stopped``) that was not the
                            platform's stall stop
``no-progress``             the segment's capacity ended but its newest complete step did not advance over the
                            step it started from (a segment that never got instances is exempt: see below), or
                            it is the :data:`MAX_CAPACITY_FAILURES`-th segment in a row that never trained
``budget-segments``         ``max_segments`` segments have run
``budget-deadline``         the run's ``deadline`` has passed
``budget-instance-hours``   the segments used ``max_instance_hours`` (sum of ``InstanceCount`` x
                            (``TrainingEndTime`` - ``TrainingStartTime``))
``continue``                the segment's capacity ended below ``max_steps``: the next segment is submitted,
                            at once after a segment that trained, after a growing wait after one that never
                            trained (**capacity backoff**, below: also a job whose instances failed
                            SageMaker's infrastructure health check); likewise a segment that **hung** (below)
``waiting-for-capacity``    (the runtime's) ``continue`` whose next segment found no capacity: retried on
                            the continuation's schedule
==========================  =================================================================================

**Capacity ends** (:func:`capacity_end`): the segment ``Completed`` below ``max_steps`` (the trainer
stops itself at its block's end, ``SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP``, and
SageMaker reports the job ``Completed``); ``Stopped`` with secondary status ``MaxRuntimeExceeded``
("The job stopped because it exceeded the maximum allowed runtime"), ``MaxWaitTimeExceeded`` or
``Interrupted`` (managed spot: the wait for spot capacity plus the run exceeded
``MaxWaitTimeInSeconds``, "If the job does not complete during this time, SageMaker ends the job";
SageMaker API Reference, SecondaryStatusTransition and StoppingCondition); ``Failed`` with
``InsufficientCapacityError`` ("If a job has been pending for 2 days, it is terminated with an
InsufficientCapacityError", "Training plans utilization for SageMaker training jobs",
https://docs.aws.amazon.com/sagemaker/latest/dg/training-plan-utilization-for-training-jobs.html),
SageMaker's ``CapacityError`` (instances could not be provisioned), or
:data:`platform_spec.health.INFRA_CHECK_ERROR` (SageMaker's infrastructure health check, ``InfraCheckConfig``, failed
the instances before the trainer started: a new job gets new instances), each as the error type heading the
``FailureReason`` (:data:`CAPACITY_FAILURE_TYPES`, :func:`never_trained`), or the trainer's own
:data:`platform_spec.capacity.CAPACITY_BLOCK_ENDED_REASON` (it started with too little of its block
left). The ``Failed`` ones never got to train: they are exempt from ``no-progress`` (the budget and
:data:`MAX_CAPACITY_FAILURES` still bound them).

**Hangs** (:mod:`platform_spec.health`): a segment that ``Failed`` with the trainer's watchdog report
(``AlgorithmError: <health.HANG_REASON>: ...``: no step completed within its limit; a wedged collective or a
stuck rank is the instances', not the code's) and a segment the continuation stopped because its newest step
was older than the request's ``stall_minutes`` (``Stopped`` by its ``StopTrainingJob``, recorded in the run's
ledger before the stop; the reason starts with :data:`platform_spec.health.STALL_STOP_REASON`) are judged
like a capacity end that trained: the next segment, on new instances, resumes from the newest complete
checkpoint, and a segment that did not advance it ends the run ``no-progress``. The trainer's non-finite
report (:data:`platform_spec.health.NON_FINITE_REASON`: the same data and state would diverge again) and
pre-flight report (:data:`platform_spec.health.PREFLIGHT_REASON`: the image or instance is wrong) are
``failed``, their reason naming which.

**Capacity backoff.** Each decision counts the segments in a row, this one included, that never trained
(:attr:`Decision.capacity_failures`; a segment that trained resets it to 0). After such a segment the next
one starts no earlier than :func:`capacity_backoff_s` seconds after the decision: :data:`CAPACITY_BACKOFF_BASE_S`
doubled for each further failure in a row, at most :data:`CAPACITY_BACKOFF_CEILING_S` (the runtime's run
waits for capacity meanwhile, retried by the continuation's schedule). The :data:`MAX_CAPACITY_FAILURES`-th
failure in a row ends the run ``no-progress``, and a wait that would pass the run's ``deadline`` ends it
``budget-deadline`` at once.

**The budget bounds the running segment** (:func:`segment_runtime`), not only the decision at its end:
every segment's ``MaxRuntimeInSeconds`` is the least of ``max_runtime_hours``, the time left until the
``deadline`` (from when the segment starts: now, or the start of the training-plan block it waits for)
and the instance-hours left divided by its instance count. When the deadline or the instance-hours
leave less than the segment floor (the larger of SageMaker's least ``MaxRuntimeInSeconds`` and the
trainer's stop margin plus ``min_segment_minutes``: a shorter segment would mostly pay its start-up and
may not save a step), no segment starts: the submission is refused naming ``run.deadline`` or
``run.max_instance_hours``, and a run's next segment ends the run with ``budget-deadline`` or
``budget-instance-hours``. The instance count never shrinks to fit: it is the training's layout (the
FSDP world size, hence the global batch, the per-GPU memory the planner checked and the data order of
the resumed checkpoint), which a run keeps across segments; only the time is bounded. SageMaker stops a
segment at ``MaxRuntimeInSeconds`` with ``SIGTERM``, on which the trainer saves its checkpoint, and
reports ``Stopped`` / ``MaxRuntimeExceeded``: a capacity end, then judged by the budget.

**Continuing an ended run** (:data:`CONTINUABLE_DECISIONS`): a run that ended ``budget-*``,
``stopped`` or ``no-progress`` keeps its checkpoints and may be continued on purpose with a new budget
(the job API's ``continue_run``): its next segment resumes from the newest complete checkpoint. A run
that ``finished`` or ``failed`` (its code failed, its final export failed, or a segment was refused)
is not continued: nothing is left to train, or the same code would fail again.

Pure Python, standard library only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from platform_spec.capacity import CAPACITY_BLOCK_ENDED_REASON, STOP_MARGIN_S
from platform_spec.errors import FieldError
from platform_spec.health import (
    INFRA_CHECK_ERROR,
    NON_FINITE_REASON,
    PREFLIGHT_REASON,
    STALL_STOP_REASON,
    trainer_failure_kind,
)

__all__ = [
    "ALGORITHM_ERROR",
    "BUDGET_DEADLINE",
    "BUDGET_INSTANCE_HOURS",
    "BUDGET_SEGMENTS",
    "CAPACITY_BACKOFF_BASE_S",
    "CAPACITY_BACKOFF_CEILING_S",
    "CAPACITY_ERROR",
    "CONTINUABLE_DECISIONS",
    "CONTINUE",
    "DECISIONS",
    "FAILED",
    "FINISHED",
    "INSUFFICIENT_CAPACITY_ERROR",
    "MAX_CAPACITY_FAILURES",
    "MAX_SEGMENTS",
    "NO_PROGRESS",
    "RUN_CHECKPOINT_PREFIX",
    "RUN_ID_EXPECTED",
    "RUN_ID_PATTERN",
    "STALE_EVENT",
    "STOPPED",
    "TAG_RUN_ID",
    "TAG_RUN_SEGMENT",
    "TERMINAL_DECISIONS",
    "WAITING_FOR_CAPACITY",
    "Decision",
    "RunSpec",
    "SegmentOutcome",
    "SegmentRuntime",
    "budget_exhausted",
    "capacity_backoff_s",
    "capacity_end",
    "decide",
    "failure_reason",
    "never_trained",
    "parse_run",
    "parse_segment_job_name",
    "run_checkpoint_prefix",
    "segment_client_token",
    "segment_floor_s",
    "segment_job_name",
    "segment_runtime",
    "trainer_report",
]

TAG_RUN_ID = "platform:run-id"
"""Tag of every segment of a run: the run id."""
TAG_RUN_SEGMENT = "platform:run-segment"
"""Tag of every segment of a run: its index (``"1"``, ``"2"``, ...)."""

RUN_ID_PATTERN = r"[a-z][a-z0-9-]{0,47}"
"""A run id, matched whole: 1-48 lowercase letters, digits and hyphens, starting with a letter (so that
``<run_id>-seg-NNN`` is a valid TrainingJobName of at most 56 characters, and a run id is a valid S3
key segment and tag value)."""
RUN_ID_RE = re.compile(rf"(?:{RUN_ID_PATTERN})\Z")
RUN_ID_EXPECTED = "1-48 lowercase letters, digits and hyphens, starting with a letter"

MAX_SEGMENTS = 999
"""The most segments a run may have (a segment's index is written with 3 digits in its job name)."""
_SEGMENT_NAME_RE = re.compile(rf"({RUN_ID_PATTERN})-seg-([0-9]{{3}})\Z")

DEFAULT_MIN_SEGMENT_MINUTES = 30.0
"""The least training time (minutes) a capacity block must leave a run's segment, beyond the trainer's
stop margin (:data:`platform_spec.capacity.STOP_MARGIN_S`), for the submitter to place the segment on
it, unless the run sets ``min_segment_minutes``. A segment pays its start-up before it trains (instance
provisioning, the image download, the data and checkpoint downloads, the model build: minutes on
SageMaker), so a block with less left would mostly pay start-up and may leave the trainer no time to
train at all (``platform_spec.capacity.CAPACITY_BLOCK_ENDED_REASON``)."""

RUN_CHECKPOINT_PREFIX = "run-checkpoints/"
"""Key prefix, in the checkpoint bucket, of the runs' checkpoint prefixes (``run-checkpoints/<run_id>/``).
Never under ``checkpoints/``, where a plain job's prefix is ``checkpoints/<job name>/``: a job named like
a run would share its checkpoints."""

CONTINUE = "continue"
FINISHED = "finished"
STOPPED = "stopped"
FAILED = "failed"
BUDGET_SEGMENTS = "budget-segments"
BUDGET_DEADLINE = "budget-deadline"
BUDGET_INSTANCE_HOURS = "budget-instance-hours"
NO_PROGRESS = "no-progress"
WAITING_FOR_CAPACITY = "waiting-for-capacity"
STALE_EVENT = "stale-event"
DECISIONS: tuple[str, ...] = (
    CONTINUE,
    FINISHED,
    STOPPED,
    FAILED,
    BUDGET_SEGMENTS,
    BUDGET_DEADLINE,
    BUDGET_INSTANCE_HOURS,
    NO_PROGRESS,
    WAITING_FOR_CAPACITY,
    STALE_EVENT,
)
"""Every decision (module docstring); the ``Decision`` dimension of the ``RunDecisions`` metric."""
TERMINAL_DECISIONS: tuple[str, ...] = (
    FINISHED,
    STOPPED,
    FAILED,
    BUDGET_SEGMENTS,
    BUDGET_DEADLINE,
    BUDGET_INSTANCE_HOURS,
    NO_PROGRESS,
)
"""The decisions that end a run."""
CONTINUABLE_DECISIONS: tuple[str, ...] = (
    BUDGET_SEGMENTS,
    BUDGET_DEADLINE,
    BUDGET_INSTANCE_HOURS,
    STOPPED,
    NO_PROGRESS,
)
"""The terminal decisions after which a run may be continued on purpose (module docstring): its budget ran
out, someone stopped it, or a segment made no progress (a stalled data loader or a lost block may not
recur). ``finished`` and ``failed`` are final."""

TERMINAL_JOB_STATUSES: tuple[str, ...] = ("Completed", "Failed", "Stopped")
"""``TrainingJobStatus`` values of a job that has ended."""
JOB_STATE_CHANGE_SOURCE = "aws.sagemaker"
"""``source`` of SageMaker's EventBridge event for a training job's status change."""
JOB_STATE_CHANGE_DETAIL_TYPE = "SageMaker Training Job State Change"
"""``detail-type`` of that event (its ``detail`` is the job as ``DescribeTrainingJob`` answers it, with ``Tags``:
SageMaker Developer Guide, "Events that Amazon SageMaker AI sends to Amazon EventBridge")."""
CAPACITY_STOPS: tuple[str, ...] = ("MaxRuntimeExceeded", "MaxWaitTimeExceeded", "Interrupted")
"""Secondary statuses of a ``Stopped`` job that SageMaker stopped because its time or its spot capacity ran out."""
CAPACITY_ERROR = "CapacityError"
"""SageMaker's error type of a job whose instances could not be provisioned."""
INSUFFICIENT_CAPACITY_ERROR = "InsufficientCapacityError"
"""SageMaker's error type of a job on a plan pending 2 days (:data:`platform_spec.capacity.PENDING_LIMIT_S`)."""
ALGORITHM_ERROR = "AlgorithmError"
"""SageMaker's error type of a failure the container reported (its ``/opt/ml/output/failure``)."""
CAPACITY_FAILURE_TYPES: tuple[str, ...] = (CAPACITY_ERROR, INSUFFICIENT_CAPACITY_ERROR, INFRA_CHECK_ERROR)
"""SageMaker's error types that say a job never got (healthy) instances to train, as the type at the head of its
``FailureReason`` (:func:`failure_reason`, as ``AlgorithmError: ...`` and ``ClientError: ...`` are).
Matched at the head only: an ``AlgorithmError`` whose message mentions one is the code's failure."""

CAPACITY_BACKOFF_BASE_S = 300.0
"""The wait, seconds, before the segment after one that never trained (:func:`capacity_backoff_s`).
SageMaker answers ``CapacityError`` minutes after ``CreateTrainingJob`` (provisioning failed), and capacity
comes back as other jobs end, on the scale of minutes; 5 minutes is also one period of the continuation's
default schedule, so the first retry is the next tick, not the same one."""
CAPACITY_BACKOFF_CEILING_S = 3600.0
"""The longest wait, seconds, between segments that never trained: capacity that frees up is taken within
an hour, however long the run has waited."""
MAX_CAPACITY_FAILURES = 6
"""The segments in a row that may never train before the run ends ``no-progress``: with the waits of
:func:`capacity_backoff_s` (5, 10, 20, 40 and 60 minutes) that is about 2 h 15 min of retrying after
``CapacityError`` (SageMaker's own retries are within each job), or 12 days of plans that never started the job
(``InsufficientCapacityError`` comes after 2 days pending). Past that the run's configuration (its instance
type, count or plans), not the weather, is the likely cause, and someone should look; a run's deadline and
``max_instance_hours`` bound what it spends meanwhile, and an ended run keeps its checkpoints."""


def failure_reason(kind: str, message: str) -> str:
    """A ``FailureReason`` as SageMaker writes it: its error type (:data:`ALGORITHM_ERROR`,
    :data:`CAPACITY_ERROR`, ...), a colon, and the message (``"CapacityError: ..."``)."""
    return f"{kind}: {message}"


def capacity_backoff_s(failures: int) -> float:
    """Seconds the next segment waits after ``failures`` segments in a row that never trained:
    0 for 0, else :data:`CAPACITY_BACKOFF_BASE_S` x 2 ** (``failures`` - 1), at most
    :data:`CAPACITY_BACKOFF_CEILING_S` (300, 600, 1200, 2400, 3600, 3600, ...).

    Raises:
        ValueError: ``failures`` is negative.
    """
    if failures < 0:
        raise ValueError(f"failures {failures!r}: expected a count >= 0")
    if failures == 0:
        return 0.0
    return min(CAPACITY_BACKOFF_CEILING_S, CAPACITY_BACKOFF_BASE_S * 2.0 ** min(failures - 1, 32))


def segment_job_name(run_id: str, index: int) -> str:
    """The training job name of segment ``index`` (from 1) of run ``run_id``: ``<run_id>-seg-<index:03d>``.

    Raises:
        ValueError: ``run_id`` breaks :data:`RUN_ID_PATTERN`, or ``index`` is not 1..:data:`MAX_SEGMENTS`.
    """
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise ValueError(f"run_id {run_id!r}: expected {RUN_ID_EXPECTED}")
    if isinstance(index, bool) or not isinstance(index, int) or not 1 <= index <= MAX_SEGMENTS:
        raise ValueError(f"segment index {index!r}: expected an integer from 1 to {MAX_SEGMENTS}")
    return f"{run_id}-seg-{index:03d}"


def parse_segment_job_name(name: str) -> tuple[str, int] | None:
    """``(run_id, index)`` of a segment's job name, or ``None`` for any other name."""
    match = _SEGMENT_NAME_RE.fullmatch(name) if isinstance(name, str) else None
    if match is None or int(match.group(2)) < 1:
        return None
    return match.group(1), int(match.group(2))


def run_checkpoint_prefix(run_id: str) -> str:
    """The key prefix of a run's checkpoints in the checkpoint bucket: ``run-checkpoints/<run_id>/``."""
    segment_job_name(run_id, 1)  # validates run_id
    return f"{RUN_CHECKPOINT_PREFIX}{run_id}/"


def segment_client_token(run_id: str, index: int) -> str:
    """The client token under which segment ``index`` is submitted: ``run:<run_id>:seg-<index:03d>``.

    A function of the run and the index alone, so every submission of one segment (the run's first
    request and its retries, duplicate or concurrent continuation events) settles on one job.
    """
    segment_job_name(run_id, index)  # validates both
    return f"run:{run_id}:seg-{index:03d}"


# --- the run field ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """A submission's ``run``: the run id and its budget (each ``None``: no limit).

    Attributes:
        run_id: :data:`RUN_ID_PATTERN`.
        max_segments: at most this many segments (1..:data:`MAX_SEGMENTS`).
        deadline: no segment is started after this time (UTC).
        max_instance_hours: no segment is started once the segments used this many instance-hours.
        min_segment_minutes: a block is used for a segment only when it leaves this much training
            time beyond the trainer's stop margin (``None``: :data:`DEFAULT_MIN_SEGMENT_MINUTES`).
    """

    run_id: str
    max_segments: int | None = None
    deadline: datetime | None = None
    max_instance_hours: float | None = None
    min_segment_minutes: float | None = None

    @property
    def min_segment_s(self) -> float:
        """:attr:`min_segment_minutes` (else :data:`DEFAULT_MIN_SEGMENT_MINUTES`) in seconds."""
        minutes = DEFAULT_MIN_SEGMENT_MINUTES if self.min_segment_minutes is None else self.min_segment_minutes
        return minutes * 60.0

    @property
    def least_segment_s(self) -> float:
        """The least time (seconds) a segment must have: the trainer's stop margin
        (:data:`platform_spec.capacity.STOP_MARGIN_S`) plus :attr:`min_segment_s`."""
        return STOP_MARGIN_S + self.min_segment_s

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (what a request sends; ``deadline`` as ISO 8601 UTC), absent limits left out."""
        out: dict[str, Any] = {"run_id": self.run_id}
        if self.max_segments is not None:
            out["max_segments"] = self.max_segments
        if self.deadline is not None:
            out["deadline"] = format_time(self.deadline)
        if self.max_instance_hours is not None:
            out["max_instance_hours"] = self.max_instance_hours
        if self.min_segment_minutes is not None:
            out["min_segment_minutes"] = self.min_segment_minutes
        return out


RUN_FIELDS: Mapping[str, str] = {
    "run_id": f"{RUN_ID_EXPECTED} (the run's key: a retry with the same run and request replays)",
    "max_segments": f"an integer from 1 to {MAX_SEGMENTS}",
    "deadline": "an ISO 8601 date-time with a time zone (e.g. 2026-03-01T00:00:00Z)",
    "max_instance_hours": "a number of instance-hours > 0",
    "min_segment_minutes": f"a number of minutes > 0 (default {DEFAULT_MIN_SEGMENT_MINUTES:g}): the least training "
    "time a capacity block must leave a segment, beyond the trainer's stop margin",
}
"""The keys of a request's ``run`` object and what each must be."""


def format_time(when: datetime) -> str:
    """``when`` in UTC as ISO 8601 with ``Z`` (``2026-03-01T00:00:00Z``)."""
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_time(value: Any, field: str) -> datetime:
    """An ISO 8601 date-time with a time zone, as UTC.

    Raises:
        FieldError: not a string, not ISO 8601, without a time zone, or outside years 1-9999 once in UTC
            (naming ``field``).
    """
    expected = RUN_FIELDS["deadline"]
    if not isinstance(value, str):
        raise FieldError(field, value, expected)
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        raise FieldError(field, value, expected) from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise FieldError(field, value, expected, detail="it has no time zone")
    try:
        return when.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+14:00 is before year 1 in UTC
        raise FieldError(field, value, expected, detail="it is outside years 1-9999 in UTC") from None


def parse_run(raw: Mapping[str, Any]) -> tuple[RunSpec, dict[str, Any]]:
    """A request's ``run`` object: ``(RunSpec, canonical form)`` (canonical: :meth:`RunSpec.to_dict`).

    ``null`` values are absent. Whether the deadline has passed is checked by the submitter when it
    creates the run's first segment (a retry of that submission replays whatever the clock says).

    Raises:
        FieldError: naming ``run.<key>`` (an unknown key, a missing or malformed ``run_id``, a budget
            out of range).
    """
    for key in raw:
        if key not in RUN_FIELDS:
            raise FieldError(f"run.{key}", raw[key], "a key of run: " + ", ".join(RUN_FIELDS))
    run_id = raw.get("run_id")
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise FieldError("run.run_id", run_id, RUN_FIELDS["run_id"])
    segments = raw.get("max_segments")
    if segments is not None:
        if isinstance(segments, float) and segments.is_integer():
            segments = int(segments)
        if isinstance(segments, bool) or not isinstance(segments, int) or not 1 <= segments <= MAX_SEGMENTS:
            raise FieldError("run.max_segments", raw.get("max_segments"), RUN_FIELDS["max_segments"])
    deadline = raw.get("deadline")
    when = parse_time(deadline, "run.deadline") if deadline is not None else None
    hours = _positive(raw, "max_instance_hours")
    minutes = _positive(raw, "min_segment_minutes")
    spec = RunSpec(run_id, segments, when, hours, minutes)
    return spec, spec.to_dict()


def _positive(raw: Mapping[str, Any], key: str) -> float | None:
    """``raw[key]`` as a finite number > 0, or ``None`` when absent.

    Raises:
        FieldError: naming ``run.<key>`` (a boolean, a string, NaN, an infinity, zero or less).
    """
    value = raw.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise FieldError(f"run.{key}", value, RUN_FIELDS[key])
    return float(value)


# --- the decision -------------------------------------------------------------------------------


@dataclass(frozen=True)
class SegmentOutcome:
    """How a segment's job stands (``DescribeTrainingJob``).

    Attributes:
        index: the segment's index (from 1).
        status: ``TrainingJobStatus``.
        secondary_status: ``SecondaryStatus``, or ``None``.
        failure_reason: ``FailureReason``, or ``None``.
    """

    index: int
    status: str
    secondary_status: str | None = None
    failure_reason: str | None = None

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL_JOB_STATUSES


@dataclass(frozen=True)
class Decision:
    """A decision (one of :data:`DECISIONS`) and its reason, one sentence.

    Attributes:
        capacity_failures: the segments in a row, the decided one included, that never trained (0 when it
            trained, or the decision is not on a capacity end).
    """

    decision: str
    reason: str
    capacity_failures: int = 0

    @property
    def terminal(self) -> bool:
        return self.decision in TERMINAL_DECISIONS

    @property
    def backoff_s(self) -> float:
        """Seconds the next segment waits after this decision (:func:`capacity_backoff_s`; 0 unless ``continue``)."""
        return capacity_backoff_s(self.capacity_failures) if self.decision == CONTINUE else 0.0


def capacity_end(outcome: SegmentOutcome) -> tuple[str, bool] | None:
    """Why an ended segment's end is a capacity end (module docstring), or ``None`` when it is not.

    Returns:
        ``(why, trained)``: ``trained`` is ``False`` when the job never got instances or time to train
        (exempt from ``no-progress``).
    """
    if outcome.status == "Completed":
        return "it Completed, as the trainer does when it stops at its capacity block's end", True
    if outcome.status == "Stopped" and outcome.secondary_status in CAPACITY_STOPS:
        return f"SageMaker stopped it: {outcome.secondary_status}", True
    if outcome.status == "Failed" and never_trained(outcome.failure_reason or ""):
        return f"it Failed for capacity: {_short(outcome.failure_reason or '')}", False
    return None


def never_trained(failure_reason: str) -> bool:
    """Whether a ``FailureReason`` says the job never got instances or time to train: one of
    :data:`CAPACITY_FAILURE_TYPES` at its head, or the trainer's own
    :data:`platform_spec.capacity.CAPACITY_BLOCK_ENDED_REASON` heading its report (as is, or as SageMaker
    carries it, after ``AlgorithmError:``)."""
    kind, colon, rest = failure_reason.partition(":")
    if kind.strip() in CAPACITY_FAILURE_TYPES:
        return True
    report = rest.lstrip() if colon and kind.strip() == ALGORITHM_ERROR else failure_reason
    return report.startswith(CAPACITY_BLOCK_ENDED_REASON)


def trainer_report(failure_reason: str) -> str:
    """The trainer's own report in a ``FailureReason``: the text after SageMaker's ``AlgorithmError:`` head
    (what the trainer wrote to ``output/failure``), else ``""`` (a failure SageMaker reported itself)."""
    kind, colon, rest = failure_reason.partition(":")
    return rest.strip() if colon and kind.strip() == ALGORITHM_ERROR else ""


def budget_exhausted(spec: RunSpec, *, segments: int, instance_hours: float, now: datetime) -> Decision | None:
    """The budget decision when another segment may not start, else ``None``.

    Args:
        segments: segments started so far.
        instance_hours: instance-hours the segments used so far.
        now: the current time (aware).
    """
    most = min(spec.max_segments or MAX_SEGMENTS, MAX_SEGMENTS)
    if segments >= most:
        named = "max_segments" if spec.max_segments is not None else "the platform's most segments per run,"
        return Decision(BUDGET_SEGMENTS, f"{segments} of {named} {most} segment(s) have run")
    if spec.deadline is not None and now >= spec.deadline:
        return Decision(BUDGET_DEADLINE, f"the run's deadline {format_time(spec.deadline)} has passed")
    if spec.max_instance_hours is not None and instance_hours >= spec.max_instance_hours:
        return Decision(
            BUDGET_INSTANCE_HOURS,
            f"the segments used {instance_hours:.2f} of max_instance_hours {spec.max_instance_hours:g} instance-hours",
        )
    return None


@dataclass(frozen=True)
class SegmentRuntime:
    """How long a run's segment may run (:func:`segment_runtime`).

    Attributes:
        seconds: its ``StoppingCondition.MaxRuntimeInSeconds`` (whole seconds, rounded down); 0 when ``ended``.
        bound_by: the field that set it: ``max_runtime_hours``, ``run.deadline`` or ``run.max_instance_hours``.
        reason: one phrase with the figures (``"14.2 min left until the deadline 2026-03-01T00:00:00Z"``).
        until_deadline_s: seconds from the segment's start to the run's deadline (``None`` without one): a
            spot segment's ``MaxWaitTimeInSeconds`` (wait plus run) is held within it too.
        ended: the budget decision (``budget-deadline`` / ``budget-instance-hours``) when the deadline or the
            instance-hours leave less than the segment floor: no segment may start; ``None`` otherwise.
    """

    seconds: int
    bound_by: str
    reason: str
    until_deadline_s: int | None = None
    ended: Decision | None = None


def segment_floor_s(spec: RunSpec, least_runtime_s: int) -> float:
    """The least time (seconds) a budget may leave a segment (module docstring): the larger of SageMaker's least
    ``MaxRuntimeInSeconds`` (``least_runtime_s``, from botocore's model: 1) and the trainer's stop margin
    (:data:`platform_spec.capacity.STOP_MARGIN_S`, 300 s) plus the run's ``min_segment_minutes`` (default 30)."""
    return max(float(least_runtime_s), spec.least_segment_s)


def segment_runtime(
    spec: RunSpec,
    *,
    max_runtime_s: int,
    instance_count: int,
    instance_hours: float,
    starts: datetime,
    least_runtime_s: int,
) -> SegmentRuntime:
    """The ``MaxRuntimeInSeconds`` of a run's next segment: the least of the three bounds (module docstring).

    Args:
        spec: the run's budget (a continued run's newest).
        max_runtime_s: the request's ``max_runtime_hours`` in seconds.
        instance_count: the segment's ``InstanceCount`` (>= 1; never changed to fit the budget).
        instance_hours: instance-hours the run's earlier segments used (``InstanceCount`` x their
            ``TrainingEndTime`` - ``TrainingStartTime``, from their descriptions).
        starts: when the segment starts running (aware): now, or the start of the plan block it waits for.
        least_runtime_s: SageMaker's least ``MaxRuntimeInSeconds`` (botocore's model).

    Returns:
        The runtime; its ``ended`` is set, and ``seconds`` 0, when ``run.deadline`` or
        ``run.max_instance_hours`` leaves less than :func:`segment_floor_s`. ``max_runtime_hours`` wins ties
        and is never refused here (it is the request's own limit).
    """
    limits: list[tuple[float, str, str]] = [
        (float(max_runtime_s), "max_runtime_hours", f"max_runtime_hours {max_runtime_s / 3600:g}")
    ]
    until_deadline: int | None = None
    if spec.deadline is not None:
        left = (spec.deadline - starts).total_seconds()
        until_deadline = max(0, math.floor(left))
        limits.append(
            (left, "run.deadline", f"{left / 60:.1f} min left until the deadline {format_time(spec.deadline)}")
        )
    if spec.max_instance_hours is not None:
        hours_left = spec.max_instance_hours - instance_hours
        left = hours_left * 3600.0 / instance_count
        limits.append(
            (
                left,
                "run.max_instance_hours",
                f"{hours_left:.4g} of max_instance_hours {spec.max_instance_hours:g} left ({instance_hours:.4g} used) "
                f"over {instance_count} instance(s): {left / 60:.1f} min",
            )
        )
    seconds, bound_by, why = min(limits, key=lambda limit: limit[0])
    floor = segment_floor_s(spec, least_runtime_s)
    if bound_by != "max_runtime_hours" and seconds < floor:
        decision = BUDGET_DEADLINE if bound_by == "run.deadline" else BUDGET_INSTANCE_HOURS
        reason = (
            f"{why}, less than a segment's least {floor / 60:g} min (the trainer's {STOP_MARGIN_S / 60:g} min stop "
            f"margin + min_segment_minutes {spec.min_segment_s / 60:g}; SageMaker's least MaxRuntimeInSeconds is "
            f"{least_runtime_s} s)"
        )
        return SegmentRuntime(0, bound_by, reason, until_deadline, Decision(decision, reason))
    return SegmentRuntime(max(least_runtime_s, math.floor(seconds)), bound_by, why, until_deadline)


def decide(
    outcome: SegmentOutcome,
    *,
    spec: RunSpec,
    newest_segment: int,
    already_decided: bool,
    stop_requested: bool,
    newest_step: int | None,
    start_step: int | None,
    capacity_failures_before: int,
    max_steps: int,
    instance_hours: float,
    now: datetime,
    stalled: str | None = None,
) -> Decision:
    """Judge segment ``outcome`` of a run (module docstring; never raises).

    Args:
        outcome: the segment's job as described now.
        spec: the run (its budget).
        newest_segment: the index of the run's newest segment (the event's segment, unless another
            already exists).
        already_decided: a decision on this segment is already recorded (a duplicate event).
        stop_requested: the run's stop marker exists.
        newest_step: the newest complete, readable checkpoint step of the run now, or ``None``.
        start_step: the newest complete step when this segment started (what it resumed from), or
            ``None`` (it started from nothing).
        capacity_failures_before: the previous segment's :attr:`Decision.capacity_failures` (0 for segment 1).
        max_steps: the run's ``max_steps``.
        instance_hours: instance-hours used by the run's segments, this one included.
        now: the current time (aware).
        stalled: the run's record that the platform stopped this segment for a stall (its reason: how old the
            newest step was), or ``None``; only a ``Stopped`` segment's end reads it.

    Returns:
        The decision: ``continue`` never when ``newest_step >= max_steps``, and only for the newest,
        undecided, ended segment; on a capacity end it carries :attr:`Decision.capacity_failures`, and a
        ``continue``'s :attr:`Decision.backoff_s` is how long the next segment waits.
    """
    step_text = "no complete checkpoint" if newest_step is None else f"newest complete step {newest_step}"
    if outcome.index != newest_segment:
        return Decision(STALE_EVENT, f"segment {outcome.index} is not the run's newest (segment {newest_segment} is)")
    if already_decided:
        return Decision(STALE_EVENT, f"segment {outcome.index} was already decided (a duplicate event)")
    if not outcome.ended:
        return Decision(STALE_EVENT, f"segment {outcome.index} is {outcome.status}; it is decided when it ends")
    reached = newest_step is not None and newest_step >= max_steps
    if reached:
        if outcome.status == "Failed":
            return Decision(
                FAILED,
                f"{step_text} reached max_steps {max_steps} but the segment Failed "
                f"({_short(outcome.failure_reason or 'no FailureReason')}): the final export did not complete",
            )
        return Decision(FINISHED, f"{step_text} reached max_steps {max_steps}; the segment {outcome.status}")
    if stop_requested:
        return Decision(STOPPED, f"the run was stopped (stop requested); {step_text} of max_steps {max_steps}")
    capacity, head = capacity_end(outcome), ""  # head: what heads the reason of a stall's decision
    if capacity is None:
        ended = _not_capacity(outcome, stalled, step_text, max_steps)
        if isinstance(ended, Decision):
            return ended
        capacity, head = ended
    why, trained = capacity
    advanced = newest_step is not None and (start_step is None or newest_step > start_step)
    if trained and not advanced:
        began = "nothing" if start_step is None else f"step {start_step}"
        return Decision(
            NO_PROGRESS,
            f"{head}segment {outcome.index} ended with {step_text}, no further than it started from ({began}); {why}",
        )
    failures = 0 if trained else max(0, capacity_failures_before) + 1
    if failures >= MAX_CAPACITY_FAILURES:
        return Decision(
            NO_PROGRESS,
            f"segment {outcome.index} is the {_nth(failures)} segment in a row that never trained (at most "
            f"{MAX_CAPACITY_FAILURES}), with {step_text}; the last: {why}",
            failures,
        )
    spent = budget_exhausted(spec, segments=newest_segment, instance_hours=instance_hours, now=now)
    if spent is not None:
        return Decision(
            spent.decision, f"{head}{spent.reason}; segment {outcome.index} ended with {step_text}; {why}", failures
        )
    wait = capacity_backoff_s(failures)
    resumes = f"segment {newest_segment + 1} resumes from it"
    if wait:
        after = now + timedelta(seconds=wait)
        if spec.deadline is not None and after >= spec.deadline:
            return Decision(
                BUDGET_DEADLINE,
                f"segment {outcome.index} is the {_nth(failures)} segment in a row that never trained ({why}); the "
                f"next may start no earlier than {format_time(after)}, not before the run's deadline "
                f"{format_time(spec.deadline)}",
                failures,
            )
        resumes += f" no earlier than {format_time(after)} ({wait:g} s: {failures} segment(s) in a row never trained)"
    return Decision(
        CONTINUE,
        f"{head}segment {outcome.index} ended with {step_text} of max_steps {max_steps} ({why}): {resumes}",
        failures,
    )


def _not_capacity(
    outcome: SegmentOutcome, stalled: str | None, step_text: str, max_steps: int
) -> Decision | tuple[tuple[str, bool], str]:
    """The end of a segment that is not a capacity end: a hang (the platform's stall stop, the trainer's watchdog)
    as ``((why, trained), head of the reason)``, judged on as a capacity end that trained; else the decision
    (``stopped``, ``failed``)."""
    report = trainer_report(outcome.failure_reason or "")
    kind = trainer_failure_kind(report) if outcome.status == "Failed" else None
    if outcome.status == "Stopped" and stalled is not None and outcome.secondary_status == "Stopped":
        return ("the platform stopped it with StopTrainingJob", True), f"{STALL_STOP_REASON} ({_short(stalled)}); "
    if outcome.status == "Stopped":
        return Decision(
            STOPPED,
            f"segment {outcome.index} was stopped by StopTrainingJob (secondary status "
            f"{outcome.secondary_status or 'Stopped'}); {step_text} of max_steps {max_steps}",
        )
    if kind == "hang":
        return (f"the trainer's watchdog ended it: {_short(report)}", True), ""
    what = {
        "non-finite": f"the trainer stopped on non-finite values ({NON_FINITE_REASON})",
        "preflight": f"the trainer's pre-flight check failed ({PREFLIGHT_REASON})",
    }.get(kind or "", "a reason that is not capacity")
    return Decision(
        FAILED,
        f"segment {outcome.index} Failed for {what} ({_short(outcome.failure_reason or 'no FailureReason')}); "
        "it is not retried",
    )


def _nth(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ..., ``11th``, ``21st``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _short(text: str, limit: int = 200) -> str:
    """``text`` on one line, at most ``limit`` characters: cut after a whole word, ``...`` marking the cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 3]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + "..."
