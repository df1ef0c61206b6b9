"""``make demo`` (``python -m devtools.demo``): the platform end to end on embedded defaults, with no AWS account.

Steps (each prints a section; the first failure stops the demo non-zero):

1. **Infrastructure**: synthesize the CDK app, run cdk-nag (AwsSolutions) and
   cfn-lint, and summarise what ``cdk deploy`` would create.
2. **Plan**: the planner's memory/throughput/cost answer for the guide's
   default request (gpt-1b, mxfp8, 10 layers, batch 8, sequence 2048 on
   ``ml.p6-b200.48xlarge``).
3. **Submit**: start the embedded AWS emulator (``trainctl local-aws``; moto
   plus emulated training-plan operations), seed two plans (one fitting, one
   expired), submit the guide's default request with a ``client_token``, send
   it again (a retry: the first job comes back, ``"replayed": true``, nothing
   new is created), and a bad one; print the created job as
   ``DescribeTrainingJob`` returns it, and the refusal.
4. **Train**: tokenize CPython's documentation (real text on every machine),
   run the trainer through the same entry point SageMaker runs on a temporary
   ``SAGEMAKER_BASE_DIR``, interrupt it with SIGTERM (as a stop or a spot
   reclaim would), resume from the checkpoint, and print the loss curve's
   start and end; then cut the newest checkpoint's largest shard short (as an
   interrupted S3 upload leaves it) and restart: the trainer skips it with a
   log line and resumes from the one before.
5. **Run**: one training continued by the platform across a block's end and a stuck
   rank: the emulator executes each job it accepts through the trainer's entry point
   (2 processes) and sends its state-change events to the continuation function; the
   first segment stops itself at the end of its plan's block, the platform submits the
   second on the other plan, which resumes from the checkpoint in S3; once the second
   has written a checkpoint, its rank 1 is frozen (:class:`RankHang`), rank 0's watchdog
   fails the job with the hang report, and the third segment resumes from that
   checkpoint and finishes; the demo prints the seconds from the freeze to each of the
   platform's actions, ``trainctl runs`` shows the segments, and one loss curve spans
   them (``.demo/run/loss.png``).
6. **Observe**: write the CloudWatch dashboard body as JSON with a PNG preview
   of its layout, and list the alarms.
7. **Sweep**: a small local sweep on CPU and its report (Markdown + PNGs).

Everything is written under ``.demo/`` (ignored by git; removed by
``make clean``). The demo ends with the wall time of each step (also in
``.demo/timings.json``). The app is synthesized once, in step 1, for the
demo's deployment (:data:`DEMO_CONTEXT` in :data:`DEMO_ENVIRON`: the two
training plans the emulator seeds, in its account and region); step 6 reads
that template instead of synthesizing again.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from devtools.local_aws.client import LocalAws
from platform_spec.metric_lines import SAGEMAKER_LOG_GROUP
from training.local import DEMO_HYPERPARAMETERS

REPO_ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = REPO_ROOT / ".demo"
EXAMPLES = REPO_ROOT / "examples"

# Wide enough for the tables and the trainer's metric lines when the output is a file or a pipe.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


class DemoError(RuntimeError):
    """A demo step found the platform misbehaving."""


DEMO_PLAN_ARNS = [
    "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p6-b200-active",
    "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p6-b200-expired",
]
"""The plans of ``examples/plans.json`` as the emulator names them (its account and region)."""
DEMO_CONTEXT = {"trainingPlanArns": DEMO_PLAN_ARNS}
"""The demo deployment's context overrides on top of ``cdk.json``."""
DEMO_ENVIRON = {"CDK_DEFAULT_ACCOUNT": "123456789012", "CDK_DEFAULT_REGION": "us-east-1"}
"""The demo deployment's account and region (the plans' own), whatever this machine's AWS configuration says."""

_synthesized: dict[str, Path] = {}
"""The stack template step 1 synthesized (``"template"``), for step 6."""


# --------------------------------------------------------------------------- 1


def step_infrastructure() -> None:
    from trainctl.synth_summary import render, summarize

    summary = summarize(str(DEMO_DIR / "cdk.out"), context=DEMO_CONTEXT, environ=DEMO_ENVIRON)
    console.print(
        f"The demo's deployment: account {DEMO_ENVIRON['CDK_DEFAULT_ACCOUNT']}, {DEMO_ENVIRON['CDK_DEFAULT_REGION']}, "
        f"with the {len(DEMO_PLAN_ARNS)} training plans the emulator seeds in step 3."
    )
    render(summary)
    if not summary.ok:
        raise DemoError("the synthesized app has unacknowledged cdk-nag findings or cfn-lint errors")
    if len(summary.stacks) == 1:
        _synthesized["template"] = summary.stacks[0].template


# --------------------------------------------------------------------------- 2


def step_plan() -> None:
    import planner
    from trainctl.plans import guide_default_input, render_plan

    render_plan(planner.estimate(guide_default_input()), console)


# --------------------------------------------------------------------------- 3


DEMO_CLIENT_TOKEN = "guide-default-demo-1"
"""The demo's idempotency key for the guide's request (any 1-128 characters of the submitter's alphabet)."""


