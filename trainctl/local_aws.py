"""``trainctl local-aws``: an AWS *emulator* for tests and demos (moto + training plans).

It is not AWS, and it is a development tool: moto is the project's optional
extra ``local`` (``pip install .[local]``, which ``make test`` and ``make
demo`` install), imported only when the emulator starts; without it,
:class:`LocalAws` and ``trainctl local-aws`` fail with one line saying so
(:class:`EmulatorUnavailable`). It runs moto's server on ``127.0.0.1`` with the extensions in
:mod:`trainctl.local_aws_sagemaker` (training-plan operations checked against
botocore's service model; training jobs described as they were sent, with a
lifecycle tests drive), and creates what the deployed stack would:

* buckets for data, checkpoints and output,
* the SSM String parameter holding the seeded plans' ARNs (JSON list),
* the SageMaker execution role and the trainer's ECR repository,
* the training plans from ``--plans FILE`` (a JSON list of objects shaped like
  ``DescribeTrainingPlan``'s response, see
  :meth:`~trainctl.local_aws_sagemaker.SageMakerExtension.seed_plans`).

``--env-file FILE`` receives ``export`` lines (endpoint, region, dummy
credentials, and the function's environment, :func:`function_environment`:
what the construct sets on the deployed function, from the same function)
under which ``trainctl submit --local`` runs against the emulator.

Emulator-only admin endpoints under ``/_local-aws/`` (JSON):

=======  ===========================================  ======================================================
GET      ``/_local-aws/health``                       ``{"ok": true}``
GET      ``/_local-aws/calls[?operation=Op]``         requests seen (JSON-protocol operations with params)
DELETE   ``/_local-aws/calls``                        forget them
POST     ``/_local-aws/faults``                       ``{"operation", "code", "count"?, "message"?, "match"?}``:
                                                      answer the next ``count`` (default 1, -1 = always) calls
                                                      of ``operation`` with error ``code`` (e.g.
                                                      ``ThrottlingException``, ``ResourceLimitExceeded``,
                                                      ``InternalFailure``, ``ServiceUnavailable``); ``match``
                                                      limits it to requests whose dotted fields equal the
                                                      given values (``null``: absent)
DELETE   ``/_local-aws/faults``                       remove every fault
GET      ``/_local-aws/training-jobs``                every job's name and status
POST     ``/_local-aws/training-jobs/NAME/status``    ``{"status", "secondary_status"?, "failure_reason"?,
                                                      "final_metrics"?, "log_lines"?}``: drive the lifecycle;
                                                      log lines go to CloudWatch Logs
                                                      (``/aws/sagemaker/TrainingJobs``) and their metrics,
                                                      matched with the job's ``MetricDefinitions``, to
                                                      CloudWatch (``/aws/sagemaker/TrainingJobs``,
                                                      dimension ``TrainingJobName``) and
                                                      ``FinalMetricDataList``
POST     ``/_local-aws/training-jobs/complete-active``  mark every running job ``Completed`` (frees plans)
GET/PUT  ``/_local-aws/training-plans``               the plans as described now / replace the seeded plans
                                                      (and the SSM parameter)
GET/PUT  ``/_local-aws/run-jobs``                     ``{"enabled": bool}``: whether jobs created from now on run
                                                      (:mod:`trainctl.local_aws_jobs`)
GET      ``/_local-aws/events[?job=NAME]``            the job state-change events emitted, each with its bus
                                                      status and its deliveries to the event targets
POST     ``/_local-aws/events/ID/redeliver``          ``{"targets"?: [...]}``: deliver event ``ID`` again
                                                      (duplicate / out-of-order delivery)
=======  ===========================================  ======================================================

``--run-jobs`` executes the jobs it accepts on this machine's CPU and ``--event-target
module:function`` receives every job state-change event: see :mod:`trainctl.local_aws_jobs` for
what is emulated and what is not.

Python API: :class:`LocalAws` starts the emulator in a child process (so its
moto state never mixes with a test's own moto mocks) and wraps the admin
endpoints::

    with LocalAws(plans=[...]) as aws:
        os.environ.update(aws.env)       # or pass aws.env to submit_local()
        ...
        aws.set_job_status("my-job", "Completed", final_metrics={"train:loss": 2.1})
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import select
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from platform_spec.capacity import DEFAULT_CAPACITY_FALLBACK
from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE
from platform_spec.files import atomic_write_text
from platform_spec.runs import TERMINAL_JOB_STATUSES

DEFAULT_REGION = "us-east-1"
ACCOUNT_ID = "123456789012"
"""moto's default account (dummy credentials map to it)."""
ADMIN_PREFIX = "/_local-aws"
READY_MARKER = "LOCAL_AWS_READY "
SAGEMAKER_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
SAGEMAKER_METRICS_NAMESPACE = "/aws/sagemaker/TrainingJobs"
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}


@dataclass(frozen=True)
class StackResources:
    """Names of what the emulator creates in place of the deployed stack, and the tags its jobs get."""

    data_bucket: str = "training-platform-data-local"
    checkpoint_bucket: str = "training-platform-checkpoints-local"
    output_bucket: str = "training-platform-output-local"
    plan_arns_parameter: str = "/training-platform/local/training-plan-arns"
    execution_role_name: str = "training-platform-sagemaker-execution"
    trainer_repository: str = "training-platform/trainer"
    platform_tags: Mapping[str, str] = field(
        default_factory=lambda: {"platform": "training-platform", "environment": "local"}
    )

    def execution_role_arn(self) -> str:
        return f"arn:aws:iam::{ACCOUNT_ID}:role/{self.execution_role_name}"

    def trainer_image_uri(self, region: str) -> str:
        return f"{ACCOUNT_ID}.dkr.ecr.{region}.amazonaws.com/{self.trainer_repository}:local"


