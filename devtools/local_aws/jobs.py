"""The ``trainctl local-aws`` emulator's job runner and event bus: accepted training jobs really train.

With execution on (``trainctl local-aws --run-jobs``, ``LocalAws(run_jobs=True)``, or the admin
endpoint ``PUT /_local-aws/run-jobs``), every training job the emulator accepts runs on this
machine's CPU through the trainer's container entry point (``python -m training.entrypoint
train``, started by :func:`training.local.start_local`), the code path of a SageMaker job:

* **Layout** (:meth:`JobRunner.lay_out`): ``<state dir>/training-jobs/<job>/opt_ml`` is the job's
  ``/opt/ml`` (``SAGEMAKER_BASE_DIR``), written by :func:`training.local.prepare_base_dir`:
  ``hyperparameters.json`` from ``HyperParameters`` (strings, as SageMaker writes them),
  ``resourceconfig.json`` with one host ``algo-1`` (one node: ``InstanceCount`` above 1 runs as
  one node, said in the job's log) and *no* ``current_instance_type``: the instance's GPUs are not
  emulated, so the trainer's GPU check (:func:`training.environment.check_gpus_visible`) has no
  instance type to hold this CPU host to, and the precision check still refuses a GPU-only
  precision (such a job fails with the trainer's reason, as a job whose GPUs were missing would);
  ``inputdataconfig.json`` naming every channel; each ``S3Prefix`` channel downloaded from the
  emulated S3 into ``input/data/<channel>/`` (keys relative to the prefix; ``ManifestFile``,
  ``AugmentedManifestFile`` and ``Pipe`` mode fail the job with ``ClientError``; ``FastFile`` is
  downloaded as ``File``); each ``FileSystemDataSource`` channel (FSx for Lustre, read-only) copied from the
  folder that plays the file system (``--fsx-root``: ``/<mount name>/<path>`` is ``DIR/<path>``), its files
  read-only (a missing directory fails the job with ``ClientError``).
* **VPC mode**: a job with a ``VpcConfig`` first needs its execution role to be allowed the EC2 network-interface
  actions SageMaker performs as it (:func:`devtools.local_aws.network.network_interface_checks`, decided by the
  emulator's authorization); one denied fails the job with ``ClientError: ...`` naming it. The network itself
  (ENIs, security-group rules, routes) is not emulated: the job runs on this machine.
* **Environment**: the job's ``Environment``, plus
  :data:`platform_spec.capacity.CAPACITY_BLOCK_ENV` (the current block's ``EndTime`` in epoch
  milliseconds) for a job on a training plan, and ``TRAINER_NPROC_PER_NODE`` (the runner's
  ``processes``, default 1: this describes the machine, so it overrides the job's).
* **Checkpoints** (:class:`FolderSync`), as SageMaker documents it ("Enable checkpointing",
  "Resume training from a checkpoint",
  https://docs.aws.amazon.com/sagemaker/latest/dg/model-checkpoints.html): everything under
  ``CheckpointConfig.S3Uri`` is downloaded to ``LocalPath`` (default ``/opt/ml/checkpoints``,
  which must lie under ``/opt/ml``) before the entry point starts; while it runs, new and changed
  files are uploaded every :data:`CHECKPOINT_SYNC_INTERVAL_S` seconds (oldest change first, so a
  checkpoint's ``.complete`` marker, written last, follows its shards), and once more after it
  exits. Not emulated: deletions (a file the trainer removes stays in S3; the emulator never
  deletes from S3) and S3 directory buckets.
* **TensorBoard** (``TensorBoardOutputConfig``, "Configure TensorBoard output for a training job":
  SageMaker uploads ``LocalPath``, default ``/opt/ml/output/tensorboard``, to ``S3OutputPath`` while the
  job runs): the configuration is written to :attr:`training.environment.SageMakerPaths.tensorboard_config_file`,
  where the trainer reads ``LocalPath`` (:func:`training.tracking.tensorboard_dir`), and ``LocalPath``
  (under ``/opt/ml``) is uploaded to ``S3OutputPath`` as the checkpoints are, as the job's execution role;
  nothing is downloaded first.
* **Statuses**: ``InProgress`` (``Pending`` while the plan's block has not started, then
  ``Starting`` -> ``Downloading`` (``TrainingStartTime``) -> ``Training`` -> ``Uploading``) ->
  ``Completed`` (exit 0), ``Failed`` (``FailureReason`` ``AlgorithmError: <output/failure>``) or,
  after a stop, ``Stopping`` -> ``Stopped``; ``TrainingEndTime``, ``BillableTimeInSeconds``.
  ``StopTrainingJob`` sends SIGTERM to the entry point (which relays it to the workers) and
  SIGKILL to its process tree :data:`STOP_GRACE_S` seconds later ("SageMaker sends the algorithm
  the SIGTERM signal, which delays job termination for 120 seconds", ``StopTrainingJob``'s API
  reference). ``StoppingCondition.MaxRuntimeInSeconds`` past (counted from
  ``TrainingStartTime``) stops the job the same way, ending ``Stopped`` with secondary status
  ``MaxRuntimeExceeded``. A plan job still running at its block's reclaim point (``EndTime -``
  :data:`platform_spec.capacity.CAPACITY_BLOCK_RECLAIM_S`) is stopped the same way and ends
  ``Stopped`` with secondary status ``Interrupted`` (the documentation says only that SageMaker
  "begins terminating" the instances then; the emulator's choice of status is its own). A trainer
  that stops itself before the reclaim point exits 0 and the job is ``Completed``, as on SageMaker.
* **Logs and metrics**: each output line goes to CloudWatch Logs (group
  ``/aws/sagemaker/TrainingJobs``, stream ``<job>/algo-1-<creation epoch>``) and, matched with the
  job's ``MetricDefinitions``, to CloudWatch (namespace ``/aws/sagemaker/TrainingJobs``,
  dimension ``TrainingJobName``), timestamped when the line was read; ``FinalMetricDataList``
  holds the last value of each metric. Published every :data:`LOG_FLUSH_INTERVAL_S` seconds.
* **Model**: ``/opt/ml/model`` and ``/opt/ml/output/data`` are uploaded as ``model.tar.gz`` and
  ``output.tar.gz`` under ``S3OutputPath/<job>/output/``.

**Infrastructure health check** (``InfraCheckConfig``): a job whose check the emulator was told to fail
(:meth:`devtools.local_aws.sagemaker.SageMakerExtension.fail_infra_checks`) moves to ``Starting`` ("Running the
infrastructure health check") once its plan's block runs, then ends ``Failed`` with
:data:`devtools.local_aws.sagemaker.INFRA_CHECK_FAILURE_REASON`: nothing downloaded, no trainer, no
``TrainingStartTime`` and no billable time. A job whose check passes runs as any other (the check itself, on GPUs
and EFA, is not emulated).

**Hangs** (:meth:`JobRunner.freeze`, ``POST /_local-aws/training-jobs/NAME/freeze``, :meth:`LocalAws.freeze_job
<devtools.local_aws.client.LocalAws.freeze_job>`): the running job's entry point and workers are SIGSTOPped, a
frozen node: no output, no step (so no ``train:step`` datapoint), the job stays ``InProgress`` / ``Training``
until something stops it. With a rank (``?rank=R``, ``freeze_job(NAME, rank=R)``) only that training worker
(``RANK=R``) and the processes below it are SIGSTOPped, a stuck rank: the others wait for it in their next
collective until the trainer's watchdog reports the hang (``platform_spec.health.HANG_REASON``, stacks in
``output/data/watchdog/``) and the job ends ``Failed``; the entry point kills the stopped worker. A stop
(``StopTrainingJob``, ``MaxRuntimeInSeconds``, the block's reclaim) sends SIGTERM and then SIGCONT to every
frozen process, so the trainer's SIGTERM checkpoint runs, and SIGKILL follows :data:`STOP_GRACE_S` later as for
any job. Not emulated: a SageMaker instance that is frozen whole ignores the SIGTERM too and is terminated after
the grace; a collective wedged with every rank running (NCCL's case: a stuck rank looks the same to the others).

Not emulated: containers and images (every job runs this checkout's trainer, whatever its
``TrainingImage``), more than one node, GPUs, ``RetryStrategy``, spot interruptions and
``MaxWaitTimeInSeconds``, the 2-day pending limit, warm pools, network isolation, billing beyond
``BillableTimeInSeconds``. A job driven by hand (``set_job_status``) to a terminal status while
it runs has its process tree killed.

Events (:class:`EventBus`): every status change of every job (executed or driven by hand) emits a
``SageMaker Training Job State Change`` event (``source: aws.sagemaker``; ``detail`` =
``DescribeTrainingJob``'s answer plus ``Tags`` as a map, timestamps in epoch milliseconds as
SageMaker's events carry them) to moto's EventBridge default bus (``PutEvents``) and to each
in-process target (``--event-target module:function``, ``LocalAws(event_targets=[...])``),
called like a Lambda function that an EventBridge rule invokes asynchronously: ``fn(event,
context)`` in a worker thread of its own, retried twice when it raises (Lambda retries an
asynchronous invocation's function error twice, "Asynchronous invocation",
https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html; the emulator
waits :data:`TARGET_RETRY_DELAYS_S` instead of Lambda's minutes). A target receives every event
(a rule matching the source and detail type; filtering terminal statuses is the target's job, as
the deployed rule does it). Each event and each delivery is recorded (``GET /_local-aws/events``);
``POST /_local-aws/events/<id>/redeliver`` delivers a recorded event again (duplicate and
out-of-order delivery, which EventBridge allows: "at least once", no ordering).

The standard library, boto3 (clients of the emulator's own endpoint) and the trainer's local
launcher (:mod:`training.local`); imported only by the emulator process (it needs moto, through
:mod:`devtools.local_aws.sagemaker`).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import os
import posixpath
import shutil
import signal
import subprocess
import tarfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from devtools.local_aws.authorize import Authorizer
from devtools.local_aws.sagemaker import (
    INFRA_CHECK_FAILURE_REASON,
    JobRecord,
    SageMakerExtension,
    TransitionError,
    metrics_from_log,
    publish_logs,
)
from devtools.local_aws.stack import ACCOUNT_ID, DEFAULT_REGION
from platform_spec.capacity import CAPACITY_BLOCK_ENV, CAPACITY_BLOCK_RECLAIM_S, SIGTERM_GRACE_S
from platform_spec.checkpoint_layout import COMPLETE_MARKER
from platform_spec.runs import (
    ALGORITHM_ERROR,
    CAPACITY_ERROR,
    JOB_STATE_CHANGE_DETAIL_TYPE,
    JOB_STATE_CHANGE_SOURCE,
    TERMINAL_JOB_STATUSES,
    failure_reason,
)
from platform_spec.tracking import DEFAULT_TENSORBOARD_LOCAL_PATH
from training.environment import SageMakerPaths
from training.local import kill_tree, prepare_base_dir, start_local

TARGET_RETRY_DELAYS_S = (1.0, 2.0)
"""Seconds before the 2nd and 3rd attempt of an event target that raised (Lambda retries an asynchronous
invocation's function error twice, after about 1 and 2 minutes; shortened here)."""
TARGET_TIMEOUT_S = 300.0
"""What ``context.get_remaining_time_in_millis()`` counts down from (no target is cut off)."""
STOP_GRACE_S = SIGTERM_GRACE_S
"""SIGTERM to SIGKILL on a stop: ``StopTrainingJob``'s 120 seconds (:data:`platform_spec.capacity.SIGTERM_GRACE_S`)."""
CHECKPOINT_SYNC_INTERVAL_S = 2.0
"""Seconds between two uploads of new and changed checkpoint files while the job runs."""
LOG_FLUSH_INTERVAL_S = 1.0
"""Seconds between two publications of the job's new log lines and their metrics."""
POLL_S = 0.2
"""How often the runner looks at a running job (exit, stop request, deadlines)."""
JOB_PROCESSES = 1
"""Default ``TRAINER_NPROC_PER_NODE`` of an executed job (CPU processes)."""
OPT_ML = "/opt/ml"


class TargetError(ValueError):
    """An ``--event-target`` that is not ``module:function`` naming a callable that can be imported."""


def load_target(spec: str) -> Callable[[dict[str, Any], Any], Any]:
    """The callable ``module:function`` names (``function`` may be dotted: ``module:Class.method``).

    Raises:
        TargetError: naming ``spec``: not ``module:function``, the module cannot be imported, or the
            name is missing or not callable.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise TargetError(f"--event-target {spec!r}: expected module:function (e.g. package.module:lambda_handler)")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # an import error of any kind, said in one line
        raise TargetError(
            f"--event-target {spec!r}: cannot import {module_name}: {type(exc).__name__}: {exc}"
        ) from None
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise TargetError(f"--event-target {spec!r}: {module_name} has no {attr}")
    if not callable(target):
        raise TargetError(f"--event-target {spec!r}: {attr} is not callable")
    return target


@dataclass
class LambdaContext:
    """The ``context`` a target gets: what Lambda's Python context object offers."""

    function_name: str
    aws_request_id: str
    invoked_function_arn: str
    deadline: float
    memory_limit_in_mb: int = 1024
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = ""

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self.deadline - time.monotonic()) * 1000))