def step_submit() -> None:
    from trainctl.submitter_client import submit_local

    out = DEMO_DIR / "submit"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    good = json.loads((EXAMPLES / "guide-default-request.json").read_text())
    good["client_token"] = DEMO_CLIENT_TOKEN  # what a caller adds so that its retries are safe
    bad = json.loads((EXAMPLES / "oversized-request.json").read_text())
    with LocalAws(plans=str(EXAMPLES / "plans.json")) as aws, open(out / "submitter.log", "w") as log:
        console.print(f"Emulator on {aws.env['AWS_ENDPOINT_URL']} (moto + emulated training-plan operations)")
        sagemaker = aws.client("sagemaker")
        table = Table(title="Training plans seeded in the emulator")
        for column in ("plan", "status", "instance type", "available / total", "ends"):
            table.add_column(column)
        for summary in sagemaker.list_training_plans()["TrainingPlanSummaries"]:
            plan = sagemaker.describe_training_plan(TrainingPlanName=summary["TrainingPlanName"])
            reserved = plan.get("ReservedCapacitySummaries") or [{}]
            table.add_row(
                plan["TrainingPlanName"],
                plan["Status"],
                reserved[0].get("InstanceType", "-"),
                f"{plan.get('AvailableInstanceCount', 0)} / {plan.get('TotalInstanceCount', 0)}",
                f"{plan['EndTime']:%Y-%m-%d %H:%M} UTC" if "EndTime" in plan else "-",
            )
        console.print(table)

        def submit(request: dict) -> dict:
            # the handler's JSON logs and EMF metrics go to the log file, as CloudWatch would get them
            with contextlib.redirect_stderr(log):
                return submit_local(request, aws.env)

        console.print(
            "[bold]The guide's default request[/] (examples/guide-default-request.json, with a client_token):"
        )
        console.print_json(data=good)
        response = submit(good)
        (out / "submitted.json").write_text(json.dumps(response, indent=2))
        if response.get("status") != "submitted":
            raise DemoError(f"the guide's default request was not submitted: {response}")
        estimate = response["estimate"]
        console.print(
            f"-> [green]{response['status']}[/] {response['training_job_name']} on {response['capacity']['type']}: "
            f"{response['capacity']['reason']}"
        )
        for skipped in response["capacity"].get("skipped_plans", []):
            console.print(f"   skipped {skipped['training_plan_arn'].rsplit('/', 1)[-1]}: {skipped['reason']}")
        console.print(
            f"   planner: {estimate['memory_gb']['total']:.1f} GB per GPU, fits={estimate['fits']}, "
            f"{estimate['tokens_per_second']:,.0f} tokens/s, MFU {estimate['mfu']:.1f}%"
        )
        job = aws.describe_training_job(response["training_job_name"])
        (out / "describe-training-job.json").write_text(json.dumps(job, indent=2, default=str))
        shown = {
            k: job[k]
            for k in (
                "TrainingJobName",
                "TrainingJobStatus",
                "AlgorithmSpecification",
                "ResourceConfig",
                "HyperParameters",
                "InputDataConfig",
                "CheckpointConfig",
                "StoppingCondition",
                "OutputDataConfig",
            )
            if k in job
        }
        shown["AlgorithmSpecification"] = {
            **shown.get("AlgorithmSpecification", {}),
            "MetricDefinitions": f"[{len(job['AlgorithmSpecification'].get('MetricDefinitions', []))} regexes "
            f"from platform_spec/metric_lines.py]",
        }
        console.print(
            "[bold]The created job, as DescribeTrainingJob returns it[/] (abridged; full: "
            f"{(out / 'describe-training-job.json').relative_to(REPO_ROOT)}):"
        )
        console.print_json(json.dumps(shown, default=str))

        console.print("[bold]The same request again[/] (a caller retrying after a lost answer: same client_token):")
        retried = submit(good)
        (out / "retried.json").write_text(json.dumps(retried, indent=2))
        named = [
            j
            for j in sagemaker.list_training_jobs()["TrainingJobSummaries"]
            if j["TrainingJobName"] == response["training_job_name"]
        ]
        if not (
            retried.get("replayed") is True
            and retried.get("training_job_arn") == response["training_job_arn"]
            and len(named) == 1
        ):
            raise DemoError(f"the retried request did not replay the first job: {retried}")
        console.print(
            f'-> [green]{retried["status"]}[/] {retried["training_job_name"]} with "replayed": true: the first '
            f"job came back and none was created (jobs of that name in the emulator: {len(named)})"
        )
        console.print(f"   same ARN as the first answer: {retried['training_job_arn']}", soft_wrap=True)

        console.print("[bold]A bad request[/] (examples/oversized-request.json):")
        console.print_json(data=bad)
        refusal = submit(bad)
        (out / "refused.json").write_text(json.dumps(refusal, indent=2))
        if refusal.get("status") != "rejected":
            raise DemoError(f"the bad request was not refused: {refusal}")
        error = refusal["error"]
        console.print(f"-> [red]rejected[/] {error['code']}: {error['message']}")
        if "suggestion" in error.get("details", {}):
            console.print("   suggestion: " + json.dumps(error["details"]["suggestion"], default=str))
        jobs = sagemaker.list_training_jobs()["TrainingJobSummaries"]
        if len(jobs) != 1:
            raise DemoError(f"expected exactly one training job in the emulator, found {len(jobs)}")
        console.print(
            f"Jobs in the emulator after the three requests: {len(jobs)} (the retry replayed it, the refusal "
            "created nothing). "
            f"Responses and the submitter's logs: {out.relative_to(REPO_ROOT)}/"
        )


