"""SageMaker extensions of the ``trainctl local-aws`` emulator (on top of moto).

moto (5.2) has no training-plan operations, and its training jobs do not
behave like SageMaker's: ``DescribeTrainingJob`` replaces the job's
``MetricDefinitions`` with made-up ones, reports every job ``Completed`` at
once, and ``CreateTrainingJob`` silently overwrites a job of the same name.
:func:`install` patches moto's ``SageMakerResponse`` (in the emulator's own
process only) so that

* ``DescribeTrainingPlan``, ``ListTrainingPlans`` and
  ``SearchTrainingPlanOfferings`` exist, serve the seeded plans, and have
  their requests and responses checked against botocore's service model
  (:mod:`trainctl.aws_shapes`); a plan's status follows the clock (a
  ``Scheduled`` plan becomes ``Active`` at ``StartTime``; ``Expired`` after
  ``EndTime``) and its ``AvailableInstanceCount`` / ``InUseInstanceCount``
  account for the emulator's running jobs on it;
* ``CreateTrainingJob`` enforces name uniqueness (``ResourceInUse``), checks
  ``TrainingPlanArn`` and the spot rules as SageMaker does, and stores the
  request as sent;
* ``DescribeTrainingJob`` returns the job as sent (``MetricDefinitions``,
  ``HyperParameters``, ``ResourceConfig`` with ``TrainingPlanArn``,
  ``CheckpointConfig``, ``Environment``, ``RetryStrategy`` ...) with a status
  lifecycle driven by :meth:`SageMakerExtension.set_job_status` (the
  emulator's admin endpoint): ``InProgress`` -> ``Completed`` / ``Failed`` /
  ``Stopping`` -> ``Stopped``, with ``FailureReason`` and
  ``FinalMetricDataList``;
* ``StopTrainingJob`` moves an ``InProgress`` job to ``Stopping``.

This is an emulator for tests and demos, not SageMaker: there is no
scheduling, no container, no billing.
"""

from __future__ import annotations

import copy
import hashlib
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from moto.core.exceptions import ServiceException
from moto.core.responses import ActionResult, EmptyResult
from moto.sagemaker.exceptions import ResourceInUseException, ResourceNotFound, ValidationError
from moto.sagemaker.models import sagemaker_backends
from moto.sagemaker.responses import SageMakerResponse

from trainctl.aws_shapes import operation_model, validate_input, validate_output, validate_shape

TERMINAL_STATUSES = ("Completed", "Failed", "Stopped")
ACTIVE_STATUSES = ("InProgress", "Stopping")
_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "InProgress": ("InProgress", "Completed", "Failed", "Stopping", "Stopped"),
    "Stopping": ("Stopped", "Failed"),
}
_SECONDARY = {
    "Completed": ("Completed", "Training job completed"),
    "Failed": ("Failed", "Training job failed"),
    "Stopping": ("Stopping", "Stopping the training job"),
    "Stopped": ("Stopped", "Training job stopped"),
}
_RELATIVE_TIME = re.compile(r"^now\s*(?:([+-])\s*(\d+(?:\.\d+)?)\s*([smhdw]))?$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


class InternalFailure(ServiceException):
    """The emulator produced a response its service model forbids (a bug in the emulator)."""

    code = "InternalFailure"


class TransitionError(ValueError):
    """An admin status change that SageMaker's lifecycle does not allow."""


def parse_time(value: Any, now: datetime) -> datetime:
    """A seed timestamp: ``datetime``, epoch seconds, ISO 8601, or ``now``, ``now+14d``, ``now-1h`` (s, m, h, d, w).

    Raises:
        ValueError: an unreadable value.
    """
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=timezone.utc)
    if isinstance(value, str):
        match = _RELATIVE_TIME.match(value.strip())
        if match:
            sign, amount, unit = match.groups()
            if sign is None:
                return now
            delta = timedelta(seconds=float(amount) * _UNITS[unit])
            return now + delta if sign == "+" else now - delta
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    raise ValueError(f"expected a timestamp (ISO 8601, epoch seconds or now[+-]N[smhdw]), got {value!r}")


