"""The submitter's job API: one table of actions (:data:`ACTIONS`), an entry each.

The event's ``action`` says what is asked: absent or ``"submit"``, a submission (:func:`.service.submit`,
which checks the request's own table, :data:`.request.FIELDS`); otherwise one of::

    {"action": "describe", "job_name": "gpt-1b-run-7"}          # or "run_id": a run (runtime/runs.py)
    {"action": "list", "status": "InProgress", "tags": {"team": "nlp"},
     "created_after": "2025-06-01T00:00:00Z", "max_results": 20, "next_token": "..."}
    {"action": "stop", "job_name": "gpt-1b-run-7"}               # or "run_id"
    {"action": "list_runs", "max_results": 20, "next_token": "..."}
    {"action": "continue_run", "run_id": "my-run", "client_token": "...", "max_instance_hours": 400}   # an ended run

An :class:`Action` holds its fields (:class:`.fields.Field` rows, checked before any AWS call as the
request's are: an unknown field, a wrong type or a value out of range is an ``InvalidRequest`` naming the
field, the value and what was expected), its handler, whether it only reads (:data:`READ_ACTIONS`, the
reader function's) and the IAM actions its handler calls, no more (:class:`Grant`s; the construct grants
a function the union of its actions'; tests/submitter/test_grants.py records each action's calls). :func:`dispatch` refuses an action the function is not deployed to answer
(``SUBMITTER_ALLOWED_ACTIONS``) with ``ActionNotAllowed``.

**Which jobs.** Only the platform's, those carrying the ``platform:submitted-by`` tag
(:data:`.training_job.TAG_SUBMITTER`): another job is answered exactly as one that does not exist
(``NotFound``) and never listed, so a caller learns nothing of the account's other training jobs.

**Idempotency.** ``describe`` and ``list`` read only. ``stop`` of a job ``InProgress`` calls
``StopTrainingJob`` and answers ``"changed": true``; of a job already ``Stopping`` or ended (or one a
concurrent ``stop`` moved first) it answers the job's state with ``"changed": false``, never an error.

**Listing.** ``list`` is SageMaker ``Search`` (tag, status and creation-time filters, newest first;
``ListTrainingJobs`` cannot filter by tag), eventually consistent: a job created a moment ago may not be
listed yet. ``next_token`` wraps SageMaker's token with a digest of the query and the deployment, so a
token of another query or deployment, or one altered, is refused on ``next_token``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools import Logger

from platform_spec.capacity import CAPACITY_BLOCK_RECLAIM_S, CAPACITY_TYPES, capacity_type_of
from platform_spec.errors import FieldError
from platform_spec.metric_lines import FIELDS as METRIC_FIELDS
from platform_spec.runs import (
    RUN_FIELDS,
    RUN_ID_EXPECTED,
    RUN_ID_PATTERN,
    TAG_RUN_ID,
    TERMINAL_JOB_STATUSES,
    format_time,
    parse_time,
)

from ...lambda_runtime.deadline import current_deadline, deadline_scope
from . import runs
from . import sagemaker_rules as model
from .aws import NOT_FOUND_CODES, Clients, Deadline, error_code
from .config import SubmitterConfig
from .errors import ConfigurationError, DeadlineExceeded, Refusal, action_not_allowed, invalid, not_found
from .fields import JOB_NAME, Check, Field, check_table, parse
from .settings import ENV_ALLOWED_ACTIONS, SERVICE_NAME
from .training_job import TAG_CAPACITY_TYPE, TAG_SUBMITTER, existing_job, iso, stop_job, utc

logger = Logger(service=SERVICE_NAME, child=True)

Handler = Callable[..., dict[str, Any]]
"""``fn(request, *, clients, config, now) -> response``, raising :class:`.errors.Refusal`; ``request`` is the
action's parsed fields (defaults filled in), ``submit``'s the event."""

SUBMIT = "submit"
MAX_RESULTS = 100
"""The most jobs one ``list`` page holds, and its default (``Search``'s ``MaxResults`` in botocore's model
bounds it too)."""
NEXT_TOKEN_MAX_LENGTH = 16384
"""Longest ``next_token`` accepted: SageMaker's ``NextToken`` (at most 8192 characters) wrapped with
the query digest, base64-encoded."""
_TOKEN_VERSION = 1
_NEXT_TOKEN_EXPECTED = "the next_token of the previous page of this same list (same filters)"


# --- what an action needs of IAM -------------------------------------------------------------------


@dataclass(frozen=True)
class Grant:
    """IAM actions on one resource: a statement of the role of each function answering an action that needs
    it (one ``sid`` and resource make one statement; ``sid`` ``None``: none).

    ``resource`` is symbolic; the construct maps it to ARNs (``construct._resources``): ``training-job``,
    ``training-plan``, ``plan-capacity`` (training plans and their reserved capacity), ``*`` (no resource-level permissions), ``execution-role``, ``plan-parameter``,
    ``run-events`` (the default bus), or an S3 prefix, ``client-token-records``, ``run-records``,
    ``run-markers`` (the waiting and active markers), ``run-checkpoints`` (the run checkpoint prefix), ``model-folders`` (the files of a Hugging Face model folder the
    submitter reads, below the data bucket and the allowed input prefixes) or ``checkpoints-prefix`` (``s3:ListBucket`` on its bucket for the
    prefix; the bucket's key follows reads and writes).
    """

    sid: str | None
    resource: str
    actions: tuple[str, ...]


DESCRIBE_JOBS = Grant("DescribeTrainingJobs", "training-job", ("sagemaker:DescribeTrainingJob", "sagemaker:ListTags"))
DESCRIBE_PLANS = Grant("DescribeTrainingPlans", "training-plan", ("sagemaker:DescribeTrainingPlan",))
SEARCH_JOBS = Grant("SearchTrainingJobs", "*", ("sagemaker:Search",))
CREATE_JOBS = Grant("TrainingJobs", "training-job", ("sagemaker:CreateTrainingJob", "sagemaker:AddTags"))
CREATE_JOBS_ON_PLANS = Grant("TrainingJobsOnPlans", "plan-capacity", ("sagemaker:CreateTrainingJob",))
"""A ``CreateTrainingJob`` with a ``TrainingPlanArn`` is authorized against the plan and its reserved capacity
too (Service Authorization Reference: resource types ``training-job``, ``training-plan``, ``reserved-capacity``;
SageMaker Developer Guide, "IAM for SageMaker training plans"): without it every job on a plan is denied."""
STOP_JOBS = Grant("TrainingJobs", "training-job", ("sagemaker:StopTrainingJob",))
PASS_ROLE = Grant(None, "execution-role", ("iam:PassRole",))
READ_PLAN_ARNS = Grant(None, "plan-parameter", ("ssm:GetParameter",))
TOKEN_RECORDS = Grant("ClientTokenRecords", "client-token-records", ("s3:GetObject", "s3:PutObject"))
LIST_TOKEN_RECORDS = Grant("ListClientTokenRecords", "client-token-records", ("s3:ListBucket",))
READ_RUNS = Grant("RunRecordsRead", "run-records", ("s3:GetObject",))
LIST_RUNS = Grant("ListRunRecords", "run-records", ("s3:ListBucket",))
WRITE_RUNS = Grant("RunRecords", "run-records", ("s3:PutObject",))
READ_CHECKPOINTS = Grant("CheckpointsRead", "checkpoints-prefix", ("s3:GetObject",))
LIST_CHECKPOINTS = Grant("ListCheckpoints", "checkpoints-prefix", ("s3:ListBucket",))
READ_RUN_CHECKPOINTS = Grant("RunCheckpointsRead", "run-checkpoints", ("s3:GetObject",))
LIST_RUN_CHECKPOINTS = Grant("ListRunCheckpoints", "run-checkpoints", ("s3:ListBucket",))
PRUNE_RUN_CHECKPOINTS = Grant("RunCheckpointsPrune", "run-checkpoints", ("s3:DeleteObject",))
"""Before a run's next segment, every object under the run's checkpoint prefix but its newest complete checkpoint
is deleted (:mod:`.checkpoint_prune`; ``DeleteObjects`` is authorized as ``s3:DeleteObject`` per key). On the
versioned bucket that keeps each as a noncurrent version; ``s3:DeleteObjectVersion`` is never granted."""
READ_MODEL_FOLDERS = Grant("ModelFoldersRead", "model-folders", ("s3:GetObject",))
"""A request's ``inputs.init_from`` (:mod:`.init_from`): its ``config.json`` read, its weights' index or file
headed (``HeadObject`` needs ``s3:GetObject``), under the data bucket and the allowed input prefixes."""

CONTINUATION_GRANTS = (
    # a waiting marker goes when its segment starts, an active marker when its run has ended
    Grant("RunMarkers", "run-markers", ("s3:DeleteObject",)),
    Grant("RunDecisionEvents", "run-events", ("events:PutEvents",)),
    READ_RUN_CHECKPOINTS,
    LIST_RUN_CHECKPOINTS,
    PRUNE_RUN_CHECKPOINTS,
    # the stall watch reads each running segment's train:step (runtime/stall.py)
    Grant("StepMetricsRead", "*", ("cloudwatch:GetMetricData",)),
)
"""The run continuation's own, beyond every action's (it submits, stops and reads runs as they do): removing
its markers from the run store, publishing its decisions, pruning a run's checkpoints before its next segment,
reading its running segments' ``train:step`` metric (``GetMetricData`` has no resource-level permissions:
Service Authorization Reference, Amazon CloudWatch). Its own metrics are EMF log lines (no
``cloudwatch:PutMetricData``)."""


@dataclass(frozen=True)
class Action:
    """One action: its ``name`` (the event's ``action``), :data:`Handler`, ``fields`` (checked in order;
    ``None``: the handler checks the event, as ``submit`` does with the request's table), whether it
    ``reads_only`` (the reader answers it) and the ``grants`` it needs."""

    name: str
    handler: Handler
    fields: tuple[Field, ...] | None
    reads_only: bool
    grants: tuple[Grant, ...]


# --- the fields ------------------------------------------------------------------------------------

RUN_ID = Field("run_id", "string", pattern=RUN_ID_PATTERN, expected=RUN_ID_EXPECTED)


def _run_id_of(action: str) -> Field:
    """The ``run_id`` of ``describe`` and ``stop``: a run (``runtime/runs.py``), or ``job_name``, exactly one."""

    def job_or_run(values: Mapping[str, Any], config: Any) -> None:
        if values["run_id"] is not None and values["job_name"] is not None:
            raise FieldError("run_id", values["run_id"], "job_name or run_id, not both")
        if values["run_id"] is None and values["job_name"] is None:
            raise FieldError("job_name", None, f"a job_name (or a run_id) of the job to {action}")

    return dataclasses.replace(RUN_ID, checks=(Check(job_or_run, needs=("job_name",)),))


def _time(name: str) -> Field:
    """An ISO 8601 date-time with a time zone (:func:`platform_spec.runs.parse_time`), as UTC."""

    def iso(raw: str, config: Any) -> tuple[datetime, str]:
        return parse_time(raw, name), raw

    return Field(name, "string", expected=RUN_FIELDS["deadline"], parse=iso)


def _tag_filters(raw: Mapping[str, Any], config: Any) -> tuple[dict[str, str], dict[str, str]]:
    """``list``'s tags, each matched exactly: SageMaker's ``TagKey`` and ``TagValue``."""
    key_rule, value_rule = model.string_rule("Tags.member.Key"), model.string_rule("Tags.member.Value")
    for key, value in raw.items():
        if not isinstance(key, str) or not key_rule.accepts(key):
            raise FieldError("tags", key, f"tag keys of {key_rule.length_text()} (SageMaker's {key_rule.name})")
        if not isinstance(value, str) or not value_rule.accepts(value):
            raise FieldError(
                f"tags.{key}", value, f"a string of {value_rule.length_text()} (SageMaker's {value_rule.name})"
            )
    tags = dict(sorted(raw.items()))
    return tags, tags


def _created_in_order(values: Mapping[str, Any], config: Any) -> None:
    after, before = values["created_after"], values["created_before"]
    if after is not None and before is not None and before <= after:
        raise FieldError("created_before", format_time(before), "a time after created_after")


def _fields(action: str, *rows: Field) -> tuple[Field, ...]:
    """An action's table: ``action`` (checked by :func:`dispatch`), then ``rows``."""
    table = (Field("action", "string", choices=(action,)), *rows)
    check_table(table)
    return table


# --- the handlers ----------------------------------------------------------------------------------


def _submit(event: Mapping[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime) -> dict[str, Any]:
    """:func:`.service.submit`, imported with the first submission (at init in a function that answers
    submissions: :func:`.handler.preload_submissions`; never by the reader)."""
    from .service import submit

    return submit(event, clients=clients, config=config, now=now)


def _continue_run(
    event: Mapping[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime
) -> dict[str, Any]:
    """:func:`.continue_run.continue_run` (it submits a segment: imported on first use, as :func:`_submit`)."""
    from .continue_run import continue_run

    return continue_run(event, clients=clients, config=config, now=now)


def describe(request: Mapping[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime) -> dict[str, Any]:
    """``describe`` of one job (``job_name``), or of a run (``run_id``: :func:`.runs.describe_run`).

    Returns:
        ``{"status": "described", "job": {...}}``, the job as :func:`job_view` shows it plus ``checkpoint``
        (``{"s3_uri", "newest_complete_step"}``: the newest complete step under the job's
        ``CheckpointConfig.S3Uri`` as the run continuation judges it, :func:`.runs.newest_checkpoint_in`;
        ``"unavailable"`` names the error when the prefix cannot be listed), ``capacity.block``
        (:func:`capacity_block`) and ``infra_check`` (whether SageMaker's infrastructure health check is on:
        ``InfraCheckConfig.EnableInfraCheck``; ``Search``'s records, which ``list`` reads, do not carry it).

    Raises:
        Refusal: ``NotFound`` (no such platform job).
    """
    if request["run_id"] is not None:
        return runs.describe_run(request, clients=clients, config=config, now=now)
    name = request["job_name"]
    job = _platform_job(clients, name)
    description, tags = job["description"], job["tags"]
    view = job_view(description, tags)
    view["checkpoint"] = _checkpoint(clients, description)
    view["capacity"]["block"] = capacity_block(clients, description, now)
    view["infra_check"] = bool((description.get("InfraCheckConfig") or {}).get("EnableInfraCheck"))
    return {"status": "described", "job": view}


def list_jobs(
    request: Mapping[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime
) -> dict[str, Any]:
    """``list``: one page of the platform's jobs, newest first (SageMaker ``Search``), filtered by ``status``,
    ``tags`` (every key and value exactly), ``created_after`` / ``created_before`` (exclusive) and ``run_id``.

    Returns:
        ``{"status": "listed", "jobs": [job_view ...], "next_token"?: str}``: ``next_token`` is present
        when more jobs may follow (a page may hold fewer than ``max_results`` then).

    Raises:
        Refusal: ``InvalidRequest`` naming ``tags`` (more than ``Search`` filters) or ``next_token`` (a token
            of another query, deployment, or altered).
    """
    filters, digest, token = _list_query(request, config)
    params: dict[str, Any] = {
        "Resource": "TrainingJob",
        "SearchExpression": {"Filters": filters},
        "SortBy": "CreationTime",
        "SortOrder": "Descending",
        "MaxResults": request["max_results"],
    }
    if token is not None:
        params["NextToken"] = token
    try:
        response = clients.sagemaker.search(**params)
    except Exception as exc:
        if token is not None and error_code(exc) == "ValidationException":
            raise _bad_token("SageMaker no longer accepts it (it may have expired)") from None
        raise
    jobs = []
    for result in response.get("Results") or []:
        job = result.get("TrainingJob")
        if not job:
            continue
        tags = {t["Key"]: t["Value"] for t in job.get("Tags") or []}
        created = job.get("CreationTime")
        if TAG_SUBMITTER not in tags or not _within(created, request["created_after"], request["created_before"]):
            continue  # the server-side filters are second-granular; these are exact
        jobs.append(job_view(job, tags))
    out: dict[str, Any] = {"status": "listed", "jobs": jobs}
    if response.get("NextToken"):
        out["next_token"] = _encode_token(digest, response["NextToken"])
    return out


def stop(request: Mapping[str, Any], *, clients: Clients, config: SubmitterConfig, now: datetime) -> dict[str, Any]:
    """``stop`` of one job (``job_name``), or of a run (``run_id``: :func:`.runs.stop_run`).

    Returns:
        ``{"status": <the job's status in lower case: "stopping", "stopped", "completed", "failed">,
        "changed": bool, "training_job_name", "training_job_arn", "training_job_status",
        "secondary_status"}``; ``changed`` is true only for the call that moved the job from
        ``InProgress`` to ``Stopping``.

    Raises:
        Refusal: ``NotFound`` (no such platform job).
    """
    if request["run_id"] is not None:
        return runs.stop_run(request, clients=clients, config=config, now=now)
    name = request["job_name"]
    description = _platform_job(clients, name)["description"]
    changed = False
    if description.get("TrainingJobStatus") == "InProgress":
        changed = stop_job(clients, name)  # refused: the job is no longer InProgress, settled below
        description = clients.sagemaker.describe_training_job(TrainingJobName=name)
    status = str(description.get("TrainingJobStatus"))
    logger.info("stop answered", extra={"training_job_name": name, "training_job_status": status, "changed": changed})
    return {
        "status": status.lower(),
        "changed": changed,
        "training_job_name": description["TrainingJobName"],
        "training_job_arn": description["TrainingJobArn"],
        "training_job_status": status,
        "secondary_status": description.get("SecondaryStatus"),
    }


# --- the table -------------------------------------------------------------------------------------

_RUN_READS = (READ_RUNS, LIST_RUNS)
_SUBMITS = (
    DESCRIBE_JOBS, DESCRIBE_PLANS, CREATE_JOBS, CREATE_JOBS_ON_PLANS, PASS_ROLE, READ_PLAN_ARNS, TOKEN_RECORDS,
    LIST_TOKEN_RECORDS, READ_MODEL_FOLDERS,
)  # fmt: skip

ACTIONS: Mapping[str, Action] = {
    action.name: action
    for action in (
        Action(
            SUBMIT,
            _submit,
            fields=None,
            reads_only=False,
            grants=(*_SUBMITS, *_RUN_READS, WRITE_RUNS),
        ),
        Action(
            "describe",
            describe,
            fields=_fields("describe", JOB_NAME, _run_id_of("describe")),
            reads_only=True,
            grants=(DESCRIBE_JOBS, DESCRIBE_PLANS, *_RUN_READS, READ_CHECKPOINTS, LIST_CHECKPOINTS),
        ),
        Action(
            "list",
            list_jobs,
            fields=_fields(
                "list",
                Field("status", "string", sagemaker="ListTrainingJobs:StatusEquals"),
                _time("created_after"),
                dataclasses.replace(_time("created_before"), checks=(Check(_created_in_order, ("created_after",)),)),
                RUN_ID,
                Field("tags", "object", parse=_tag_filters, expected="a JSON object of tag key -> value, each matched exactly"),
                Field("max_results", "integer", default=MAX_RESULTS, maximum=MAX_RESULTS, sagemaker="Search:MaxResults"),
                Field("next_token", "string", expected=_NEXT_TOKEN_EXPECTED),
            ),
            reads_only=True,
            grants=(SEARCH_JOBS,),
        ),
        Action(
            "stop",
            stop,
            fields=_fields("stop", JOB_NAME, _run_id_of("stop")),
            reads_only=False,
            grants=(DESCRIBE_JOBS, STOP_JOBS, *_RUN_READS, WRITE_RUNS),
        ),
        Action(
            "list_runs",
            runs.list_runs,
            fields=_fields(
                "list_runs",
                Field("max_results", "integer", default=runs.LIST_RUNS_DEFAULT, minimum=1, maximum=runs.LIST_RUNS_MAX),
                Field("next_token", "string", expected="the next_token of an earlier list_runs answer"),
            ),
            reads_only=True,
            grants=_RUN_READS,
        ),
        Action(
            "continue_run",
            _continue_run,
            fields=None,  # its table is runtime/continue_run.py's, imported with the handler
            reads_only=False,
            grants=(
                *_SUBMITS, *_RUN_READS, WRITE_RUNS, STOP_JOBS, READ_RUN_CHECKPOINTS, LIST_RUN_CHECKPOINTS,
                PRUNE_RUN_CHECKPOINTS,
            ),
        ),
    )
}  # fmt: skip
"""Every action the function answers, by name; an action is one entry here."""

READ_ACTIONS: tuple[str, ...] = tuple(name for name, action in ACTIONS.items() if action.reads_only)
CONTINUATION_ACTIONS: tuple[str, ...] = ("submit", "describe", "stop", "list_runs")
"""The actions whose work the run continuation does (it submits segments, describes jobs and runs, stops and lists
runs), so whose grants its role needs besides :data:`CONTINUATION_GRANTS`; not ``list``: it never searches jobs
(``sagemaker:Search``), as the emulator's authorization of a whole run showed."""
"""The actions that change nothing: what a reader function (``JobSubmitter.grant_read``) is deployed with."""


def grants(actions: Iterable[str] | None = None) -> tuple[Grant, ...]:
    """The grants a function answering ``actions`` needs (``None``: every action), each once, in table order."""
    chosen = ACTIONS if actions is None else {name: ACTIONS[name] for name in actions}
    return tuple(dict.fromkeys(grant for action in chosen.values() for grant in action.grants))


# --- dispatch --------------------------------------------------------------------------------


def action_of(event: Any) -> str:
    """The event's action: ``"submit"`` when absent or ``null`` (or when the event is no JSON object,
    which the submission refuses); otherwise the value, unchecked."""
    if not isinstance(event, Mapping):
        return SUBMIT
    action = event.get("action")
    return SUBMIT if action is None else action


def dispatch(
    event: Any,
    *,
    clients: Clients,
    config: SubmitterConfig,
    allowed_actions: tuple[str, ...] | None = None,
    now: datetime | None = None,
    deadline: Deadline | None = None,
) -> dict[str, Any]:
    """Answer one event: a submission, or one of :data:`ACTIONS` (its fields checked by its table first).

    Args:
        event: the function's event (a JSON object).
        allowed_actions: the actions this function answers (:func:`allowed_actions_from_environ`);
            ``None``: every action.
        now: the current time (tests); default: the clock.
        deadline: when the answer is due; default: the deadline already in scope, else none.

    Returns:
        The action's response, or a refusal ``{"status": "rejected", "error": {...}}``:
        ``InvalidRequest`` on ``action`` for an action that is not a string of :data:`ACTIONS`,
        ``ActionNotAllowed`` for one outside ``allowed_actions``.

    Raises:
        DeadlineExceeded, botocore.exceptions.ClientError, ConfigurationError: as :func:`.service.submit`.
    """
    action = action_of(event)
    now = now or datetime.now(UTC)
    with deadline_scope(deadline if deadline is not None else current_deadline()) as scoped:
        try:
            if not isinstance(action, str) or action not in ACTIONS:
                raise invalid(FieldError("action", action, "one of " + ", ".join(ACTIONS)))
            if allowed_actions is not None and action not in allowed_actions:
                raise action_not_allowed(action, allowed_actions)
            entry = ACTIONS[action]
            request = event if entry.fields is None else _parsed(event, entry.fields, config, action)
            return entry.handler(request, clients=clients, config=config, now=now)
        except Refusal as refusal:
            logger.info(
                "request refused",
                extra={
                    "action": action if isinstance(action, str) else repr(action),
                    "refusal": {"code": refusal.code, "field": refusal.field, "message": refusal.message},
                },
            )
            return refusal.to_response()
        except DeadlineExceeded:
            raise
        except Exception as exc:
            if scoped is not None and scoped.error is not None:
                raise scoped.error from exc
            raise


def allowed_actions_from_environ(environ: Mapping[str, str]) -> tuple[str, ...] | None:
    """The function's ``SUBMITTER_ALLOWED_ACTIONS`` (comma-separated), or ``None`` (absent: every action).

    Raises:
        ConfigurationError: the variable is blank or names an action that is not in :data:`ACTIONS`.
    """
    raw = environ.get(ENV_ALLOWED_ACTIONS)
    if raw is None:
        return None
    names = tuple(dict.fromkeys(part.strip() for part in raw.split(",") if part.strip()))
    unknown = [name for name in names if name not in ACTIONS]
    if not names or unknown:
        raise ConfigurationError(
            f"{ENV_ALLOWED_ACTIONS}={raw!r}: expected a comma-separated list of actions from "
            f"{', '.join(ACTIONS)}" + (f" ({', '.join(map(repr, unknown))} is not one)" if unknown else "")
        )
    return names


def _parsed(event: Mapping[str, Any], rows: tuple[Field, ...], config: SubmitterConfig, action: str) -> dict[str, Any]:
    """The action's fields, checked by its table (:func:`.fields.parse`)."""
    try:
        return parse(event, rows, config, unknown=f"a field of action {action!r}")[0]
    except FieldError as error:
        raise invalid(error) from None


# --- list ------------------------------------------------------------------------------------------


def _list_query(request: Mapping[str, Any], config: SubmitterConfig) -> tuple[list[dict[str, str]], str, str | None]:
    """``Search``'s filters, the query's digest (a page's token is bound to it) and SageMaker's token, if any."""
    filters: list[dict[str, str]] = [{"Name": f"Tags.{TAG_SUBMITTER}", "Operator": "Exists"}]
    if request["status"] is not None:
        filters.append({"Name": "TrainingJobStatus", "Operator": "Equals", "Value": request["status"]})
    after, before = request["created_after"], request["created_before"]
    if after is not None:  # Search takes whole seconds: widen here, filter exactly on the answer
        filters.append({"Name": "CreationTime", "Operator": "GreaterThanOrEqualTo", "Value": _search_time(after)})
    if before is not None and before < datetime.max.replace(tzinfo=UTC) - timedelta(seconds=1):
        ceiling = before if before.microsecond == 0 else before + timedelta(seconds=1)
        filters.append({"Name": "CreationTime", "Operator": "LessThanOrEqualTo", "Value": _search_time(ceiling)})
    if request["run_id"] is not None:
        filters.append({"Name": f"Tags.{TAG_RUN_ID}", "Operator": "Equals", "Value": request["run_id"]})
    tags = request["tags"]
    most = model.bounds("SearchExpression.Filters", "Search")[1] or 20
    if len(filters) + len(tags) > most:
        raise invalid(
            FieldError(
                "tags", f"{len(tags)} tags", f"at most {most - len(filters)} with these filters "
                f"(SageMaker Search takes {most} filters; the others use {len(filters)})",
            )
        )  # fmt: skip
    filters.extend({"Name": f"Tags.{key}", "Operator": "Equals", "Value": value} for key, value in tags.items())
    digest = _query_digest(filters, after, before, config)
    token = request["next_token"]
    return filters, digest, None if token is None else _decode_token(token, digest)


def _search_time(at: datetime) -> str:
    """A ``Search`` timestamp value: ``YYYY-mm-dd'T'HH:MM:SS`` in UTC (API Reference, Filter.Value)."""
    return at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="seconds")  # strftime's %Y drops year 1's zeros


def _within(created: Any, after: datetime | None, before: datetime | None) -> bool:
    if (created := utc(created)) is None:
        return after is None and before is None
    return (after is None or created > after) and (before is None or created < before)


# --- next_token --------------------------------------------------------------------------------


def _query_digest(
    filters: list[dict[str, str]], after: datetime | None, before: datetime | None, config: SubmitterConfig
) -> str:
    """SHA-256 of what a page's token is bound to: the query (filters, exact times) and the deployment."""
    body = {
        "filters": filters,
        "after": after.isoformat() if after else None,
        "before": before.isoformat() if before else None,
        "deployment": [config.account_id, config.region, config.checkpoint_bucket, config.output_bucket],
    }
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()


def _encode_token(digest: str, sagemaker_token: str) -> str:
    body = {"v": _TOKEN_VERSION, "q": digest[:32], "t": sagemaker_token}
    body["c"] = _checksum(body)
    return base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode().rstrip("=")


def _decode_token(token: str, digest: str) -> str:
    if not 0 < len(token) <= NEXT_TOKEN_MAX_LENGTH:
        raise _bad_token("it is not one")
    try:
        body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise _bad_token("it is not one") from None
    if not isinstance(body, dict) or body.get("v") != _TOKEN_VERSION or not isinstance(body.get("t"), str):
        raise _bad_token("it is not one")
    if body.get("c") != _checksum({k: body.get(k) for k in ("v", "q", "t")}):
        raise _bad_token("it was altered")
    if body.get("q") != digest[:32]:
        raise _bad_token("it belongs to another query (other filters) or another deployment")
    return str(body["t"])


def _checksum(body: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16]


def _bad_token(why: str) -> Refusal:
    return invalid(FieldError("next_token", "<token>", _NEXT_TOKEN_EXPECTED, detail=why))


# --- the job's view ------------------------------------------------------------------------------


def _platform_job(clients: Clients, name: str) -> dict[str, Any]:
    """``{"description", "tags"}`` of the platform job ``name``.

    Raises:
        Refusal: ``NotFound`` when no job has that name, or the one that has it was not made by the
            platform (no :data:`.training_job.TAG_SUBMITTER` tag): the two are answered alike.
    """
    job = existing_job(clients, name)
    if job is None or TAG_SUBMITTER not in job["tags"]:
        raise not_found("job_name", name, f"training job {name!r}")
    return job


def job_view(description: Mapping[str, Any], tags: Mapping[str, str]) -> dict[str, Any]:
    """What ``describe`` and ``list`` show of one job (``DescribeTrainingJob`` or a ``Search`` record): its name,
    ARN, statuses, ``failure_reason``, ``capacity`` (``{"type", "training_plan_arn"}``), ``run_id`` (its
    ``platform:run-id`` tag), ``metrics`` (:func:`metrics_of`), ``tags`` and its times (ISO 8601 in UTC, or
    ``None``)."""
    resource = description.get("ResourceConfig") or {}
    plan = resource.get("TrainingPlanArn")
    kind = tags.get(TAG_CAPACITY_TYPE)
    if kind not in CAPACITY_TYPES:
        kind = capacity_type_of(description)
    return {
        "training_job_name": description.get("TrainingJobName"),
        "training_job_arn": description.get("TrainingJobArn"),
        "training_job_status": description.get("TrainingJobStatus"),
        "secondary_status": description.get("SecondaryStatus"),
        "failure_reason": description.get("FailureReason"),
        "capacity": {"type": kind, "training_plan_arn": plan},
        "run_id": tags.get(TAG_RUN_ID),
        "metrics": metrics_of(description.get("FinalMetricDataList") or []),
        "tags": dict(sorted(tags.items())),
        "creation_time": iso(description.get("CreationTime")),
        "training_start_time": iso(description.get("TrainingStartTime")),
        "training_end_time": iso(description.get("TrainingEndTime")),
        "last_modified_time": iso(description.get("LastModifiedTime")),
    }


def metrics_of(final_metrics: list[Mapping[str, Any]]) -> dict[str, float | int]:
    """``FinalMetricDataList`` -> metric-line field -> value, for the metrics of
    :data:`platform_spec.metric_lines.FIELDS` (others are left out; the newest of a repeated one wins).
    ``step`` is an integer; a value that is not finite is left out (JSON has no NaN)."""
    by_metric = {metric: line_field for line_field, metric, _ in METRIC_FIELDS}
    newest: dict[str, tuple[Any, float]] = {}
    for datum in final_metrics:
        line_field = by_metric.get(str(datum.get("MetricName")))
        value = datum.get("Value")
        if line_field is None or not isinstance(value, (int, float)) or not math.isfinite(value):
            continue
        stamp = datum.get("Timestamp")
        key = stamp.timestamp() if isinstance(stamp, datetime) else 0.0
        if line_field not in newest or key >= newest[line_field][0]:
            newest[line_field] = (key, float(value))
    out: dict[str, float | int] = {}
    for line_field, _, _ in METRIC_FIELDS:
        if line_field in newest:
            value = newest[line_field][1]
            out[line_field] = int(value) if line_field == "step" else value
    return out


def capacity_block(clients: Clients, description: Mapping[str, Any], now: datetime) -> dict[str, Any] | None:
    """The reserved capacity block a training-plan job runs in, and its time left; ``None`` off a plan.

    The block is the plan's ``ReservedCapacitySummaries`` entry of the job's instance type holding
    ``now`` (else the next one to start, for a job waiting ``Pending``). Its usable time ends
    :data:`platform_spec.capacity.CAPACITY_BLOCK_RECLAIM_S` (30 minutes) before its ``EndTime``, when
    SageMaker starts reclaiming the instances.

    Returns:
        ``None`` for a job not on a plan; for an ended job ``{"training_plan_arn", "ended": true}``;
        else ``{"training_plan_arn", "reserved_capacity_arn", "start_time", "end_time", "usable_until"
        (ISO 8601), "seconds_left" (int, >= 0, until usable_until), "running" (the block holds now)}``,
        or ``{"training_plan_arn", "unavailable": why}`` when the plan cannot be read or reserves no
        such block now or later.
    """
    plan = (description.get("ResourceConfig") or {}).get("TrainingPlanArn")
    if not plan:
        return None
    if description.get("TrainingJobStatus") in TERMINAL_JOB_STATUSES:
        return {"training_plan_arn": plan, "ended": True}
    try:
        answer = clients.sagemaker.describe_training_plan(TrainingPlanName=plan)
    except Exception as exc:
        code = error_code(exc)
        if code not in NOT_FOUND_CODES:
            raise
        return {"training_plan_arn": plan, "unavailable": f"DescribeTrainingPlan answered {code}"}
    instance_type = (description.get("ResourceConfig") or {}).get("InstanceType")
    blocks = [
        b
        for b in answer.get("ReservedCapacitySummaries") or []
        if b.get("InstanceType") in (None, instance_type) and isinstance(b.get("EndTime"), datetime)
    ]
    running = [b for b in blocks if b.get("StartTime") and b["StartTime"] <= now < b["EndTime"]]
    later = sorted((b for b in blocks if b.get("StartTime") and b["StartTime"] > now), key=lambda b: b["StartTime"])
    if not running and not later:
        return {"training_plan_arn": plan, "unavailable": f"the plan reserves no {instance_type} block now or later"}
    block = (running or later)[0]
    usable_until = block["EndTime"] - timedelta(seconds=CAPACITY_BLOCK_RECLAIM_S)
    return {
        "training_plan_arn": plan,
        "reserved_capacity_arn": block.get("ReservedCapacityArn"),
        "start_time": iso(block.get("StartTime")),
        "end_time": iso(block["EndTime"]),
        "usable_until": iso(usable_until),
        "seconds_left": max(0, int((usable_until - now).total_seconds())),
        "running": bool(running),
    }


def _checkpoint(clients: Clients, description: Mapping[str, Any]) -> dict[str, Any] | None:
    """The job's checkpoint prefix and its newest complete step (see :func:`describe`); ``None`` without one."""
    uri = (description.get("CheckpointConfig") or {}).get("S3Uri")
    if not uri or not str(uri).startswith("s3://"):
        return None
    bucket, _, prefix = str(uri)[len("s3://") :].partition("/")
    try:
        state, _ = runs.newest_checkpoint_in(clients, bucket, prefix)
    except Exception as exc:
        code = error_code(exc)
        if code not in ("AccessDenied", "NoSuchBucket"):
            raise
        return {"s3_uri": uri, "newest_complete_step": None, "unavailable": f"ListObjectsV2 answered {code}"}
    return {"s3_uri": uri, "newest_complete_step": None if state is None else state.step}
