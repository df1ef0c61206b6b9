"""The submitter as a plain function: request in, response out.

:func:`submit` is what the Lambda handler, ``trainctl submit --local`` and the
tests call. Steps, each able to refuse (nothing is created before the last):

1. **Validate** the event (:func:`.request.parse_request`, :func:`.request.check_instance`).
2. **Preflight** with the planner: a configuration predicted not to fit in GPU
   memory is refused with ``PredictedOutOfMemory`` (the estimate and the change
   that would fit), unless ``auto_tune`` is set: then the planner's change is
   applied and reported.
3. **Idempotency**: with a ``client_token`` or ``job_name`` the job name is
   deterministic (:func:`.job.job_name_for`). An existing job of that name is
   returned when its ``platform:request-sha256`` tag equals this request's
   fingerprint, and refused as ``Conflict`` otherwise. SageMaker's job-name
   uniqueness (``ResourceInUse``) is the race-free lock for concurrent
   duplicates: the loser describes the winner's job and answers with it.
   This needs no table: the job itself records the request that made it.
4. **Capacity** (:func:`.capacity.choose_capacity`): ``NoCapacity`` lists every
   configured plan and why it was skipped.
5. **Create** (``CreateTrainingJob``) or, for ``dry_run``, answer ``validated``
   with the parameters that would be sent. ``ResourceLimitExceeded`` becomes
   ``QuotaExceeded`` naming the quota (``capacity: auto`` first tries its next
   candidate).

Transient AWS faults are retried by botocore; when they persist the
``ClientError`` propagates (a function error), so the caller retries.

Response shapes: see :mod:`.errors` (refusals) and :func:`submit`.
"""

from __future__ import annotations

import dataclasses
import re
import time
from datetime import datetime, timezone
from typing import Any

import planner
from aws_lambda_powertools import Logger
from planner import catalogue
from training import hyperparameters as hpmod

from .aws import error_code, error_message
from .capacity import CapacityChoice, choose_capacity
from .config import SubmitterConfig
from .errors import Refusal, invalid
from .job import TAG_REQUEST_SHA256, build_create_training_job, job_name_for
from .request import SubmitRequest, check_instance, parse_request
from .settings import SERVICE_NAME

logger = Logger(service=SERVICE_NAME, child=True)

_NOT_FOUND_CODES = ("ValidationException", "ResourceNotFound")
_QUOTA_RE = re.compile(r"limit '([^']+)'")


def submit(event: Any, *, clients: Any, config: SubmitterConfig, now: datetime | None = None) -> dict[str, Any]:
    """Validate ``event`` and create (or, for ``dry_run``, plan) one SageMaker training job.

    Args:
        event: the request (a JSON object; see :mod:`.request`). Anything else is refused.
        clients: :class:`.aws.Clients`.
        config: :class:`.config.SubmitterConfig`.
        now: the current time (tests); default: the clock.

    Returns:
        ``{"status": "submitted", "training_job_name", "training_job_arn",
        "capacity": {"type", "training_plan_arn"?, "reason", "skipped_plans"?},
        "estimate": {planner figures}, "replayed": bool, "auto_tune"?: {"changes", "hyperparameters"}}``;
        for ``dry_run`` ``"status": "validated"`` with ``"create_training_job"``
        (the parameters that would be sent) instead of an ARN; or a refusal
        ``{"status": "rejected", "error": {"code", "message", "field"?, "details"?}}``.

    Raises:
        botocore.exceptions.ClientError: AWS faults that are not the caller's
            (throttling or 5xx after botocore's retries, access denied).
        ConfigurationError: the function's configuration is broken.
    """
    try:
        return _submit(event, clients=clients, config=config, now=now or datetime.now(timezone.utc))
    except Refusal as refusal:
        logger.info(
            "request refused",
            extra={"refusal": {"code": refusal.code, "field": refusal.field, "message": refusal.message}},
        )
        return refusal.to_response()


