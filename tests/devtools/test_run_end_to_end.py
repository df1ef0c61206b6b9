"""A run end to end, as other services and `trainctl runs` see it, with every part real but AWS: the emulator
executes each segment through the trainer's container entry point on this CPU and sends every job state-change
event to the continuation function's handler (as the stack's EventBridge rule invokes it).

Segment 1 runs on a plan whose capacity block ends ~25 s into training: the trainer checkpoints and stops
itself, the job is ``Completed`` below ``max_steps``, and the continuation judges that from the checkpoint
in S3 and submits segment 2, on the other plan (what is left of the first block is too short), which resumes
from segment 1's checkpoint. The run is then stopped through the job API: segment 2 gets SIGTERM, saves,
ends ``Stopped``, and the run ends ``stopped`` with no third segment. It is then continued on purpose
(``continue_run``, with an instance-hour budget that bounds segment 3's ``MaxRuntimeInSeconds``): segment 3
resumes from segment 2's SIGTERM checkpoint, and is stopped in turn. ``max_steps`` is out of reach, so the
test does not depend on this machine's speed (``make demo`` shows a run that finishes).

In the same emulator two more runs hang: one's segment frozen whole (a frozen node) is stopped by the
continuation's outside watch; the other's (its jobs on 2 processes, as ``make demo`` runs them) has one rank
frozen with the demo's :class:`devtools.demo.RankHang` (a stuck rank) and fails with the trainer's hang report.
Each is decided ``continue`` and the next segment finishes the run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devtools import demo
from devtools.local_aws.client import LocalAws
from platform_constructs.observability.runtime.plan_metrics import publish_plan_metrics
from platform_constructs.submitter.runtime.actions import READ_ACTIONS
from platform_spec.metric_lines import parse_line
from platform_spec.runs import segment_job_name
from platform_spec.tracking import MLFLOW_LOGGING_ACTIONS
from trainctl.runs import show_runs
from trainctl.submitter_client import submit_local

from .conftest import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("devtools-run-end-to-end")]

RUN_ID = "e2e-run"
STEPS = 1_000_000  # never reached: the run ends because it is stopped
RUN_POLL_S = 1.0
"""How often a wait on a run's state asks for it: each describe costs ~37 ms of CPU here (the submitter's handler and
moto), so polling at wait_until's 0.2 s kept a fifth of a core busy through each wait."""


def _steps_logged(aws: LocalAws, job: str) -> list[int]:
    log = aws.job_dir(job).parent / "job.log"
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [int(v["step"]) for v in map(parse_line, lines) if v and "step" in v and "loss" in v]


