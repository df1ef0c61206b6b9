"""Facts about SageMaker training capacity, shared by the trainer, the job submitter, the observability
functions, the stack's configuration and the emulator.

The trainer reads the reclaim window (``training.environment``: when to
checkpoint and stop); the submitter reads it and the pending limit (its
capacity choice: how long a block can run a job, and how far ahead a block may
start), the capacity types and their default order, and the plan statuses a job
may use, which the plan-metrics publisher counts as usable too.

Source of the reclaim window, the pending limit and the usable statuses: "Training plans
utilization for SageMaker training jobs",
https://docs.aws.amazon.com/sagemaker/latest/dg/training-plan-utilization-for-training-jobs.html.

Pure Python, standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CAPACITY_BLOCK_ENDED_REASON",
    "CAPACITY_BLOCK_ENV",
    "CAPACITY_BLOCK_RECLAIM_S",
    "CAPACITY_FALLBACK_EXPECTED",
    "CAPACITY_TYPES",
    "DEFAULT_CAPACITY_FALLBACK",
    "PENDING_LIMIT_S",
    "SIGTERM_GRACE_S",
    "STOP_MARGIN_S",
    "TRAINING_PLAN_ARNS_PARAMETER_ENV",
    "USABLE_PLAN_STATUSES",
    "capacity_fallback_problem",
    "capacity_type_of",
]

CAPACITY_TYPES: tuple[str, ...] = ("training-plan", "spot", "on-demand")
"""How a training job gets its instances, as the platform names them (a request's ``capacity``, the
``CapacityType`` dimension of the submitter's metrics, a job's ``platform:capacity-type`` tag):
``training-plan`` (reserved capacity: ``ResourceConfig.TrainingPlanArn``), ``spot`` (managed spot
training: ``EnableManagedSpotTraining``) or ``on-demand`` (neither)."""

DEFAULT_CAPACITY_FALLBACK: tuple[str, ...] = CAPACITY_TYPES
"""The order ``capacity: auto`` tries when the deployment names none (``capacityFallback``'s default):
reserved capacity first, then spot, then on-demand, cheapest first for capacity already paid for."""

CAPACITY_FALLBACK_EXPECTED = f"a non-empty order of distinct values from {', '.join(CAPACITY_TYPES)}"
"""What a capacity fallback order must be, in words (:func:`capacity_fallback_problem`)."""

USABLE_PLAN_STATUSES: tuple[str, ...] = ("Active", "Scheduled")
"""Training-plan statuses a training job may use ("The training plan must be in the Scheduled or Active
status to be used by a training job", the page above): the submitter places jobs on these plans only,
and the plan-metrics publisher's all-plans totals count only these."""

TRAINING_PLAN_ARNS_PARAMETER_ENV = "TRAINING_PLAN_ARNS_PARAMETER"
"""The environment variable, of the submitter and of the plan-metrics publisher alike, naming the SSM
String parameter that holds the deployment's training-plan ARNs as a JSON list."""


def capacity_type_of(description: Mapping[str, Any]) -> str:
    """The capacity type (:data:`CAPACITY_TYPES`) of a training job as ``DescribeTrainingJob`` (or its
    state-change event's ``detail``) shows it: ``training-plan`` with ``ResourceConfig.TrainingPlanArn``,
    ``spot`` with ``EnableManagedSpotTraining`` true, else ``on-demand``."""
    resource = description.get("ResourceConfig")
    if isinstance(resource, Mapping) and resource.get("TrainingPlanArn"):
        return "training-plan"
    if description.get("EnableManagedSpotTraining") is True:
        return "spot"
    return "on-demand"


def capacity_fallback_problem(order: Sequence[str]) -> str | None:
    """Why ``order`` is not a capacity fallback order (:data:`CAPACITY_FALLBACK_EXPECTED`), or ``None``.

    Returns:
        ``"it is empty"``, ``"'x' is not a capacity type"`` (the first such) or ``"'spot' is listed
        more than once"`` (the first repeated); ``None`` for a good order.
    """
    if not order:
        return "it is empty"
    for value in order:
        if value not in CAPACITY_TYPES:
            return f"{value!r} is not a capacity type"
    for index, value in enumerate(order):
        if value in order[:index]:
            return f"{value!r} is listed more than once"
    return None


CAPACITY_BLOCK_ENV = "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
"""Milliseconds since the epoch at which the training plan's current capacity block ends (the page
above documents the variable)."""

CAPACITY_BLOCK_RECLAIM_S = 30 * 60
"""Seconds before a reserved capacity block's ``EndTime`` at which SageMaker starts terminating its
instances: 30 minutes. "You have full access to all reserved instances until 30 minutes before the
Reserved Capacity end time. When there are 30 minutes remaining in your Reserved Capacity, SageMaker
training plans begin the process of terminating any running instances within that Reserved Capacity."
A block's usable time ends here, for the trainer and for the submitter alike."""

PENDING_LIMIT_S = 2 * 24 * 3600
"""Longest wait (seconds) for a block to start that the submitter accepts: 2 days.

"If the required capacity is not immediately available for a training job, the job
waits until it becomes available, or until the StoppingCondition is met, or the job
has been Pending for capacity for 2 days, whichever comes first. [...] If a job has
been pending for 2 days, it is terminated with an InsufficientCapacityError."
The API reference of ``StoppingCondition.MaxPendingTimeInSeconds`` says that time
spent waiting for a Scheduled plan's start does not count against that newer
setting; the submitter keeps to the 2 days all the same, so that no job it
places can be ended for waiting."""

STOP_MARGIN_S = 300.0
"""Fixed part of the trainer's safety margin before the capacity-block deadline, in seconds (the
trainer adds twice its last step and checkpoint times): a job that starts with less than this left
cannot train a step and save it. The submitter places a run's segment on a block that ends before
the segment's ``max_runtime_hours`` only when the block leaves more than this (``runtime/capacity.py``)."""

SIGTERM_GRACE_S = 120.0
"""Seconds between the SIGTERM SageMaker sends to stop a training job and the end of the job: "To stop a job,
SageMaker sends the algorithm the SIGTERM signal, which delays job termination for 120 seconds. Algorithms can use
this 120-second window to save the model artifacts" (SageMaker API Reference, StoppingCondition,
https://docs.aws.amazon.com/sagemaker/latest/APIReference/API_StoppingCondition.html). A stop (``StopTrainingJob``,
a spot interruption, ``MaxRuntimeInSeconds``) leaves the trainer this long to finish its step and save; the
planner checks the synchronous save at a stop against it (``planner.checkpoint``)."""

CAPACITY_BLOCK_ENDED_REASON = "the training plan's capacity block leaves no time to train"
"""How the trainer's failure reason begins when it starts with less than its stop margin left in its
capacity block (``training.environment.CapacityBlockEnded``): nothing was trained, the capacity ended.
The run continuation reads it as a capacity end, not a code failure (``platform_spec.runs``)."""
