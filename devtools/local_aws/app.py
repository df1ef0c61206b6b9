"""The emulator's WSGI layer: admin endpoints under ``/_local-aws/`` (a route table of small handlers; the
endpoints are listed in :mod:`devtools.local_aws`), injected faults and the call log, then moto.

Imported by the emulator's process only, once moto is there (:func:`devtools.local_aws.server.serve`).
"""

from __future__ import annotations

import io
import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

from devtools.local_aws import simulate
from devtools.local_aws.authorize import Authorizer
from devtools.local_aws.jobs import EventBus, JobRunner
from devtools.local_aws.principals import access_key_for
from devtools.local_aws.sagemaker import SageMakerExtension, publish_logs
from devtools.local_aws.stack import (
    ACCOUNT_ID,
    ADMIN_PREFIX,
    DUMMY_CREDENTIALS,
    StackResources,
    emulator_client,
    json_default,
)
from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE

_DEFAULT_FAULTS = {
    "ThrottlingException": (400, "Rate exceeded"),
    "ResourceLimitExceeded": (400, None),
    "InternalFailure": (500, "We encountered an internal error. Please try again."),
    "ServiceUnavailable": (503, "The service is unavailable. Please try again."),
}


@dataclass(frozen=True)
class AdminRequest:
    """One admin call: the names its path holds in its route's ``*`` places, its query and its JSON body."""

    names: tuple[str, ...]
    query: Mapping[str, list[str]]
    payload: Any