def _submit(event: Any, *, clients: Any, config: SubmitterConfig, now: datetime) -> dict[str, Any]:
    request = parse_request(event, config)
    check_instance(request, config, catalogue)
    tuned, estimate, tuning = preflight(request)

    job_name = job_name_for(request, now)
    fingerprint = request.fingerprint()
    if request.job_name or request.client_token:
        existing = _existing_job(clients, job_name)
        if existing is not None:
            return _replay(request, existing, fingerprint, estimate, tuning)

    candidates = choose_capacity(tuned, clients=clients, config=config, now=now)
    quota_refusals: list[Refusal] = []
    for choice in candidates:
        params = build_create_training_job(tuned, job_name=job_name, capacity=choice, config=config, fingerprint=fingerprint)
        logger.info(
            "capacity chosen",
            extra={"training_job_name": job_name, "capacity": choice.to_dict(), "dry_run": request.dry_run},
        )
        if request.dry_run:
            return _answer("validated", job_name, None, choice, estimate, tuning, create_training_job=params)
        try:
            created = clients.sagemaker.create_training_job(**params)
        except Exception as exc:
            code = error_code(exc)
            if code == "ResourceInUse":
                existing = _existing_job(clients, job_name, settle=True)
                if existing is None:
                    raise
                return _replay(request, existing, fingerprint, estimate, tuning)
            if code == "ResourceLimitExceeded":
                quota_refusals.append(_quota_refusal(exc, tuned, choice))
                if request.capacity == "auto":
                    logger.warning("quota exceeded, trying the next capacity", extra={"capacity": choice.to_dict()})
                    continue
                raise quota_refusals[-1] from None
            if code == "ValidationException":
                raise Refusal(
                    "InvalidRequest",
                    f"SageMaker rejected the job: {error_message(exc)}",
                    details={"sagemaker_error": code},
                ) from None
            raise
        logger.info(
            "training job created",
            extra={"training_job_name": job_name, "training_job_arn": created["TrainingJobArn"], "capacity": choice.type},
        )
        return _answer("submitted", job_name, created["TrainingJobArn"], choice, estimate, tuning)
    last = quota_refusals[-1]
    if len(quota_refusals) > 1:
        last.details = dict(last.details or {}, quotas=[r.details["quota"] for r in quota_refusals if r.details])
        last.message = "every capacity in the fallback order is over its quota: " + "; ".join(r.message for r in quota_refusals)
    raise last


# --- preflight -------------------------------------------------------------------------------


def preflight(request: SubmitRequest) -> tuple[SubmitRequest, dict[str, Any], dict[str, Any] | None]:
    """The planner's estimate for the request's instance type and count.

    Returns:
        ``(request to submit, estimate dict, tuning)`` where ``tuning`` is
        ``None`` or ``{"changes": [...], "hyperparameters": {changed name: new value}}``.

    Raises:
        Refusal: ``PredictedOutOfMemory`` with the estimate and the planner's
            suggested change, when the configuration does not fit and
            ``auto_tune`` is off (or the planner finds no change that fits).
    """
    try:
        plan_input = planner.PlanInput.from_hyperparameters(
            request.hyperparameters, instance_type=request.instance_type, instance_count=request.instance_count
        )
        plan = planner.estimate(plan_input)
    except ValueError as exc:  # planner.errors.PlanInputError names the field
        field = getattr(exc, "field", None)
        where = f"hyperparameters.{field}" if field in hpmod.SPECS else (field or "hyperparameters")
        raise invalid(
            where, getattr(exc, "value", None), getattr(exc, "expected", f"a configuration the planner can estimate ({exc})")
        ) from None
    if plan.fits:
        return request, plan.to_dict(), None

    tuned = planner.auto_tune(plan_input)
    suggestion = None
    if tuned is not None:
        tuned_input, changes = tuned
        new_hp = _hyperparameters_from(request.hyperparameters, tuned_input)
        suggestion = {"changes": list(changes), "hyperparameters": _diff(request.hyperparameters, new_hp)}
    memory = plan.memory_gb.total
    if request.auto_tune and tuned is not None:
        tuned_plan = planner.estimate(tuned_input)
        logger.info("auto_tune applied", extra={"auto_tune": suggestion})
        return dataclasses.replace(request, hyperparameters=new_hp), tuned_plan.to_dict(), suggestion

    why = "and the planner found no change that fits" if tuned is None else "set auto_tune to apply the suggested change"
    required, usable = getattr(plan.memory_gb, "required", None), getattr(plan.memory_gb, "usable", None)
    if isinstance(required, (int, float)) and isinstance(usable, (int, float)):
        figures = f"{memory:.1f} GB peak per GPU ({required:.1f} GB with margins) of {usable:.1f} GB usable"
    else:
        figures = f"{memory:.1f} GB per GPU, more than fits"
    raise Refusal(
        "PredictedOutOfMemory",
        f"the planner predicts {figures} on {request.instance_type}; {why}",
        field="hyperparameters",
        details={"estimate": plan.to_dict(), "suggestion": suggestion},
    )


