"""Before a run's next segment: only its newest complete checkpoint stays under the run's checkpoint prefix.

SageMaker downloads everything under ``CheckpointConfig.S3Uri`` to every instance before a job trains, and
while the job runs it uploads what is new or changed under ``/opt/ml/checkpoints``; what the trainer deletes
locally (it keeps its newest few) is not deleted from S3 ("Use checkpoints in Amazon SageMaker AI",
https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints.html). So a run's prefix
(:func:`platform_spec.runs.run_checkpoint_prefix`) would hold every checkpoint it ever saved, and each
segment would download all of them onto each node (about 0.85 TB per Llama 70B checkpoint).

:func:`prune_run_checkpoints` deletes, under the run's prefix, every object that is not in the folder of the
run's newest complete checkpoint (:func:`.runs.newest_checkpoint`: the one the trainer resumes, as far as
S3 shows it): older checkpoints, folders without ``.complete`` (a save cut short), anything else the trainer
would not load. It is called by :func:`.service.submit_segment`, the one path by which every next segment
is created (the continuation's ``continue``, the scheduled retry of a waiting run, ``continue_run``), and
only while that segment's job does not exist: a segment already running writes under the prefix.

**Nothing is lost at once.** The checkpoint bucket is versioned: ``DeleteObject`` leaves a delete marker and
keeps the data as a noncurrent version (Amazon S3 User Guide, "Deleting object versions from a
versioning-enabled bucket"); the bucket's rule ``ExpirePrunedRunCheckpoints``
(:class:`platform_constructs.buckets.TrainingBuckets`) removes noncurrent versions under the run checkpoint
prefix after ``noncurrent_version_expiration`` (default 30 days), so a pruned checkpoint can be restored
(copy its noncurrent versions back) until then. The function's role may ``s3:DeleteObject`` under the run
checkpoint prefix only, never ``s3:DeleteObjectVersion``.

**Nothing is deleted** when the run has no complete checkpoint, or when the newest one lacks a file every
whole checkpoint has (:func:`platform_spec.checkpoint_layout.missing_files`: a node's uploads that never
arrived), so the older ones stay for the trainer to fall back on.

**Order and failures.** Each pruned folder's ``.complete`` marker is deleted first, its other files only
once that succeeded, so a folder cut short by a failure never reads as a whole checkpoint. ``DeleteObjects``
takes 1000 keys per call (Amazon S3 API Reference, ``DeleteObjects``) and answers failed keys one by one
(``Errors``): those are reported (:attr:`PruneResult.failed`) and left for the next prune, and a failed
marker keeps its folder's files.

**Idempotent, bounded.** Every call lists the prefix afresh and deletes only keys it listed, so the same
event twice, two invocations at once or a retry after a crash mid-delete converge on the same state (a
key already deleted is not listed again). The work stops when less than :data:`PRUNE_RESERVE_S` of the
invocation is left (the deadline hooks of :mod:`platform_constructs.lambda_runtime.deadline`, against a
deadline that much earlier): the segment is still submitted, and what is left is pruned before the next one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from aws_lambda_powertools import Logger

from platform_spec import runs as spec
from platform_spec.checkpoint_layout import COMPLETE_MARKER, STEP_PREFIX, missing_files

from ...lambda_runtime.deadline import DeadlineExceeded, current_deadline, deadline_scope
from .aws import Clients
from .config import SubmitterConfig
from .runs import newest_checkpoint
from .settings import FUNCTION_TIMEOUT_S, SERVICE_NAME

logger = Logger(service=SERVICE_NAME, child=True)

DELETE_BATCH = 1000
"""Keys per ``DeleteObjects`` call: the most S3 takes (Amazon S3 API Reference, ``DeleteObjects``)."""
PRUNE_RESERVE_S = float(FUNCTION_TIMEOUT_S)
"""Seconds of the invocation the prune leaves to the segment's submission that follows it (a submission
answers within the submitter function's own timeout, :data:`.settings.FUNCTION_TIMEOUT_S`)."""
PRUNE_LOG_MESSAGE = "run checkpoints pruned"
"""The ``message`` of the prune's one log line (fields: :meth:`PruneResult.to_dict`, ``run_id``, ``segment``)."""
MAX_FAILED_REPORTED = 20
"""Failed keys named in a result (the count is always whole)."""