class EmulatorApp:
    """WSGI app: ``/_local-aws/`` admin endpoints, then authorization, injected faults and moto.

    Args:
        moto_app: moto's WSGI application.
        extension: the SageMaker state (:data:`devtools.local_aws.sagemaker.EXTENSION`).
        region, resources: what the emulator answers for, and the names of the stack it stands in for.
        authorizer: decides every signed request (:mod:`devtools.local_aws.authorize`); its refusals are answered
            before faults and moto.
    """

    def __init__(
        self,
        moto_app: Any,
        *,
        extension: SageMakerExtension,
        region: str,
        resources: StackResources,
        authorizer: Authorizer,
    ) -> None:
        self.moto_app = moto_app
        self.authorizer = authorizer
        self.extension = extension
        self.region = region
        self.resources = resources
        self.endpoint = ""
        self.lock = threading.Lock()
        self.faults: list[dict[str, Any]] = []
        self.calls: deque[dict[str, Any]] = deque(maxlen=20000)
        self.runner: JobRunner | None = None  # set by serve()
        self.events: EventBus | None = None  # set by serve()
        self._clients: dict[tuple[str, str], Any] = {}
        self._session: Any = None

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path.startswith(ADMIN_PREFIX + "/"):
            return self._admin(environ, start_response)
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        refusal = self.authorizer.authorize(environ, self._body(environ) if _body_needed(environ) else b"")
        if refusal is not None:
            with self.lock:
                self.calls.append(
                    {"path": path, "refused": refusal.code, "message": refusal.message, "time": time.time()}
                )
            start_response(f"{refusal.status} Refused", [*refusal.headers, ("Content-Length", str(len(refusal.body)))])
            return [refusal.body]
        if _body_needed(environ) and simulate.is_simulation(environ, self._body(environ)):
            simulated = simulate.answer(self.authorizer, self._body(environ))
            headers = [("Content-Type", "text/xml"), ("Content-Length", str(len(simulated.body)))]
            start_response(f"{simulated.status} Simulated", headers)
            return [simulated.body]
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
                return self._error(start_response, fault, params)
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

    @staticmethod
    def _error(start_response: Any, fault: dict[str, Any], params: dict[str, Any]) -> list[bytes]:
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
        """Answer an admin call with its route's handler: 200 with what it returns, 400 for a request it
        refuses (``ValueError``, ``TypeError``; a status change SageMaker does not allow), 404 for what
        does not exist (``KeyError``) or a path no route takes."""
        method = environ.get("REQUEST_METHOD", "GET")
        parts = [unquote(p) for p in environ["PATH_INFO"][len(ADMIN_PREFIX) + 1 :].split("/") if p]
        try:
            payload = json.loads(self._body(environ) or b"null")
        except json.JSONDecodeError as exc:
            return _json(start_response, 400, {"error": f"body is not JSON: {exc}"})
        found = _route(method, parts)
        if found is None:
            return _json(start_response, 404, {"error": f"no admin endpoint {method} {environ['PATH_INFO']}"})
        handler, names = found
        try:
            answer = handler(self, AdminRequest(names, parse_qs(environ.get("QUERY_STRING", "")), payload))
        except (ValueError, TypeError) as exc:
            return _json(start_response, 400, {"error": str(exc)})
        except KeyError as exc:
            return _json(start_response, 404, {"error": f"not found: {exc}"})
        return _json(start_response, 200, answer)

    def list_calls(self, request: AdminRequest) -> Any:
        wanted = request.query.get("operation", [None])[0]
        with self.lock:
            return {"calls": [c for c in self.calls if wanted is None or c.get("operation") == wanted]}

    def clear_calls(self, request: AdminRequest) -> Any:
        with self.lock:
            self.calls.clear()
        return {"ok": True}

    def add_fault(self, request: AdminRequest) -> Any:
        fault = _fault(request.payload)
        with self.lock:
            self.faults.append(fault)
        return {"fault": fault}

    def list_faults(self, request: AdminRequest) -> Any:
        with self.lock:
            return {"faults": list(self.faults)}

    def clear_faults(self, request: AdminRequest) -> Any:
        with self.lock:
            self.faults.clear()
        return {"ok": True}

    def list_training_jobs(self, request: AdminRequest) -> Any:
        with self.extension.lock:
            jobs = [
                {"name": j.name, "status": j.status, "secondary_status": j.secondary}
                for j in self.extension.jobs.values()
            ]
        return {"training_jobs": jobs}

    def complete_active_jobs(self, request: AdminRequest) -> Any:
        ends = {"InProgress": "Completed", "Stopping": "Stopped"}
        with self.extension.lock:
            holding = [(j.name, ends[j.status]) for j in self.extension.jobs.values() if j.status in ends]
            for name, status in holding:
                self.extension.set_job_status(name, status)
        return {"completed": [name for name, _ in holding]}

    def freeze_job(self, request: AdminRequest) -> Any:
        """SIGSTOP an executed job's trainer process tree, or with ``?rank=R`` that rank's worker only
        (:meth:`.jobs.JobRunner.freeze`): the job hangs."""
        (name,) = request.names
        if self.runner is None:
            raise ValueError("training-jobs/NAME/freeze: the emulator executes no jobs (start it with run_jobs)")
        ranks = request.query.get("rank", [])
        if len(ranks) > 1 or (ranks and not (ranks[0].isascii() and ranks[0].isdigit())):
            raise ValueError(f"training-jobs/NAME/freeze rank: got {ranks}; expected one non-negative integer")
        rank = int(ranks[0]) if ranks else None
        return {"name": name, "rank": rank, "frozen_pids": self.runner.freeze(name, rank)}

    def remove_object(self, request: AdminRequest) -> Any:
        """Delete ``{"bucket", "key"}`` outside AWS's authorization: what an operator does to a record no role may
        delete (the output bucket's policy denies every other principal; in AWS they would first lift its Deny).
        A versioned bucket keeps the object as a noncurrent version, as S3's DeleteObject does."""
        payload = request.payload if isinstance(request.payload, dict) else {}
        bucket, key = payload.get("bucket"), payload.get("key")
        if not isinstance(bucket, str) or not isinstance(key, str) or not bucket or not key:
            raise ValueError('objects/remove: expected {"bucket": NAME, "key": KEY} (non-empty strings)')
        from moto.s3.exceptions import MissingBucket
        from moto.s3.models import s3_backends

        try:
            s3_backends[ACCOUNT_ID]["aws"].delete_object(bucket, key)
        except MissingBucket:
            raise KeyError(f"bucket {bucket!r}") from None
        return {"removed": f"s3://{bucket}/{key}"}

    def set_job_status(self, request: AdminRequest) -> Any:
        (name,) = request.names
        payload = request.payload
        if not isinstance(payload, dict) or not isinstance(payload.get("status"), str):
            raise ValueError('expected {"status": "InProgress|Completed|Failed|Stopping|Stopped", ...}')
        lines = payload.get("log_lines") or []
        if not isinstance(lines, list) or not all(isinstance(x, str) for x in lines):
            raise ValueError("log_lines: expected a list of strings")
        job = self.extension.set_job_status(
            name,
            payload["status"],
            secondary_status=payload.get("secondary_status"),
            failure_reason=payload.get("failure_reason"),
            final_metrics=payload.get("final_metrics"),
            log_lines=lines,
        )
        role = job.params.get("RoleArn")
        publish_logs(lambda service: self.client(service, role), job, lines)  # as the job's role, as SageMaker does
        return {
            "name": job.name,
            "status": job.status,
            "secondary_status": job.secondary,
            "failure_reason": job.failure_reason,
        }

    def redeliver_event(self, request: AdminRequest) -> Any:
        if self.events is None:
            raise KeyError("event bus (the emulator has none)")
        payload = request.payload
        targets = payload.get("targets") if isinstance(payload, dict) else None
        if targets is not None and (not isinstance(targets, list) or not all(isinstance(t, str) for t in targets)):
            raise ValueError("targets: expected a list of event target names (module:function)")
        return {"deliveries": self.events.redeliver(request.names[0], targets)}

    def set_run_jobs(self, request: AdminRequest) -> Any:
        """``{"enabled": bool, "processes"?: int}``: whether the jobs created from now on run, and with how many
        processes the jobs created from now on train (``TRAINER_NPROC_PER_NODE``; unchanged when absent)."""
        payload = request.payload
        if not isinstance(payload, dict) or not isinstance(payload.get("enabled"), bool):
            raise ValueError('expected {"enabled": true|false, "processes"?: positive integer}')
        processes = payload.get("processes", None)
        if processes is not None and (isinstance(processes, bool) or not isinstance(processes, int) or processes < 1):
            raise ValueError(f"run-jobs processes: got {processes!r}; expected a positive integer")
        if self.runner is None:
            raise KeyError("job runner (the emulator has none)")
        self.runner.enabled = payload["enabled"]
        if processes is not None:
            self.runner.processes = processes
        return {"enabled": self.runner.enabled, "processes": self.runner.processes}

    def set_infra_check_failures(self, request: AdminRequest) -> Any:
        """``{"count": N}``: the next N jobs created with ``EnableInfraCheck`` true fail their infrastructure health
        check (:meth:`.sagemaker.SageMakerExtension.fail_infra_checks`)."""
        count = request.payload.get("count") if isinstance(request.payload, dict) else None
        return {"count": self.extension.fail_infra_checks(count)}  # it refuses a count that is no integer >= 0

    def list_training_plans(self, request: AdminRequest) -> Any:
        with self.extension.lock:
            return {"training_plans": [self.extension.describe_plan(n) for n in self.extension.plans]}

    def client(self, service: str, role_arn: str | None = None) -> Any:
        """A boto3 client of the emulator's own endpoint (one per service and caller, shared by threads: boto3
        clients are thread-safe once made, their creation is not, so it happens under a lock).

        ``role_arn``: act as that role of the template (a job acts as its ``RoleArn``, which SageMaker assumes; a
        role the template has not is a principal with no policies); ``None``: the account's administrator, who
        creates the stack's resources.
        """
        key = DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"]
        if role_arn is not None:
            principal = self.authorizer.authorities.by_arn(role_arn)
            key = principal.access_key if principal is not None else access_key_for(role_arn)  # an unknown role: no key
        with self.lock:
            if (service, key) not in self._clients:
                if self._session is None:
                    import boto3

                    self._session = boto3.session.Session()
                self._clients[(service, key)] = emulator_client(
                    service, self.endpoint, self.region, session=self._session, access_key=key
                )
            return self._clients[(service, key)]

    # stack ----------------------------------------------------------------------------------

    def seed_plans(self, plans: Any) -> list[str]:
        """Replace the training plans and rewrite the plan-ARN SSM parameter."""
        if not isinstance(plans, list):
            raise ValueError(
                "training plans: expected a JSON list of objects shaped like DescribeTrainingPlan's response"
            )
        arns = self.extension.seed_plans(plans, account=ACCOUNT_ID, region=self.region)
        self.client("ssm").put_parameter(
            Name=self.resources.plan_arns_parameter, Type="String", Value=json.dumps(arns), Overwrite=True
        )
        return arns

    def create_stack(self, plans: list[Any]) -> list[str]:
        """Create the key, buckets, role, repository, plans and SSM parameter the stack would.

        The buckets are encrypted by default with the key (SSE-KMS, as the stack's ``Buckets``), whose id is
        :attr:`StackResources.encryption_key_id` (:func:`create_key_with_id`).
        """
        key_arn = create_key_with_id(
            self.region, self.resources.encryption_key_id, "Encrypts the training platform's buckets (emulated)"
        )
        s3 = self.client("s3")
        for bucket in (self.resources.data_bucket, self.resources.checkpoint_bucket, self.resources.output_bucket):
            kwargs: dict[str, Any] = {}
            if self.region != "us-east-1":
                kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
            s3.create_bucket(Bucket=bucket, **kwargs)
            s3.put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
            s3.put_bucket_encryption(
                Bucket=bucket,
                ServerSideEncryptionConfiguration={
                    "Rules": [
                        {
                            "ApplyServerSideEncryptionByDefault": {
                                "SSEAlgorithm": "aws:kms",
                                "KMSMasterKeyID": key_arn,
                            },
                            "BucketKeyEnabled": True,
                        }
                    ]
                },
            )
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


