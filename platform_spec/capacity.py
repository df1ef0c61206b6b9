"""Facts about SageMaker training-plan capacity, shared by the trainer and the job submitter.

The trainer reads the reclaim window (``training.environment``: when to
checkpoint and stop); the submitter reads it and the pending limit (its
capacity choice: how long a block can run a job, and how far ahead a block may
start).

Source of both: "Training plans utilization for SageMaker training jobs",
https://docs.aws.amazon.com/sagemaker/latest/dg/training-plan-utilization-for-training-jobs.html.

Pure Python, standard library only.
"""

from __future__ import annotations

__all__ = ["CAPACITY_BLOCK_ENV", "CAPACITY_BLOCK_RECLAIM_S", "PENDING_LIMIT_S"]

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