def test_a_run_is_continued_across_blocks_resumes_from_s3_and_stops_on_request(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(demo, "RUN_FIRST_BLOCK_TRAINING_S", 25)
    hyperparameters = {**demo.RUN_HYPERPARAMETERS, "max_steps": STEPS, "checkpoint_interval": 1000, "log_interval": 1}
    request = {
        "instance_type": "ml.p6-b200.48xlarge",
        "capacity": "training-plan",
        "hyperparameters": {**hyperparameters, "synthetic_data": True},
        "max_runtime_hours": 1,
        "run": {"run_id": RUN_ID, "max_segments": 3, "min_segment_minutes": demo.RUN_MIN_SEGMENT_MINUTES},
    }
    first, second = segment_job_name(RUN_ID, 1), segment_job_name(RUN_ID, 2)
    with LocalAws(plans=demo.run_plans(), run_jobs=True, event_targets=[demo.RUN_CONTINUATION]) as aws:
        for key, value in aws.env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("COLUMNS", "200")  # rich's width off a terminal: the job names in full
        answer = submit_local(request, aws.env)
        assert answer["status"] == "submitted" and answer["training_job_name"] == first, answer
        assert answer["capacity"]["training_plan_arn"].endswith("/p6-b200-ending")

        # segment 1 ends with its block: Completed below max_steps, with a checkpoint the trainer saved
        ended = aws.wait_for_job(first, timeout=180)
        assert ended["TrainingJobStatus"] == "Completed", ended.get("FailureReason")
        stopped_at = _steps_logged(aws, first)[-1]
        assert 0 < stopped_at < STEPS

        # the continuation (an event target) started segment 2 on the other plan; it resumes from S3
        wait_until(
            lambda: _steps_logged(aws, second) if aws.job_dir(second).parent.exists() else None,
            "segment 2 trains",
            timeout=180,
        )
        job = aws.describe_training_job(second)
        assert job["ResourceConfig"]["TrainingPlanArn"].endswith("/p6-b200-next")
        assert job["CheckpointConfig"]["S3Uri"] == aws.describe_training_job(first)["CheckpointConfig"]["S3Uri"]
        assert _steps_logged(aws, second)[0] == stopped_at + 1
        principals = aws.principals()
        reader_env = {
            **aws.env,
            "AWS_ACCESS_KEY_ID": principals[_role_of(principals, "SubmitterReaderRole")]["access_key"],
            "SUBMITTER_ALLOWED_ACTIONS": ",".join(READ_ACTIONS),
        }
        described = submit_local({"action": "describe", "job_name": second}, reader_env)
        assert described["status"] != "error", described

        # metrics from the MetricDefinitions, and the events the rule would deliver
        assert {m["MetricName"] for m in ended["FinalMetricDataList"]} >= {"train:loss"}
        delivered = [e for e in aws.events(first) if e["status"] == "Completed"]
        assert delivered and all(d["status"] == "delivered" for e in delivered for d in e["deliveries"])

        # stopped through the job API, as `trainctl runs RUN_ID --stop` does: SIGTERM, a checkpoint, no segment 3
        assert show_runs(RUN_ID, local=True, stop=True, as_json=True) == 0
        stop = json.loads(capsys.readouterr().out)
        assert (stop["status"], stop["changed"], stop["training_job_name"]) == ("stopping", True, second)
        assert aws.wait_for_job(second, timeout=180)["TrainingJobStatus"] == "Stopped"
        view = wait_until(
            lambda: (
                (v := submit_local({"action": "describe", "run_id": RUN_ID}, aws.env)["run"])["state"] == "stopped"
                and v
            ),
            "the run is decided stopped",
            timeout=60,
            interval=RUN_POLL_S,
        )
        assert [s["training_job_name"] for s in view["segments"]] == [first, second]
        assert view["segments"][0]["decision"]["decision"] == "continue"
        assert view["segments"][1]["decision"]["decision"] == "stopped"
        assert view["newest_complete_step"] > stopped_at  # segment 2's SIGTERM checkpoint reached S3
        assert view["segments"][1]["first_step"] == stopped_at + 1

        assert show_runs(RUN_ID, local=True) == 0
        shown = capsys.readouterr().out
        assert first in shown and second in shown and "stopped" in shown

        # continued on purpose: segment 3 resumes from segment 2's checkpoint, bounded by what the budget leaves
        third = segment_job_name(RUN_ID, 3)
        body = {"action": "continue_run", "run_id": RUN_ID, "client_token": "e2e-continue", "max_instance_hours": 1}
        answer = submit_local(body, aws.env)
        assert (answer["status"], answer["training_job_name"]) == ("continued", third), answer
        assert submit_local(body, aws.env)["replayed"] is True
        left_s = (1 - view["instance_hours"]) * 3600
        assert left_s - 60 < aws.describe_training_job(third)["StoppingCondition"]["MaxRuntimeInSeconds"] <= left_s + 1
        wait_until(
            lambda: _steps_logged(aws, third) if aws.job_dir(third).parent.exists() else None,
            "segment 3 trains",
            timeout=180,
        )
        assert _steps_logged(aws, third)[0] == view["newest_complete_step"] + 1
        assert show_runs(RUN_ID, local=True, stop=True, as_json=True) == 0
        assert json.loads(capsys.readouterr().out)["training_job_name"] == third
        assert aws.wait_for_job(third, timeout=180)["TrainingJobStatus"] == "Stopped"

        _a_frozen_segment_is_stopped_by_the_tick_and_its_run_continues(aws)
        _a_stuck_rank_fails_its_segment_and_the_run_finishes(aws)

        # the reader's actions as the reader function (its role and settings), and the plan-metrics function's calls
        reads = (
            {"action": "describe", "run_id": RUN_ID},
            {"action": "describe", "job_name": first},
            {"action": "list"},
        )
        for action in (*reads, {"action": "list_runs"}):
            assert submit_local(action, reader_env)["status"] != "error", action
        assert submit_local({"action": "list"}, aws.env)["status"] != "error"  # the submitter's own list
        plan_metrics_key = principals[_role_of(principals, "ObservabilityPlanMetricsFunctionRole")]["access_key"]
        report = publish_plan_metrics(
            **{s: aws.client(s, access_key=plan_metrics_key) for s in ("ssm", "sagemaker", "cloudwatch")},
            parameter_name=aws.env["TRAINING_PLAN_ARNS_PARAMETER"],
        )
        assert not report.problems
        assert_every_statement_allowed_a_call(aws.grants())


STALL_RUN_ID = "e2e-stall"
STALL_MAX_STEPS = 30


def _a_frozen_segment_is_stopped_by_the_tick_and_its_run_continues(aws: LocalAws) -> None:
    """A run's segment 1 hangs for real (its trainer's process tree SIGSTOPped: a frozen node): the scheduled tick,
    as the continuation's role, reads its newest ``train:step`` from CloudWatch, stops it, and the run's next
    segment resumes from the SIGTERM checkpoint and finishes. The tick runs at the freeze plus ``stall_minutes``
    plus a minute on an injected clock (10 real minutes are not waited here); a tick at the real time before the
    freeze leaves the healthy job alone. Prints the real seconds from the freeze until ``StopTrainingJob``."""
    import time
    from datetime import UTC, datetime, timedelta

    from platform_constructs.submitter.construct import CONTINUATION_HANDLER
    from platform_constructs.submitter.runtime import continuation
    from platform_constructs.submitter.runtime.aws import Clients
    from platform_constructs.submitter.runtime.config import SubmitterConfig
    from platform_spec.health import MIN_STALL_MINUTES, STALL_STOP_REASON

    env = aws.function_env(CONTINUATION_HANDLER)
    clients, config = Clients.create(environ=env), SubmitterConfig.from_environ(env)
    events = aws.client("events", access_key=env["AWS_ACCESS_KEY_ID"])
    tick = {"source": "aws.events", "detail-type": "Scheduled Event", "detail": {}}
    first, second = segment_job_name(STALL_RUN_ID, 1), segment_job_name(STALL_RUN_ID, 2)
    hyperparameters = {**demo.RUN_HYPERPARAMETERS, "max_steps": STALL_MAX_STEPS, "checkpoint_interval": 1000,
                       "log_interval": 1, "synthetic_data": True}  # fmt: skip
    request = {
        "instance_type": "ml.p6-b200.48xlarge", "capacity": "training-plan", "hyperparameters": hyperparameters,
        "max_runtime_hours": 1, "stall_minutes": MIN_STALL_MINUTES,
        "run": {"run_id": STALL_RUN_ID, "max_segments": 3, "min_segment_minutes": demo.RUN_MIN_SEGMENT_MINUTES},
    }  # fmt: skip
    answer = submit_local(request, aws.env)
    assert answer["status"] == "submitted" and answer["training_job_name"] == first, answer
    cloudwatch = aws.client("cloudwatch")

    def step_published() -> bool:  # a train:step datapoint in CloudWatch, as the tick reads it
        listed = cloudwatch.list_metrics(
            Namespace="/aws/sagemaker/TrainingJobs", MetricName="train:step",
            Dimensions=[{"Name": "TrainingJobName", "Value": first}],
        )  # fmt: skip
        return bool(listed["Metrics"]) and len(_steps_logged(aws, first)) >= 2

    wait_until(step_published, "segment 1 publishes train:step", timeout=180)
    healthy = continuation.handle(tick, clients=clients, config=config, events=events, now=datetime.now(UTC))
    assert healthy["stalled"] == [] and healthy["step_ages_s"][STALL_RUN_ID] < 120, healthy
    assert aws.describe_training_job(first)["TrainingJobStatus"] == "InProgress"

    assert aws.freeze_job(first)
    frozen_at, frozen_wall = time.monotonic(), datetime.now(UTC)
    frozen_steps = _steps_logged(aws, first)
    later = frozen_wall + timedelta(minutes=MIN_STALL_MINUTES + 1)
    aws.clear_calls()
    caught = continuation.handle(tick, clients=clients, config=config, events=events, now=later)
    stops = [c for c in aws.calls("StopTrainingJob") if c["params"].get("TrainingJobName") == first]
    print(f"[stall] freeze -> StopTrainingJob: {time.monotonic() - frozen_at:.2f} s real (tick at freeze + "
          f"{MIN_STALL_MINUTES + 1:g} min on its clock)")  # fmt: skip
    assert caught["stalled"] == [STALL_RUN_ID] and len(stops) == 1, caught
    assert caught["step_ages_s"][STALL_RUN_ID] > MIN_STALL_MINUTES * 60
    assert _steps_logged(aws, first)[: len(frozen_steps)] == frozen_steps

    # thawed after its SIGTERM, it checkpoints and ends Stopped; its event decides continue, not stopped
    ended = aws.wait_for_job(first, timeout=180)
    assert (ended["TrainingJobStatus"], ended["SecondaryStatus"]) == ("Stopped", "Stopped")
    view = wait_until(
        lambda: (
            (v := submit_local({"action": "describe", "run_id": STALL_RUN_ID}, aws.env)["run"])["state"] == "finished"
            and v
        ),
        "the run's segment 2 resumes and finishes",
        timeout=300,
        interval=RUN_POLL_S,
    )
    decision = view["segments"][0]["decision"]
    assert decision["decision"] == "continue" and decision["reason"].startswith(STALL_STOP_REASON), decision
    assert "over stall_minutes 10" in decision["reason"]
    assert [s["training_job_name"] for s in view["segments"]] == [first, second]
    assert _steps_logged(aws, second)[0] == view["segments"][1]["first_step"] > frozen_steps[-1] - 1
    assert view["newest_complete_step"] == STALL_MAX_STEPS


HANG_RUN_ID = "e2e-hang"
HANG_MAX_STEPS = 20


def _a_stuck_rank_fails_its_segment_and_the_run_finishes(aws: LocalAws) -> None:
    """``make demo``'s hang, through the emulator: once a run's segment 1 has written a checkpoint, its rank 1 is
    frozen (the demo's :class:`demo.RankHang`, ``freeze_job(NAME, rank=1)``: SIGSTOP to that worker); rank 0's
    watchdog (the demo's ``watchdog_minutes``) reports the hang, the job ends ``Failed`` with the report and the
    stacks in its ``output.tar.gz``, the continuation decides ``continue``, and segment 2 resumes from the newest
    complete checkpoint and finishes the run. Prints the seconds from the freeze to each of these. The trainer's
    side of a stuck rank is checked here too (no separate 2-process run): the report names the last step and the
    stacks' folder, the status record is ``failed`` with it, and rank 0's stacks name the training loop and every
    thread, beside its gloo flight recorder."""
    from platform_spec.health import HANG_REASON
    from training.environment import SageMakerPaths
    from training.local import read_failure
    from training.supervision import read_status
    from training.watchdog import DUMP_FOLDER, stacks_file

    first, second = segment_job_name(HANG_RUN_ID, 1), segment_job_name(HANG_RUN_ID, 2)
    hyperparameters = {**demo.RUN_HYPERPARAMETERS, "max_steps": HANG_MAX_STEPS, "checkpoint_interval": 5,
                       "log_interval": 1, "synthetic_data": True, "watchdog_minutes": demo.HANG_WATCHDOG_MINUTES}  # fmt: skip
    request = {
        "instance_type": "ml.p6-b200.48xlarge", "capacity": "training-plan", "hyperparameters": hyperparameters,
        "max_runtime_hours": 1,
        "run": {"run_id": HANG_RUN_ID, "max_segments": 2, "min_segment_minutes": demo.RUN_MIN_SEGMENT_MINUTES},
    }  # fmt: skip
    aws.set_run_jobs(True, processes=demo.DEMO_PROCESSES)  # a stuck rank needs another rank to catch it
    answer = submit_local(request, aws.env)
    assert answer["status"] == "submitted" and answer["training_job_name"] == first, answer
    with pytest.raises(RuntimeError, match=r"HTTP 400.*freeze rank: got 2; expected an integer from 0 to 1"):
        aws.freeze_job(first, rank=2)

    hang = demo.RankHang(aws, first)
    wait_until(hang.poll, "segment 1 writes a checkpoint and its rank 1 is frozen", timeout=180)
    hung = aws.wait_for_job(first, timeout=180)
    assert hung["TrainingJobStatus"] == "Failed", hung
    assert hung["FailureReason"].startswith(f"AlgorithmError: {HANG_REASON}: no step completed in "), hung
    last = _steps_logged(aws, first)[-1]  # the step rank 0 was in at the freeze may still have completed
    assert last >= hang.frozen_after_step and f" after step {last} (limit " in hung["FailureReason"]
    paths = SageMakerPaths(aws.job_dir(first))
    report = read_failure(paths.base_dir)
    assert report is not None and report.startswith(f"{HANG_REASON}: no step completed in "), report
    assert f" after step {last} (limit " in report and "stacks in output/data/watchdog/" in report
    status = read_status(paths)
    assert status is not None and status.state == "failed" and status.reason == report
    assert "[run] state=failed" in (aws.job_dir(first).parent / "job.log").read_text(errors="replace")
    # rank 0's stacks and flight recorder, in the job's output.tar.gz
    stacks, recorder = stacks_file(paths, 0), paths.output_data_dir / DUMP_FOLDER / "rank-00000-flight-recorder.json"
    outputs = hang.watchdog_outputs()
    assert all(p.relative_to(paths.output_data_dir).as_posix() in outputs for p in (stacks, recorder)), outputs
    assert recorder.stat().st_size > 0
    text = stacks.read_text(encoding="utf-8")
    assert text.startswith(f"rank 0: {HANG_REASON}")
    assert "training/train.py" in text and "in _run" in text  # the main thread, stuck in the training loop
    assert "trainer-watchdog" in text or "in _watch" in text  # every thread, the watchdog's too
    assert "no NCCL flight recorder" in text and "flight recorder (gloo and other backends)" in text

    view = wait_until(
        lambda: (
            (v := submit_local({"action": "describe", "run_id": HANG_RUN_ID}, aws.env)["run"])["state"] == "finished"
            and v
        ),
        "the run's segment 2 resumes and finishes",
        timeout=300,
        interval=RUN_POLL_S,
    )
    assert [s["training_job_name"] for s in view["segments"]] == [first, second]
    decision = view["segments"][0]["decision"]
    assert decision["decision"] == "continue" and HANG_REASON in decision["reason"], decision
    # from the newest complete checkpoint: the one seen at the freeze, or one whose save was agreed as it froze
    assert _steps_logged(aws, second)[0] == view["segments"][1]["first_step"] > hang.checkpoint_step
    assert view["newest_complete_step"] == HANG_MAX_STEPS
    timeline = hang.timeline(second)
    print("[hang] from rank 1's freeze:", ", ".join(f"{k} {v:.1f} s" for k, v in timeline.items()))
    assert min(timeline.values()) > 0


NOT_EXERCISED: dict[frozenset[str] | str, str] = {
    "ModelFoldersRead": "the submitter reads a request's inputs.init_from config.json and heads its weights "
    "(tests/submitter/test_init_from.py, as the submitter's role); this run starts from scratch",
    frozenset({"logs:CreateLogStream", "logs:PutLogEvents"}): "Lambda's runtime writes a function's own log group; "
    "the emulator runs handlers in-process",
    frozenset({"ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"}): "SageMaker "
    "pulls the trainer image; the emulator runs the trainer from source",
    frozenset({"ecr:GetAuthorizationToken"}): "SageMaker pulls the trainer image (as above)",
    frozenset({"sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:SendMessage"}): "Lambda's asynchronous invocation "
    "sends a failed event to the continuation's dead-letter queue; the emulator's event bus retries and records",
    frozenset({"s3:GetBucket*", "s3:GetObject*", "s3:List*"}): "a job's train channel from the data bucket: this run "
    "trains on synthetic data; test_emulator_runs_jobs downloads a channel as the execution role",
    frozenset({"s3:DeleteObject"}): "the continuation deletes a run's waiting-for-capacity marker "
    "(tests/submitter's continuation tests); this run never waits",
    frozenset({"cloudwatch:PutMetricData"}): "the job-outcomes function's metrics: the emulator does not run that "
    "function (it needs its DynamoDB idempotency table)",
    frozenset({"s3:AbortMultipartUpload", "s3:PutObject"}): "processing jobs write prepared datasets below "
    "prepared/ of the data bucket: test_prepare_remote runs one, which writes as the execution role",
    frozenset(MLFLOW_LOGGING_ACTIONS): "the trainer's MLflow logging to a SageMaker managed tracking server, which "
    "the emulator does not run; test_authorization's tracking test authorizes each action as the execution role",
    frozenset({"dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}): "the "
    "job-outcomes function's idempotency records (as above)",
}
"""Statements no call of this scenario uses, by their actions (or their Sid, where other statements have the same
actions), and why each stays."""
PLATFORM_ROLES = (
    "SubmitterRole",
    "SubmitterReaderRole",
    "SubmitterContinuationRole",
    "ExecutionRole",
    "ObservabilityPlanMetricsFunctionRole",
    "ObservabilityJobOutcomesFunctionRole",
)
"""The roles the platform's own code acts as (the CDK's image-deployment role is the CDK's, not checked)."""


def _role_of(principals: dict[str, Any], prefix: str) -> str:
    """The logical id of the template's role ``prefix`` + CDK's hash."""
    (name,) = [
        n for n in principals if n.startswith(prefix) and n[len(prefix) :].isalnum() and len(n) == len(prefix) + 8
    ]
    return name


def assert_every_statement_allowed_a_call(grants: list[dict[str, Any]]) -> None:
    """Each statement of each platform role allowed a call of this scenario, or :data:`NOT_EXERCISED` says why not."""
    from devtools.local_aws.principals import authorities
    from devtools.local_aws.stack import DEFAULT_REGION, StackResources
    from devtools.local_aws.template import platform_template

    found = authorities(platform_template(DEFAULT_REGION), region=DEFAULT_REGION, resources=StackResources())
    used = {name for grant in grants for name in grant["statements"]}
    unused = []
    for role in PLATFORM_ROLES:
        principal = found.by_name[_role_of(dict.fromkeys(found.by_name), role)]
        for policy in principal.policies:
            for statement in policy.statements:
                actions = statement.document["Action"]
                key = frozenset([actions] if isinstance(actions, str) else actions)
                sid = statement.name.rpartition("#")[2]
                if statement.name not in used and key not in NOT_EXERCISED and sid not in NOT_EXERCISED:
                    unused.append(f"{role}: {statement.name} {sorted(key)}")
    assert not unused, "statements no call used (remove them, or say in NOT_EXERCISED why they stay):\n" + "\n".join(
        unused
    )
