"""Lambda entry point of the job submitter (``platform_constructs.submitter.runtime.handler.lambda_handler``).

A thin adapter: it sets up structured logging (Powertools ``Logger``: JSON, Lambda context, a correlation
id = the request's ``client_token`` or the Lambda request id) and metrics (Powertools ``Metrics``, EMF),
builds the clients and configuration once per warm container, and calls :func:`.actions.dispatch`, a plain
function tested without Lambda. The function answers only the actions of its ``SUBMITTER_ALLOWED_ACTIONS``
(absent: all; a reader is deployed with :data:`.actions.READ_ACTIONS`).

Metrics (namespace :data:`.settings.METRICS_NAMESPACE`, dimension ``service``):
:data:`.settings.METRIC_SUBMISSIONS` (Count, dimension :data:`.settings.DIMENSION_CAPACITY_TYPE`), one per
job created (not for dry runs or replays); :data:`.settings.METRIC_REFUSALS` (Count, dimension
:data:`.settings.DIMENSION_ERROR_CODE`), one per refusal.

A malformed event is answered with an ``InvalidRequest`` refusal, never an exception; persistent AWS
faults and a broken configuration raise (a function error the caller can retry or alarm on). Each
invocation's AWS calls are bounded by the time Lambda gives it (:class:`.aws.Deadline`): with too little
left for the next call the function fails with ``errorType`` ``DeadlineExceeded``
(:class:`.errors.DeadlineExceeded`, retriable: a retry with the same ``client_token`` never creates a
second job) instead of being killed mid-call.

Cold starts: an on-demand function initialises on a full vCPU, while an invocation runs at its memory's
share (0.29 of one at the default 512 MB), so work done once per container is done at import, in Lambda's
init phase: the botocore clients and the configuration (:func:`prepare_dependencies`, in Lambda only;
elsewhere on first use, so an import never reaches the network) and, in a function that answers
submissions, their modules (:func:`preload_submissions`); the reader never imports them.
``benchmarks/startup.py`` measures both functions' init.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from . import settings
from .actions import SUBMIT, action_of, allowed_actions_from_environ, dispatch
from .aws import Clients, Deadline
from .config import SubmitterConfig
from .errors import ConfigurationError

logger = Logger(service=settings.SERVICE_NAME)
metrics = Metrics(namespace=settings.METRICS_NAMESPACE, service=settings.SERVICE_NAME)

LAMBDA_FUNCTION_ENV = "AWS_LAMBDA_FUNCTION_NAME"
"""Set by Lambda in every function's environment (AWS Lambda Developer Guide, "Defined runtime environment
variables"): this process is a Lambda function."""

_dependencies: tuple[Clients, SubmitterConfig] | None = None
_allowed_actions: list[tuple[str, ...] | None] = []


def preload_submissions(environ: Mapping[str, str]) -> bool:
    """Import a submission's modules (:mod:`.service`) now, at import (Lambda's init phase, on a full vCPU),
    when the function answers submissions; its first submission then finds them imported.

    Returns:
        Whether they were imported: ``False`` for a function whose ``SUBMITTER_ALLOWED_ACTIONS`` leaves out
        ``submit`` (the reader), or is malformed (its first request reports the ``ConfigurationError``).
    """
    try:
        allowed = allowed_actions_from_environ(environ)
    except ConfigurationError:
        return False
    if allowed is not None and SUBMIT not in allowed:
        return False
    importlib.import_module(".service", __package__)
    return True


def dependencies() -> tuple[Clients, SubmitterConfig]:
    """Clients and configuration of this (warm) container: made at init in Lambda (:func:`prepare_dependencies`),
    else on first use.

    Raises:
        ConfigurationError: the function's environment is missing a setting or has a malformed one.
    """
    global _dependencies
    if _dependencies is None:
        _dependencies = (Clients.create(), SubmitterConfig.from_environ(os.environ))
    return _dependencies