def create_key_with_id(region: str, key_id: str, description: str) -> str:
    """Create a symmetric KMS key in moto's backend under ``key_id`` and return its ARN.

    moto draws a new key's id at random (``moto.kms.models.Key``); the key is created as moto creates
    any, then filed under ``key_id``, so its ARN is known before the emulator starts.
    """
    from moto.kms.models import kms_backends

    backend = kms_backends[ACCOUNT_ID][region]
    key = backend.create_key(
        policy=None, key_usage="ENCRYPT_DECRYPT", key_spec="SYMMETRIC_DEFAULT", description=description, tags=None
    )
    backend.keys.pop(key.id)
    key.id = key_id
    key.arn = f"arn:aws:kms:{region}:{ACCOUNT_ID}:key/{key_id}"
    backend.keys[key_id] = key
    return key.arn


ROUTES: dict[tuple[str, str], Callable[[EmulatorApp, AdminRequest], Any]] = {
    ("*", "health"): lambda app, request: {"ok": True},
    ("GET", "calls"): EmulatorApp.list_calls,
    ("DELETE", "calls"): EmulatorApp.clear_calls,
    ("POST", "faults"): EmulatorApp.add_fault,
    ("GET", "faults"): EmulatorApp.list_faults,
    ("DELETE", "faults"): EmulatorApp.clear_faults,
    ("GET", "training-jobs"): EmulatorApp.list_training_jobs,
    ("POST", "training-jobs/complete-active"): EmulatorApp.complete_active_jobs,
    ("POST", "training-jobs/*/status"): EmulatorApp.set_job_status,
    ("POST", "training-jobs/*/freeze"): EmulatorApp.freeze_job,
    ("POST", "objects/remove"): EmulatorApp.remove_object,
    ("GET", "events"): lambda app, r: {
        "events": app.events.snapshot(r.query.get("job", [None])[0]) if app.events else []
    },
    ("POST", "events/*/redeliver"): EmulatorApp.redeliver_event,
    ("GET", "run-jobs"): lambda app, request: {
        "enabled": bool(app.runner and app.runner.enabled),
        "processes": app.runner.processes if app.runner else None,
    },
    ("PUT", "run-jobs"): EmulatorApp.set_run_jobs,
    ("GET", "training-plans"): EmulatorApp.list_training_plans,
    ("GET", "infra-check-failures"): lambda app, request: {"count": app.extension.infra_check_failures},
    ("PUT", "infra-check-failures"): EmulatorApp.set_infra_check_failures,
    ("GET", "principals"): lambda app, request: {
        "principals": [
            {"name": p.name, "arn": p.arn, "session_arn": p.session_arn, "access_key": p.access_key}
            for p in app.authorizer.authorities.by_name.values()
        ],
        "handlers": dict(app.authorizer.authorities.handlers),
    },
    ("GET", "grants"): lambda app, request: {"grants": [asdict(g) for g in app.authorizer.grants_of()]},
    ("PUT", "training-plans"): lambda app, request: {"training_plan_arns": app.seed_plans(request.payload)},
}
"""The admin endpoints: ``(method, path below /_local-aws/)`` -> handler; ``*`` as the method: any, in the path:
a name the handler gets in :attr:`AdminRequest.names`."""