# --------------------------------------------------------------------------- 4


def step_train() -> None:
    from training.checkpoint.verify import complete_steps
    from training.environment import SageMakerPaths
    from training.local import interrupted_run, read_failure

    work = DEMO_DIR / "train"
    shutil.rmtree(work, ignore_errors=True)
    console.print("Hyperparameters (hyperparameters.json, as SageMaker writes it):")
    console.print_json(data={k: str(v) for k, v in DEMO_HYPERPARAMETERS.items()})

    def echo(line: str) -> None:
        text = line.rstrip()
        if text.startswith(("[metrics]", "[trainer]")):
            console.print("  " + text, markup=False, soft_wrap=True)

    run = interrupted_run(work, nproc=DEMO_PROCESSES, echo=echo)
    if not run.ok:
        raise DemoError(f"a local run failed: {read_failure(run.base_dir)}")
    if not run.stopped_at_step:
        raise DemoError("the first run was not stopped by SIGTERM")
    paths = SageMakerPaths(run.base_dir)
    console.print(
        f"SIGTERM checkpoint at step {run.stopped_at_step}; the second run resumed from it. "
        f"Complete checkpoints kept: {complete_steps(paths.checkpoint_dir)}"
    )
    (first_step, first_loss), (last_step, last_loss) = run.losses[0], run.losses[-1]
    console.print(
        f"[bold]Loss curve:[/] {first_loss:.3f} at step {first_step} -> {last_loss:.3f} at step {last_step} "
        f"(uniform over 512 tokens would be 6.238)"
    )
    console.print(f"Final model in {paths.model_dir}: {sorted(p.name for p in paths.model_dir.iterdir())}")
    if not last_loss < first_loss:
        raise DemoError("the loss did not fall")
    damaged_checkpoint_restart(run.base_dir, work / "data")


def damaged_checkpoint_restart(base_dir: Path, data_dir: Path) -> None:
    """Cut the newest checkpoint's largest shard short (its ``.complete`` stays) and restart on it.

    What a restart finds when SageMaker's background upload of ``/opt/ml/checkpoints``
    was cut off: the trainer verifies the checkpoint against DCP's ``.metadata``,
    skips it with a log line and resumes from the one before.
    """
    from training.checkpoint.verify import complete_steps, verify_checkpoint
    from training.environment import SageMakerPaths
    from training.local import read_failure, run_local

    checkpoints = SageMakerPaths(base_dir).checkpoint_dir
    newest = complete_steps(checkpoints)[-1]
    shard = max((checkpoints / f"step-{newest}").glob("*.distcp"), key=lambda p: p.stat().st_size)
    size = shard.stat().st_size
    with open(shard, "r+b") as fh:
        fh.truncate(1000)
    console.print(
        f"[bold]A damaged newest checkpoint:[/] step-{newest}/{shard.name} cut to 1000 of {size:,} bytes, its "
        f".complete marker kept (an upload cut short). Restarting:"
    )

    def echo(line: str) -> None:
        text = line.rstrip()
        if text.startswith("[trainer]") and any(k in text for k in ("skipping", "resum", "data continues", "finished")):
            console.print("  " + text, markup=False, soft_wrap=True)

    run = run_local(base_dir, DEMO_HYPERPARAMETERS, data_dir=data_dir, nproc=DEMO_PROCESSES, echo=echo)
    if run.returncode != 0:
        raise DemoError(f"the restart on a damaged checkpoint failed: {read_failure(base_dir)}")
    # what the trainer did, from its status record (training.supervision), not from its log lines
    if run.status is None or newest not in run.status.skipped:
        raise DemoError(f"the damaged step-{newest} was not skipped (status record: {run.status})")
    if run.status.resumed_from is None or run.status.resumed_from >= newest:
        raise DemoError(
            f"the restart did not resume from a checkpoint before step-{newest} (status record: {run.status})"
        )
    if not verify_checkpoint(checkpoints / f"step-{newest}", newest).ok:
        raise DemoError(f"step-{newest} was not written again whole")
    console.print(
        f"Skipped, resumed from the checkpoint before it, step-{newest} written again whole. "
        f"Complete checkpoints kept: {complete_steps(checkpoints)}"
    )


# --------------------------------------------------------------------------- 4b

