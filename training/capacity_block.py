"""Facts about the reserved capacity blocks of SageMaker training plans, shared by the
trainer and the job submitter.

Pure Python, no imports: the trainer reads it (``training.environment``: when to
checkpoint and stop) and so does the submitter's Lambda bundle (its capacity
choice: how long a block can run a job), which carries this module beside
``training/hyperparameters.py``.

Source: "Training plans utilization for SageMaker training jobs",
https://docs.aws.amazon.com/sagemaker/latest/dg/training-plan-utilization-for-training-jobs.html:
"You have full access to all reserved instances until 30 minutes before the
Reserved Capacity end time. When there are 30 minutes remaining in your Reserved
Capacity, SageMaker training plans begin the process of terminating any running
instances within that Reserved Capacity." The same page documents
``SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP``.
"""

from __future__ import annotations

CAPACITY_BLOCK_ENV = "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP"
"""Milliseconds since the epoch at which the training plan's current capacity block ends."""

CAPACITY_BLOCK_RECLAIM_S = 30 * 60
"""Seconds before a reserved capacity block's ``EndTime`` at which SageMaker starts
terminating its instances (30 minutes, see the module docstring): a block's usable
time ends here, for the trainer and for the submitter alike."""

__all__ = ["CAPACITY_BLOCK_ENV", "CAPACITY_BLOCK_RECLAIM_S"]
