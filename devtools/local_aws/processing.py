"""The emulator's SageMaker Processing jobs: ``CreateProcessingJob`` runs the job on this machine.

moto keeps processing jobs but marks each ``Completed`` the moment it is created and runs nothing; the
emulator answers ``CreateProcessingJob`` and ``DescribeProcessingJob`` itself (the request checked against
botocore's model, as its training jobs are) and runs every job, whatever ``run-jobs`` says (there is no
hand-driven mode for processing jobs):

* **Instances**: ``ClusterConfig.InstanceCount`` hosts ``algo-1 .. algo-N``, each a local process of the
  container's ``ContainerEntrypoint`` + ``ContainerArguments`` (``python`` is this interpreter; the image is not
  pulled: every job runs this checkout), all at once, with ``SAGEMAKER_BASE_DIR`` standing for its ``/opt/ml``:
  ``config/processingjobconfig.json`` (the request) and ``config/resourceconfig.json`` (``current_host``,
  ``hosts``), AWS's documented layout ("Build Your Own Processing Container").
* **Inputs** (``S3Input``, ``File`` mode only), downloaded as the job's ``RoleArn`` (the emulator authorizes
  it with the template's policies, as SageMaker acts as that role): ``FullyReplicated`` gives every host every
  object; ``ShardedByS3Key`` gives host ``k`` (1-based) the ``k``-th, ``k+N``-th, ... object of the prefix in
  key order (AWS documents only that each instance gets ``1/N`` of the objects; the round robin is the
  emulator's choice). Keys land relative to the prefix under ``LocalPath``.
* **Outputs**: when every host exits 0, each host's ``S3Output.LocalPath`` is uploaded to ``S3Uri`` (keys
  relative to it), as the role, and the job is ``Completed``. Otherwise the job is ``Failed`` with
  ``FailureReason`` ``AlgorithmError: <host>: <the last line of its stderr>`` and nothing is uploaded (what
  SageMaker uploads from a failed job is not documented; the emulator's choice is the strict one).
* Not emulated: ``Pipe`` mode, ``DatasetDefinition`` inputs, ``Continuous`` upload, ``StopProcessingJob``,
  ``MaxRuntimeInSeconds``, CloudWatch Logs of processing jobs, the VPC network (``NetworkConfig`` is kept and
  described).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from moto.core.responses import ActionResult
from moto.sagemaker.exceptions import ResourceInUseException, ValidationError
from moto.sagemaker.responses import SageMakerResponse

from devtools.local_aws.jobs import _safe_relative, split_s3_uri
from devtools.local_aws.sagemaker import checked_params, checked_result
from devtools.local_aws.shapes import operation_model

OPT_ML = "/opt/ml"
REPO = Path(__file__).resolve().parents[2]


@dataclass
class ProcessingRecord:
    name: str
    arn: str
    params: dict[str, Any]
    created: datetime
    status: str = "InProgress"
    ended: datetime | None = None
    failure_reason: str | None = None
    modified: datetime | None = None
    started: datetime | None = None
    hosts: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        shape = operation_model("sagemaker", "DescribeProcessingJob").output_shape
        out = {k: copy.deepcopy(v) for k, v in self.params.items() if k in shape.members}
        out.update(
            {
                "ProcessingJobArn": self.arn,
                "ProcessingJobStatus": self.status,
                "CreationTime": self.created,
                "LastModifiedTime": self.modified or self.created,
            }
        )
        for key, value in (
            ("ProcessingStartTime", self.started),
            ("ProcessingEndTime", self.ended),
            ("FailureReason", self.failure_reason),
        ):
            if value is not None:
                out[key] = value
        return out


class JobFailed(Exception):
    """The job fails with this ``FailureReason``."""


def _local(base: Path, container_path: str) -> Path:
    if container_path != OPT_ML and not container_path.startswith(OPT_ML + "/"):
        raise JobFailed(f"ClientError: LocalPath {container_path!r}: the emulator maps only /opt/ml/...")
    return base / container_path[len(OPT_ML) + 1 :]


def _objects(s3: Any, uri: str) -> list[str]:
    bucket, prefix = split_s3_uri(uri)
    keys: list[str] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [o["Key"] for o in page.get("Contents") or [] if not o["Key"].endswith("/")]
    return sorted(keys)


class ProcessingRunner:
    """Runs processing jobs (module docstring).

    Args:
        client: ``client(service, role_arn)``, as :class:`devtools.local_aws.jobs.JobRunner`'s.
        state_dir: where ``processing-jobs/<job>/<host>/`` folders go.
    """

    def __init__(self, client: Callable[[str, str | None], Any], state_dir: Path) -> None:
        self.client = client
        self.state_dir = Path(state_dir)
        self.jobs: dict[tuple[str, str, str], ProcessingRecord] = {}
        self.lock = threading.RLock()
        self.threads: list[threading.Thread] = []

    def start(self, record: ProcessingRecord) -> None:
        thread = threading.Thread(target=self._run, args=(record,), name=f"processing-{record.name}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def _run(self, record: ProcessingRecord) -> None:
        try:
            self._execute(record)
            status, reason = "Completed", None
        except JobFailed as exc:
            status, reason = "Failed", str(exc)
        except Exception as exc:  # an emulator bug or an S3 refusal: the job fails saying so
            status, reason = "Failed", f"ClientError: {type(exc).__name__}: {exc}"
        now = datetime.now(UTC)
        with self.lock:
            record.status, record.failure_reason, record.ended, record.modified = status, reason, now, now

    def _execute(self, record: ProcessingRecord) -> None:
        params = record.params
        role = params.get("RoleArn")
        s3 = self.client("s3", role if isinstance(role, str) else None)
        cluster = params["ProcessingResources"]["ClusterConfig"]
        hosts = [f"algo-{i}" for i in range(1, int(cluster["InstanceCount"]) + 1)]
        root = self.state_dir / "processing-jobs" / record.name
        shutil.rmtree(root, ignore_errors=True)
        bases = {host: root / host / "opt_ml" for host in hosts}
        for index, host in enumerate(hosts):
            self._lay_out(s3, params, bases[host], host, hosts, index)
        with self.lock:
            record.started = record.modified = datetime.now(UTC)
        failures = self._launch(params, bases)
        if failures:
            raise JobFailed("AlgorithmError: " + "; ".join(failures))
        for host in hosts:
            for output in (params.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
                self._upload(s3, output["S3Output"], bases[host])

    def _lay_out(self, s3: Any, params: dict[str, Any], base: Path, host: str, hosts: list[str], index: int) -> None:
        config = base / "config"
        config.mkdir(parents=True)
        (config / "processingjobconfig.json").write_text(json.dumps(params, default=str), encoding="utf-8")
        resource = {
            "current_host": host,
            "hosts": hosts,
            "current_instance_type": params["ProcessingResources"]["ClusterConfig"]["InstanceType"],
        }
        (config / "resourceconfig.json").write_text(json.dumps(resource), encoding="utf-8")
        for item in params.get("ProcessingInputs") or []:
            source = item.get("S3Input")
            if source is None or source.get("S3InputMode", "File") != "File" or source.get("S3DataType") != "S3Prefix":
                raise JobFailed(
                    f"ClientError: input {item.get('InputName')!r}: the emulator stages S3Prefix File inputs only"
                )
            local = _local(base, source["LocalPath"])
            local.mkdir(parents=True, exist_ok=True)
            bucket, prefix = split_s3_uri(source["S3Uri"])
            keys = _objects(s3, source["S3Uri"])
            if source.get("S3DataDistributionType") == "ShardedByS3Key":
                keys = keys[index :: len(hosts)]
            for key in keys:
                rel = key[len(prefix) :].lstrip("/") or key.rsplit("/", 1)[-1]
                target = local / _safe_relative(rel, source["S3Uri"])
                target.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, key, str(target))
        for output in (params.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
            _local(base, output["S3Output"]["LocalPath"]).mkdir(parents=True, exist_ok=True)

    def _launch(self, params: dict[str, Any], bases: dict[str, Path]) -> list[str]:
        app = params["AppSpecification"]
        command = [*app.get("ContainerEntrypoint", []), *app.get("ContainerArguments", [])]
        if not command:
            raise JobFailed("ClientError: AppSpecification has no ContainerEntrypoint (the emulator pulls no image)")
        if command[0] == "python":
            command[0] = sys.executable
        procs = {}
        for host, base in bases.items():
            env = {**_environ(), **(params.get("Environment") or {}), "SAGEMAKER_BASE_DIR": str(base)}
            procs[host] = subprocess.Popen(
                command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        failures = []
        for host, proc in procs.items():
            out, err = proc.communicate()
            (bases[host].parent / "log.txt").write_text(out + err, encoding="utf-8")
            if proc.returncode:
                last = (err.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
                failures.append(f"{host}: {last}")
        return failures

    def _upload(self, s3: Any, output: dict[str, Any], base: Path) -> None:
        bucket, prefix = split_s3_uri(output["S3Uri"])
        prefix = prefix.rstrip("/") + "/" if prefix else ""
        local = _local(base, output["LocalPath"])
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            s3.upload_file(str(path), bucket, prefix + path.relative_to(local).as_posix())


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


RUNNER: ProcessingRunner | None = None
"""The emulator process's runner (set by :func:`devtools.local_aws.server.serve`)."""