RUN_ID = "demo-run"
RUN_CONTINUATION = "platform_constructs.submitter.runtime.continuation:lambda_handler"
"""The continuation function's handler, which the emulator calls with every job state-change event (as the
stack's EventBridge rule invokes the deployed function)."""
RUN_FIRST_BLOCK_TRAINING_S = 40
"""Seconds of training the first plan's block leaves the first segment: the block ends at seeding +
reclaim window (30 min) + the trainer's stop margin + this, so the trainer checkpoints and stops itself at
about this many seconds after the emulator starts (the segment's start-up, ~10 s, comes out of it)."""
RUN_MIN_SEGMENT_MINUTES = 0.25
"""The run's ``min_segment_minutes``: a block must leave a segment 15 s of training (the default, 30 min, suits
real blocks of days): the first block leaves more, and what is left of it after the first segment less."""
DEMO_PROCESSES = 2
"""CPU processes of step 4's runs and of each segment of step 5 (``TRAINER_NPROC_PER_NODE`` of the emulator's
jobs): the same, so that step 4's measured speed sizes step 5's run."""
RUN_HYPERPARAMETERS: dict[str, Any] = {
    **DEMO_HYPERPARAMETERS,
    "max_steps": 200,
    "warmup_steps": 10,
    "checkpoint_interval": 40,
}
"""The run's training: step 4's (its model, batch, learning rates; CPython's docs), so that step 4's measured
speed sizes it (:func:`run_max_steps`; ``max_steps`` here is the size when step 4 measured nothing). A loss
line every 5 steps, so the first segment's part of the curve shows."""
RUN_MAX_STEPS_CAP = 5_000
"""The most steps :func:`run_max_steps` gives (a CPU trains gpt-tiny at a few steps a second)."""
RUN_SPAN_BLOCKS = 2.0
"""The run's length in first blocks: ``max_steps`` is what step 4's speed trains in this many times
:data:`RUN_FIRST_BLOCK_TRAINING_S`, so the first segment (which also spends its start-up in the block) ends
well below it and the second finishes the run, unless the machine became more than about twice as fast since
step 4 (then the run ends in one segment and the demo says so). A fixed ``max_steps`` did not: one idle machine
finished 200 steps inside the first block, where busy ones took 0.3-1 s a step."""
RUN_TIMEOUT_S = 900
"""The longest the demo waits for the run to end."""
HANG_RANK = 1
"""The rank the demo freezes in the run's second segment (of :data:`DEMO_PROCESSES`): a stuck rank."""
HANG_WATCHDOG_MINUTES = 0.1
"""The run's ``watchdog_minutes``: 6 s without a completed step (or 5 x the slowest recent step, if longer) and
the waiting rank reports the hang, so the demo's hang is caught in seconds (the default, 5 minutes, suits GPUs;
tests/devtools/test_run_end_to_end.py's hang measured 17.2 s from a rank's freeze to the job's Failed with
this limit)."""
HANG_CHECKPOINTS_PER_RUN = 8
"""The run's ``checkpoint_interval`` is ``max_steps`` / this (at least 5 steps): segment 2 writes a checkpoint
soon after it resumes, before the demo freezes one of its ranks, so that the hang's segment advanced the run
(a segment that did not ends it ``no-progress``) and segment 3 resumes from it."""


def run_max_steps(metrics: Sequence[Mapping[str, Any]]) -> int:
    """The run's ``max_steps``: :data:`RUN_SPAN_BLOCKS` first blocks of training at the median tokens/s of
    ``metrics`` (step 4's ``metrics.jsonl`` records, same model, batch and processes; the report's
    :func:`~trainctl.reports.analysis.median_finite`), from 20 to :data:`RUN_MAX_STEPS_CAP`; the default of
    :data:`RUN_HYPERPARAMETERS` when that median is not a positive speed."""
    from trainctl.reports.analysis import median_finite

    speed = median_finite(r.get("tokens_per_sec") for r in metrics if isinstance(r, Mapping))
    if not speed > 0:  # NaN too: nothing measured
        return RUN_HYPERPARAMETERS["max_steps"]
    tokens_per_step = RUN_HYPERPARAMETERS["batch_size"] * RUN_HYPERPARAMETERS["seq_length"] * DEMO_PROCESSES
    steps = speed * RUN_SPAN_BLOCKS * RUN_FIRST_BLOCK_TRAINING_S / tokens_per_step
    return min(RUN_MAX_STEPS_CAP, max(20, math.ceil(steps)))


def run_plans() -> list[dict[str, object]]:
    """The two plans of step 5: one whose block ends :data:`RUN_FIRST_BLOCK_TRAINING_S` of training from now,
    and one for 7 days."""
    from platform_spec.capacity import CAPACITY_BLOCK_RECLAIM_S, STOP_MARGIN_S

    ends = round(CAPACITY_BLOCK_RECLAIM_S + STOP_MARGIN_S + RUN_FIRST_BLOCK_TRAINING_S)
    common = {"Status": "Active", "InstanceType": "ml.p6-b200.48xlarge", "TotalInstanceCount": 1}
    return [
        {**common, "TrainingPlanName": "p6-b200-ending", "StartTime": "now-1d", "EndTime": f"now+{ends}s"},
        {**common, "TrainingPlanName": "p6-b200-next", "StartTime": "now-1h", "EndTime": "now+7d"},
    ]