def event_value(value: Any) -> Any:
    """``value`` as an event carries it: datetimes as epoch milliseconds, containers copied."""
    if isinstance(value, datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, Mapping):
        return {k: event_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [event_value(v) for v in value]
    return value


def state_change_event(detail: Mapping[str, Any], *, account: str, region: str, arn: str) -> dict[str, Any]:
    """A ``SageMaker Training Job State Change`` event around ``detail`` (DescribeTrainingJob + Tags)."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": JOB_STATE_CHANGE_DETAIL_TYPE,
        "source": JOB_STATE_CHANGE_SOURCE,
        "account": account,
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [arn],
        "detail": event_value(detail),
    }


class EventBus:
    """Emits state-change events to moto's default bus and to in-process targets; records deliveries.

    Args:
        put_events: ``fn(entries)`` -> PutEvents on the emulator's default bus.
        targets: ``(name, callable)`` pairs.
        retry_delays: seconds before each retry (its length + 1 attempts; ``None``: :data:`TARGET_RETRY_DELAYS_S`).
    """

    def __init__(
        self,
        put_events: Callable[[list[dict[str, Any]]], Any],
        targets: Sequence[tuple[str, Callable[[dict[str, Any], Any], Any]]] = (),
        *,
        retry_delays: Sequence[float] | None = None,
        account: str = ACCOUNT_ID,
        region: str = DEFAULT_REGION,
    ) -> None:
        self.put_events = put_events
        self.targets = list(targets)
        self.retry_delays = tuple(TARGET_RETRY_DELAYS_S if retry_delays is None else retry_delays)
        self.account = account
        self.region = region
        self.lock = threading.Lock()
        self.records: list[dict[str, Any]] = []
        self._by_id: dict[str, dict[str, Any]] = {}
        self._queue: list[dict[str, Any]] = []
        self._wake = threading.Condition(self.lock)
        self._closed = False
        self._threads: list[threading.Thread] = []
        self._dispatcher = threading.Thread(target=self._dispatch, name="local-aws-events", daemon=True)
        self._dispatcher.start()

    # emitting ---------------------------------------------------------------------------------

    def emit(self, detail: Mapping[str, Any], *, arn: str) -> str:
        """Queue one event (non-blocking; callers may hold the SageMaker state lock). Returns its id."""
        event = state_change_event(detail, account=self.account, region=self.region, arn=arn)
        record = {
            "id": event["id"],
            "job": detail.get("TrainingJobName"),
            "status": detail.get("TrainingJobStatus"),
            "secondary_status": detail.get("SecondaryStatus"),
            "event": event,
            "bus": {"status": "pending", "error": None},
            "deliveries": [],
        }
        with self.lock:
            self.records.append(record)
            self._by_id[event["id"]] = record
            self._queue.append(record)
            self._wake.notify()
        return event["id"]

    def _dispatch(self) -> None:
        while True:
            with self.lock:
                while not self._queue and not self._closed:
                    self._wake.wait()
                if self._closed and not self._queue:
                    return
                record = self._queue.pop(0)
            self._put_on_bus(record)
            for name, _ in self.targets:
                self._start_delivery(record, name, redelivery=False)

    def _put_on_bus(self, record: dict[str, Any]) -> None:
        event = record["event"]
        entry = {
            "Source": event["source"],
            "DetailType": event["detail-type"],
            "Detail": json.dumps(event["detail"]),
            "Resources": event["resources"],
            "EventBusName": "default",
        }
        try:
            answer = self.put_events([entry]) or {}
            failed = int(answer.get("FailedEntryCount") or 0)
            status, error = ("failed", json.dumps(answer.get("Entries"))) if failed else ("sent", None)
        except Exception as exc:  # the bus is best effort: the targets still get the event
            status, error = "failed", f"{type(exc).__name__}: {exc}"
        with self.lock:
            record["bus"] = {"status": status, "error": error}

    # delivering -------------------------------------------------------------------------------

    def _start_delivery(self, record: dict[str, Any], name: str, *, redelivery: bool) -> str:
        delivery = {
            "delivery_id": str(uuid.uuid4()),
            "target": name,
            "redelivery": redelivery,
            "status": "pending",
            "attempts": [],
            "result": None,
        }
        with self.lock:
            record["deliveries"].append(delivery)
        function = dict(self.targets)[name]
        thread = threading.Thread(
            target=self._deliver, args=(record["event"], function, name, delivery), name=f"event-{name}", daemon=True
        )
        with self.lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return delivery["delivery_id"]

    def _deliver(
        self, event: dict[str, Any], function: Callable[..., Any], name: str, delivery: dict[str, Any]
    ) -> None:
        attempts = len(self.retry_delays) + 1
        for attempt in range(attempts):
            request_id = str(uuid.uuid4())
            context = LambdaContext(
                function_name=name.rsplit(":", 1)[-1],
                aws_request_id=request_id,
                invoked_function_arn=f"arn:aws:lambda:{self.region}:{self.account}:function:{name.rsplit(':', 1)[-1]}",
                deadline=time.monotonic() + TARGET_TIMEOUT_S,
            )
            entry: dict[str, Any] = {"request_id": request_id, "started": time.time(), "error": None}
            with self.lock:
                delivery["attempts"].append(entry)
                delivery["status"] = "running"
            try:
                result = function(copy.deepcopy(event), context)
            except Exception as exc:
                with self.lock:
                    entry["error"] = f"{type(exc).__name__}: {exc}"
                    entry["traceback"] = traceback.format_exc(limit=8)
                if attempt + 1 < attempts:
                    time.sleep(self.retry_delays[attempt])
                    continue
                with self.lock:
                    delivery["status"] = "failed"
                return
            with self.lock:
                delivery["status"] = "delivered"
                delivery["result"] = json.loads(json.dumps(result, default=str))
            return

    def redeliver(self, event_id: str, targets: Iterable[str] | None = None) -> list[str]:
        """Deliver a recorded event again to ``targets`` (default: every target); returns delivery ids.

        Raises:
            KeyError: no event ``event_id``, or a target name that is not configured.
        """
        with self.lock:
            record = self._by_id[event_id]
        names = list(targets) if targets is not None else [n for n, _ in self.targets]
        known = {n for n, _ in self.targets}
        for name in names:
            if name not in known:
                raise KeyError(f"event target {name!r} (configured: {', '.join(sorted(known)) or 'none'})")
        return [self._start_delivery(record, name, redelivery=True) for name in names]

    def snapshot(self, job: str | None = None) -> list[dict[str, Any]]:
        """Every recorded event (oldest first) with its deliveries; ``job`` keeps that job's only."""
        with self.lock:
            return [copy.deepcopy(r) for r in self.records if job is None or r["job"] == job]

    def idle(self) -> bool:
        """No event queued and no delivery pending or running."""
        with self.lock:
            return (
                not self._queue
                and all(d["status"] in ("delivered", "failed") for r in self.records for d in r["deliveries"])
                and all(r["bus"]["status"] != "pending" for r in self.records)
            )

    def close(self, timeout: float = 5.0) -> None:
        with self.lock:
            self._closed = True
            self._wake.notify_all()
        self._dispatcher.join(timeout=timeout)


# --- checkpoints and S3 ----------------------------------------------------------------------


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/key/prefix`` -> ``("bucket", "key/prefix")``.

    Raises:
        ValueError: not an ``s3://`` URI with a bucket.
    """
    if not uri.startswith("s3://"):
        raise ValueError(f"{uri!r} is not an s3:// URI")
    bucket, _, key = uri[len("s3://") :].partition("/")
    if not bucket:
        raise ValueError(f"{uri!r} names no bucket")
    return bucket, key


def _safe_relative(rel: str, where: str) -> Path:
    path = Path(rel)
    if path.is_absolute() or ".." in path.parts or not path.parts:
        raise ValueError(f"{where}: object key part {rel!r} would leave the local folder")
    return path


def download_prefix(s3: Any, uri: str, local: Path) -> int:
    """Copy every object under ``uri`` into ``local`` (key relative to the prefix); returns the count.

    Raises:
        ValueError: a key that would land outside ``local``.
        botocore.exceptions.ClientError: S3 refused (no such bucket...).
    """
    bucket, prefix = split_s3_uri(uri)
    count = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents") or []:
            key = item["Key"]
            if key.endswith("/"):
                continue
            rel = key[len(prefix) :].lstrip("/") if prefix else key
            if not rel:  # the prefix is the object's whole key
                rel = key.rsplit("/", 1)[-1]
            target = local / _safe_relative(rel, uri)
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(target))
            count += 1
    return count


class FolderSync:
    """Uploads a local folder's new and changed files (checkpoints, TensorBoard event files) to an S3 prefix (never
    deletes).

    A file is uploaded when its ``(size, mtime_ns)`` differs from its last upload; files go
    oldest change first, so a marker written after a checkpoint's shards follows them (and, at an
    equal ``mtime_ns``, a ``.complete`` marker goes after the other files, though ``.`` sorts first).
    """

    def __init__(self, s3: Any, uri: str, local: Path) -> None:
        self.s3 = s3
        self.bucket, prefix = split_s3_uri(uri)
        self.prefix = prefix if not prefix or prefix.endswith("/") else prefix + "/"
        self.local = local
        self.uploaded: dict[str, tuple[int, int]] = {}
        self.lock = threading.Lock()

    def download(self) -> int:
        return download_prefix(self.s3, f"s3://{self.bucket}/{self.prefix}", self.local)

    def mark_present(self) -> None:
        """Treat the files now present (just downloaded) as already in S3."""
        for path, stamp in self._files():
            self.uploaded[path.relative_to(self.local).as_posix()] = stamp

    def _files(self) -> list[tuple[Path, tuple[int, int]]]:
        found = []
        if not self.local.is_dir():
            return found
        for path in self.local.rglob("*"):
            try:
                if path.is_file() and not path.is_symlink():
                    st = path.stat()
                    found.append((path, (st.st_size, st.st_mtime_ns)))
            except FileNotFoundError:  # removed by the trainer meanwhile (keep_checkpoints)
                continue
        # oldest change first; of files changed at the same instant (a coarse clock) a folder's marker last
        found.sort(key=lambda item: (item[1][1], item[0].name == COMPLETE_MARKER, str(item[0])))
        return found

    def upload_changes(self) -> list[str]:
        """Upload what is new or changed; returns the keys uploaded."""
        done = []
        with self.lock:
            for path, stamp in self._files():
                rel = path.relative_to(self.local).as_posix()
                if self.uploaded.get(rel) == stamp:
                    continue
                try:
                    data = path.read_bytes()
                except FileNotFoundError:
                    continue
                key = self.prefix + rel
                self.s3.put_object(Bucket=self.bucket, Key=key, Body=data)
                self.uploaded[rel] = stamp
                done.append(key)
        return done


def _kill(proc: subprocess.Popen[str] | None) -> None:
    """Kill a job's entry point and its process tree, if it still runs."""
    if proc is not None and proc.poll() is None:
        kill_tree(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def _download_channel(s3: Any, channel: Mapping[str, Any], default_mode: str, paths: SageMakerPaths) -> dict[str, str]:
    """Download an ``S3Prefix`` channel into ``input/data/<channel>/``; returns its ``inputdataconfig.json`` entry.

    Raises:
        JobFailure: ``ClientError: ...``: a channel the emulator does not serve, or nothing to download.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    name = channel["ChannelName"]
    mode = channel.get("InputMode") or default_mode
    source = (channel.get("DataSource") or {}).get("S3DataSource")
    if source is None:
        raise JobFailure(f"ClientError: channel {name!r}: only S3DataSource channels are emulated")
    if mode == "Pipe":
        raise JobFailure(f"ClientError: channel {name!r}: Pipe input mode is not emulated (File or FastFile)")
    if source.get("S3DataType", "S3Prefix") != "S3Prefix":
        raise JobFailure(f"ClientError: channel {name!r}: S3DataType {source['S3DataType']} is not emulated")
    try:
        count = download_prefix(s3, source["S3Uri"], paths.channel_dir(name))
    except (ClientError, BotoCoreError, ValueError) as exc:
        raise JobFailure(f"ClientError: Data download failed: channel {name!r} ({source['S3Uri']}): {exc}") from None
    if count == 0:
        raise JobFailure(f"ClientError: Data download failed: channel {name!r}: no objects under {source['S3Uri']}")
    return {
        "TrainingInputMode": mode,
        "S3DistributionType": source.get("S3DataDistributionType", "FullyReplicated"),
        "RecordWrapperType": channel.get("RecordWrapperType", "None"),
    }


def _copy_file_system_channel(channel: Mapping[str, Any], root: Path | None, paths: SageMakerPaths) -> dict[str, str]:
    """Copy an FSx for Lustre channel's directory (``/<mount name>/<path>`` is ``root/<path>``) into
    ``input/data/<channel>/``, its files read-only (mode 0444) as a read-only mount's are; returns its
    ``inputdataconfig.json`` entry. The copy keeps the trainer from changing the "file system".

    Symbolic links are followed where they stay on the "file system" (inside ``root``), as on a Lustre mount; a link
    that leaves it, leads nowhere or loops fails the job, so no file of this machine beyond ``root`` reaches a job.

    Raises:
        JobFailure: ``ClientError: ...``: no folder plays the file system, the directory does not exist there, or a
            link under it leaves the file system (:func:`_link_off_file_system`).
    """
    name = channel["ChannelName"]
    source = channel["DataSource"]["FileSystemDataSource"]
    system, path = source["FileSystemId"], source["DirectoryPath"]
    if root is None:
        raise JobFailure(
            f"ClientError: channel {name!r}: file system {system}: the emulator has no folder playing it "
            "(trainctl local-aws --fsx-root DIR, LocalAws(fsx_root=...))"
        )
    relative = path.strip("/").partition("/")[2]  # below /<mount name>, checked when the job was created
    folder = root / relative
    if ".." in Path(relative).parts or not folder.is_dir():
        raise JobFailure(
            f"ClientError: Failed to mount the file system {system} for channel {name!r}: the directory {path} "
            "does not exist on the file system"
        )
    problem = _link_off_file_system(root, relative)
    if problem:
        raise JobFailure(f"ClientError: channel {name!r}: {path.partition(relative)[0]}{problem}")
    target = paths.channel_dir(name)
    staged = target.with_name(f".{name}.mounting")  # the channel appears whole and read-only at once, as a mount
    shutil.copytree(folder, staged, symlinks=False)
    for copied in staged.rglob("*"):
        if copied.is_file():
            copied.chmod(0o444)
    staged.rename(target)
    return {
        "TrainingInputMode": channel.get("InputMode") or "File",
        "S3DistributionType": "FullyReplicated",
        "RecordWrapperType": channel.get("RecordWrapperType", "None"),
    }


def _link_off_file_system(root: Path, relative: str) -> str | None:
    """Why the directory ``root/relative`` cannot be copied as a channel, or ``None``: the first symbolic link on
    the way to it or below it that leads out of ``root``, nowhere, or back into a directory it is inside (a loop the
    copy would follow forever), as ``<path below root> is a symbolic link ...``."""
    top = root.resolve()

    def leaves(link: Path) -> str | None:
        target = link.resolve()  # strict=False: a dangling link resolves to where it would lead
        shown = link.relative_to(root).as_posix()
        if not target.is_relative_to(top):
            return f"{shown} is a symbolic link to {os.readlink(link)}, outside the file system"
        if not target.exists():
            return f"{shown} is a symbolic link to {os.readlink(link)}, which does not exist"
        return None

    here = root
    for part in Path(relative).parts:  # a folder on the way may itself be a link
        here = here / part
        if here.is_symlink() and (problem := leaves(here)):
            return problem
    pending = [(here, (here.resolve(),))]  # each folder with the real folders it is inside, itself included
    while pending:
        folder, inside = pending.pop()
        for entry in sorted(folder.iterdir()):
            if entry.is_symlink() and (problem := leaves(entry)):
                return problem
            if entry.is_dir():
                real = entry.resolve()
                if entry.is_symlink() and any(folder_real.is_relative_to(real) for folder_real in inside):
                    return (
                        f"{entry.relative_to(root).as_posix()} is a symbolic link to {os.readlink(entry)}, which loops"
                    )
                pending.append((entry, (*inside, real)))
    return None


def _under_opt_ml(base: Path, local_path: str, field: str) -> Path:
    """The job's folder for a ``LocalPath`` under ``/opt/ml`` (created).

    Raises:
        JobFailure: ``ClientError: ...`` naming ``field``: a path outside ``/opt/ml``.
    """
    trimmed = local_path.rstrip("/")
    if (trimmed != OPT_ML and not trimmed.startswith(OPT_ML + "/")) or posixpath.normpath(trimmed) != trimmed:
        raise JobFailure(f"ClientError: {field} {local_path!r}: the emulator maps only normalised paths in /opt/ml/")
    local = base / trimmed[len(OPT_ML) + 1 :]
    local.mkdir(parents=True, exist_ok=True)
    return local


def _tar_gz(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        if folder.is_dir():
            for path in sorted(folder.rglob("*")):
                if path.is_file():
                    tar.add(path, arcname=path.relative_to(folder).as_posix())
    return buffer.getvalue()


# --- the runner ------------------------------------------------------------------------------


@dataclass
class Execution:
    """One executed job: its folder, process, stop request and the lines read so far."""

    name: str
    base: Path
    proc: subprocess.Popen[str] | None = None
    stop_reason: str | None = None  # "StopTrainingJob" | "MaxRuntimeExceeded" | "Interrupted"
    stop_sent: float | None = None
    lines: list[tuple[float, str]] = field(default_factory=list)
    published: int = 0
    final: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> (value, time)
    thread: threading.Thread | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    frozen: list[int] = field(default_factory=list)  # the pids SIGSTOPped by freeze(), until a stop thaws them
    processes: int = JOB_PROCESSES  # its TRAINER_NPROC_PER_NODE: the runner's when the job was created


class JobFailure(Exception):
    """The job fails with this ``FailureReason`` (already prefixed: ``ClientError: ...``)."""


class JobRunner:
    """Executes accepted training jobs (see the module docstring).

    Args:
        client: ``client(service, role_arn)``: a boto3 client of the emulator (S3, CloudWatch Logs, CloudWatch)
            acting as the role ``role_arn``: a job's calls are its ``RoleArn``'s, as SageMaker assumes it.
        extension: the SageMaker state (:data:`devtools.local_aws.sagemaker.EXTENSION`).
        state_dir: where ``training-jobs/<job>/`` folders go.
        enabled: execute newly created jobs (``False``: jobs stay as created, driven by hand).
        processes: ``TRAINER_NPROC_PER_NODE`` of each job created from then on (1 or 2 on a small machine;
            ``PUT /_local-aws/run-jobs`` changes it).
        stop_grace_s, sync_interval_s: SIGTERM to SIGKILL, and between two checkpoint uploads (seconds).
        authorizer: decides what SageMaker does as a job's execution role before it starts (VPC mode's network
            interfaces, :func:`devtools.local_aws.network.network_interface_checks`). Default: none (not checked).
        fsx_root: the folder that plays the FSx for Lustre file system's root. Default: none (a job with a
            ``FileSystemDataSource`` channel fails saying so).
    """

    def __init__(
        self,
        client: Callable[[str, str | None], Any],
        extension: SageMakerExtension,
        state_dir: Path,
        *,
        enabled: bool = False,
        processes: int = JOB_PROCESSES,
        stop_grace_s: float = STOP_GRACE_S,
        sync_interval_s: float = CHECKPOINT_SYNC_INTERVAL_S,
        authorizer: Authorizer | None = None,
        fsx_root: Path | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError(f"job processes: got {processes}; expected a positive integer")
        self.client = client
        self.extension = extension
        self.state_dir = Path(state_dir)
        self.enabled = enabled
        self.processes = processes
        self.stop_grace_s = stop_grace_s
        self.sync_interval_s = sync_interval_s
        self.authorizer = authorizer
        self.fsx_root = fsx_root
        self.executions: dict[str, Execution] = {}
        self.lock = threading.Lock()
        self._closing = False

    def _as_job(self, job: JobRecord) -> Callable[[str], Any]:
        """``client(service)`` acting as the job's ``RoleArn`` (the execution role SageMaker assumes)."""
        role = job.params.get("RoleArn")
        return lambda service: self.client(service, role if isinstance(role, str) else None)

    # hooks called by the SageMaker extension (under its lock: never block) ----------------------

    def job_created(self, job: JobRecord) -> None:
        if not self.enabled or self._closing:
            return
        base = self.state_dir / "training-jobs" / job.name / "opt_ml"
        execution = Execution(job.name, base, processes=self.processes)
        with self.lock:
            self.executions[job.name] = execution
        execution.thread = threading.Thread(
            target=self._run, args=(job, execution), name=f"job-{job.name}", daemon=True
        )
        execution.thread.start()

    def executes(self, name: str) -> bool:
        with self.lock:
            return name in self.executions

    def stop_requested(self, name: str, reason: str = "StopTrainingJob") -> None:
        """SIGTERM the job's entry point (or keep it from starting); SIGKILL follows after the grace."""
        with self.lock:
            execution = self.executions.get(name)
        if execution is None:
            return
        self._signal_stop(execution, reason)

    def freeze(self, name: str, rank: int | None = None) -> list[int]:
        """Make the running job ``name`` hang for real: SIGSTOP its entry point and every process below it (a
        frozen node: no output, no step, no exit; the job stays ``InProgress``), or with ``rank`` only the
        training worker of that rank and the processes below it (a stuck rank: the other ranks wait for it in
        their next collective, and their watchdog fails the job, :mod:`training.watchdog`). Returns the pids
        stopped.

        Raises:
            KeyError: the emulator does not execute a job of that name.
            ValueError: ``rank`` is not one of the job's ranks (``0`` to its processes - 1), or its trainer
                (that rank's worker) is not running (not started yet, stopping, or ended).
        """
        from training.entrypoint import child_pids
        from training.local import worker_pid

        with self.lock:
            execution = self.executions.get(name)
        if execution is None:
            raise KeyError(f"training job {name!r} is not executed by the emulator (run-jobs off, or no such job)")
        count = execution.processes
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < count):
            raise ValueError(
                f"freeze rank: got {rank!r}; expected an integer from 0 to {count - 1} (the job runs {count} "
                "process(es), TRAINER_NPROC_PER_NODE)"
            )
        with execution.lock:
            proc = execution.proc
            if proc is None or proc.poll() is not None or execution.stop_sent is not None:
                raise ValueError(f"training job {name!r}: its trainer is not running (not started, stopping or ended)")
            top = proc.pid if rank is None else worker_pid(proc.pid, rank)
            if top is None:
                raise ValueError(f"training job {name!r}: no worker of rank {rank} runs (not started yet, or ended)")
            pending, seen = [top], []
            while pending:  # parents first, so that none starts a child after the walk saw it
                current = pending.pop()
                with contextlib.suppress(ProcessLookupError):
                    os.kill(current, signal.SIGSTOP)
                    seen.append(current)
                    pending.extend(child_pids(current))
            execution.frozen.extend(seen)
        what = "the job hangs" if rank is None else f"rank {rank} hangs"
        self._note(execution, f"[local-aws] frozen (SIGSTOP to {len(seen)} process(es)): {what}")
        return seen

    def _signal_stop(self, execution: Execution, reason: str) -> None:
        with execution.lock:
            if execution.stop_reason is None:
                execution.stop_reason = reason
            proc = execution.proc
            if proc is not None and execution.stop_sent is None and proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                for pid in execution.frozen:  # thawed after the SIGTERM: it is the first thing the trainer sees
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGCONT)
                execution.frozen.clear()
                execution.stop_sent = time.monotonic()

    def shutdown(self) -> None:
        """Kill every running job's process tree (the emulator is going away; nothing waits for them)."""
        self._closing = True
        with self.lock:
            executions = list(self.executions.values())
        for execution in executions:
            _kill(execution.proc)

    # the job's thread ------------------------------------------------------------------------

    def _move(self, job: JobRecord, status: str, secondary: str | None, message: str, **fields: Any) -> bool:
        """Move the job; False when it was ended by hand meanwhile (the runner then gives up)."""
        with self.extension.lock:
            if job.status in TERMINAL_JOB_STATUSES:
                return False
            if job.status == status and job.secondary == secondary and status != "InProgress":
                return True
            try:
                self.extension.set_job_status(
                    job.name, status, secondary_status=secondary, message=message, record=job, **fields
                )
            except TransitionError:
                return False
        return True

    def _run(self, job: JobRecord, execution: Execution) -> None:
        try:
            self._execute(job, execution)
        except JobFailure as exc:
            self._end(job, execution, failure=str(exc))
        except Exception as exc:  # an emulator bug: the job says so instead of hanging InProgress
            traceback.print_exc()
            self._end(job, execution, failure=f"InternalServerError: the emulator failed: {type(exc).__name__}: {exc}")
        finally:
            _kill(execution.proc)

    def _plan_block(self, job: JobRecord, now: datetime) -> dict[str, Any] | None:
        """The job's plan's block running at ``now`` (of the job's instance type), else None."""
        plan = self.extension.describe_plan(job.plan_arn, now)
        instance_type = (job.params.get("ResourceConfig") or {}).get("InstanceType")
        for block in plan.get("ReservedCapacitySummaries") or []:
            if block["InstanceType"] == instance_type and block["StartTime"] <= now < block["EndTime"]:
                return block
        return None

    def _execute(self, job: JobRecord, execution: Execution) -> None:
        block = None
        if job.plan_arn:
            block = self._wait_for_block(job, execution)
            if block is None:  # stopped while it waited (and ended), or ended by hand
                return
        if execution.stop_reason is not None:
            self._end(job, execution)
            return
        if job.infra_check_fails:
            self._fail_infra_check(job, execution)
            return
        self._check_network_role(job)
        if not self._move(job, "InProgress", "Downloading", "Downloading input data"):
            return
        syncs = self.lay_out(job, execution, self._as_job(job)("s3"))
        if execution.stop_reason is not None:
            self._end(job, execution, syncs=syncs)
            return
        if not self._move(job, "InProgress", "Training", "Training image download completed. Training in progress."):
            return
        proc = self._start(job, execution, block)
        if proc is None:
            self._end(job, execution, syncs=syncs)
            return
        returncode = self._supervise(job, execution, proc, syncs, block)
        if job.status in TERMINAL_JOB_STATUSES:  # ended by hand: nothing to report
            return
        self._end(job, execution, syncs=syncs, returncode=returncode)

    def _fail_infra_check(self, job: JobRecord, execution: Execution) -> None:
        """The job's infrastructure health check fails (:meth:`.sagemaker.SageMakerExtension.fail_infra_checks`): it
        ends ``Failed`` with :data:`.sagemaker.INFRA_CHECK_FAILURE_REASON` before anything is downloaded or started,
        never having started training (no ``TrainingStartTime``, no billable time)."""
        if not self._move(job, "InProgress", "Starting", "Running the infrastructure health check (InfraCheckConfig)"):
            return
        self._note(execution, "[local-aws] the infrastructure health check fails (LocalAws.fail_infra_checks)")
        self._flush(job, execution)
        self._move(
            job,
            "Failed",
            None,
            INFRA_CHECK_FAILURE_REASON,
            failure_reason=INFRA_CHECK_FAILURE_REASON,
            before_start=True,
        )

    def _check_network_role(self, job: JobRecord) -> None:
        """SageMaker puts a VPC job's network interfaces in its subnets as the job's execution role: each EC2
        action it needs is decided with the role's policies (module docstring).

        Raises:
            JobFailure: ``ClientError: ...`` naming the first action the role is not allowed.
        """
        vpc_config = job.params.get("VpcConfig")
        if not vpc_config or self.authorizer is None:
            return
        from devtools.local_aws import network

        role = str(job.params.get("RoleArn"))
        vpc_id = network.check_vpc_config(vpc_config, account=job.account, region=job.region)
        principal = self.authorizer.authorities.by_arn(role)
        for check in network.network_interface_checks(vpc_config, vpc_id, self.authorizer.reference, region=job.region):
            decision = self.authorizer.decide(principal, check) if principal is not None else None
            if decision is None or not decision.allowed:
                why = decision.reason(check.action) if decision is not None else "because it has no policies"
                raise JobFailure(
                    f"ClientError: The execution role {role} is not authorized to perform: {check.action} on resource: "
                    f"{check.resource} {why}; SageMaker needs it to create the job's network interfaces in its "
                    "VpcConfig subnets"
                )

    def _wait_for_block(self, job: JobRecord, execution: Execution) -> dict[str, Any] | None:
        """Keep the job ``Pending`` until its plan runs a block of its instance type; returns that block.

        ``None``: the job was stopped meanwhile (it is ended) or ended by hand.

        Raises:
            JobFailure: ``CapacityError``: the plan is neither running such a block nor ``Scheduled``.
        """
        assert job.plan_arn is not None
        waited = False
        while True:
            now = datetime.now(UTC)
            block = self._plan_block(job, now)
            if block is not None:
                break
            status = self.extension.describe_plan(job.plan_arn, now)["Status"]
            if status != "Scheduled":
                raise JobFailure(
                    failure_reason(
                        CAPACITY_ERROR, f"training plan {job.plan_arn} is {status}; its capacity cannot run the job"
                    )
                )
            if execution.stop_reason is not None:
                self._end(job, execution)
                return None
            waited = True
            time.sleep(POLL_S)
        if waited and not self._move(job, "InProgress", "Starting", "Launching requested ML instances"):
            return None
        return block

    def _start(
        self, job: JobRecord, execution: Execution, block: Mapping[str, Any] | None
    ) -> subprocess.Popen[str] | None:
        """Start the trainer's entry point on the job's ``/opt/ml`` (``None``: a stop came first)."""
        env = {str(k): str(v) for k, v in (job.params.get("Environment") or {}).items()}
        env["TRAINER_NPROC_PER_NODE"] = str(execution.processes)
        if block is not None:
            env[CAPACITY_BLOCK_ENV] = str(int(block["EndTime"].timestamp() * 1000))
        count = int((job.params.get("ResourceConfig") or {}).get("InstanceCount") or 1)
        if count > 1:
            self._note(execution, f"[local-aws] InstanceCount={count}: the emulator runs one node (algo-1) only")
        with execution.lock:
            if execution.stop_reason is not None:
                return None
            execution.proc = start_local(execution.base, None, env=env, nproc=execution.processes, new_session=True)
            return execution.proc

    def _supervise(
        self,
        job: JobRecord,
        execution: Execution,
        proc: subprocess.Popen[str],
        syncs: Sequence[FolderSync],
        block: Mapping[str, Any] | None,
    ) -> int:
        """Read the entry point's output and publish it, sync its checkpoints and TensorBoard files and enforce its
        deadlines until
        it exits (killed at once when the job is ended by hand); returns its exit status."""
        reader = threading.Thread(target=self._read, args=(execution, proc), daemon=True)
        reader.start()
        max_runtime = (job.params.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds")
        started = (job.started or datetime.now(UTC)).timestamp()
        runtime_end = None if max_runtime is None else started + float(max_runtime)
        reclaim_at = None if block is None else block["EndTime"].timestamp() - CAPACITY_BLOCK_RECLAIM_S
        last_sync = last_flush = time.monotonic()
        while proc.poll() is None:
            time.sleep(POLL_S)
            if job.status in TERMINAL_JOB_STATUSES:
                kill_tree(proc.pid)
                break
            self._enforce_deadlines(job, execution, proc, runtime_end, reclaim_at)
            if time.monotonic() - last_flush >= LOG_FLUSH_INTERVAL_S:
                self._flush(job, execution)
                last_flush = time.monotonic()
            if syncs and time.monotonic() - last_sync >= self.sync_interval_s:
                for sync in syncs:
                    sync.upload_changes()
                last_sync = time.monotonic()
        returncode = proc.wait()
        reader.join(timeout=30)
        self._flush(job, execution)
        return returncode

    def _enforce_deadlines(
        self,
        job: JobRecord,
        execution: Execution,
        proc: subprocess.Popen[str],
        runtime_end: float | None,
        reclaim_at: float | None,
    ) -> None:
        """Stop the job at ``runtime_end`` (``MaxRuntimeInSeconds``) or at its block's reclaim point (epoch
        seconds; SIGTERM), and SIGKILL it :attr:`stop_grace_s` after a SIGTERM it outlived."""
        now = time.time()
        if runtime_end is not None and now >= runtime_end and execution.stop_reason is None:
            max_runtime = job.params["StoppingCondition"]["MaxRuntimeInSeconds"]
            self._note(execution, f"[local-aws] MaxRuntimeInSeconds={max_runtime} reached: stopping the job")
            self._move(job, "Stopping", "MaxRuntimeExceeded", "The job reached its MaxRuntimeInSeconds")
            self._signal_stop(execution, "MaxRuntimeExceeded")
        if reclaim_at is not None and now >= reclaim_at and execution.stop_reason is None:
            end = datetime.fromtimestamp(reclaim_at + CAPACITY_BLOCK_RECLAIM_S, tz=UTC).isoformat()
            self._note(execution, f"[local-aws] capacity block ends {end}: reclaiming its instances")
            self._move(job, "Stopping", "Stopping", f"The training plan's capacity block ends at {end}")
            self._signal_stop(execution, "Interrupted")
        if execution.stop_sent is not None and time.monotonic() - execution.stop_sent >= self.stop_grace_s:
            self._note(execution, f"[local-aws] still running {self.stop_grace_s:g} s after SIGTERM: SIGKILL")
            kill_tree(proc.pid)

    def lay_out(self, job: JobRecord, execution: Execution, s3: Any) -> list[FolderSync]:
        """Write the job's ``/opt/ml`` and download its channels and checkpoints (see the module docstring); returns
        the folders to upload while the job runs (its checkpoints, its TensorBoard output).

        Raises:
            JobFailure: ``ClientError: ...`` for a channel, checkpoint or TensorBoard location the emulator cannot
                serve.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        base = execution.base
        if base.parent.exists():
            shutil.rmtree(base.parent)  # a folder of an earlier emulator run with the same state dir
        base.mkdir(parents=True)
        default_mode = (job.params.get("AlgorithmSpecification") or {}).get("TrainingInputMode", "File")
        channels = {
            channel["ChannelName"]: (
                _copy_file_system_channel(channel, self.fsx_root, SageMakerPaths(base))
                if "FileSystemDataSource" in (channel.get("DataSource") or {})
                else _download_channel(s3, channel, default_mode, SageMakerPaths(base))
            )
            for channel in job.params.get("InputDataConfig") or []
        }
        paths = prepare_base_dir(base, job.params.get("HyperParameters") or {}, input_data_config=channels)
        syncs = []
        tensorboard = job.params.get("TensorBoardOutputConfig")
        if tensorboard:
            config = {"LocalPath": DEFAULT_TENSORBOARD_LOCAL_PATH, **tensorboard}
            paths.tensorboard_config_file.write_text(json.dumps(config) + "\n", encoding="utf-8")
            local = _under_opt_ml(base, config["LocalPath"], "TensorBoardOutputConfig.LocalPath")
            syncs.append(FolderSync(s3, config["S3OutputPath"], local))
        checkpoint = job.params.get("CheckpointConfig") or {}
        if not checkpoint.get("S3Uri"):
            return syncs
        local = _under_opt_ml(
            base, checkpoint.get("LocalPath") or f"{OPT_ML}/checkpoints", "CheckpointConfig.LocalPath"
        )
        sync = FolderSync(s3, checkpoint["S3Uri"], local)
        try:
            count = sync.download()
        except (ClientError, BotoCoreError, ValueError) as exc:
            raise JobFailure(f"ClientError: checkpoint download from {checkpoint['S3Uri']} failed: {exc}") from None
        sync.mark_present()
        self._note(execution, f"[local-aws] {count} checkpoint file(s) downloaded from {checkpoint['S3Uri']}")
        return [*syncs, sync]

    def _note(self, execution: Execution, line: str) -> None:
        with execution.lock:
            execution.lines.append((time.time(), line))

    def _read(self, execution: Execution, proc: subprocess.Popen[str]) -> None:
        """The entry point's output, line by line, into the execution and the job's ``job.log``."""
        assert proc.stdout is not None
        with open(execution.base.parent / "job.log", "a", encoding="utf-8") as log:
            for raw in proc.stdout:
                line = raw.rstrip("\n")
                log.write(raw)
                log.flush()
                with execution.lock:
                    execution.lines.append((time.time(), line))

    def _flush(self, job: JobRecord, execution: Execution) -> None:
        with execution.lock:
            new = execution.lines[execution.published :]
            execution.published = len(execution.lines)
        if not new:
            return
        for seen, line in new:
            for metric, value in metrics_from_log(job.params, [line]).items():
                execution.final[metric] = (value, seen)
        try:
            publish_logs(self._as_job(job), job, [line for _, line in new], times=[seen for seen, _ in new])
        except Exception:  # CloudWatch of the emulator: never the job's failure
            traceback.print_exc()
        with self.extension.lock:
            job.final_metrics = [
                {"MetricName": k, "Value": v, "Timestamp": datetime.fromtimestamp(t, tz=UTC)}
                for k, (v, t) in sorted(execution.final.items())
            ]

    def _end(
        self,
        job: JobRecord,
        execution: Execution,
        *,
        syncs: Sequence[FolderSync] = (),
        returncode: int | None = None,
        failure: str | None = None,
    ) -> None:
        """Upload what the job left, then move it to its terminal status."""
        stopped = execution.stop_reason
        if failure is None and returncode is not None and stopped is None:
            self._move(job, "InProgress", "Uploading", "Uploading generated training model")
        upload_error = None
        try:
            for sync in syncs:
                sync.upload_changes()
            if returncode is not None:
                self._upload_artifacts(job, execution.base)
        except Exception as exc:
            upload_error = f"ClientError: uploading the job's files failed: {type(exc).__name__}: {exc}"
        self._flush(job, execution)
        paths = SageMakerPaths(execution.base)
        if failure is None and returncode not in (None, 0):
            reason = paths.failure_file.read_text(encoding="utf-8").strip() if paths.failure_file.exists() else ""
            failure = failure_reason(ALGORITHM_ERROR, reason or f"the entry point exited with status {returncode}")
        failure = failure or upload_error
        if failure is not None:
            self._move(job, "Failed", None, failure, failure_reason=failure)
        elif stopped is not None:
            secondary = {"MaxRuntimeExceeded": "MaxRuntimeExceeded", "Interrupted": "Interrupted"}.get(
                stopped, "Stopped"
            )
            if job.status == "InProgress":
                self._move(job, "Stopping", "Stopping", "Stopping the training job")
            self._move(job, "Stopped", secondary, f"Training job stopped ({stopped})")
        else:
            self._move(job, "Completed", "Completed", "Training job completed")

    def _upload_artifacts(self, job: JobRecord, base: Path) -> None:
        """Upload ``model.tar.gz`` and ``output.tar.gz`` below ``OutputDataConfig.S3OutputPath``, under its
        ``KmsKeyId`` when it names one (SSE-KMS with that key, as SageMaker writes them)."""
        config = job.params.get("OutputDataConfig") or {}
        output = config.get("S3OutputPath")
        if not output:
            return
        encryption = (
            {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": config["KmsKeyId"]} if config.get("KmsKeyId") else {}
        )
        bucket, prefix = split_s3_uri(output.rstrip("/") + "/")
        s3 = self._as_job(job)("s3")
        for folder, name in ((base / "model", "model.tar.gz"), (base / "output" / "data", "output.tar.gz")):
            s3.put_object(Bucket=bucket, Key=f"{prefix}{job.name}/output/{name}", Body=_tar_gz(folder), **encryption)