def _runner() -> ProcessingRunner:
    if RUNNER is None:
        raise ValidationError(message="processing jobs need the emulator's runner (trainctl local-aws)")
    return RUNNER


def create_processing_job(self: SageMakerResponse) -> ActionResult:
    params = checked_params(self, "CreateProcessingJob")
    name = params["ProcessingJobName"]
    backend = self.sagemaker_backend
    runner = _runner()
    key = (backend.account_id, backend.region_name, name)
    with runner.lock:
        if key in runner.jobs:
            raise ResourceInUseException(message=f"Job name {name} already exists (processing job names are unique)")
        arn = f"arn:aws:sagemaker:{backend.region_name}:{backend.account_id}:processing-job/{name}"
        record = ProcessingRecord(name, arn, copy.deepcopy(params), datetime.now(UTC))
        runner.jobs[key] = record
    runner.start(record)
    return ActionResult({"ProcessingJobArn": arn})


def describe_processing_job(self: SageMakerResponse) -> ActionResult:
    name = self._get_param("ProcessingJobName")
    backend = self.sagemaker_backend
    runner = _runner()
    with runner.lock:
        record = runner.jobs.get((backend.account_id, backend.region_name, name))
        if record is None:
            raise ValidationError(message=f"Could not find requested job with name {name}")
        result = record.describe()
    return checked_result("DescribeProcessingJob", result)


def install() -> None:
    """Patch moto's ``SageMakerResponse`` (idempotent; emulator process only)."""
    SageMakerResponse.create_processing_job = create_processing_job  # type: ignore[method-assign]
    SageMakerResponse.describe_processing_job = describe_processing_job  # type: ignore[method-assign]