def _segment_losses(aws: LocalAws, job_name: str) -> list[tuple[int, float]]:
    """``(step, loss)`` of a segment's ``[metrics]`` lines, read back from its CloudWatch Logs stream."""
    from platform_spec.metric_lines import parse_line

    logs = aws.client("logs")
    group = SAGEMAKER_LOG_GROUP
    points: list[tuple[int, float]] = []
    for stream in logs.describe_log_streams(logGroupName=group, logStreamNamePrefix=f"{job_name}/")["logStreams"]:
        kwargs = {"logGroupName": group, "logStreamName": stream["logStreamName"], "startFromHead": True}
        while True:
            page = logs.get_log_events(**kwargs)
            for event in page["events"]:
                values = parse_line(event["message"])
                if values and "loss" in values and "step" in values:
                    points.append((int(values["step"]), float(values["loss"])))
            if page.get("nextForwardToken") in (None, kwargs.get("nextToken")):
                break
            kwargs["nextToken"] = page["nextForwardToken"]
    return points


class RankHang:
    """A stuck rank in a run's segment, made and timed: :meth:`poll` freezes rank ``rank`` of the executed job
    ``job`` (:meth:`LocalAws.freeze_job <devtools.local_aws.client.LocalAws.freeze_job>`, SIGSTOP to that worker)
    once the job has written a complete checkpoint of its own; :meth:`timeline` reads what followed from the
    job's files and from SageMaker's and the run's records.

    Attributes:
        frozen_at: wall-clock epoch seconds of the freeze (``None`` before it).
        frozen_after_step: the job's newest logged step at the freeze.
        checkpoint_step: the newest complete checkpoint the job had written at the freeze.
    """

    def __init__(self, aws: LocalAws, job: str, rank: int = HANG_RANK) -> None:
        self.aws, self.job, self.rank = aws, job, rank
        self.frozen_at: float | None = None
        self.frozen_after_step: int | None = None
        self.checkpoint_step: int | None = None

    def _steps_logged(self) -> list[int]:
        from platform_spec.metric_lines import parse_line

        log = self.aws.job_dir(self.job).parent / "job.log"
        with contextlib.suppress(OSError):
            lines = log.read_text(errors="replace").splitlines()
            return [int(v["step"]) for v in map(parse_line, lines) if v and "step" in v and "loss" in v]
        return []

    def poll(self) -> bool:
        """Freeze the rank if the job now trains past a complete checkpoint it wrote (its first logged step or
        later); whether it is frozen. A job that ended before that is never frozen."""
        from training.checkpoint.verify import complete_steps
        from training.environment import SageMakerPaths

        if self.frozen_at is not None:
            return True
        steps = self._steps_logged()
        if not steps:
            return False
        own = [c for c in complete_steps(SageMakerPaths(self.aws.job_dir(self.job)).checkpoint_dir) if c >= steps[0]]
        if (
            not own
            or steps[-1] <= own[-1]
            or self.aws.describe_training_job(self.job)["TrainingJobStatus"] != "InProgress"
        ):
            return False
        self.aws.freeze_job(self.job, rank=self.rank)
        self.frozen_at, self.frozen_after_step, self.checkpoint_step = time.time(), steps[-1], own[-1]
        return True

    def timeline(self, next_job: str) -> dict[str, float]:
        """Seconds from the freeze to: the trainer's hang report (its ``output/failure`` file's time), the job's
        ``Failed`` (its ``TrainingEndTime``), ``next_job``'s creation (its ``CreationTime``: the continuation's
        decision and submission) and ``next_job``'s end (its ``TrainingEndTime``: the run finished)."""
        from datetime import datetime

        from training.environment import SageMakerPaths

        assert self.frozen_at is not None, "poll() froze nothing"
        hung, following = self.aws.describe_training_job(self.job), self.aws.describe_training_job(next_job)

        def at(value: str) -> float:
            return datetime.fromisoformat(value).timestamp() - self.frozen_at

        report = SageMakerPaths(self.aws.job_dir(self.job)).failure_file.stat().st_mtime - self.frozen_at
        return {
            "the trainer's hang report": report,
            f"{self.job} Failed": at(hung["TrainingEndTime"]),
            f"{next_job} created": at(following["CreationTime"]),
            f"{next_job} Completed (the run finished)": at(following["TrainingEndTime"]),
        }

    def watchdog_outputs(self) -> list[str]:
        """The files under ``watchdog/`` in the job's ``output.tar.gz`` (``S3OutputPath/<job>/output/``)."""
        import io
        import tarfile

        from devtools.local_aws.jobs import split_s3_uri

        job = self.aws.describe_training_job(self.job)
        bucket, prefix = split_s3_uri(job["OutputDataConfig"]["S3OutputPath"].rstrip("/") + "/")
        body = self.aws.client("s3").get_object(Bucket=bucket, Key=f"{prefix}{self.job}/output/output.tar.gz")["Body"]
        with tarfile.open(fileobj=io.BytesIO(body.read()), mode="r:gz") as tar:
            return sorted(m.name for m in tar.getmembers() if m.isfile() and "watchdog/" in m.name)