def function_environment(region: str, resources: StackResources) -> dict[str, str]:
    """The submitter function's environment in the emulator.

    What the deployed function gets, from the same function the construct calls
    (:func:`platform_constructs.submitter.runtime.settings.function_environment`), with the
    emulator's resources, its account, and the stack's defaults: the default instance type
    (:data:`platform_spec.catalogue.DEFAULT_INSTANCE_TYPE`), the allowed instance types
    (:func:`platform_constructs.submitter.runtime.config.default_allowed_instance_types`) and the
    capacity order (:data:`platform_spec.capacity.DEFAULT_CAPACITY_FALLBACK`).
    """
    from platform_constructs.submitter.runtime import config, settings

    return settings.function_environment(
        trainer_image_uri=resources.trainer_image_uri(region),
        execution_role_arn=resources.execution_role_arn(),
        data_bucket=resources.data_bucket,
        checkpoint_bucket=resources.checkpoint_bucket,
        output_bucket=resources.output_bucket,
        plan_arns_parameter=resources.plan_arns_parameter,
        account_id=ACCOUNT_ID,
        default_instance_type=DEFAULT_INSTANCE_TYPE,
        allowed_instance_types=config.default_allowed_instance_types(),
        capacity_fallback=DEFAULT_CAPACITY_FALLBACK,
        platform_tags=resources.platform_tags,
    )


def submitter_environment(endpoint: str, region: str, resources: StackResources) -> dict[str, str]:
    """Environment for the submitter (and any boto3 code) against the emulator.

    ``AWS_ENDPOINT_URL``, the region (``AWS_REGION``, which Lambda sets, and
    ``AWS_DEFAULT_REGION``), dummy credentials, then :func:`function_environment`.
    """
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        **DUMMY_CREDENTIALS,
        **function_environment(region, resources),
    }


def write_env_file(path: str | os.PathLike[str], env: Mapping[str, str]) -> None:
    """Write ``export NAME=value`` lines (shell-quoted) for ``source``.

    Creates the parent folder; the file is replaced whole (written beside it,
    then renamed), so a reader never sources half of it.

    Raises:
        OSError: the folder or the file cannot be written.
    """
    lines = ["# trainctl local-aws: environment for `trainctl submit --local` (an emulator, not AWS)"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, "\n".join(lines) + "\n")


class ListenError(OSError):
    """The emulator cannot listen on the address it was given (port in use, not an address of this machine)."""


MOTO_MISSING = (
    "the AWS emulator needs moto, which is not installed: it is a development tool, "
    "installed with the project's extra `local` (pip install .[local]; make test and make demo do it)"
)


class EmulatorUnavailable(ImportError):
    """moto (the project's optional extra ``local``) cannot be imported, so the emulator cannot run.

    An ``ImportError`` (a missing optional dependency) whose message is one line naming
    ``pip install .[local]``.
    """


def require_moto() -> None:
    """Check that moto can be found, without importing it (that takes half a second).

    Raises:
        EmulatorUnavailable: moto is not installed (the extra ``local`` is missing).
    """
    import importlib.util

    try:
        found = importlib.util.find_spec("moto") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise EmulatorUnavailable(MOTO_MISSING)


# --- the WSGI layer: admin endpoints, fault injection, call log ----------------------------------

_DEFAULT_FAULTS = {
    "ThrottlingException": (400, "Rate exceeded"),
    "ResourceLimitExceeded": (400, None),
    "InternalFailure": (500, "We encountered an internal error. Please try again."),
    "ServiceUnavailable": (503, "The service is unavailable. Please try again."),
}


