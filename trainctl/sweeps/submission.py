"""Submitting a sweep's configurations as training jobs through the job submitter.

Each configuration goes through the submitter (the same validation, capacity
choice and idempotency as ``trainctl submit``), in process against
``AWS_ENDPOINT_URL`` of the environment (required: the in-process path never
reaches real AWS, see :func:`check_submitter`), or through the deployed
function (``function``). Every job gets a deterministic ``job_name`` and
``client_token`` derived from the sweep name and the configuration
(:mod:`trainctl.sweeps.grid`), and the tags :data:`SWEEP_TAG` (the sweep name)
and :data:`CONFIG_TAG` (the grid values), so running the same sweep again
returns the jobs it already created instead of creating more.
"""

from __future__ import annotations

import contextlib
import copy
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainctl.sweeps.grid import client_token_for, job_name_for
from trainctl.sweeps.progress import make_progress
from trainctl.sweeps.state import PENDING, REJECTED, RUNNING, SUBMIT_ERROR, VALIDATED, Sweep, SweepConfig, SweepError

if TYPE_CHECKING:
    from rich.progress import Progress

SWEEP_TAG = "sweep"
"""Job tag holding the sweep name (``platform:`` keys are the submitter's own)."""
CONFIG_TAG = "sweep-config"
"""Job tag holding the configuration's grid values, e.g. ``precision=bf16 batch_size=4``."""


def request_for(sweep: Sweep, config: SweepConfig, *, dry_run: bool = False) -> dict[str, Any]:
    """The submitter request of ``config``: the base request, its hyperparameters, deterministic
    ``job_name`` / ``client_token``, and the ``sweep`` / ``sweep-config`` tags."""
    request = copy.deepcopy(sweep.base)
    request["hyperparameters"] = dict(config.hyperparameters)
    request["job_name"] = config.job_name or job_name_for(sweep.name, config)
    request["client_token"] = config.client_token or client_token_for(sweep.name, config)
    tags = dict(request.get("tags") or {})
    tags[SWEEP_TAG] = sweep.name
    tags[CONFIG_TAG] = config.title[:256]
    request["tags"] = tags
    if dry_run:
        request["dry_run"] = True
    return request


@contextlib.contextmanager
def _submitter(
    env: Mapping[str, str] | None, function: str | None, region: str | None, log_file: Path | None = None
) -> Iterator[Callable[[dict[str, Any]], dict[str, Any]]]:
    """A function sending one request to the submitter: the deployed function, or the handler in process.

    In process, with ``log_file``, the handler's JSON logs and EMF metrics go to
    that file (they would break the progress display) for the duration.

    Raises:
        SubmitError: see :func:`check_submitter`.
    """
    from trainctl.submitter_client import invoke_function, lambda_client, submit_local

    if function:
        client = lambda_client(function, region=region, environ=None if env is None else env)
        yield lambda request: invoke_function(function, request, client=client)
        return
    environ = dict(os.environ if env is None else env)
    if log_file is None:
        yield lambda request: submit_local(request, environ)
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "a", encoding="utf-8") as log:

        def send(request: dict[str, Any]) -> dict[str, Any]:
            with contextlib.redirect_stderr(log):
                return submit_local(request, environ)

        yield send


def check_submitter(
    env: Mapping[str, str] | None = None, function: str | None = None, region: str | None = None
) -> str | None:
    """Refuse, before anything is written or sent, a submitter the sweep cannot or must not use.

    In process (no ``function``): only against ``AWS_ENDPOINT_URL`` of ``env``
    (the emulator's), never against real AWS with whatever credentials the
    environment holds. ``function``: a region and credentials must resolve.

    Returns:
        The region jobs are polled in (``function``: the function's, see
        :func:`trainctl.submitter_client.function_region`; else ``region``).

    Raises:
        SweepError: one line naming what is missing.
    """
    from trainctl.submitter_client import SubmitError, function_region, lambda_client, require_local_endpoint

    try:
        if function:
            lambda_client(function, region=region, environ=env)
            return function_region(function, region, env)
        require_local_endpoint(os.environ if env is None else env)
    except SubmitError as exc:
        raise SweepError(str(exc)) from None
    return region


