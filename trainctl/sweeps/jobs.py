"""A sweep's training jobs once submitted: a boto3 client of the environment's endpoint, and
``DescribeTrainingJob`` polling until every job is terminal (or a timeout)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from trainctl.sweeps.progress import make_progress
from trainctl.sweeps.state import ACTIVE_STATUSES, FAILED, SKIPPED, TERMINAL_STATUSES, Sweep, SweepConfig

if TYPE_CHECKING:
    from boto3.session import Session
    from botocore.client import BaseClient
    from rich.progress import Progress


def _session(env: Mapping[str, str] | None, region: str | None) -> tuple[Session, str | None]:
    import boto3

    environ = os.environ if env is None else env
    session = boto3.session.Session(
        aws_access_key_id=environ.get("AWS_ACCESS_KEY_ID") if env is not None else None,
        aws_secret_access_key=environ.get("AWS_SECRET_ACCESS_KEY") if env is not None else None,
        aws_session_token=environ.get("AWS_SESSION_TOKEN") if env is not None else None,
        region_name=region or environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION"),
    )
    return session, environ.get("AWS_ENDPOINT_URL") or None


def aws_client(service: str, env: Mapping[str, str] | None = None, region: str | None = None) -> BaseClient:
    """A boto3 client for ``service`` from ``env`` (default: the process environment), honouring ``AWS_ENDPOINT_URL``."""
    session, endpoint = _session(env, region)
    return session.client(service, endpoint_url=endpoint)


def poll_jobs(sweep: Sweep, client: BaseClient) -> list[SweepConfig]:
    """Describe every submitted, non-terminal job once; record status and ``FailureReason``.

    Returns:
        The configurations still active (``InProgress`` / ``Stopping``).
    """
    active = []
    for config in sweep.configs:
        if not config.job_name or config.status not in ACTIVE_STATUSES:
            continue
        try:
            description = client.describe_training_job(TrainingJobName=config.job_name)
        except Exception as exc:
            config.reason = f"DescribeTrainingJob failed: {exc}"
            active.append(config)
            continue
        status = description.get("TrainingJobStatus", config.status)
        reason = description.get("FailureReason") if status == FAILED else config.reason
        if status != config.status or reason != config.reason:
            config.mark(status, reason)
        if status in ACTIVE_STATUSES:
            active.append(config)
    sweep.save()
    return active


def wait_for_jobs(
    sweep: Sweep,
    *,
    env: Mapping[str, str] | None = None,
    region: str | None = None,
    timeout: float = 3600.0,
    poll_interval: float = 30.0,
    progress: Progress | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> list[SweepConfig]:
    """Poll ``DescribeTrainingJob`` until every submitted job is terminal or ``timeout`` seconds pass.

    Returns:
        The configurations still active when it returned (empty: all terminal).
    """
    client = aws_client("sagemaker", env, region)
    submitted = [
        c for c in sweep.configs if c.job_name and (c.status in ACTIVE_STATUSES or c.status in TERMINAL_STATUSES)
    ]
    deadline = time.monotonic() + max(0.0, timeout)
    progress = progress or make_progress(False)
    with progress:
        task = progress.add_task(f"waiting for {sweep.name}", total=len(submitted))
        while True:
            active = poll_jobs(sweep, client)
            done = len(submitted) - len(active)
            counts = ", ".join(f"{n} {s}" for s, n in sorted(sweep.counts().items()) if s not in (SKIPPED,))
            progress.update(task, completed=done, description=f"waiting for {sweep.name}: {counts}")
            if not active or time.monotonic() >= deadline:
                return active
            sleep(min(poll_interval, max(0.0, deadline - time.monotonic())))


__all__ = ["aws_client", "poll_jobs", "wait_for_jobs"]