class EmulatorApp:
    """WSGI app: ``/_local-aws/`` admin endpoints, injected faults, then moto."""

    def __init__(self, moto_app: Any, *, region: str, resources: StackResources) -> None:
        self.moto_app = moto_app
        self.region = region
        self.resources = resources
        self.endpoint = ""
        self.lock = threading.Lock()
        self.faults: list[dict[str, Any]] = []
        self.calls: deque[dict[str, Any]] = deque(maxlen=20000)
        self.runner: Any = None  # trainctl.local_aws_jobs.JobRunner, set by serve()
        self.events: Any = None  # trainctl.local_aws_jobs.EventBus, set by serve()
        self._clients: dict[str, Any] = {}
        self._session: Any = None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path.startswith(ADMIN_PREFIX + "/"):
            return self._admin(environ, start_response)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target:
            body = self._body(environ)
            service, _, operation = target.rpartition(".")
            try:
                params = json.loads(body or b"{}")
            except json.JSONDecodeError:
                params = {}
            with self.lock:
                self.calls.append({"service": service, "operation": operation, "params": params, "time": time.time()})
                fault = self._take_fault(operation, params)
            if fault is not None:
                return self._error(start_response, fault, operation, params)
        else:
            with self.lock:
                self.calls.append({"method": environ.get("REQUEST_METHOD"), "path": path, "time": time.time()})
        return self.moto_app(environ, start_response)

    @staticmethod
    def _body(environ: dict[str, Any]) -> bytes:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        return body

    def _take_fault(self, operation: str, params: dict[str, Any]) -> dict[str, Any] | None:
        for fault in self.faults:
            if fault["operation"] != operation or not _matches(params, fault.get("match") or {}):
                continue
            if fault["count"] > 0:
                fault["count"] -= 1
                if fault["count"] == 0:
                    self.faults.remove(fault)
            return fault
        return None

    def _error(self, start_response: Any, fault: dict[str, Any], operation: str, params: dict[str, Any]) -> list[bytes]:
        code = fault["code"]
        status, message = _DEFAULT_FAULTS.get(code, (400, None))
        status = fault.get("status") or status
        message = fault.get("message") or message or _limit_message(params)
        body = json.dumps({"__type": code, "message": message}).encode()
        start_response(
            f"{status} Injected",
            [
                ("Content-Type", "application/x-amz-json-1.1"),
                ("x-amzn-ErrorType", code),
                ("x-amzn-RequestId", str(uuid.uuid4())),
                ("Content-Length", str(len(body))),
            ],
        )
        return [body]

    # admin ----------------------------------------------------------------------------------

    def _admin(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        from urllib.parse import parse_qs, unquote

        from trainctl.local_aws_sagemaker import EXTENSION, TransitionError

        method = environ.get("REQUEST_METHOD", "GET")
        parts = [unquote(p) for p in environ["PATH_INFO"][len(ADMIN_PREFIX) + 1 :].split("/") if p]
        query = parse_qs(environ.get("QUERY_STRING", ""))
        try:
            payload = json.loads(self._body(environ) or b"null")
        except json.JSONDecodeError as exc:
            return _json(start_response, 400, {"error": f"body is not JSON: {exc}"})
        try:
            if parts == ["health"]:
                return _json(start_response, 200, {"ok": True})
            if parts == ["calls"] and method == "GET":
                wanted = query.get("operation", [None])[0]
                with self.lock:
                    calls = [c for c in self.calls if wanted is None or c.get("operation") == wanted]
                return _json(start_response, 200, {"calls": calls})
            if parts == ["calls"] and method == "DELETE":
                with self.lock:
                    self.calls.clear()
                return _json(start_response, 200, {"ok": True})
            if parts == ["faults"] and method == "POST":
                fault = _fault(payload)
                with self.lock:
                    self.faults.append(fault)
                return _json(start_response, 200, {"fault": fault})
            if parts == ["faults"] and method == "GET":
                with self.lock:
                    return _json(start_response, 200, {"faults": list(self.faults)})
            if parts == ["faults"] and method == "DELETE":
                with self.lock:
                    self.faults.clear()
                return _json(start_response, 200, {"ok": True})
            if parts == ["training-jobs"] and method == "GET":
                with EXTENSION.lock:
                    jobs = [
                        {"name": j.name, "status": j.status, "secondary_status": j.secondary}
                        for j in EXTENSION.jobs.values()
                    ]
                return _json(start_response, 200, {"training_jobs": jobs})
            if parts == ["training-jobs", "complete-active"] and method == "POST":
                with EXTENSION.lock:
                    ends = {"InProgress": "Completed", "Stopping": "Stopped"}
                    holding = [(j.name, ends[j.status]) for j in EXTENSION.jobs.values() if j.status in ends]
                    for name, status in holding:
                        EXTENSION.set_job_status(name, status)
                    names = [name for name, _ in holding]
                return _json(start_response, 200, {"completed": names})
            if len(parts) == 3 and parts[0] == "training-jobs" and parts[2] == "status" and method == "POST":
                return self._set_status(start_response, parts[1], payload)
            if parts == ["events"] and method == "GET":
                job = query.get("job", [None])[0]
                return _json(start_response, 200, {"events": self.events.snapshot(job) if self.events else []})
            if len(parts) == 3 and parts[0] == "events" and parts[2] == "redeliver" and method == "POST":
                if self.events is None:
                    raise KeyError("event bus (the emulator has none)")
                targets = (payload or {}).get("targets") if isinstance(payload, dict) else None
                if targets is not None and (
                    not isinstance(targets, list) or not all(isinstance(t, str) for t in targets)
                ):
                    raise ValueError("targets: expected a list of event target names (module:function)")
                return _json(start_response, 200, {"deliveries": self.events.redeliver(parts[1], targets)})
            if parts == ["run-jobs"] and method == "GET":
                return _json(start_response, 200, {"enabled": bool(self.runner and self.runner.enabled)})
            if parts == ["run-jobs"] and method == "PUT":
                if not isinstance(payload, dict) or not isinstance(payload.get("enabled"), bool):
                    raise ValueError('expected {"enabled": true|false}')
                if self.runner is None:
                    raise KeyError("job runner (the emulator has none)")
                self.runner.enabled = payload["enabled"]
                return _json(start_response, 200, {"enabled": self.runner.enabled})
            if parts == ["training-plans"] and method == "GET":
                with EXTENSION.lock:
                    plans = [EXTENSION.describe_plan(n) for n in EXTENSION.plans]
                return _json(start_response, 200, {"training_plans": plans})
            if parts == ["training-plans"] and method == "PUT":
                arns = self.seed_plans(payload)
                return _json(start_response, 200, {"training_plan_arns": arns})
        except (TransitionError, ValueError, TypeError) as exc:
            return _json(start_response, 400, {"error": str(exc)})
        except KeyError as exc:
            return _json(start_response, 404, {"error": f"not found: {exc}"})
        return _json(start_response, 404, {"error": f"no admin endpoint {method} {environ['PATH_INFO']}"})

    def _set_status(self, start_response: Any, name: str, payload: Any) -> list[bytes]:
        from trainctl.local_aws_sagemaker import EXTENSION

        if not isinstance(payload, dict) or not isinstance(payload.get("status"), str):
            raise ValueError('expected {"status": "InProgress|Completed|Failed|Stopping|Stopped", ...}')
        lines = payload.get("log_lines") or []
        if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
            raise ValueError("log_lines: expected a list of strings")
        job = EXTENSION.set_job_status(
            name,
            payload["status"],
            secondary_status=payload.get("secondary_status"),
            failure_reason=payload.get("failure_reason"),
            final_metrics=payload.get("final_metrics"),
            log_lines=lines,
        )
        if lines:
            self.publish_logs(job, lines)
        return _json(
            start_response,
            200,
            {
                "name": job.name,
                "status": job.status,
                "secondary_status": job.secondary,
                "failure_reason": job.failure_reason,
            },
        )

    def publish_logs(self, job: Any, lines: Sequence[str], times: Sequence[float] | None = None) -> None:
        """Put ``lines`` in CloudWatch Logs and their metrics in CloudWatch, as SageMaker does.

        Group ``/aws/sagemaker/TrainingJobs``, stream ``<job>/algo-1-<creation epoch>``; metrics
        matched with the job's ``MetricDefinitions`` go to namespace ``/aws/sagemaker/TrainingJobs``,
        dimension ``TrainingJobName``. ``times`` (epoch seconds, one per line): when each line was
        seen, the timestamp of its log event and its datapoints (default: now).
        """
        from trainctl.local_aws_sagemaker import metrics_from_log

        if not lines:
            return
        logs, cloudwatch = self.client("logs"), self.client("cloudwatch")
        stream = f"{job.name}/algo-1-{int(job.created.timestamp())}"
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            logs.create_log_group(logGroupName=SAGEMAKER_LOG_GROUP)
        with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
            logs.create_log_stream(logGroupName=SAGEMAKER_LOG_GROUP, logStreamName=stream)
        now = time.time()
        seen = list(times) if times is not None else [now] * len(lines)
        events = [{"timestamp": int(t * 1000), "message": line or " "} for t, line in zip(seen, lines, strict=True)]
        for start in range(0, len(events), 1000):  # PutLogEvents takes at most 10,000 events a call
            logs.put_log_events(
                logGroupName=SAGEMAKER_LOG_GROUP, logStreamName=stream, logEvents=events[start : start + 1000]
            )
        data = []
        for t, line in zip(seen, lines, strict=True):
            for name, value in metrics_from_log(job.params, [line]).items():
                data.append(
                    {
                        "MetricName": name,
                        "Value": value,
                        "Timestamp": datetime.fromtimestamp(t, tz=UTC),
                        "Dimensions": [{"Name": "TrainingJobName", "Value": job.name}],
                    }
                )
        for start in range(0, len(data), 500):
            cloudwatch.put_metric_data(Namespace=SAGEMAKER_METRICS_NAMESPACE, MetricData=data[start : start + 500])

    def client(self, service: str) -> Any:
        """A boto3 client of the emulator's own endpoint (one per service, shared by threads: boto3
        clients are thread-safe once made, their creation is not, so it happens under a lock)."""
        with self.lock:
            client = self._clients.get(service)
            if client is None:
                import boto3

                if self._session is None:
                    self._session = boto3.session.Session()
                client = self._clients[service] = self._session.client(
                    service,
                    endpoint_url=self.endpoint,
                    region_name=self.region,
                    aws_access_key_id="testing",
                    aws_secret_access_key="testing",
                )
            return client

    # stack ----------------------------------------------------------------------------------

    def seed_plans(self, plans: Any) -> list[str]:
        """Replace the training plans and rewrite the plan-ARN SSM parameter."""
        from trainctl.local_aws_sagemaker import EXTENSION

        if not isinstance(plans, list):
            raise ValueError(
                "training plans: expected a JSON list of objects shaped like DescribeTrainingPlan's response"
            )
        arns = EXTENSION.seed_plans(plans, account=ACCOUNT_ID, region=self.region)
        self.client("ssm").put_parameter(
            Name=self.resources.plan_arns_parameter, Type="String", Value=json.dumps(arns), Overwrite=True
        )
        return arns

    def create_stack(self, plans: list[Any]) -> list[str]:
        """Create the buckets, role, repository, plans and SSM parameter the stack would."""
        s3 = self.client("s3")
        for bucket in (self.resources.data_bucket, self.resources.checkpoint_bucket, self.resources.output_bucket):
            kwargs: dict[str, Any] = {}
            if self.region != "us-east-1":
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
            s3.create_bucket(Bucket=bucket, **kwargs)
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
        trust = {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}
            ],
        }
        self.client("iam").create_role(
            RoleName=self.resources.execution_role_name, AssumeRolePolicyDocument=json.dumps(trust)
        )
        self.client("ecr").create_repository(repositoryName=self.resources.trainer_repository)
        return self.seed_plans(plans)