def step_run() -> None:
    from platform_spec.runs import segment_job_name
    from trainctl.runs import run_blocks
    from trainctl.submitter_client import submit_local
    from trainctl.tables import print_blocks
    from training.corpus import python_docs_corpus
    from training.local import read_metrics
    from training.prepare import prepare_data

    out = DEMO_DIR / "run"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    data = DEMO_DIR / "train" / "data"  # step 4's shards, else made here
    if not any(data.glob("shard-*.bin")):
        data = out / "data"
        prepare_data(data, [python_docs_corpus(out / "python-docs.jsonl")])
    try:
        measured = read_metrics(DEMO_DIR / "train" / "opt_ml")
    except (OSError, ValueError) as exc:  # a damaged metrics.jsonl: the default size, said
        console.print(f"step 4's metrics could not be read ({exc}); the run keeps its default max_steps")
        measured = []
    max_steps = run_max_steps(measured)
    hyperparameters = {
        **RUN_HYPERPARAMETERS,
        "max_steps": max_steps,
        "checkpoint_interval": max(5, max_steps // HANG_CHECKPOINTS_PER_RUN),
        "watchdog_minutes": HANG_WATCHDOG_MINUTES,
    }
    plans = run_plans()
    with (
        LocalAws(plans=plans, run_jobs=True, event_targets=[RUN_CONTINUATION], job_processes=DEMO_PROCESSES) as aws,
        open(out / "submitter.log", "w") as log,
    ):

        def ask(request: dict) -> dict:
            with contextlib.redirect_stderr(log):  # the handler's JSON logs, as CloudWatch would get them
                return submit_local(request, aws.env)

        bucket = aws.resources["data_bucket"]
        s3 = aws.client("s3")
        for shard in sorted(data.iterdir()):
            s3.upload_file(str(shard), bucket, f"datasets/python-docs/{shard.name}")
        console.print(
            f"Two plans in the emulator: [bold]p6-b200-ending[/] (its block leaves ~{RUN_FIRST_BLOCK_TRAINING_S} s "
            "of training before the trainer must checkpoint and stop) and [bold]p6-b200-next[/] (7 days). The "
            "emulator runs each job it accepts through the trainer's entry point on this CPU, syncs its checkpoints "
            "with S3, and sends each state-change event to the continuation function."
        )
        request = {
            "instance_type": "ml.p6-b200.48xlarge",
            "capacity": "training-plan",
            "hyperparameters": hyperparameters,
            "inputs": {"train": "datasets/python-docs/"},
            "max_runtime_hours": 1,
            "run": {"run_id": RUN_ID, "max_segments": 3, "min_segment_minutes": RUN_MIN_SEGMENT_MINUTES},
        }
        console.print(
            "[bold]A run request[/] (one training; the platform continues it across capacity blocks; "
            f"watchdog_minutes {HANG_WATCHDOG_MINUTES:g}, so a hang is caught in seconds):"
        )
        console.print_json(data=request)
        first = ask(request)
        (out / "submitted.json").write_text(json.dumps(first, indent=2))
        if first.get("status") != "submitted":
            raise DemoError(f"the run was not submitted: {first}")
        console.print(
            f"-> [green]submitted[/] {first['training_job_name']} on {first['capacity']['type']}: "
            f"{first['capacity']['reason']}"
        )
        hang = RankHang(aws, segment_job_name(RUN_ID, 2))

        def freeze_when_ready() -> None:
            if hang.frozen_at is None and hang.poll():
                console.print(
                    f"  [bold]froze rank {hang.rank}[/] of {hang.job} (SIGSTOP to its worker: a stuck rank) after "
                    f"step {hang.frozen_after_step}; its newest complete checkpoint is step {hang.checkpoint_step}"
                )

        view = _wait_for_run(ask, during=freeze_when_ready)
        (out / "run.json").write_text(json.dumps(view, indent=2))
        console.print("[bold]trainctl runs demo-run --local[/]:")
        print_blocks(run_blocks(view), console)
        names = [s["training_job_name"] for s in view["segments"]]
        expected = [segment_job_name(RUN_ID, n) for n in (1, 2, 3)]
        if view["state"] != "finished" or names != expected:
            raise DemoError(f"expected a run finished in segments {expected}; got {view['state']} with {names}")
        plans_used = [s["capacity"].get("training_plan_arn", "").rsplit("/", 1)[-1] for s in view["segments"]]
        if plans_used[0] == plans_used[1]:
            raise DemoError(f"both segments ran on {plans_used[0]}; the second should have moved to another plan")
        _show_hang(aws, hang, view)
        curves = [_segment_losses(aws, name) for name in names]
    if not all(curves):
        raise DemoError("a segment published no loss")
    stopped_at, resumed_at = curves[0][-1][0], curves[1][0][0]
    if not resumed_at > view["segments"][0]["last_step"] >= stopped_at - RUN_HYPERPARAMETERS["log_interval"]:
        raise DemoError(f"segment 2 did not continue segment 1's steps (logged up to {stopped_at}, then {resumed_at})")
    console.print(
        "[bold]One loss curve across the segments[/] (each segment's \\[metrics] lines, from its CloudWatch log):"
    )
    for index, curve in enumerate(curves, start=1):
        shown = ", ".join(f"{step}: {loss:.3f}" for step, loss in curve[:: max(1, len(curve) // 6)])
        console.print(f"  segment {index} ({plans_used[index - 1]}): {shown}")
    (first_step, first_loss), (last_step, last_loss) = curves[0][0], curves[-1][-1]
    console.print(
        f"  loss {first_loss:.3f} at step {first_step} -> {last_loss:.3f} at step {last_step}; segment 2 resumed "
        f"at step {resumed_at} from the checkpoint segment 1 wrote at its block's end"
    )
    console.print(
        f"  segment 3 resumed at step {curves[2][0][0]}, from the checkpoint segment 2 wrote before its rank hung"
    )
    _plot_run(curves, plans_used, out / "loss.png")
    console.print(f"wrote {(out / 'loss.png').relative_to(REPO_ROOT)}")
    if not last_loss < first_loss:
        raise DemoError("the loss did not fall across the run")


def _show_hang(aws: LocalAws, hang: RankHang, view: Mapping[str, Any]) -> None:
    """Print what the platform did with segment 2's stuck rank and how long each step took after the freeze.

    Raises:
        DemoError: segment 2 was not frozen, did not fail with the trainer's hang report and its stacks, was not
            decided ``continue``, or segment 3 did not resume from the checkpoint segment 2 wrote.
    """
    from platform_spec.health import HANG_REASON, MIN_STALL_MINUTES

    if hang.frozen_at is None or hang.checkpoint_step is None:
        raise DemoError(f"{hang.job} ended before it wrote a checkpoint of its own, so no rank was frozen")
    hung, following = view["segments"][1], view["segments"][2]
    reason = aws.describe_training_job(hang.job).get("FailureReason", "")
    if hung["status"] != "Failed" or not reason.startswith(f"AlgorithmError: {HANG_REASON}"):
        raise DemoError(f"{hang.job} did not fail with the trainer's hang report: {hung['status']}, {reason!r}")
    stacks = hang.watchdog_outputs()
    if not stacks:
        raise DemoError(f"{hang.job}'s output.tar.gz holds no watchdog/ stacks")
    if hung["decision"]["decision"] != "continue":
        raise DemoError(f"{hang.job}'s hang was decided {hung['decision']}, not continue")
    if following["first_step"] <= hang.checkpoint_step:
        raise DemoError(
            f"{following['training_job_name']} started at step {following['first_step']}, not after the "
            f"checkpoint {hang.job} wrote (step {hang.checkpoint_step})"
        )
    console.print(f"[bold]The stuck rank[/] ({hang.job}, rank {hang.rank} frozen after step {hang.frozen_after_step}):")
    console.print(f"  FailureReason: {reason}", markup=False, soft_wrap=True)
    console.print(f"  its output.tar.gz: {', '.join(stacks)}", markup=False)
    console.print(f"  decision: {hung['decision']['decision']} ({hung['decision']['reason']})", markup=False)
    console.print(
        f"  {following['training_job_name']} resumed from step {following['first_step'] - 1}, the newest complete "
        f"checkpoint (written by {hang.job})"
    )
    table = Table(title=f"From the freeze of rank {hang.rank} (seconds, wall clock)")
    table.add_column("until")
    table.add_column("s", justify="right")
    for what, seconds in hang.timeline(following["training_job_name"]).items():
        table.add_row(what, f"{seconds:.1f}")
    console.print(table)
    console.print(
        "  A frozen node (every rank, the watchdog too) reports nothing; the platform's outside watch is its "
        f"backstop: the run continuation stops a segment whose newest step is older than the request's "
        f"stall_minutes (at least {MIN_STALL_MINUTES:g}, too long for this demo), proven by "
        "tests/devtools/test_run_end_to_end.py on an injected clock."
    )


def _wait_for_run(ask: Callable[[dict], dict], during: Callable[[], None] = lambda: None) -> dict:
    """The run's view (``describe``) once it is decided, printing each segment's status as it changes and calling
    ``during`` at each look (every second).

    Raises:
        DemoError: not decided within :data:`RUN_TIMEOUT_S`.
    """
    from platform_spec.runs import TERMINAL_DECISIONS

    deadline = time.monotonic() + RUN_TIMEOUT_S
    seen: dict[str, str] = {}
    view: dict = {}
    while time.monotonic() < deadline:
        view = ask({"action": "describe", "run_id": RUN_ID})["run"]
        for segment in view["segments"]:
            status = f"{segment['status']}/{segment.get('secondary_status')}"
            if seen.get(segment["training_job_name"]) != status:
                seen[segment["training_job_name"]] = status
                console.print(f"  {segment['training_job_name']}: {status}")
        if view["state"] in TERMINAL_DECISIONS:
            return view
        during()
        time.sleep(1)
    raise DemoError(f"the run did not end within {RUN_TIMEOUT_S} s: {view.get('state')}")


def _plot_run(curves: list[list[tuple[int, float]]], plans: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for index, curve in enumerate(curves, start=1):
        steps, losses = zip(*curve, strict=True)
        ax.plot(steps, losses, marker=".", label=f"segment {index} ({plans[index - 1]})")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("training loss")
    ax.set_title(f"Run {RUN_ID}: one training across a block's end and a stuck rank")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- 5


def step_observe() -> None:
    from trainctl.dashboard.export import export_dashboard, print_alarms

    synthesized = _synthesized.get("template")  # step 1's, when it ran; else synthesize the same app here
    exported = export_dashboard(
        DEMO_DIR / "dashboard" / "platform-dashboard.json",
        context=DEMO_CONTEXT,
        environ=DEMO_ENVIRON,
        template=json.loads(synthesized.read_text()) if synthesized else None,
    )
    json_path, png_path, alarms = exported
    if synthesized:
        console.print(f"From step 1's template: {synthesized.relative_to(REPO_ROOT)}")
    console.print(f"Dashboard body (with the two demo plans configured): {json_path.relative_to(REPO_ROOT)}")
    console.print(f"Layout preview: {png_path.relative_to(REPO_ROOT)}")
    print_alarms(alarms, console)
    if not alarms:
        raise DemoError("the stack defines no alarms")


# --------------------------------------------------------------------------- 6

DEMO_SWEEP_GRID = {"precision": ["fp32", "bf16", "fp8"], "batch_size": [2, 4]}
"""Two precisions the CPU runs, one it cannot (pruned: fp8 needs an NVIDIA GPU), at two batch sizes.

Kept small for the CPU, whose bf16 speed depends on its instructions: with AVX512-BF16 (this project's machine
of 2026-12-06, an AMD EPYC) the demo's report measured bf16 at 1.19x fp32's tokens/s at batch 2 and 1.28x at
batch 4; without native bf16 PyTorch emulates its matrix products, and an earlier machine's reports had bf16
4-12x slower than fp32 (batch sizes 4 and 16 made this step 25 minutes there, 19 of them bf16 at batch 16).
Batch 1 would be cheaper still, but its 20-step loss curves are too noisy to compare formats by."""
DEMO_SWEEP_STEPS = 20
"""Steps per configuration: enough for the report's loss curves to fall and be compared."""


def step_sweep() -> None:
    from rich.markdown import Markdown

    from trainctl.reports.writer import write_report
    from trainctl.sweeps.runner import run_local_sweep

    sweeps = DEMO_DIR / "sweeps"
    shutil.rmtree(sweeps, ignore_errors=True)
    grid = " ".join(f"--grid {k}={','.join(map(str, v))}" for k, v in DEMO_SWEEP_GRID.items())
    console.print(
        f"trainctl sweep --name demo --local {grid} --set max_steps={DEMO_SWEEP_STEPS} (gpt-tiny, CPython docs, CPU)"
    )
    result = run_local_sweep("demo", DEMO_SWEEP_GRID, sweeps_dir=sweeps, set_values={"max_steps": DEMO_SWEEP_STEPS})
    paths = write_report(result.directory, DEMO_DIR / "sweep-report")
    console.print(Markdown(paths.markdown.read_text(encoding="utf-8")))
    for path in (paths.markdown, paths.throughput_memory, paths.loss_curves):
        console.print(f"wrote {path.relative_to(REPO_ROOT)}")
    statuses = {c.status for c in result.configs}
    if not statuses <= {"Completed", "Skipped"}:
        raise DemoError(f"sweep configurations ended {sorted(statuses)}; see {paths.markdown}")


# --------------------------------------------------------------------------- main

STEPS: list[tuple[str, Callable[[], None]]] = [
    ("1. Infrastructure: cdk synth + cdk-nag + cfn-lint", step_infrastructure),
    ("2. Plan: the guide's default request", step_plan),
    ("3. Submit: the job submitter against the embedded AWS emulator", step_submit),
    ("4. Train: the trainer through the SageMaker entry point, interrupted and resumed", step_train),
    ("5. Run: one training continued across a block's end and a stuck rank", step_run),
    ("6. Observe: the CloudWatch dashboard and alarms", step_observe),
    ("7. Sweep: a local tuning grid and its report", step_sweep),
]


def print_timings(timings: list[tuple[str, float]], total: float) -> None:
    """The wall time of each step that ran and of all of them, in seconds, as a table and as
    ``.demo/timings.json`` (``{"steps": {title: seconds}, "total_s": seconds}``)."""
    table = Table(title="Wall time per step")
    table.add_column("step")
    table.add_column("s", justify="right")
    table.add_column("share", justify="right")
    for title, seconds in timings:
        table.add_row(title, f"{seconds:.1f}", f"{seconds / total:.0%}" if total > 0 else "-")
    table.add_row("[bold]all steps[/]", f"[bold]{total:.1f}[/]", "", end_section=True)
    console.print(table)
    record = {"steps": {title: round(seconds, 2) for title, seconds in timings}, "total_s": round(total, 2)}
    (DEMO_DIR / "timings.json").write_text(json.dumps(record, indent=2) + "\n")


def main() -> int:
    DEMO_DIR.mkdir(exist_ok=True)
    started = time.monotonic()
    timings: list[tuple[str, float]] = []
    try:
        for title, step in STEPS:
            console.rule(f"[bold cyan]{title}")
            t0 = time.monotonic()
            try:
                step()
            except DemoError as exc:
                console.print(f"[bold red]demo failed:[/] {exc}")
                return 1
            finally:
                timings.append((title, time.monotonic() - t0))
            console.print(f"[dim]({timings[-1][1]:.1f} s)[/]")
    finally:
        print_timings(timings, time.monotonic() - started)
    console.rule(f"[bold green]demo finished in {time.monotonic() - started:.0f} s; files under .demo/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