def submit_configs(
    sweep: Sweep,
    *,
    env: Mapping[str, str] | None = None,
    function: str | None = None,
    region: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Submit every configuration not yet submitted (``Pending``, ``Rejected``, ``SubmitError``).

    Each answer is recorded on its configuration (and the state saved after
    each one) unless ``dry_run``, which asks the submitter to validate and
    choose capacity only, and records nothing.

    A submission that gets no answer is recorded as ``SubmitError`` with the
    reason; when that reason would answer every request (endpoint, credentials,
    permissions, function name), the remaining configurations are not sent and
    stay ``Pending``.

    Returns:
        ``[{"config": id, "status", "training_job_name"?, "replayed"?, "reason"?}]`` per submission.

    Raises:
        SweepError: the in-process submitter's environment is incomplete.
        SubmitError: the deployed function's region or credentials do not resolve.
    """
    from platform_constructs.submitter.runtime.errors import ConfigurationError
    from trainctl.submitter_client import SubmitError

    todo = [c for c in sweep.configs if c.status in (PENDING, REJECTED, SUBMIT_ERROR)]
    answers: list[dict[str, Any]] = []
    progress = progress or make_progress(False)
    log_file = None if dry_run else sweep.directory / "submitter.log"
    with progress, _submitter(env, function, region, log_file) as send:
        task = progress.add_task(f"{'validating' if dry_run else 'submitting'} {sweep.name}", total=len(todo))
        for config in todo:
            progress.update(task, description=f"{'validating' if dry_run else 'submitting'} {config.id}")
            answer: dict[str, Any] = {"config": config.id}
            try:
                response = send(request_for(sweep, config, dry_run=dry_run))
            except ConfigurationError as exc:  # the in-process runtime's: a setting missing from the environment
                raise SweepError(
                    f"the submitter's environment is incomplete: {exc}; source the env file of "
                    "`trainctl local-aws --env-file FILE`, or use --function NAME"
                ) from None
            except Exception as exc:
                reason = str(exc) if isinstance(exc, SubmitError) else f"{type(exc).__name__}: {exc}"
                answer.update(status=SUBMIT_ERROR, reason=reason)
                if not dry_run:
                    config.mark(SUBMIT_ERROR, reason)
                    sweep.save()
                answers.append(answer)
                progress.advance(task)
                if getattr(exc, "unavailable", False):
                    break  # the same answer awaits every other configuration: they stay Pending for the next run
                continue
            else:
                status = response.get("status")
                if status in ("submitted", "validated"):
                    answer.update(
                        status=VALIDATED if dry_run else response.get("training_job_status") or RUNNING,
                        training_job_name=response.get("training_job_name"),
                        replayed=bool(response.get("replayed")),
                        capacity=response.get("capacity"),
                    )
                    if not dry_run:
                        config.job_name = response.get("training_job_name") or config.job_name
                        config.job_arn = response.get("training_job_arn")
                        config.capacity = response.get("capacity")
                        tuning = response.get("auto_tune")
                        config.mark(
                            answer["status"], f"auto_tune applied: {'; '.join(tuning['changes'])}" if tuning else None
                        )
                else:
                    error = response.get("error") or {}
                    reason = f"{error.get('code', 'Rejected')}: {error.get('message', response)}"
                    answer.update(status=REJECTED, reason=reason)
                    if not dry_run:
                        config.mark(REJECTED, reason)
            if not dry_run:
                sweep.save()
            answers.append(answer)
            progress.advance(task)
    return answers


__all__ = ["CONFIG_TAG", "SWEEP_TAG", "check_submitter", "request_for", "submit_configs"]