def _matches(params: Mapping[str, Any], match: Mapping[str, Any]) -> bool:
    for dotted, expected in match.items():
        value: Any = params
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, Mapping) else None
        if value != expected:
            return False
    return True


def _fault(payload: Any) -> dict[str, Any]:
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("operation"), str)
        or not isinstance(payload.get("code"), str)
    ):
        raise ValueError('expected {"operation": "CreateTrainingJob", "code": "ThrottlingException", "count": 1}')
    count = payload.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count == 0 or count < -1:
        raise ValueError("count: expected a positive integer or -1 (always)")
    match = payload.get("match") or {}
    if not isinstance(match, dict):
        raise ValueError("match: expected an object of dotted field -> value")
    status = payload.get("status")
    if status is not None and (not isinstance(status, int) or not 400 <= status <= 599):
        raise ValueError("status: expected an HTTP error status 400-599")
    return {
        "operation": payload["operation"],
        "code": payload["code"],
        "count": count,
        "message": payload.get("message"),
        "match": match,
        "status": status,
    }


def _limit_message(params: Mapping[str, Any]) -> str:
    """SageMaker's ResourceLimitExceeded wording, naming the quota for the request's instance type."""
    resource = params.get("ResourceConfig") or {}
    instance_type = resource.get("InstanceType", DEFAULT_INSTANCE_TYPE)
    count = resource.get("InstanceCount", 1)
    usage = "spot training job usage" if params.get("EnableManagedSpotTraining") else "training job usage"
    return (
        f"The account-level service limit '{instance_type} for {usage}' is 0 Instances, with current utilization "
        f"of 0 Instances and a request delta of {count} Instances. Please use AWS Service Quotas to request an "
        "increase for this quota. If AWS Service Quotas is not available, contact AWS support to request an "
        "increase for this quota."
    )


