"""Lambda entry point of the run continuation (``platform_constructs.submitter.runtime.continuation.lambda_handler``).

A thin adapter over :mod:`.runs`, deployed from the submitter's code asset with the submitter's
environment (:func:`.settings.function_environment`). Two kinds of event:

* ``SageMaker Training Job State Change`` (``source`` ``aws.sagemaker``; the stack's rule sends the
  terminal statuses): the job named in ``detail.TrainingJobName`` is re-read, never trusted from the
  event, and when it is a run's segment the run is decided (:func:`.runs.on_segment_end`); a
  ``continue`` submits the next segment through :func:`.service.submit`, the submission's own path
  (validation, preflight, capacity rules, idempotency). Duplicate events, events of older segments
  and events of segments still running are ``stale-event`` no-ops.
* ``Scheduled Event`` (``source`` ``aws.events``): every run waiting for capacity is retried
  (:func:`.runs.retry_waiting`), and the longest wait still running is published.

Per decision: one log line (:data:`.settings.RUN_DECISION_LOG_MESSAGE`, with the fields
:data:`.settings.RUN_DECISION_LOG_FIELDS`), the metric
:data:`.settings.METRIC_RUN_DECISIONS` (Count, dimension :data:`.settings.DIMENSION_DECISION`), and,
except for ``stale-event``, an EventBridge event on the default bus (``Source``
:data:`.settings.RUN_EVENT_SOURCE`, ``DetailType`` :data:`.settings.RUN_EVENT_DETAIL_TYPE`, detail =
the decision record). A started segment adds :data:`.settings.METRIC_RUN_SEGMENTS_STARTED`; every
scheduled tick publishes :data:`.settings.METRIC_RUN_CAPACITY_WAIT_SECONDS` (0 when no run waits).
Metrics are EMF lines (Powertools ``Metrics``), namespace :data:`.settings.METRICS_NAMESPACE`,
``service`` :data:`.settings.CONTINUATION_SERVICE_NAME`.

AWS faults and :class:`.errors.DeadlineExceeded` raise: the invocation fails and EventBridge's retry
runs it again, which is safe (every write is conditional and every segment has one name and token).
A failed ``PutEvents`` entry is logged and does not fail the invocation: the decision is recorded in
S3 and logged already.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from platform_spec.runs import JOB_STATE_CHANGE_DETAIL_TYPE, JOB_STATE_CHANGE_SOURCE, STALE_EVENT

from . import settings
from .aws import (
    Clients,
    Deadline,
    client_config,
    client_kwargs,
    current_deadline,
    deadline_scope,
    install_deadline_hooks,
)
from .config import SubmitterConfig
from .errors import DeadlineExceeded
from .runs import Outcome, RunStore, on_segment_end, retry_waiting, waiting_runs
from .service import submit

logger = Logger(service=settings.CONTINUATION_SERVICE_NAME)
metrics = Metrics(namespace=settings.METRICS_NAMESPACE, service=settings.CONTINUATION_SERVICE_NAME)

SCHEDULED_SOURCE = "aws.events"
SCHEDULED_DETAIL_TYPE = "Scheduled Event"

_dependencies: tuple[Clients, SubmitterConfig, Any] | None = None


def events_client(environ: Mapping[str, str] | None = None) -> Any:
    """An EventBridge client with the submitter's retry configuration and deadline hooks (region and
    endpoint from ``environ`` when given, as :meth:`.aws.Clients.create` takes them)."""
    import botocore.session

    client = botocore.session.Session().create_client("events", config=client_config(environ), **client_kwargs(environ))
    install_deadline_hooks(client)
    return client


def dependencies() -> tuple[Clients, SubmitterConfig, Any]:
    """Clients, configuration and the EventBridge client of this (warm) container, created on first use."""
    global _dependencies
    if _dependencies is None:
        _dependencies = (Clients.create(), SubmitterConfig.from_environ(os.environ), events_client())
    return _dependencies


def handle(
    event: Any,
    *,
    clients: Clients,
    config: SubmitterConfig,
    events: Any,
    now: datetime | None = None,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """Answer one event (module docstring); what :func:`lambda_handler`, the emulator's targets and tests run.

    Returns:
        ``{"status": "decided", "decision": record}`` for a run's segment; ``{"status": "ticked",
        "decisions": [records], "longest_wait_s": s}`` for the schedule; ``{"status": "ignored",
        "reason"}`` otherwise.

    Raises:
        DeadlineExceeded, botocore.exceptions.ClientError, RunStoreError: retriable faults.
    """
    when = now or datetime.now(UTC)
    with deadline_scope(deadline if deadline is not None else current_deadline()):
        if not isinstance(event, Mapping):
            return _ignored(f"the event is {type(event).__name__}, not a JSON object")
        source, kind = event.get("source"), event.get("detail-type")
        if source == JOB_STATE_CHANGE_SOURCE and kind == JOB_STATE_CHANGE_DETAIL_TYPE:
            detail = event.get("detail")
            name = detail.get("TrainingJobName") if isinstance(detail, Mapping) else None
            if not isinstance(name, str) or not name:
                return _ignored("the state-change event names no TrainingJobName")
            outcome = on_segment_end(name, clients=clients, config=config, submit=submit, now=when)
            if outcome is None:
                return _ignored(f"training job {name!r} is not a run's segment")
            publish(outcome, events)
            return {"status": "decided", "decision": outcome.record}
        if source == SCHEDULED_SOURCE and kind == SCHEDULED_DETAIL_TYPE:
            return tick(clients=clients, config=config, events=events, now=when)
        return _ignored(f"an event of source {source!r} and detail-type {kind!r} is not one this function answers")


def tick(*, clients: Clients, config: SubmitterConfig, events: Any, now: datetime) -> dict[str, Any]:
    """Retry every run waiting for capacity; publish the longest wait still running (0 when none)."""
    decided: list[dict[str, Any]] = []
    longest = 0.0
    errors: list[BaseException] = []
    for run_id in waiting_runs(RunStore.of(clients, config)):
        try:
            outcome, waited = retry_waiting(run_id, clients=clients, config=config, submit=submit, now=now)
        except DeadlineExceeded:
            raise
        except Exception as exc:  # one run's fault does not keep the others waiting; raised after them
            logger.exception("waiting run not retried", extra={"run_id": run_id})
            errors.append(exc)
            continue
        if outcome is not None:
            publish(outcome, events)
            decided.append(outcome.record)
        longest = max(longest, waited)
    metrics.add_metric(name=settings.METRIC_RUN_CAPACITY_WAIT_SECONDS, unit=MetricUnit.Seconds, value=longest)
    metrics.flush_metrics()
    logger.info("runs waiting for capacity retried", extra={"decisions": len(decided), "longest_wait_s": longest})
    if errors:
        raise errors[0]
    return {"status": "ticked", "decisions": decided, "longest_wait_s": longest}


def publish(outcome: Outcome, events: Any) -> None:
    """The decision's log line, metrics and (but for ``stale-event``) EventBridge event."""
    record = outcome.record
    logger.info(
        settings.RUN_DECISION_LOG_MESSAGE, extra={name: record.get(name) for name in settings.RUN_DECISION_LOG_FIELDS}
    )
    if outcome.segment_started:
        metrics.add_metric(name=settings.METRIC_RUN_SEGMENTS_STARTED, unit=MetricUnit.Count, value=1)
        metrics.flush_metrics()
    metrics.add_dimension(name=settings.DIMENSION_DECISION, value=outcome.decision)
    metrics.add_metric(name=settings.METRIC_RUN_DECISIONS, unit=MetricUnit.Count, value=1)
    metrics.flush_metrics()
    if outcome.decision == STALE_EVENT:
        return
    entry = {
        "Source": settings.RUN_EVENT_SOURCE,
        "DetailType": settings.RUN_EVENT_DETAIL_TYPE,
        "Detail": json.dumps(record, sort_keys=True, default=str),
        "EventBusName": "default",
    }
    answer = events.put_events(Entries=[entry])
    if answer.get("FailedEntryCount"):
        logger.error(
            "run decision event not published",
            extra={"run_id": record.get("run_id"), "entries": answer.get("Entries")},
        )


def _ignored(reason: str) -> dict[str, Any]:
    logger.info("event ignored", extra={"reason": reason})
    return {"status": "ignored", "reason": reason}


@logger.inject_lambda_context(clear_state=True)
def lambda_handler(event: Any, context: Any) -> dict[str, Any]:
    """AWS Lambda handler (EventBridge targets: the state-change rule and the schedule)."""
    clients, config, events = dependencies()
    return handle(event, clients=clients, config=config, events=events, deadline=Deadline.from_lambda_context(context))