@dataclass
class PruneResult:
    """What one prune did.

    Attributes:
        kept_step: the step of the checkpoint kept (``None``: no complete checkpoint, nothing deleted).
        kept_prefix: its folder, ``s3://bucket/run-checkpoints/<run_id>/step-<n>/``.
        kept_objects / kept_bytes: its objects and bytes: what the next segment downloads onto each node.
        deleted_objects / deleted_bytes: objects deleted now and their bytes (sizes as listed).
        failed: ``"key: Code"`` of keys ``DeleteObjects`` refused (at most :data:`MAX_FAILED_REPORTED`);
            ``failed_count`` counts them all.
        cut_short: the invocation's time ran short; objects listed and not deleted are left for the next prune.
        reason: one sentence: what was kept and deleted, or why nothing was.
    """

    kept_step: int | None = None
    kept_prefix: str | None = None
    kept_objects: int = 0
    kept_bytes: int = 0
    deleted_objects: int = 0
    deleted_bytes: int = 0
    failed: list[str] = field(default_factory=list)
    failed_count: int = 0
    cut_short: bool = False
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def prune_run_checkpoints(clients: Clients, config: SubmitterConfig, run_id: str) -> PruneResult:
    """Delete every object under run ``run_id``'s checkpoint prefix but its newest complete checkpoint's
    (module docstring). Logs :data:`PRUNE_LOG_MESSAGE` with the result.

    Returns:
        The result; a time-bound stop is ``cut_short``, never raised.

    Raises:
        botocore.exceptions.ClientError: a listing or ``DeleteObjects`` call failed whole (access denied,
            persistent throttling): the caller's invocation fails and is retried, which prunes again.
        DeadlineExceeded: the invocation's own deadline (not the prune's earlier one) is past.
    """
    deadline = current_deadline()
    bounded = deadline.earlier(PRUNE_RESERVE_S) if deadline is not None else None
    result = PruneResult()
    with deadline_scope(bounded):
        try:
            _prune(clients, config, run_id, result)
        except DeadlineExceeded:
            if bounded is None or (deadline is not None and deadline.remaining() <= 0):
                raise
            result.cut_short = True
            result.reason += (
                f"; cut short for time ({PRUNE_RESERVE_S:g} s kept for the submission): the rest is pruned before "
                "the next segment"
            )
    logger.info(PRUNE_LOG_MESSAGE, extra={"run_id": run_id, **result.to_dict()})
    return result


def _prune(clients: Clients, config: SubmitterConfig, run_id: str, result: PruneResult) -> None:
    bucket, prefix = config.checkpoint_bucket, spec.run_checkpoint_prefix(run_id)
    newest, _ = newest_checkpoint(clients, config, run_id)
    if newest is None:
        result.reason = "no complete checkpoint under the run's prefix: nothing pruned"
        return
    keep = f"{prefix}{STEP_PREFIX}{newest.step}/"
    result.kept_step, result.kept_prefix = newest.step, f"s3://{bucket}/{keep}"
    listed: dict[str, int] = {}
    kept: list[str] = []
    for page in clients.s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents") or []:
            key, size = item["Key"], int(item.get("Size") or 0)
            if key.startswith(keep):
                kept.append(key[len(keep) :])
                result.kept_objects += 1
                result.kept_bytes += size
            else:
                listed[key] = size
    missing = missing_files(kept, newest.world_size)
    if missing:
        result.reason = (
            f"the newest complete checkpoint step-{newest.step} lacks {', '.join(missing[:5])}"
            f"{' ...' if len(missing) > 5 else ''} in S3: nothing pruned, older checkpoints stay to fall back on"
        )
        return
    result.reason = (
        f"kept step-{newest.step} ({result.kept_objects} objects, {result.kept_bytes:,} bytes: what the next "
        f"segment downloads onto each instance)"
    )
    markers = [key for key in listed if key.endswith(f"/{COMPLETE_MARKER}")]
    failed_folders = _delete(clients, bucket, markers, listed, result)
    rest = [
        key
        for key in listed
        if not key.endswith(f"/{COMPLETE_MARKER}") and not any(key.startswith(folder) for folder in failed_folders)
    ]
    _delete(clients, bucket, rest, listed, result)
    result.reason += f"; deleted {result.deleted_objects} objects ({result.deleted_bytes:,} bytes)"
    if result.failed_count:
        result.reason += f"; {result.failed_count} refused by S3 (left for the next prune)"


def _delete(clients: Clients, bucket: str, keys: list[str], sizes: dict[str, int], result: PruneResult) -> set[str]:
    """``DeleteObjects`` of ``keys`` in batches of :data:`DELETE_BATCH`; the result counts what was deleted and
    refused. Returns the folders (``.../``) of the refused keys."""
    refused: set[str] = set()
    for start in range(0, len(keys), DELETE_BATCH):
        batch = keys[start : start + DELETE_BATCH]
        answer = clients.s3.delete_objects(
            Bucket=bucket, Delete={"Objects": [{"Key": key} for key in batch], "Quiet": True}
        )
        errors = answer.get("Errors") or []
        failed = {str(error.get("Key")): str(error.get("Code") or "Error") for error in errors}
        for key in batch:
            if key in failed:
                continue
            result.deleted_objects += 1
            result.deleted_bytes += sizes.get(key, 0)
        for key, code in failed.items():
            result.failed_count += 1
            if len(result.failed) < MAX_FAILED_REPORTED:
                result.failed.append(f"{key}: {code}")
            refused.add(key.rsplit("/", 1)[0] + "/")
    return refused