def _json(start_response: Any, status: int, payload: Any) -> list[bytes]:
    body = json.dumps(payload, default=_json_default).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
    start_response(f"{status} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _json_default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


# --- the server ------------------------------------------------------------------------------


def load_plans(path: str | os.PathLike[str] | None) -> list[Any]:
    """The JSON list of plans in ``path`` (``None``: no plans).

    Raises:
        ValueError: the file is not a JSON list.
    """
    if path is None:
        return []
    data = json.loads(Path(path).read_text())
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of objects shaped like DescribeTrainingPlan's response")
    return data


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    plans: list[Any] | None = None,
    region: str = DEFAULT_REGION,
    env_file: str | os.PathLike[str] | None = None,
    quiet: bool = False,
    stop: threading.Event | None = None,
    run_jobs: bool = False,
    event_targets: Sequence[str] = (),
    state_dir: str | os.PathLike[str] | None = None,
    job_processes: int | None = None,
) -> int:
    """Run the emulator in the foreground until ``stop`` is set (or SIGINT / SIGTERM).

    Prints one line ``LOCAL_AWS_READY {json}`` on stdout once the stack is
    created (``endpoint``, ``region``, ``env``, ``resources``,
    ``training_plan_arns``, ``state_dir``), and a human summary on stderr.

    Args:
        run_jobs: execute the training jobs it accepts (:mod:`trainctl.local_aws_jobs`); off, a job
            stays as created and tests drive it (``POST /_local-aws/training-jobs/NAME/status``).
        event_targets: ``module:function`` targets of every job state-change event, imported once
            listening, after the process's environment was set to the submitter's
            (:func:`submitter_environment`: they run like the deployed functions).
        state_dir: where executed jobs' ``/opt/ml`` folders go (default: a temporary folder,
            removed when the emulator stops).
        job_processes: ``TRAINER_NPROC_PER_NODE`` of executed jobs (default
            :data:`trainctl.local_aws_jobs.JOB_PROCESSES`).

    Raises:
        EmulatorUnavailable: moto (the extra ``local``) is not installed.
        ListenError: it cannot listen on ``host:port`` (in use, not an address of this machine).
        OSError: ``env_file`` cannot be written.
        trainctl.local_aws_jobs.TargetError: an event target cannot be imported.
    """
    import logging
    import signal
    import socket

    require_moto()
    os.environ.update(DUMMY_CREDENTIALS)  # moto maps these to its default account
    try:  # moto and its server's dependencies are the extra `local`, imported only here
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server, select_address_family

        from trainctl.local_aws_jobs import JOB_PROCESSES, EventBus, JobRunner, load_target
        from trainctl.local_aws_sagemaker import EXTENSION, install
    except ImportError as exc:
        raise EmulatorUnavailable(f"{MOTO_MISSING} ({exc})") from None

    install()
    if quiet:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    resources = StackResources()
    app = EmulatorApp(DomainDispatcherApplication(create_backend_app), region=region, resources=resources)
    # bind here: werkzeug's make_server prints and exits the process when it cannot bind
    try:
        listener = socket.create_server((host, port), family=select_address_family(host, port))
    except (OSError, OverflowError) as exc:  # OverflowError: a port outside 0-65535
        reason = (getattr(exc, "strerror", None) or str(exc)).split(" (while attempting to bind")[0]
        raise ListenError(f"cannot listen on {host}:{port}: {reason}") from None
    with listener:
        server = make_server(host, port, app, threaded=True, request_handler=MotoRequestHandler, fd=listener.fileno())
    bound_port = server.server_address[1]
    app.endpoint = f"http://{host}:{bound_port}"
    thread = threading.Thread(target=server.serve_forever, name="local-aws", daemon=True)
    thread.start()
    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
    own_state = state_dir is None
    state = Path(tempfile.mkdtemp(prefix="local-aws-state-")) if state_dir is None else Path(state_dir)
    try:
        arns = app.create_stack(plans or [])
        env = submitter_environment(app.endpoint, region, resources)
        targets = []
        if event_targets:
            os.environ.update(env)  # the targets run like the deployed functions, with their environment
            targets = [(spec, load_target(spec)) for spec in event_targets]
        app.events = EXTENSION.events = EventBus(
            lambda entries: app.client("events").put_events(Entries=entries),
            targets,
            account=ACCOUNT_ID,
            region=region,
        )
        state.mkdir(parents=True, exist_ok=True)
        app.runner = EXTENSION.runner = JobRunner(
            app, EXTENSION, state, enabled=run_jobs, processes=job_processes or JOB_PROCESSES
        )
        if env_file:
            write_env_file(env_file, env)
        info = {
            "endpoint": app.endpoint,
            "region": region,
            "env": env,
            "resources": asdict(resources),
            "training_plan_arns": arns,
            "state_dir": str(state),
        }
        print(READY_MARKER + json.dumps(info), flush=True)
        print(
            f"local-aws (an AWS emulator: moto + training plans) listening on {app.endpoint}, region {region}\n"
            f"  {len(arns)} training plan(s) seeded; SSM parameter {resources.plan_arns_parameter}\n"
            + (
                f"  environment written to {env_file} (source it, then `trainctl submit --local REQUEST.json`)\n"
                if env_file
                else ""
            )
            + "  stop with Ctrl-C",
            file=sys.stderr,
            flush=True,
        )
        stop.wait()
    finally:
        if app.runner is not None:
            app.runner.shutdown()  # no job process outlives the emulator
        server.shutdown()
        thread.join(timeout=10)
        if app.events is not None:
            app.events.close()
        EXTENSION.runner = EXTENSION.events = None
        if own_state:
            import shutil

            shutil.rmtree(state, ignore_errors=True)
    return 0