def prepare_dependencies(environ: Mapping[str, str]) -> bool:
    """Make this container's clients and configuration (:func:`dependencies`) now, at import (Lambda's init
    phase), when the process is a Lambda function (:data:`LAMBDA_FUNCTION_ENV`) with its role's keys in
    ``environ`` (AWS Lambda Developer Guide: "Initialize SDK clients [...] outside of the function handler").

    Without the keys botocore would walk its credential chain (the instance metadata service, an SSO cache, a
    ``credential_process``): an import that only names a function -- a shell, a CI job -- would reach the
    network, so the clients are left to the first request, as everywhere else.

    Returns:
        Whether they were made. ``False`` outside Lambda, without the keys, or when making them fails: the
        first request then makes them again and reports the failure as a function error.
    """
    if LAMBDA_FUNCTION_ENV not in environ:
        return False
    from botocore.credentials import EnvProvider  # imported by making the clients anyway

    if not (environ.get(EnvProvider.ACCESS_KEY) and environ.get(EnvProvider.SECRET_KEY)):
        return False
    try:
        dependencies()
    except Exception:  # reported by the first request, which makes them again (the docstring)
        return False
    return True


SUBMISSIONS_PRELOADED = preload_submissions(os.environ)
"""Whether this container imported a submission's modules at init (:func:`preload_submissions`)."""
DEPENDENCIES_PREPARED = prepare_dependencies(os.environ)
"""Whether this container made its clients and configuration at init (:func:`prepare_dependencies`)."""


def allowed_actions() -> tuple[str, ...] | None:
    """The actions this container answers (``SUBMITTER_ALLOWED_ACTIONS``; ``None``: all), read on first use.

    Raises:
        ConfigurationError: the variable names no action or an unknown one.
    """
    if not _allowed_actions:
        _allowed_actions.append(allowed_actions_from_environ(os.environ))
    return _allowed_actions[0]


def handle(
    event: Any,
    *,
    clients: Clients,
    config: SubmitterConfig,
    correlation_id: str | None = None,
    deadline: Deadline | None = None,
    allowed_actions: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Answer ``event`` with logging and metrics; what :func:`lambda_handler` and ``trainctl submit --local`` run.

    Args:
        deadline: when the answer is due (the invocation's end); ``None``: no bound.
        allowed_actions: the actions answered (others are refused ``ActionNotAllowed``); ``None``: all.

    Raises:
        DeadlineExceeded: too little time was left for an AWS call (retriable).
    """
    token = event.get("client_token") if isinstance(event, dict) else None
    logger.set_correlation_id(token if isinstance(token, str) and token else correlation_id)
    response = dispatch(event, clients=clients, config=config, allowed_actions=allowed_actions, deadline=deadline)
    record_metrics(response)
    action = action_of(event)
    logger.info(
        "submission answered" if action == "submit" else "request answered",
        extra={
            "action": action if isinstance(action, str) else repr(action),
            "status": response.get("status"),
            "training_job_name": response.get("training_job_name"),
            "error_code": (response.get("error") or {}).get("code"),
        },
    )
    return response


def record_metrics(response: dict[str, Any]) -> None:
    """Emit the submission / refusal metric for one response (EMF on stdout)."""
    status = response.get("status")
    if status == "submitted" and not response.get("replayed"):
        metrics.add_dimension(name=settings.DIMENSION_CAPACITY_TYPE, value=response["capacity"]["type"])
        metrics.add_metric(name=settings.METRIC_SUBMISSIONS, unit=MetricUnit.Count, value=1)
    elif status == "rejected":
        metrics.add_dimension(name=settings.DIMENSION_ERROR_CODE, value=response["error"]["code"])
        metrics.add_metric(name=settings.METRIC_REFUSALS, unit=MetricUnit.Count, value=1)
    else:
        return
    metrics.flush_metrics()


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    """AWS Lambda handler: ``event`` is the request (synchronous ``Invoke``), the return value the response."""
    deadline = Deadline.from_lambda_context(context)
    clients, config = dependencies()
    return handle(
        event,
        clients=clients,
        config=config,
        correlation_id=getattr(context, "aws_request_id", None),
        deadline=deadline,
        allowed_actions=allowed_actions(),
    )