@dataclass
class JobRecord:
    """A training job as the emulator keeps it: the request as sent plus its lifecycle."""

    account: str
    region: str
    name: str
    arn: str
    params: dict[str, Any]
    created: datetime
    status: str = "InProgress"
    secondary: str = "Starting"
    transitions: list[dict[str, Any]] = field(default_factory=list)
    started: datetime | None = None
    ended: datetime | None = None
    modified: datetime | None = None
    failure_reason: str | None = None
    final_metrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def plan_arn(self) -> str | None:
        return (self.params.get("ResourceConfig") or {}).get("TrainingPlanArn")

    @property
    def instance_count(self) -> int:
        return int((self.params.get("ResourceConfig") or {}).get("InstanceCount") or 0)

    def move(self, secondary: str, message: str, at: datetime) -> None:
        if self.transitions and "EndTime" not in self.transitions[-1]:
            self.transitions[-1]["EndTime"] = at
        self.transitions.append({"Status": secondary, "StartTime": at, "StatusMessage": message})
        self.secondary = secondary
        self.modified = at


class SageMakerExtension:
    """State of the emulator's training plans and training jobs (one per emulator process)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.plans: dict[str, dict[str, Any]] = {}
        self.jobs: dict[tuple[str, str, str], JobRecord] = {}

    # --- plans -----------------------------------------------------------------------------

    def seed_plans(self, seeds: Iterable[Mapping[str, Any]], *, account: str, region: str, replace: bool = True) -> list[str]:
        """Load plans shaped like ``DescribeTrainingPlan``'s response; returns their ARNs.

        Accepted beyond the response shape: ``InstanceType`` (turned into a
        ``ReservedCapacitySummaries`` entry, where SageMaker reports it),
        relative times (``now+14d``), and missing ``TrainingPlanArn`` /
        ``TrainingPlanName`` (one derived from the other). Missing counts
        default to ``AvailableInstanceCount = TotalInstanceCount -
        InUseInstanceCount`` and ``TargetResources`` to ``["training-job"]``.

        Raises:
            ValueError: naming the plan (index) and field that is wrong.
        """
        now = datetime.now(timezone.utc)
        loaded: dict[str, dict[str, Any]] = {}
        for index, seed in enumerate(seeds):
            plan = self._normalise_seed(index, seed, account=account, region=region, now=now)
            loaded[plan["TrainingPlanName"]] = plan
        with self.lock:
            if replace:
                self.plans = loaded
            else:
                self.plans.update(loaded)
            return [p["TrainingPlanArn"] for p in self.plans.values()]

    def _normalise_seed(self, index: int, seed: Mapping[str, Any], *, account: str, region: str, now: datetime) -> dict[str, Any]:
        where = f"plan[{index}]"
        if not isinstance(seed, Mapping):
            raise ValueError(f"{where}: expected an object shaped like DescribeTrainingPlan's response")
        plan = dict(copy.deepcopy(seed))
        instance_type = plan.pop("InstanceType", None)
        arn, name = plan.get("TrainingPlanArn"), plan.get("TrainingPlanName")
        if not arn and not name:
            raise ValueError(f"{where}: needs TrainingPlanArn or TrainingPlanName")
        plan["TrainingPlanName"] = name = name or str(arn).rsplit("/", 1)[-1]
        plan["TrainingPlanArn"] = arn or f"arn:aws:sagemaker:{region}:{account}:training-plan/{name}"
        for key in ("StartTime", "EndTime"):
            if key not in plan:
                raise ValueError(f"{where}.{key}: required")
            try:
                plan[key] = parse_time(plan[key], now)
            except ValueError as exc:
                raise ValueError(f"{where}.{key}: {exc}") from None
        if plan["EndTime"] <= plan["StartTime"]:
            raise ValueError(f"{where}.EndTime: must be after StartTime")
        plan.setdefault("Status", "Active")
        plan.setdefault("TargetResources", ["training-job"])
        total = plan.get("TotalInstanceCount")
        if total is None:
            raise ValueError(f"{where}.TotalInstanceCount: required")
        plan.setdefault("InUseInstanceCount", 0)
        plan.setdefault("AvailableInstanceCount", max(0, int(total) - int(plan["InUseInstanceCount"])))
        duration = plan["EndTime"] - plan["StartTime"]
        plan.setdefault("DurationHours", int(duration.total_seconds() // 3600))
        plan.setdefault("DurationMinutes", int(duration.total_seconds() % 3600 // 60))
        plan.setdefault("CurrencyCode", "USD")
        if instance_type is not None and "ReservedCapacitySummaries" not in plan:
            digest = hashlib.sha256(plan["TrainingPlanArn"].encode()).hexdigest()[:16]
            plan["ReservedCapacitySummaries"] = [
                {
                    "ReservedCapacityArn": f"arn:aws:sagemaker:{region}:{account}:reserved-capacity/rc-{digest}",
                    "ReservedCapacityType": "Instance",
                    "InstanceType": instance_type,
                    "TotalInstanceCount": int(total),
                    "Status": plan["Status"],
                    "AvailabilityZone": f"{region}a",
                    "DurationHours": plan["DurationHours"],
                    "DurationMinutes": plan["DurationMinutes"],
                    "StartTime": plan["StartTime"],
                    "EndTime": plan["EndTime"],
                }
            ]
        problems = validate_shape(plan, operation_model("sagemaker", "DescribeTrainingPlan").output_shape, where)
        if problems:
            raise ValueError("; ".join(problems))
        return plan

    def describe_plan(self, name: str, now: datetime | None = None) -> dict[str, Any]:
        """The plan as ``DescribeTrainingPlan`` answers now (status and counts live).

        Raises:
            KeyError: no such plan.
        """
        now = now or datetime.now(timezone.utc)
        with self.lock:
            plan = copy.deepcopy(self.plans[name])
            in_use = sum(
                job.instance_count
                for job in self.jobs.values()
                if job.plan_arn == plan["TrainingPlanArn"] and job.status in ACTIVE_STATUSES
            )
        status = plan["Status"]
        if status in ("Active", "Scheduled") and now >= plan["EndTime"]:
            status = "Expired"
        elif status == "Scheduled" and now >= plan["StartTime"]:
            status = "Active"
        plan["Status"] = status
        for summary in plan.get("ReservedCapacitySummaries", []):
            summary["Status"] = status
        plan["InUseInstanceCount"] = int(plan["InUseInstanceCount"]) + in_use
        available = int(plan["AvailableInstanceCount"]) - in_use
        plan["AvailableInstanceCount"] = max(0, available) if status in ("Active", "Scheduled") else 0
        return plan

    # --- jobs ------------------------------------------------------------------------------

    def find_job(self, name: str) -> JobRecord:
        """The job called ``name`` (any account/region). Raises ``KeyError``."""
        with self.lock:
            for (_, _, job_name), record in self.jobs.items():
                if job_name == name:
                    return record
        raise KeyError(name)

    def set_job_status(
        self,
        name: str,
        status: str,
        *,
        secondary_status: str | None = None,
        failure_reason: str | None = None,
        final_metrics: Mapping[str, float] | None = None,
        log_lines: Iterable[str] | None = None,
        now: datetime | None = None,
    ) -> JobRecord:
        """Drive a job's lifecycle (the emulator's admin endpoint calls this).

        ``final_metrics`` (metric name -> value) become ``FinalMetricDataList``;
        ``log_lines`` are matched with the job's own ``MetricDefinitions`` (the
        last match of each regex wins, as SageMaker reports final values) and
        merged under ``final_metrics``.

        Raises:
            KeyError: no such job.
            TransitionError: SageMaker's lifecycle does not allow the change.
        """
        now = now or datetime.now(timezone.utc)
        with self.lock:
            job = self.find_job(name)
            allowed = _TRANSITIONS.get(job.status, ())
            if status not in allowed:
                raise TransitionError(
                    f"training job {name!r} is {job.status}; it can move to {', '.join(allowed) or 'nothing (terminal)'}, not {status}"
                )
            if status == "InProgress":
                secondary = secondary_status or "Training"
                if job.started is None and secondary in ("Training", "Downloading", "DownloadingTrainingImage"):
                    job.started = now
                job.move(secondary, f"{secondary} (set through the emulator)", now)
            else:
                secondary, message = _SECONDARY[status]
                if status == "Failed":
                    job.failure_reason = failure_reason or "AlgorithmError: the job failed (set through the emulator)"
                    message = job.failure_reason
                if status in TERMINAL_STATUSES:
                    job.started = job.started or now
                    job.ended = now
                job.move(secondary_status or secondary, message, now)
            job.status = status
            metrics = dict(metrics_from_log(job.params, log_lines or ()))
            metrics.update(final_metrics or {})
            if metrics:
                job.final_metrics = [
                    {"MetricName": k, "Value": float(v), "Timestamp": now} for k, v in sorted(metrics.items())
                ]
            sync_moto_status(sagemaker_backends[job.account][job.region], job)
            return job

    def describe_job(self, job: JobRecord) -> dict[str, Any]:
        """``DescribeTrainingJob``'s answer: the request as sent plus the lifecycle fields."""
        shape = operation_model("sagemaker", "DescribeTrainingJob").output_shape
        out: dict[str, Any] = {k: copy.deepcopy(v) for k, v in job.params.items() if k in shape.members}
        output_path = (job.params.get("OutputDataConfig") or {}).get("S3OutputPath", "").rstrip("/")
        out.update(
            {
                "TrainingJobName": job.name,
                "TrainingJobArn": job.arn,
                "ModelArtifacts": {"S3ModelArtifacts": f"{output_path}/{job.name}/output/model.tar.gz"},
                "TrainingJobStatus": job.status,
                "SecondaryStatus": job.secondary,
                "CreationTime": job.created,
                "LastModifiedTime": job.modified or job.created,
                "SecondaryStatusTransitions": copy.deepcopy(job.transitions),
                "EnableNetworkIsolation": bool(job.params.get("EnableNetworkIsolation", False)),
                "EnableInterContainerTrafficEncryption": bool(job.params.get("EnableInterContainerTrafficEncryption", False)),
                "EnableManagedSpotTraining": bool(job.params.get("EnableManagedSpotTraining", False)),
            }
        )
        if job.started:
            out["TrainingStartTime"] = job.started
        if job.ended:
            out["TrainingEndTime"] = job.ended
            seconds = max(1, int((job.ended - (job.started or job.created)).total_seconds()))
            out["TrainingTimeInSeconds"] = seconds
            out["BillableTimeInSeconds"] = seconds
        if job.failure_reason:
            out["FailureReason"] = job.failure_reason
        if job.final_metrics:
            out["FinalMetricDataList"] = copy.deepcopy(job.final_metrics)
        return out


