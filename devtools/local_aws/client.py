"""The emulator from Python: :class:`LocalAws` starts it in a child process (so its moto state never mixes with
a test's own moto mocks) and wraps its admin endpoints (:mod:`devtools.local_aws`).

Importable without moto: :meth:`LocalAws.start` says it is missing before starting anything.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from devtools.local_aws.principals import UNLISTED, access_key_for
from devtools.local_aws.stack import (
    ADMIN_PREFIX,
    DEFAULT_REGION,
    DUMMY_CREDENTIALS,
    READY_MARKER,
    emulator_client,
    json_default,
    require_moto,
)
from platform_spec.runs import TERMINAL_JOB_STATUSES

_BOOT = (
    "import json, os, sys; from devtools.local_aws.server import run_emulator; "
    "code = run_emulator(**json.loads(sys.argv[1])); sys.stdout.flush(); sys.stderr.flush(); os._exit(code)"
)
"""The child process of :class:`LocalAws`: :func:`~devtools.local_aws.server.run_emulator` with keyword
arguments as one JSON object. It ends with ``os._exit`` once the emulator has stopped (its jobs killed, its
state folder removed): the interpreter's teardown of moto's modules would add 1-2 s to every stop."""
JOB_POLL_S = 0.5
"""How often :meth:`LocalAws.wait_for_job` describes the job: each DescribeTrainingJob costs ~40 ms of CPU here
(this client and moto), a job runs for seconds to minutes, and the tests that wait share 2 cores."""


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
            (:mod:`devtools.local_aws.jobs`; default off: jobs stay as created, and tests
            drive them with :meth:`set_job_status`); :meth:`set_run_jobs` switches it later.
        event_targets: ``module:function`` names (strings: they run in the emulator's
            process) called with every job state-change event, like Lambda functions.
        job_processes: CPU processes of each executed job (``TRAINER_NPROC_PER_NODE``; default 1).
        event_retry_delays: seconds before each retry of an event target that raised (default 1 and 2 s:
            :data:`devtools.local_aws.jobs.TARGET_RETRY_DELAYS_S`).
        template: a CloudFormation template file whose policies the emulator enforces instead of the platform's
            (:mod:`devtools.local_aws.authorize`; tests remove statements from a copy).
        context: CDK context over ``cdk.json``'s to synthesize the platform with, e.g. ``{"vpc": "create",
            "fsxLustre": {...}}``: VPC mode, the network and file system made in moto and their IDs in :attr:`env`
            (:func:`~devtools.local_aws.server.serve`). Default: ``cdk.json``'s alone (no VPC).
        fsx_root: the folder that plays the FSx for Lustre file system (``/<mount name>/`` maps to it; jobs get a
            read-only copy of a channel's directory). Default: none (a job with a file-system channel fails).

    Attributes (after start):
        endpoint: ``http://127.0.0.1:PORT``.
        env: the submitter's environment (:func:`~devtools.local_aws.stack.submitter_environment`).
        resources: bucket / parameter / role names and the platform tags
            (:class:`~devtools.local_aws.stack.StackResources` as a dict).
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
        event_retry_delays: Sequence[float] | None = None,
        template: str | os.PathLike[str] | None = None,
        context: Mapping[str, Any] | None = None,
        fsx_root: str | os.PathLike[str] | None = None,
    ) -> None:
        if isinstance(event_targets, str) or not all(isinstance(t, str) for t in event_targets):
            raise TypeError("event_targets: expected a list of 'module:function' strings")
        self.plans = plans
        self.region = region
        self.startup_timeout = startup_timeout
        self.options: dict[str, Any] = {
            "host": host,
            "port": port,
            "region": region,
            "quiet": True,
            "env_file": None if env_file is None else str(env_file),
            "run_jobs": run_jobs,
            "event_targets": list(event_targets),
            "job_processes": job_processes,
            "event_retry_delays": None if event_retry_delays is None else list(event_retry_delays),
            "template": None if template is None else str(template),
            "context": None if context is None else dict(context),
            "fsx_root": None if fsx_root is None else str(fsx_root),
        }
        """:func:`~devtools.local_aws.server.run_emulator`'s arguments (the plans and the state folder added by
        :meth:`start`)."""
        self.state_dir: Path | None = None
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
        options = {**self.options, "state_dir": str(tmp / "state")}
        if self.plans is not None:
            if isinstance(self.plans, (str, os.PathLike)):
                plans_file = Path(self.plans)
            else:
                plans_file = tmp / "plans.json"
                plans_file.write_text(json.dumps(list(self.plans), default=json_default))
            options["plans_file"] = str(plans_file)
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

    def client(self, service: str, *, access_key: str = DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"], **config: Any) -> Any:
        """A boto3 client for ``service`` bound to the emulator (botocore ``Config`` kwargs allowed), signing as
        ``access_key`` (default: the account's administrator; :attr:`env`'s ``AWS_ACCESS_KEY_ID``: the submitter)."""
        return emulator_client(service, self.endpoint, self.region, access_key=access_key, **config)

    def admin(self, method: str, path: str, payload: Any = None) -> Any:
        """Call an admin endpoint (``path`` below ``/_local-aws/``); returns the decoded JSON.

        Raises:
            RuntimeError: the emulator answered with an error (its message).
        """
        data = None if payload is None else json.dumps(payload, default=json_default).encode()
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
        return self.admin("POST", f"training-jobs/{quote(name)}/status", {"status": status, **fields})

    def complete_active_jobs(self) -> list[str]:
        """End every job that holds instances: ``InProgress`` ones ``Completed``, ``Stopping`` ones ``Stopped``
        (frees training-plan instances); returns their names."""
        return self.admin("POST", "training-jobs/complete-active", {})["completed"]

    def freeze_job(self, name: str, rank: int | None = None) -> list[int]:
        """Make the executed job ``name`` hang: SIGSTOP its trainer's process tree (a frozen node; a stop thaws it
        after its SIGTERM), or with ``rank`` only the worker of that rank (a stuck rank, which the other ranks'
        watchdog catches). Returns the pids stopped (``POST /_local-aws/training-jobs/NAME/freeze[?rank=R]``).

        Raises:
            RuntimeError: the emulator refused (HTTP 400 or 404: no such executed job, its trainer or that rank's
                worker not running, a rank outside ``0`` to ``job_processes - 1``).
        """
        query = "" if rank is None else f"?rank={rank}"
        return self.admin("POST", f"training-jobs/{quote(name)}/freeze{query}", {})["frozen_pids"]

    def fail_infra_checks(self, count: int = 1) -> int:
        """Make the infrastructure health check of the next ``count`` jobs created with
        ``InfraCheckConfig.EnableInfraCheck`` true fail (0: none; replaces what was armed): each ends ``Failed``
        (:data:`platform_spec.health.INFRA_CHECK_ERROR`) before its trainer starts, without billable time
        (``PUT /_local-aws/infra-check-failures``). Returns ``count``."""
        return int(self.admin("PUT", "infra-check-failures", {"count": count})["count"])

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

    def remove_object(self, bucket: str, key: str) -> None:
        """Delete ``s3://bucket/key`` outside the authorization (``/_local-aws/objects/remove``): a damaged record
        that no role may delete, removed as an operator who lifted the bucket policy's Deny would."""
        self.admin("POST", "objects/remove", {"bucket": bucket, "key": key})

    def clear_faults(self) -> None:
        self.admin("DELETE", "faults")

    def calls(self, operation: str | None = None) -> list[dict[str, Any]]:
        """Requests the emulator has seen (JSON-protocol ones with ``service``, ``operation``, ``params``)."""
        suffix = f"?operation={quote(operation)}" if operation else ""
        return self.admin("GET", f"calls{suffix}")["calls"]

    def clear_calls(self) -> None:
        self.admin("DELETE", "calls")

    def set_plans(self, plans: Sequence[Mapping[str, Any]]) -> list[str]:
        """Replace the seeded training plans (and the SSM parameter); returns their ARNs."""
        self.training_plan_arns = self.admin("PUT", "training-plans", list(plans))["training_plan_arns"]
        return self.training_plan_arns

    def principals(self) -> dict[str, dict[str, Any]]:
        """The template's principals by name (logical id of the role, or ``administrator``): ``{"name", "arn",
        "session_arn", "access_key"}``."""
        return {p["name"]: p for p in self.admin("GET", "principals")["principals"]}

    def function_env(self, handler: str) -> dict[str, str]:
        """:attr:`env` with the credentials of the role of the template's function whose handler is ``handler``
        (``module.function`` or ``module:function``; a handler not in the template: a role with no policies), to
        run that function's code as the deployed function runs."""
        found = self.admin("GET", "principals")
        names = {p["name"]: p for p in found["principals"]}
        role = found["handlers"].get(handler.replace(":", "."))
        key = names[role]["access_key"] if role else access_key_for(UNLISTED)
        return {**self.env, "AWS_ACCESS_KEY_ID": key}

    def grants(self) -> list[dict[str, Any]]:
        """Every allowed authorization so far: ``{"principal", "operation", "action", "resource", "statements"}``."""
        return self.admin("GET", "grants")["grants"]

    def training_jobs(self) -> list[dict[str, Any]]:
        """Every training job the emulator holds: ``{"name", "status", "secondary_status"}``."""
        return self.admin("GET", "training-jobs")["training_jobs"]

    def set_run_jobs(self, enabled: bool, processes: int | None = None) -> None:
        """Execute the jobs created from now on (``True``) or leave them as created (``False``); ``processes``:
        the CPU processes of each job created from now on (``TRAINER_NPROC_PER_NODE``; unchanged when ``None``).

        Raises:
            RuntimeError: the emulator refused (HTTP 400: ``processes`` not a positive integer).
        """
        body: dict[str, Any] = {"enabled": bool(enabled)}
        if processes is not None:
            body["processes"] = processes
        self.admin("PUT", "run-jobs", body)

    def events(self, job: str | None = None) -> list[dict[str, Any]]:
        """The state-change events emitted (oldest first), each ``{"id", "job", "status",
        "secondary_status", "event", "bus", "deliveries"}``; ``job`` keeps that job's only."""
        return self.admin("GET", "events" + (f"?job={quote(job)}" if job else ""))["events"]

    def redeliver_event(self, event_id: str, targets: Sequence[str] | None = None) -> list[str]:
        """Deliver a recorded event again (to ``targets``, default every target); returns the delivery ids."""
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
            time.sleep(JOB_POLL_S)

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
        return json.loads(json.dumps(response, default=json_default))
