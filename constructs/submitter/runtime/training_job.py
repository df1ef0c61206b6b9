"""One training job as SageMaker tells it, and the tags the submitter puts on its jobs.

The one reader (and stopper) of a job for every action: a submission's replay and conflict checks
(:mod:`.service`), the job API's ``describe`` and ``stop`` (:mod:`.actions`) and the runs
(:mod:`.runs`). It imports none of the submission's modules (request parsing, capacity, the
planner), so a function answering only ``describe``, ``list`` or ``list_runs`` starts without them.

Bookkeeping tags (``platform:``, reserved for the submitter; written by :mod:`.job`):
:data:`TAG_REQUEST_SHA256` (the request's fingerprint), :data:`TAG_CLIENT_TOKEN_SHA256`,
:data:`TAG_CAPACITY_TYPE`, :data:`TAG_SUBMITTER`, and for a run's segment
:data:`platform_spec.runs.TAG_RUN_ID` and :data:`~platform_spec.runs.TAG_RUN_SEGMENT`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from platform_spec.runs import format_time

from ...lambda_runtime.deadline import current_deadline
from .aws import NOT_FOUND_CODES, Clients, error_code

FINGERPRINT_VERSION = 2
"""The version of the request fingerprint (:meth:`.request.SubmitRequest.fingerprint`, pinned by a golden test).
It names the job's tag and is stored in every ledger claim (:mod:`.ledger`): a change of what the fingerprint
hashes is a new version, and a job or record of another version is refused as such, never compared."""
TAG_REQUEST_SHA256_STEM = "platform:request-sha256"
"""Every version's fingerprint tag starts so (version 1's was the stem itself)."""
TAG_REQUEST_SHA256 = f"{TAG_REQUEST_SHA256_STEM}-v{FINGERPRINT_VERSION}"
"""The request's fingerprint (what the caller sent)."""
TAG_CLIENT_TOKEN_SHA256 = "platform:client-token-sha256"
"""SHA-256 of the request's ``client_token`` (the token itself is not stored)."""
TAG_CAPACITY_TYPE = "platform:capacity-type"
"""The capacity the job was created on (:data:`platform_spec.capacity.CAPACITY_TYPES`)."""
TAG_SUBMITTER = "platform:submitted-by"
"""Present on every job the submitter creates: the job API answers only jobs carrying it."""

SETTLE_ATTEMPTS = 5
SETTLE_INTERVAL_S = 0.2
"""After ``ResourceInUse`` the job exists; a describe that misses is retried this often, this far apart."""


def utc(value: Any) -> datetime | None:
    """A SageMaker time as an aware UTC ``datetime`` (botocore's may be naive); ``None`` for anything else."""
    if not isinstance(value, datetime):
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def iso(value: Any) -> str | None:
    """A SageMaker time as the job API writes times (:func:`platform_spec.runs.format_time`); ``None`` for
    anything but a ``datetime``."""
    when = utc(value)
    return None if when is None else format_time(when)


def describe_job(clients: Clients, name: str) -> dict[str, Any] | None:
    """``DescribeTrainingJob`` of ``name``, or ``None`` when there is no such job.

    Raises:
        botocore.exceptions.ClientError: any other error of the call.
    """
    try:
        return dict(clients.sagemaker.describe_training_job(TrainingJobName=name))
    except Exception as exc:
        if error_code(exc) in NOT_FOUND_CODES:
            return None
        raise


def job_tags(clients: Clients, arn: str) -> dict[str, str]:
    """The tags of the training job ``arn`` (``ListTags``, every page), key -> value."""
    tags: dict[str, str] = {}
    for page in clients.sagemaker.get_paginator("list_tags").paginate(ResourceArn=arn):
        tags.update({t["Key"]: t["Value"] for t in page.get("Tags", [])})
    return tags


def stop_job(clients: Clients, name: str) -> bool:
    """``StopTrainingJob`` of ``name``: ``True`` when SageMaker accepted it, ``False`` when it refused it because
    the job is no longer ``InProgress`` (it ended or is stopping already; of two concurrent stops, SageMaker
    accepts one). A stop is therefore safe to retry.

    Raises:
        botocore.exceptions.ClientError: any other error of the call.
    """
    try:
        clients.sagemaker.stop_training_job(TrainingJobName=name)
    except Exception as exc:
        if error_code(exc) != "ValidationException":
            raise
        return False
    return True


def existing_job(clients: Clients, name: str, *, settle: bool = False) -> dict[str, Any] | None:
    """``{"description": DescribeTrainingJob, "tags": {key: value}}`` of the job ``name``, or ``None`` when no
    job has that name.

    ``settle``: after a ``ResourceInUse`` the job exists; retry a not-found :data:`SETTLE_ATTEMPTS` times,
    :data:`SETTLE_INTERVAL_S` apart (within the deadline in scope,
    :func:`platform_constructs.lambda_runtime.deadline.current_deadline`).

    Raises:
        botocore.exceptions.ClientError: any other error of the calls.
        DeadlineExceeded: too little time is left to wait and describe again.
    """
    attempts = SETTLE_ATTEMPTS if settle else 1
    for attempt in range(attempts):
        description = describe_job(clients, name)
        if description is not None:
            return {"description": description, "tags": job_tags(clients, description["TrainingJobArn"])}
        if attempt + 1 < attempts:
            deadline = current_deadline()
            if deadline is not None:
                deadline.sleep(SETTLE_INTERVAL_S, "sagemaker.DescribeTrainingJob")
            else:
                time.sleep(SETTLE_INTERVAL_S)
    return None
