"""The emulator executes the training jobs it accepts (``LocalAws(run_jobs=True)``, :mod:`devtools.local_aws.jobs`).

A tiny model (gpt-tiny, one block, one CPU process) runs through the trainer's container entry
point from a ``CreateTrainingJob`` request, end to end: statuses, ``FinalMetricDataList``,
CloudWatch datapoints, logs, checkpoints and TensorBoard event files in S3, events delivered (with retries, and again on
demand) to in-process targets; ``StopTrainingJob`` -> SIGTERM -> ``Stopped`` with a checkpoint
that a second job resumes; a job on a plan whose block ends soon stops itself before the reclaim
point and is ``Completed`` below ``max_steps``. One emulator for the module; every job ~10-30 s.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from devtools.local_aws.client import LocalAws
from devtools.local_aws.shapes import validate_output
from platform_constructs.submitter.runtime.settings import TRAINING_JOB_OUTPUT_PREFIX
from platform_spec.capacity import CAPACITY_BLOCK_RECLAIM_S
from platform_spec.health import INFRA_CHECK_ERROR, NON_FINITE_REASON
from platform_spec.metric_lines import parse_line
from platform_spec.runs import FAILED, RunSpec, SegmentOutcome, decide
from platform_spec.tracking import DEFAULT_TENSORBOARD_LOCAL_PATH, TENSORBOARD_OUTPUT_PREFIX
from training.environment import STOP_MARGIN_S, SageMakerPaths
from training.supervision import read_status

from .conftest import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("devtools-emulator-jobs")]

HERE = Path(__file__).resolve().parent
RECORD = "emulator_targets:record"  # tests/devtools/emulator_targets.py, on the emulator's PYTHONPATH
FLAKY = "emulator_targets:flaky"
LOSS = r"\[metrics\] step=\d+ loss=([0-9.]+)"
TINY: dict[str, str] = {
    "model": "gpt-tiny",
    "num_layers": "1",
    "precision": "fp32",
    "batch_size": "2",
    "seq_length": "32",
    "max_steps": "6",
    "warmup_steps": "1",
    "log_interval": "1",
    "checkpoint_interval": "2",
    "keep_checkpoints": "2",
    "synthetic_data": "true",
}
"""Strings, as SageMaker carries hyperparameters."""


@pytest.fixture(scope="module")
def aws() -> Any:
    # by file, not as tests.devtools...: a package installed as `tests` would shadow this repository's folder
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        emulator = LocalAws(run_jobs=True, event_targets=[RECORD, FLAKY], event_retry_delays=[0.1, 0.1])
        emulator.start()
    try:
        yield emulator
    finally:
        emulator.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _create(aws: LocalAws, name: str, hyperparameters: dict[str, str], **overrides: Any) -> None:
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": f"arn:aws:iam::123456789012:role/{aws.resources['execution_role_name']}",
        "AlgorithmSpecification": {
            "TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/training-platform/trainer:local",
            "TrainingInputMode": "File",
            "MetricDefinitions": [{"Name": "train:loss", "Regex": LOSS}],
        },
        "HyperParameters": hyperparameters,
        # where the platform's jobs write: the execution role may write nowhere else in the output bucket
        "OutputDataConfig": {"S3OutputPath": f"s3://{aws.resources['output_bucket']}/{TRAINING_JOB_OUTPUT_PREFIX}"},
        "ResourceConfig": {"InstanceType": "ml.p5.48xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
        "CheckpointConfig": {"S3Uri": f"s3://{aws.resources['checkpoint_bucket']}/emulator-tests/{name}/"},
        "Tags": [{"Key": "platform:run-id", "Value": "emulator-test"}],
    }
    request.update(overrides)
    aws.client("sagemaker").create_training_job(**request)


def _keys(aws: LocalAws, bucket: str, prefix: str) -> list[str]:
    found = aws.client("s3").list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents") or []
    return sorted(o["Key"][len(prefix) :] for o in found)


def _complete_steps(keys: list[str]) -> list[int]:
    return sorted(int(k.split("/")[0].removeprefix("step-")) for k in keys if k.endswith("/.complete"))


def _log_lines(aws: LocalAws, name: str) -> list[str]:
    logs = aws.client("logs")
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix=f"{name}/")
    (stream,) = streams["logStreams"]
    assert stream["logStreamName"].startswith(f"{name}/algo-1-")
    events = logs.get_log_events(
        logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream["logStreamName"], startFromHead=True
    )["events"]
    return [e["message"] for e in events]


def test_a_job_runs_end_to_end_from_its_request(aws: LocalAws, tmp_path: Path) -> None:
    from training.prepare import prepare_data

    # a real train channel in the emulated S3: byte-level shards of a small text
    text = tmp_path / "corpus.txt"
    text.write_text("The emulator runs the trainer through its container entry point. " * 400, encoding="utf-8")
    shards = prepare_data(tmp_path / "shards", [text]).output_dir
    s3 = aws.client("s3")
    data_bucket = aws.resources["data_bucket"]
    for path in sorted(p for p in Path(shards).rglob("*") if p.is_file()):
        s3.upload_file(str(path), data_bucket, f"datasets/emulator/train/{path.relative_to(shards).as_posix()}")
    name = _name("e2e")
    hp = {**TINY, "synthetic_data": "false"}
    channel = {
        "ChannelName": "train",
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": f"s3://{data_bucket}/datasets/emulator/train/",
                "S3DataDistributionType": "FullyReplicated",
            }
        },
    }
    # TensorBoard output where the submitter puts it by default (no LocalPath: SageMaker's default)
    tensorboard_uri = f"s3://{aws.resources['output_bucket']}/{TENSORBOARD_OUTPUT_PREFIX}{name}/"
    _create(aws, name, hp, InputDataConfig=[channel], TensorBoardOutputConfig={"S3OutputPath": tensorboard_uri})
    job = aws.wait_for_job(name, timeout=180)

    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    assert [t["Status"] for t in job["SecondaryStatusTransitions"]] == [
        "Starting", "Downloading", "Training", "Uploading", "Completed",
    ]  # fmt: skip
    start, end = datetime.fromisoformat(job["TrainingStartTime"]), datetime.fromisoformat(job["TrainingEndTime"])
    assert start < end and job["BillableTimeInSeconds"] == max(1, int((end - start).total_seconds()))

    # /opt/ml as SageMaker lays it out: strings, the channel named, no instance type (GPUs not emulated)
    paths = SageMakerPaths(aws.job_dir(name))
    assert json.loads(paths.hyperparameters_file.read_text()) == hp
    assert json.loads(paths.input_data_config_file.read_text()) == {
        "train": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}
    }
    resource = json.loads(paths.resource_config_file.read_text())
    assert resource["hosts"] == ["algo-1"] and "current_instance_type" not in resource
    assert sorted(p.name for p in paths.train_dir.iterdir()) == sorted(p.name for p in Path(shards).iterdir())
    assert json.loads(paths.tensorboard_config_file.read_text()) == {
        "LocalPath": DEFAULT_TENSORBOARD_LOCAL_PATH, "S3OutputPath": tensorboard_uri,
    }  # fmt: skip

    # logs, metrics and the final metric: the last loss line the trainer printed
    lines = _log_lines(aws, name)
    losses = [float(line.split("loss=")[1].split()[0]) for line in lines if line.startswith("[metrics] step=")]
    assert len(losses) == 6 and any("training finished at step 6" in line for line in lines)
    assert [(m["MetricName"], m["Value"]) for m in job["FinalMetricDataList"]] == [("train:loss", losses[-1])]
    stats = aws.client("cloudwatch").get_metric_statistics(
        Namespace="/aws/sagemaker/TrainingJobs",
        MetricName="train:loss",
        Dimensions=[{"Name": "TrainingJobName", "Value": name}],
        StartTime=start - timedelta(minutes=5),
        EndTime=end + timedelta(minutes=5),
        Period=3600,
        Statistics=["SampleCount", "Minimum", "Maximum"],
    )["Datapoints"]
    assert sum(d["SampleCount"] for d in stats) == 6
    assert min(d["Minimum"] for d in stats) == min(losses) and max(d["Maximum"] for d in stats) == max(losses)

    # checkpoints synced to the job's S3 prefix (never deleted there), model uploaded
    keys = _keys(aws, aws.resources["checkpoint_bucket"], f"emulator-tests/{name}/")
    # step-2 is pruned locally once step-6 is saved: whether a 2 s sync saw it first depends on the load
    assert set(_complete_steps(keys)) - {2} == {4, 6} and "step-6/trainer_state.json" in keys
    assert _keys(aws, aws.resources["output_bucket"], f"{TRAINING_JOB_OUTPUT_PREFIX}{name}/") == [
        "output/model.tar.gz", "output/output.tar.gz",
    ]  # fmt: skip

    # the trainer's TensorBoard event file, uploaded as the execution role to S3OutputPath, holds every step's
    # unrounded loss (metrics.jsonl) as TensorBoard itself reads it
    assert "[tracking] tensorboard: on" in lines
    (event_file,) = _keys(aws, aws.resources["output_bucket"], f"{TENSORBOARD_OUTPUT_PREFIX}{name}/")
    assert event_file.startswith("events.out.tfevents.")
    local_events = tmp_path / event_file
    s3.download_file(
        aws.resources["output_bucket"], f"{TENSORBOARD_OUTPUT_PREFIX}{name}/{event_file}", str(local_events)
    )
    accumulator = EventAccumulator(str(local_events)).Reload()
    recorded = [json.loads(line) for line in paths.metrics_file.read_text().splitlines()]
    assert [(e.step, e.value) for e in accumulator.Scalars("loss")] == [
        (r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in recorded if "loss" in r
    ]

    # one event per status change, to both targets; the flaky one succeeded on its second attempt
    events = aws.wait_for_deliveries()
    mine = [e for e in events if e["job"] == name]
    assert [(e["status"], e["secondary_status"]) for e in mine] == [
        ("InProgress", "Starting"), ("InProgress", "Downloading"), ("InProgress", "Training"),
        ("InProgress", "Uploading"), ("Completed", "Completed"),
    ]  # fmt: skip
    last = mine[-1]
    assert last["event"]["source"] == "aws.sagemaker"
    assert last["event"]["detail-type"] == "SageMaker Training Job State Change"
    assert last["event"]["resources"] == [job["TrainingJobArn"]]
    assert last["event"]["detail"]["Tags"] == {"platform:run-id": "emulator-test"}
    assert last["event"]["detail"]["TrainingEndTime"] == int(end.timestamp() * 1000)
    assert last["bus"] == {"status": "sent", "error": None}
    by_target = {d["target"]: d for d in last["deliveries"]}
    assert by_target[RECORD]["status"] == "delivered" and len(by_target[RECORD]["attempts"]) == 1
    seen = by_target[RECORD]["result"]
    assert (seen["job"], seen["status"], seen["function_name"]) == (name, "Completed", "record")
    assert seen["request_id"] == by_target[RECORD]["attempts"][0]["request_id"] and seen["remaining_ms"] > 0
    flaky = by_target[FLAKY]
    assert flaky["status"] == "delivered" and len(flaky["attempts"]) == 2
    assert "fails on purpose" in flaky["attempts"][0]["error"] and flaky["attempts"][1]["error"] is None

    # a duplicate delivery of the same event (same id), as EventBridge may deliver it
    (again,) = aws.redeliver_event(last["id"], [RECORD])
    record = next(e for e in aws.wait_for_deliveries() if e["id"] == last["id"])
    duplicate = next(d for d in record["deliveries"] if d["delivery_id"] == again)
    assert duplicate["redelivery"] and duplicate["status"] == "delivered"
    assert duplicate["result"]["status"] == "Completed" and duplicate["result"]["request_id"] != seen["request_id"]


def test_stop_sends_sigterm_the_checkpoint_reaches_s3_and_a_second_job_resumes_it(aws: LocalAws) -> None:
    first, second = _name("stop"), _name("resume")
    uri = f"s3://{aws.resources['checkpoint_bucket']}/emulator-tests/shared-{first}/"
    long_run = {**TINY, "max_steps": "100000", "checkpoint_interval": "100000"}
    _create(aws, first, long_run, CheckpointConfig={"S3Uri": uri})
    paths = SageMakerPaths(aws.job_dir(first))
    log = aws.job_dir(first).parent / "job.log"  # the job's output as the emulator reads it
    wait_until(lambda: log.exists() and "[metrics] step=2 " in log.read_text(), "step 2 trained")

    aws.client("sagemaker").stop_training_job(TrainingJobName=first)
    assert aws.describe_training_job(first)["TrainingJobStatus"] in ("Stopping", "Stopped")
    stopped = aws.wait_for_job(first)
    assert stopped["TrainingJobStatus"] == "Stopped" and stopped["SecondaryStatus"] == "Stopped"
    status = read_status(paths)
    assert status is not None and status.stopped_after is not None and status.stopped_after >= 2
    step = status.stopped_after
    keys = _keys(aws, aws.resources["checkpoint_bucket"], f"emulator-tests/shared-{first}/")
    assert _complete_steps(keys) == [step]  # the SIGTERM checkpoint, the only one this run wrote
    assert any(f"stopped by SIGTERM: the workers stopped after step {step}" in line for line in _log_lines(aws, first))
    statuses = [(e["status"], e["secondary_status"]) for e in aws.events(first)]
    assert statuses[-2:] == [("Stopping", "Stopping"), ("Stopped", "Stopped")]

    _create(aws, second, {**long_run, "max_steps": str(step + 2)}, CheckpointConfig={"S3Uri": uri})
    resumed = aws.wait_for_job(second)
    assert resumed["TrainingJobStatus"] == "Completed", resumed.get("FailureReason")
    lines = _log_lines(aws, second)
    assert any("[local-aws] " in line and "checkpoint file(s) downloaded" in line for line in lines)
    assert any("resumed from" in line and f"(step {step};" in line for line in lines)
    assert [line.split()[1] for line in lines if line.startswith("[metrics] ")] == [
        f"step={step + 1}", f"step={step + 2}",
    ]  # fmt: skip
    assert _complete_steps(_keys(aws, aws.resources["checkpoint_bucket"], f"emulator-tests/shared-{first}/")) == [
        step, step + 2,
    ]  # fmt: skip


def test_a_job_on_a_plan_waits_for_its_block_and_stops_itself_before_the_reclaim_point(aws: LocalAws) -> None:
    now = datetime.now(UTC)
    slack = 25  # seconds of training before the trainer's margin reaches the reclaim point
    block_start = now + timedelta(seconds=3)
    block_end = now + timedelta(seconds=CAPACITY_BLOCK_RECLAIM_S + STOP_MARGIN_S + slack)
    plan = {
        "TrainingPlanName": _name("soon"),
        "InstanceType": "ml.p5.48xlarge",
        "TotalInstanceCount": 1,
        "ReservedCapacitySummaries": [{"StartTime": block_start.isoformat(), "EndTime": block_end.isoformat()}],
    }
    (plan_arn,) = aws.set_plans([plan])
    name = _name("block")
    max_steps = 1_000_000
    _create(
        aws,
        name,
        {**TINY, "max_steps": str(max_steps), "checkpoint_interval": "50"},
        ResourceConfig={
            "InstanceType": "ml.p5.48xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100, "TrainingPlanArn": plan_arn,
        },
    )  # fmt: skip
    assert aws.describe_training_job(name)["SecondaryStatus"] == "Pending"
    job = aws.wait_for_job(name, timeout=120)

    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason")
    transitions = [t["Status"] for t in job["SecondaryStatusTransitions"]]
    assert transitions[:3] == ["Pending", "Starting", "Downloading"] and transitions[-1] == "Completed"
    started = datetime.fromisoformat(job["TrainingStartTime"])
    assert started >= block_start  # nothing ran before the block
    ended = datetime.fromisoformat(job["TrainingEndTime"])
    assert ended < block_end - timedelta(seconds=CAPACITY_BLOCK_RECLAIM_S)  # the trainer stopped itself first
    steps = _complete_steps(_keys(aws, aws.resources["checkpoint_bucket"], f"emulator-tests/{name}/"))
    assert steps and steps[-1] < max_steps
    status = read_status(SageMakerPaths(aws.job_dir(name)))
    assert status is not None and status.saved == steps[-1] and "capacity block" in (status.reason or "")


def test_stops_and_refusals_that_need_no_training_step(aws: LocalAws) -> None:
    # a precision the CPU cannot run fails with the trainer's own reason (GPUs are not emulated)
    gpu_only = _name("mxfp8")
    _create(aws, gpu_only, {**TINY, "precision": "mxfp8"})
    failed = aws.wait_for_job(gpu_only)
    assert failed["TrainingJobStatus"] == "Failed"
    assert failed["FailureReason"].startswith("AlgorithmError: ") and "needs an NVIDIA GPU" in failed["FailureReason"]
    assert [e["status"] for e in aws.events(gpu_only)][-1] == "Failed"

    # MaxRuntimeInSeconds passes while the trainer starts: stopped, secondary status MaxRuntimeExceeded
    slow = _name("maxrt")
    _create(aws, slow, {**TINY, "max_steps": "100000"}, StoppingCondition={"MaxRuntimeInSeconds": 1})
    over = aws.wait_for_job(slow)
    assert (over["TrainingJobStatus"], over["SecondaryStatus"]) == ("Stopped", "MaxRuntimeExceeded")

    # a channel the emulator cannot serve fails before anything starts, naming it
    missing = _name("nodata")
    channel = {
        "ChannelName": "train",
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://no-such-bucket-here/x/"}},
    }
    _create(aws, missing, TINY, InputDataConfig=[channel])
    refused = aws.wait_for_job(missing)
    assert refused["TrainingJobStatus"] == "Failed"
    assert refused["FailureReason"].startswith("ClientError: Data download failed: channel 'train'")

    # a TensorBoard LocalPath that leaves /opt/ml fails before the trainer starts, naming the field
    escaping = _name("tbpath")
    tensorboard = {
        "S3OutputPath": f"s3://{aws.resources['output_bucket']}/tensorboard/x/",
        "LocalPath": "/opt/ml/../tmp",
    }
    _create(aws, escaping, TINY, TensorBoardOutputConfig=tensorboard)
    refused = aws.wait_for_job(escaping)
    assert (refused["TrainingJobStatus"], refused["FailureReason"]) == (
        "Failed",
        "ClientError: TensorBoardOutputConfig.LocalPath '/opt/ml/../tmp': the emulator maps only normalised paths "
        "in /opt/ml/",
    )

    # an infrastructure health check told to fail: the first job created with EnableInfraCheck true fails before
    # anything is downloaded or started, without billable time; one without the check is not counted
    assert aws.fail_infra_checks(1) == 1
    unchecked, sick = _name("nocheck"), _name("infrack")
    _create(aws, unchecked, TINY, InputDataConfig=[channel])  # fails at its download, as above
    _create(aws, sick, TINY, InfraCheckConfig={"EnableInfraCheck": True})
    assert aws.admin("GET", "infra-check-failures") == {"count": 0}
    failed = aws.wait_for_job(sick)
    assert (failed["TrainingJobStatus"], failed["InfraCheckConfig"]) == ("Failed", {"EnableInfraCheck": True})
    assert failed["FailureReason"].startswith(f"{INFRA_CHECK_ERROR}: ")
    assert "TrainingStartTime" not in failed and "BillableTimeInSeconds" not in failed
    transitions = [(t["Status"], t["StatusMessage"]) for t in failed["SecondaryStatusTransitions"]]
    assert [status for status, _ in transitions] == ["Starting", "Starting", "Failed"]  # never Downloading
    assert "infrastructure health check" in transitions[1][1]
    assert not SageMakerPaths(aws.job_dir(sick)).hyperparameters_file.exists()  # no /opt/ml laid out
    assert validate_output("sagemaker", "DescribeTrainingJob", failed) == []
    assert aws.wait_for_job(unchecked)["FailureReason"].startswith("ClientError: Data download failed")

    # with execution off, a job stays as created (the existing tests' default) and no folder is made
    aws.set_run_jobs(False)
    try:
        idle = _name("idle")
        _create(aws, idle, TINY)
        time.sleep(1.0)
        described = aws.describe_training_job(idle)
        assert (described["TrainingJobStatus"], described["SecondaryStatus"]) == ("InProgress", "Starting")
        assert not aws.job_dir(idle).exists()
        aws.set_job_status(idle, "Completed")  # driven by hand: still an event
        assert [e["status"] for e in aws.events(idle)] == ["InProgress", "Completed"]
    finally:
        aws.set_run_jobs(True)


def test_a_diverging_job_fails_with_the_trainers_report_and_its_run_would_end_failed(aws: LocalAws) -> None:
    """A job that really diverges (learning rate and weight decay so large that the gradient norm becomes inf):
    its skipped steps are in its log, no checkpoint in S3 holds a non-finite update, it ends ``Failed`` with the
    trainer's report, and the run continuation's rule ends its run ``failed`` on that report."""
    name = _name("diverge")
    diverging = {
        **TINY, "max_steps": "12", "warmup_steps": "0", "learning_rate": "10", "min_learning_rate": "0",
        "weight_decay": "10", "checkpoint_interval": "1", "keep_checkpoints": "20", "max_nonfinite_steps": "3",
    }  # fmt: skip
    _create(aws, name, diverging)
    job = aws.wait_for_job(name, timeout=180)
    assert job["TrainingJobStatus"] == "Failed" and job["FailureReason"].startswith(
        f"AlgorithmError: {NON_FINITE_REASON}: "
    ), job.get("FailureReason")
    skipped = [v["skipped_steps"] for v in map(parse_line, _log_lines(aws, name)) if v and "skipped_steps" in v]
    assert skipped[-3:] == [1, 2, 3], skipped  # the last three steps skipped their updates, then the stop
    steps = _complete_steps(_keys(aws, aws.resources["checkpoint_bucket"], f"emulator-tests/{name}/"))
    assert steps and steps[-1] == len(skipped) - 3, (steps, skipped)  # the newest is the last step that trained
    outcome = SegmentOutcome(1, job["TrainingJobStatus"], job.get("SecondaryStatus"), job["FailureReason"])
    decision = decide(
        outcome, spec=RunSpec("emulator-diverge"), newest_segment=1, already_decided=False, stop_requested=False,
        newest_step=steps[-1], start_step=None, capacity_failures_before=0, max_steps=12, instance_hours=0.01,
        now=datetime.now(UTC),
    )  # fmt: skip
    assert decision.decision == FAILED and "non-finite" in decision.reason, decision


def test_a_checkpoints_marker_is_uploaded_after_its_files_even_at_the_same_mtime(tmp_path: Path) -> None:
    """A coarse file clock gives a checkpoint's shards, state and ``.complete`` one ``mtime_ns``; sorted by
    name, ``.complete`` came first, so S3 held a "complete" folder without its files while the sync ran (or
    for good, had it stopped there). No training run: a recording S3 client."""
    from devtools.local_aws.jobs import FolderSync

    folder = tmp_path / "step-4"
    folder.mkdir()
    for name in (".complete", "__0_0.distcp", "trainer_state.json"):
        (folder / name).write_bytes(b"x")
        os.utime(folder / name, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))

    class RecordingS3:
        def __init__(self) -> None:
            self.keys: list[str] = []

        def put_object(self, *, Bucket: str, Key: str, Body: bytes) -> None:
            self.keys.append(Key)

    s3 = RecordingS3()
    FolderSync(s3, "s3://ckpt/run-checkpoints/r/", tmp_path).upload_changes()
    assert s3.keys[-1] == "run-checkpoints/r/step-4/.complete" and len(s3.keys) == 3