def _route(
    method: str, parts: Sequence[str]
) -> tuple[Callable[[EmulatorApp, AdminRequest], Any], tuple[str, ...]] | None:
    """The handler of ``method`` on the path ``parts`` and the names in the route's ``*`` places; None: no route."""
    for (verb, route), handler in ROUTES.items():
        pattern = route.split("/")
        if (
            verb in ("*", method)
            and len(pattern) == len(parts)
            and all(p in ("*", q) for p, q in zip(pattern, parts, strict=True))
        ):
            return handler, tuple(q for p, q in zip(pattern, parts, strict=True) if p == "*")
    return None


def _body_needed(environ: Mapping[str, Any]) -> bool:
    """Whether authorizing the request reads its body: JSON and query-protocol parameters, S3's DeleteObjects keys
    (an S3 upload's body is left to moto, unread)."""
    if environ.get("HTTP_X_AMZ_TARGET") or "x-www-form-urlencoded" in environ.get("CONTENT_TYPE", ""):
        return True
    return environ.get("REQUEST_METHOD") == "POST" and "delete" in parse_qs(
        environ.get("QUERY_STRING", ""), keep_blank_values=True
    )


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
    body = json.dumps(payload, default=json_default).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}.get(status, "Error")
    start_response(f"{status} {reason}", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