def _hyperparameters_from(original: Any, tuned_input: Any) -> Any:
    """The trainer hyperparameters a tuned :class:`planner.PlanInput` stands for.

    ``PlanInput`` fields that are hyperparameters carry the same names
    (``PlanInput.hyperparameters()``); everything else stays as requested.
    """
    values = tuned_input.hyperparameters()
    changes = {k: v for k, v in values.items() if hasattr(original, k) and getattr(original, k) != v}
    return dataclasses.replace(original, **changes)


def _diff(before: Any, after: Any) -> dict[str, Any]:
    old, new = before.to_strings(), after.to_strings()
    return {k: v for k, v in new.items() if old.get(k) != v}


# --- idempotency -----------------------------------------------------------------------------


def _existing_job(clients: Any, job_name: str, *, settle: bool = False) -> dict[str, Any] | None:
    """``DescribeTrainingJob`` + its tags, or ``None`` when no job has that name.

    ``settle``: after a ``ResourceInUse`` the job exists; retry a not-found a
    few times (0.2 s apart) in case the describe is not yet consistent.
    """
    attempts = 5 if settle else 1
    for attempt in range(attempts):
        try:
            description = clients.sagemaker.describe_training_job(TrainingJobName=job_name)
            break
        except Exception as exc:
            if error_code(exc) not in _NOT_FOUND_CODES:
                raise
            if attempt + 1 == attempts:
                return None
            time.sleep(0.2)
    tags: dict[str, str] = {}
    for page in clients.sagemaker.get_paginator("list_tags").paginate(ResourceArn=description["TrainingJobArn"]):
        tags.update({t["Key"]: t["Value"] for t in page.get("Tags", [])})
    return {"description": description, "tags": tags}


def _replay(
    request: SubmitRequest,
    existing: dict[str, Any],
    fingerprint: str,
    estimate: dict[str, Any],
    tuning: dict[str, Any] | None,
) -> dict[str, Any]:
    description, tags = existing["description"], existing["tags"]
    name, arn = description["TrainingJobName"], description["TrainingJobArn"]
    if tags.get(TAG_REQUEST_SHA256) != fingerprint:
        field = "job_name" if request.job_name else "client_token"
        raise Refusal(
            "Conflict",
            f"training job {name!r} already exists and was created by a different request; "
            f"use another {field}",
            field=field,
            details={"training_job_name": name, "training_job_arn": arn},
        )
    resource = description.get("ResourceConfig") or {}
    if resource.get("TrainingPlanArn"):
        kind = "training-plan"
    elif description.get("EnableManagedSpotTraining"):
        kind = "spot"
    else:
        kind = "on-demand"
    created = description.get("CreationTime")
    when = created.isoformat() if isinstance(created, datetime) else "earlier"
    choice = CapacityChoice(
        kind,
        f"idempotent replay: the job was created by an identical request at {when}",
        training_plan_arn=resource.get("TrainingPlanArn"),
    )
    logger.info("idempotent replay", extra={"training_job_name": name, "training_job_arn": arn})
    status = "validated" if request.dry_run else "submitted"
    return _answer(
        status, name, arn, choice, estimate, tuning, replayed=True, training_job_status=description.get("TrainingJobStatus")
    )


# --- responses -------------------------------------------------------------------------------


def _answer(
    status: str,
    job_name: str,
    job_arn: str | None,
    choice: CapacityChoice,
    estimate: dict[str, Any],
    tuning: dict[str, Any] | None,
    *,
    replayed: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    out: dict[str, Any] = {"status": status, "training_job_name": job_name}
    if job_arn is not None:
        out["training_job_arn"] = job_arn
    out["capacity"] = choice.to_dict()
    out["estimate"] = estimate
    out["replayed"] = replayed
    if tuning is not None:
        out["auto_tune"] = tuning
    out.update(extra)
    return out


def _quota_refusal(exc: BaseException, request: SubmitRequest, choice: CapacityChoice) -> Refusal:
    message = error_message(exc)
    match = _QUOTA_RE.search(message)
    if match:
        quota = match.group(1)
    elif choice.type == "spot":
        quota = f"{request.instance_type} for spot training job usage"
    else:
        quota = f"{request.instance_type} for training job usage"
    return Refusal(
        "QuotaExceeded",
        f"SageMaker quota {quota!r} does not allow {request.instance_count} more {request.instance_type} "
        f"({choice.type}); request an increase in Service Quotas",
        details={"quota": quota, "capacity_type": choice.type, "sagemaker_message": message},
    )