PROG = "trainctl local-aws"


def run_emulator(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    plans_file: str | os.PathLike[str] | None = None,
    region: str = DEFAULT_REGION,
    env_file: str | os.PathLike[str] | None = None,
    quiet: bool = False,
    run_jobs: bool = False,
    event_targets: Sequence[str] = (),
    state_dir: str | os.PathLike[str] | None = None,
    job_processes: int | None = None,
) -> int:
    """``trainctl local-aws``: :func:`serve` in the foreground, every failure one line on stderr.

    The checks come first, in this order, so that nothing is created or left listening when one fails:
    moto installed (the extra ``local``), ``plans_file`` readable and a JSON list, ``env_file``'s folder
    creatable and ``env_file`` not a folder, each event target ``module:function`` with a module that
    can be found (imported once listening), ``job_processes`` positive.

    Args:
        host, port, region, quiet, run_jobs, event_targets, state_dir, job_processes: as :func:`serve`
            (``port`` 0: any free port).
        plans_file: a JSON list of plans shaped like ``DescribeTrainingPlan``'s response (``None``: none).
        env_file: where to write the ``export`` lines once listening (its folder is created).

    Returns:
        0 once stopped (SIGINT / SIGTERM); 2 after one line ``trainctl local-aws: <why>`` on stderr when
        moto is missing, a plan or ``plans_file`` is malformed, ``host:port`` cannot be listened on,
        or ``env_file`` cannot be written.
    """
    try:
        require_moto()  # first: nothing else matters without it
    except EmulatorUnavailable as exc:
        return _fail(str(exc))
    try:
        plans = load_plans(plans_file)
    except (OSError, ValueError) as exc:
        return _fail(f"--plans {plans_file}: {exc}")
    if env_file:
        # before listening: a bad path fails now, not after the emulator has started
        target = Path(env_file)
        try:
            if target.is_dir():
                raise IsADirectoryError(f"{target} is a folder; expected a file path")
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            return _fail(f"--env-file {env_file}: {exc}")
    for spec in event_targets:
        problem = _target_problem(spec)
        if problem:
            return _fail(f"--event-target {spec!r}: {problem}")
    if job_processes is not None and (isinstance(job_processes, bool) or job_processes < 1):
        return _fail(f"--job-processes {job_processes}: expected a positive integer")
    try:
        return serve(
            host=host,
            port=port,
            plans=plans,
            region=region,
            env_file=env_file,
            quiet=quiet,
            run_jobs=run_jobs,
            event_targets=event_targets,
            state_dir=state_dir,
            job_processes=job_processes,
        )
    except EmulatorUnavailable as exc:  # moto found but not importable (a dependency of its server missing)
        return _fail(str(exc))
    except ValueError as exc:  # a plan that does not fit DescribeTrainingPlan's shape; an event target's import
        return _fail(str(exc))
    except ListenError as exc:  # port in use, not an address of this machine
        return _fail(str(exc))
    except OSError as exc:  # the env file (the only other file it writes)
        return _fail(f"--env-file {env_file}: cannot write it: {exc}")


def _target_problem(spec: str) -> str | None:
    """Why ``spec`` cannot be an event target, found without importing its module; None if it may be."""
    import importlib.util

    module, sep, function = spec.partition(":")
    if not sep or not module or not function:
        return "expected module:function (e.g. package.module:lambda_handler)"
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError) as exc:
        return f"cannot find module {module}: {exc}"
    return None if found else f"no module named {module}"


def _fail(message: str) -> int:
    print(f"{PROG}: {message}", file=sys.stderr)
    return 2


# --- the Python API --------------------------------------------------------------------------