def metrics_from_log(params: Mapping[str, Any], lines: Iterable[str]) -> dict[str, float]:
    """Final metric values from log ``lines`` with the job's ``MetricDefinitions`` (last match wins)."""
    definitions = (params.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
    compiled = []
    for d in definitions:
        try:
            compiled.append((d["Name"], re.compile(d["Regex"])))
        except (KeyError, re.error):
            continue
    values: dict[str, float] = {}
    for line in lines:
        for metric, regex in compiled:
            match = regex.search(line)
            if match:
                try:
                    values[metric] = float(match.group(1))
                except (IndexError, ValueError):
                    continue
    return values


EXTENSION = SageMakerExtension()
"""The emulator process's SageMaker state."""


# --- moto response methods ------------------------------------------------------------------


def _checked_params(response: SageMakerResponse, operation: str) -> dict[str, Any]:
    params = dict(response.params or {})
    problems = validate_input("sagemaker", operation, params)
    if problems:
        raise ValidationError(message=f"{operation}: " + "; ".join(problems))
    return params


def _checked_result(operation: str, result: dict[str, Any]) -> ActionResult:
    problems = validate_output("sagemaker", operation, result)
    if problems:
        raise InternalFailure(f"emulator bug: {operation} response violates the service model: " + "; ".join(problems))
    return ActionResult(result)


def describe_training_plan(self: SageMakerResponse) -> ActionResult:
    params = _checked_params(self, "DescribeTrainingPlan")
    name = params["TrainingPlanName"]
    try:
        plan = EXTENSION.describe_plan(name)
    except KeyError:
        raise ResourceNotFound(message=f"Training plan {name} not found.") from None
    return _checked_result("DescribeTrainingPlan", plan)


_SUMMARY_KEYS = tuple(operation_model("sagemaker", "ListTrainingPlans").output_shape.members["TrainingPlanSummaries"].member.members)


def list_training_plans(self: SageMakerResponse) -> ActionResult:
    params = _checked_params(self, "ListTrainingPlans")
    now = datetime.now(timezone.utc)
    with EXTENSION.lock:
        plans = [EXTENSION.describe_plan(name, now) for name in EXTENSION.plans]
    for f in params.get("Filters") or []:
        if f["Name"] == "Status":
            plans = [p for p in plans if p["Status"] == f["Value"]]
    if params.get("StartTimeAfter"):
        plans = [p for p in plans if p["StartTime"] > params["StartTimeAfter"]]
    if params.get("StartTimeBefore"):
        plans = [p for p in plans if p["StartTime"] < params["StartTimeBefore"]]
    sort_by = params.get("SortBy", "StartTime")
    key = {"TrainingPlanName": lambda p: p["TrainingPlanName"], "Status": lambda p: p["Status"]}.get(
        sort_by, lambda p: p["StartTime"]
    )
    plans.sort(key=key, reverse=params.get("SortOrder", "Ascending") == "Descending")
    try:
        start = int(params.get("NextToken") or 0)
    except ValueError:
        raise ValidationError(message="Invalid NextToken") from None
    size = params.get("MaxResults") or 100
    page = plans[start : start + size]
    result: dict[str, Any] = {"TrainingPlanSummaries": [{k: p[k] for k in _SUMMARY_KEYS if k in p} for p in page]}
    if start + size < len(plans):
        result["NextToken"] = str(start + size)
    return _checked_result("ListTrainingPlans", result)


def search_training_plan_offerings(self: SageMakerResponse) -> ActionResult:
    params = _checked_params(self, "SearchTrainingPlanOfferings")
    instance_type = params.get("InstanceType")
    count = params.get("InstanceCount") or 1
    hours = int(params.get("DurationHours") or 24)
    now = datetime.now(timezone.utc)
    start = max(params.get("StartTimeAfter") or now, now)
    start = (start + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    end = start + timedelta(hours=hours)
    offerings: list[dict[str, Any]] = []
    before = params.get("EndTimeBefore")
    if instance_type and (before is None or end <= before):
        digest = hashlib.sha256(f"{instance_type}/{count}/{start.isoformat()}/{hours}".encode()).hexdigest()[:24]
        offerings.append(
            {
                "TrainingPlanOfferingId": f"tpo-{digest}",
                "TargetResources": list(params.get("TargetResources") or ["training-job"]),
                "RequestedStartTimeAfter": params.get("StartTimeAfter") or now,
                **({"RequestedEndTimeBefore": before} if before else {}),
                "DurationHours": hours,
                "DurationMinutes": 0,
                "CurrencyCode": "USD",
                "ReservedCapacityOfferings": [
                    {
                        "ReservedCapacityType": "Instance",
                        "InstanceType": instance_type,
                        "InstanceCount": count,
                        "AvailabilityZone": f"{self.region}a",
                        "DurationHours": hours,
                        "DurationMinutes": 0,
                        "StartTime": start,
                        "EndTime": end,
                    }
                ],
            }
        )
    return _checked_result("SearchTrainingPlanOfferings", {"TrainingPlanOfferings": offerings})


def create_training_job(self: SageMakerResponse) -> ActionResult:
    params = _checked_params(self, "CreateTrainingJob")
    name = params.get("TrainingJobName")
    backend = self.sagemaker_backend
    resource = params.get("ResourceConfig") or {}
    stopping = params.get("StoppingCondition") or {}
    spot = bool(params.get("EnableManagedSpotTraining"))
    plan_arn = resource.get("TrainingPlanArn")
    if spot and "MaxWaitTimeInSeconds" not in stopping:
        raise ValidationError(message="MaxWaitTimeInSeconds is required when EnableManagedSpotTraining is true.")
    if not spot and "MaxWaitTimeInSeconds" in stopping:
        raise ValidationError(message="MaxWaitTimeInSeconds can be set only when EnableManagedSpotTraining is true.")
    if spot and stopping.get("MaxWaitTimeInSeconds", 0) < stopping.get("MaxRuntimeInSeconds", 0):
        raise ValidationError(message="MaxWaitTimeInSeconds must be greater than or equal to MaxRuntimeInSeconds.")
    if plan_arn:
        if spot:
            raise ValidationError(message="Managed spot training cannot be used with a training plan.")
        plan_name = plan_arn.rsplit("/", 1)[-1]
        try:
            plan = EXTENSION.describe_plan(plan_name)
        except KeyError:
            raise ValidationError(message=f"Training plan {plan_arn} does not exist.") from None
        types = {s["InstanceType"] for s in plan.get("ReservedCapacitySummaries", [])}
        if resource.get("InstanceType") not in types:
            raise ValidationError(
                message=f"Instance type {resource.get('InstanceType')} does not match training plan {plan_arn} ({', '.join(sorted(types))})."
            )
        if plan["Status"] not in ("Active", "Scheduled") or "training-job" not in plan.get("TargetResources", []):
            raise ValidationError(message=f"Training plan {plan_arn} is {plan['Status']} and cannot run training jobs.")
    now = datetime.now(timezone.utc)
    with EXTENSION.lock:
        if name in backend.training_jobs:
            raise ResourceInUseException(
                message=f"Training job names must be unique within an AWS account and region, and a training job "
                f"with this name already exists ({backend.training_jobs[name].arn})"
            )
        job = backend.create_training_job(
            training_job_name=name,
            hyper_parameters=copy.deepcopy(params.get("HyperParameters")),
            algorithm_specification=copy.deepcopy(params.get("AlgorithmSpecification")),
            role_arn=params.get("RoleArn"),
            input_data_config=copy.deepcopy(params.get("InputDataConfig")),
            output_data_config=copy.deepcopy(params.get("OutputDataConfig")),
            resource_config=copy.deepcopy(resource),
            vpc_config=copy.deepcopy(params.get("VpcConfig")),
            stopping_condition=copy.deepcopy(stopping),
            tags=copy.deepcopy(params.get("Tags")),
            enable_network_isolation=params.get("EnableNetworkIsolation", False),
            enable_inter_container_traffic_encryption=params.get("EnableInterContainerTrafficEncryption", False),
            enable_managed_spot_training=spot,
            checkpoint_config=copy.deepcopy(params.get("CheckpointConfig")),
            debug_hook_config=copy.deepcopy(params.get("DebugHookConfig")),
            debug_rule_configurations=copy.deepcopy(params.get("DebugRuleConfigurations")),
            tensor_board_output_config=copy.deepcopy(params.get("TensorBoardOutputConfig")),
            experiment_config=copy.deepcopy(params.get("ExperimentConfig")),
        )
        job.training_job_status = "InProgress"
        job.secondary_status = "Starting"
        record = JobRecord(
            account=backend.account_id,
            region=backend.region_name,
            name=name,
            arn=job.arn,
            params=copy.deepcopy(params),
            created=now,
        )
        pending = plan_arn and EXTENSION.describe_plan(plan_arn.rsplit("/", 1)[-1], now)["Status"] == "Scheduled"
        if pending:
            record.move("Pending", "Waiting for the training plan to start", now)
        else:
            record.move("Starting", "Launching requested ML instances", now)
        EXTENSION.jobs[(record.account, record.region, name)] = record
    return ActionResult({"TrainingJobArn": job.arn})


def _record(self: SageMakerResponse, name: str) -> JobRecord:
    record = EXTENSION.jobs.get((self.sagemaker_backend.account_id, self.sagemaker_backend.region_name, name))
    if record is None:
        arn = f"arn:aws:sagemaker:{self.region}:{self.current_account}:training-job/{name}"
        raise ValidationError(message=f"Requested resource not found: training job {arn}")
    return record


def describe_training_job(self: SageMakerResponse) -> ActionResult:
    name = self._get_param("TrainingJobName")
    with EXTENSION.lock:
        result = EXTENSION.describe_job(_record(self, name))
    return _checked_result("DescribeTrainingJob", result)


def stop_training_job(self: SageMakerResponse) -> EmptyResult:
    name = self._get_param("TrainingJobName")
    with EXTENSION.lock:
        record = _record(self, name)
        if record.status != "InProgress":
            raise ValidationError(message=f"The training job {name} is {record.status} and cannot be stopped.")
        EXTENSION.set_job_status(name, "Stopping")
    return EmptyResult()


def sync_moto_status(backend: Any, record: JobRecord) -> None:
    """Keep moto's own job object (``ListTrainingJobs``, ``Search``) in step with the record."""
    job = backend.training_jobs.get(record.name)
    if job is not None:
        job.training_job_status = record.status
        job.secondary_status = record.secondary
        job.last_modified_time = record.modified or record.created
        if record.ended:
            job.training_end_time = record.ended


_PATCHES = {
    "describe_training_plan": describe_training_plan,
    "list_training_plans": list_training_plans,
    "search_training_plan_offerings": search_training_plan_offerings,
    "create_training_job": create_training_job,
    "describe_training_job": describe_training_job,
    "stop_training_job": stop_training_job,
}


def install() -> None:
    """Patch moto's ``SageMakerResponse`` with the methods above (idempotent; emulator process only)."""
    for name, function in _PATCHES.items():
        setattr(SageMakerResponse, name, function)