_BOOT = (
    "import json, sys; from trainctl.local_aws import run_emulator; sys.exit(run_emulator(**json.loads(sys.argv[1])))"
)
"""The child process of :class:`LocalAws`: :func:`run_emulator` with keyword arguments as one JSON object."""


class LocalAws:
    """The emulator in a child process, as a context manager.

    Args:
        port: TCP port on ``host`` (0: any free port).
        plans: plans to seed: a list of objects shaped like
            ``DescribeTrainingPlan``'s response, or a path to a JSON file.
        region: AWS region the emulator answers for.
        env_file: also write the ``export`` lines there.
        startup_timeout: seconds to wait for the emulator to be ready.
        run_jobs: execute the training jobs it accepts on this machine's CPU
            (:mod:`trainctl.local_aws_jobs`; default off: jobs stay as created, and tests
            drive them with :meth:`set_job_status`); :meth:`set_run_jobs` switches it later.
        event_targets: ``module:function`` names (strings: they run in the emulator's
            process) called with every job state-change event, like Lambda functions.
        job_processes: CPU processes of each executed job (``TRAINER_NPROC_PER_NODE``; default 1).

    Attributes (after start):
        endpoint: ``http://127.0.0.1:PORT``.
        env: the submitter's environment (see :func:`submitter_environment`).
        resources: bucket / parameter / role names and the platform tags (:class:`StackResources` as a dict).
        training_plan_arns: ARNs of the seeded plans.
        log_path: the child's stderr (request log, errors).
        state_dir: the emulator's state folder (executed jobs' ``training-jobs/<job>/opt_ml``).

    Raises:
        EmulatorUnavailable: moto (the extra ``local``) is not installed (raised by ``start``,
            before any process is started).
        RuntimeError: the emulator did not start (with the tail of its log).
    """

    def __init__(
        self,
        *,
        port: int = 0,
        plans: Sequence[Mapping[str, Any]] | str | os.PathLike[str] | None = None,
        region: str = DEFAULT_REGION,
        env_file: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        startup_timeout: float = 90.0,
        run_jobs: bool = False,
        event_targets: Sequence[str] = (),
        job_processes: int | None = None,
    ) -> None:
        if isinstance(event_targets, str) or not all(isinstance(t, str) for t in event_targets):
            raise TypeError("event_targets: expected a list of 'module:function' strings")
        self.run_jobs = run_jobs
        self.event_targets = list(event_targets)
        self.job_processes = job_processes
        self.state_dir: Path | None = None
        self.port = port
        self.plans = plans
        self.region = region
        self.env_file = env_file
        self.host = host
        self.startup_timeout = startup_timeout
        self.process: subprocess.Popen[str] | None = None
        self.endpoint = ""
        self.env: dict[str, str] = {}
        self.resources: dict[str, Any] = {}
        self.training_plan_arns: list[str] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.log_path: Path | None = None

    def __enter__(self) -> LocalAws:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        require_moto()  # before starting anything
        self._tmp = tempfile.TemporaryDirectory(prefix="local-aws-")
        tmp = Path(self._tmp.name)
        options: dict[str, Any] = {"host": self.host, "port": self.port, "region": self.region, "quiet": True}
        if self.plans is not None:
            if isinstance(self.plans, (str, os.PathLike)):
                plans_file = Path(self.plans)
            else:
                plans_file = tmp / "plans.json"
                plans_file.write_text(json.dumps(list(self.plans), default=_json_default))
            options["plans_file"] = str(plans_file)
        if self.env_file:
            options["env_file"] = str(self.env_file)
        options["run_jobs"] = self.run_jobs
        options["event_targets"] = self.event_targets
        options["state_dir"] = str(tmp / "state")
        if self.job_processes is not None:
            options["job_processes"] = self.job_processes
        self.log_path = tmp / "local-aws.log"
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        child_env.update(DUMMY_CREDENTIALS)
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-c", _BOOT, json.dumps(options)],
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                text=True,
                env=child_env,
            )
        info = self._wait_ready()
        self.endpoint = info["endpoint"]
        self.env = info["env"]
        self.resources = info["resources"]
        self.training_plan_arns = info["training_plan_arns"]
        self.state_dir = Path(info["state_dir"])

    def _wait_ready(self) -> dict[str, Any]:
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.process.stdout], [], [], 0.2)
            if ready:
                line = self.process.stdout.readline()
                if line.startswith(READY_MARKER):
                    return json.loads(line[len(READY_MARKER) :])
                if not line and self.process.poll() is not None:
                    break
            elif self.process.poll() is not None:
                break
        tail = self.log_tail()  # before stop(), which removes the log with its folder
        self.stop()
        raise RuntimeError(f"local-aws did not start within {self.startup_timeout:g} s:\n{tail}")

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # clients and admin ----------------------------------------------------------------------

    def client(self, service: str, **config: Any) -> Any:
        """A boto3 client for ``service`` bound to the emulator (botocore ``Config`` kwargs allowed)."""
        import boto3
        from botocore.config import Config

        return boto3.client(
            service,
            endpoint_url=self.endpoint,
            region_name=self.region,
            aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            config=Config(**config) if config else None,
        )

    def admin(self, method: str, path: str, payload: Any = None) -> Any:
        """Call an admin endpoint (``path`` below ``/_local-aws/``); returns the decoded JSON.

        Raises:
            RuntimeError: the emulator answered with an error (its message).
        """
        data = None if payload is None else json.dumps(payload, default=_json_default).encode()
        request = urllib.request.Request(
            f"{self.endpoint}{ADMIN_PREFIX}/{path.lstrip('/')}",
            data=data,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise RuntimeError(f"local-aws admin {method} {path}: HTTP {exc.code}: {detail}") from None

    def set_job_status(self, name: str, status: str, **fields: Any) -> dict[str, Any]:
        """Move training job ``name`` to ``status`` (``failure_reason``, ``final_metrics``, ``log_lines``, ``secondary_status``)."""
        from urllib.parse import quote

        return self.admin("POST", f"training-jobs/{quote(name)}/status", {"status": status, **fields})

    def complete_active_jobs(self) -> list[str]:
        """End every job that holds instances: ``InProgress`` ones ``Completed``, ``Stopping`` ones ``Stopped``
        (frees training-plan instances); returns their names."""
        return self.admin("POST", "training-jobs/complete-active", {})["completed"]

    def inject_fault(
        self,
        operation: str,
        code: str,
        *,
        count: int = 1,
        message: str | None = None,
        match: Mapping[str, Any] | None = None,
        status: int | None = None,
    ) -> None:
        """Answer the next ``count`` calls of ``operation`` (-1: all) with error ``code``."""
        payload = {"operation": operation, "code": code, "count": count, "message": message, "match": dict(match or {})}
        if status is not None:
            payload["status"] = status
        self.admin("POST", "faults", payload)

    def clear_faults(self) -> None:
        self.admin("DELETE", "faults")

    def calls(self, operation: str | None = None) -> list[dict[str, Any]]:
        """Requests the emulator has seen (JSON-protocol ones with ``service``, ``operation``, ``params``)."""
        from urllib.parse import quote

        suffix = f"?operation={quote(operation)}" if operation else ""
        return self.admin("GET", f"calls{suffix}")["calls"]

    def clear_calls(self) -> None:
        self.admin("DELETE", "calls")

    def set_plans(self, plans: Sequence[Mapping[str, Any]]) -> list[str]:
        """Replace the seeded training plans (and the SSM parameter); returns their ARNs."""
        self.training_plan_arns = self.admin("PUT", "training-plans", list(plans))["training_plan_arns"]
        return self.training_plan_arns

    def training_jobs(self) -> list[dict[str, Any]]:
        """Every training job the emulator holds: ``{"name", "status", "secondary_status"}``."""
        return self.admin("GET", "training-jobs")["training_jobs"]

    def set_run_jobs(self, enabled: bool) -> None:
        """Execute the jobs created from now on (``True``) or leave them as created (``False``)."""
        self.admin("PUT", "run-jobs", {"enabled": bool(enabled)})

    def events(self, job: str | None = None) -> list[dict[str, Any]]:
        """The state-change events emitted (oldest first), each ``{"id", "job", "status",
        "secondary_status", "event", "bus", "deliveries"}``; ``job`` keeps that job's only."""
        from urllib.parse import quote

        return self.admin("GET", "events" + (f"?job={quote(job)}" if job else ""))["events"]

    def redeliver_event(self, event_id: str, targets: Sequence[str] | None = None) -> list[str]:
        """Deliver a recorded event again (to ``targets``, default every target); returns the delivery ids."""
        from urllib.parse import quote

        payload = {} if targets is None else {"targets": list(targets)}
        return self.admin("POST", f"events/{quote(event_id)}/redeliver", payload)["deliveries"]

    def wait_for_job(
        self, name: str, *, timeout: float = 120.0, statuses: Sequence[str] = TERMINAL_JOB_STATUSES
    ) -> dict[str, Any]:
        """Poll ``DescribeTrainingJob`` until the job's status is one of ``statuses``; returns the description.

        Raises:
            TimeoutError: not there within ``timeout`` seconds (with the job's status and the emulator's log tail).
        """
        deadline = time.monotonic() + timeout
        while True:
            described = self.describe_training_job(name)
            if described["TrainingJobStatus"] in statuses:
                return described
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"training job {name} is {described['TrainingJobStatus']}/{described.get('SecondaryStatus')} "
                    f"after {timeout:g} s (waiting for {', '.join(statuses)}):\n{self.log_tail()}"
                )
            time.sleep(0.2)

    def wait_for_deliveries(self, *, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until every event is on the bus and every delivery delivered or failed; returns :meth:`events`.

        Raises:
            TimeoutError: still busy after ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        while True:
            events = self.events()
            busy = [
                e["id"]
                for e in events
                if e["bus"]["status"] == "pending"
                or any(d["status"] in ("pending", "running") for d in e["deliveries"])
            ]
            if not busy:
                return events
            if time.monotonic() >= deadline:
                raise TimeoutError(f"events still being delivered after {timeout:g} s: {', '.join(busy)}")
            time.sleep(0.1)

    def job_dir(self, name: str) -> Path:
        """An executed job's ``/opt/ml`` folder (``SAGEMAKER_BASE_DIR``) in the emulator's state folder."""
        assert self.state_dir is not None, "start the emulator first"
        return self.state_dir / "training-jobs" / name / "opt_ml"

    def describe_training_job(self, name: str) -> dict[str, Any]:
        """``DescribeTrainingJob`` for ``name`` as JSON-ready data (timestamps ISO 8601, no ResponseMetadata)."""
        response = self.client("sagemaker").describe_training_job(TrainingJobName=name)
        response.pop("ResponseMetadata", None)
        return json.loads(json.dumps(response, default=_json_default))
