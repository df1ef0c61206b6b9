"""The platform dashboard's sections, as rows of CloudWatch widgets.

Every metric name comes from its source: SageMaker's instance metrics are
named here once (:data:`INSTANCE_METRICS`, as SageMaker publishes them in
``/aws/sagemaker/TrainingJobs`` with dimension ``Host`` = ``<job>/algo-<n>``);
the trainer's from :data:`platform_spec.metric_lines.METRIC_DEFINITIONS`
(dimension ``TrainingJobName``); the platform's own from the constructs'
``metric_*`` methods and :mod:`.runtime.settings`.

Jobs and plans come and go without a redeploy, so per-job and per-host graphs
are CloudWatch ``SEARCH`` expressions (one line per job or host with data in
the last two weeks) rather than fixed metrics.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch

from platform_spec.capacity import USABLE_PLAN_STATUSES
from platform_spec.metric_lines import (
    FIELDS,
    METRIC_DEFINITIONS,
    SAGEMAKER_LOG_GROUP,
    SAGEMAKER_METRIC_NAMESPACE,
    TRAINING_JOB_DIMENSION,
)
from platform_spec.runs import TERMINAL_JOB_STATUSES

from ..submitter.runtime import settings as submitter_settings
from .runtime import settings

__all__ = [
    "HOST_DIMENSION",
    "INSTANCE_METRICS",
    "TRAINING_JOB_DIMENSION",
    "TRAINING_LOG_ERRORS",
    "InstanceMetric",
    "dimension_label",
    "search_expression",
    "step_age_widget",
    "trainer_metric",
]

Row = list[cloudwatch.IWidget]

HOST_DIMENSION = "Host"
"""SageMaker's per-instance dimension: ``<training job name>/algo-<n>`` (n from 1)."""

GRAPH_HEIGHT = 6


@dataclass(frozen=True)
class InstanceMetric:
    """A SageMaker training instance metric (namespace ``/aws/sagemaker/TrainingJobs``, dimension ``Host``).

    Attributes:
        name: the metric name as SageMaker publishes it.
        title: the widget title.
        summed_over: ``"GPU"`` / ``"vCPU"`` when SageMaker multiplies the 0-100 %
            value by the number of GPUs / vCPUs of the instance (so 8 busy GPUs
            read 800 %); ``None`` for a plain 0-100 % value.
    """

    name: str
    title: str
    summed_over: str | None


INSTANCE_METRICS: tuple[InstanceMetric, ...] = (
    InstanceMetric("GPUUtilization", "GPU utilisation per host", "GPU"),
    InstanceMetric("GPUMemoryUtilization", "GPU memory utilisation per host", "GPU"),
    InstanceMetric("CPUUtilization", "CPU utilisation per host", "vCPU"),
    InstanceMetric("MemoryUtilization", "Host memory utilisation", None),
    InstanceMetric("DiskUtilization", "Training volume utilisation", None),
)
"""Source: SageMaker's "Monitor Amazon SageMaker AI with Amazon CloudWatch" (training job
metrics): GPU and CPU values range 0-100 multiplied by the number of GPUs / CPUs."""

TRAINING_LOG_ERRORS: dict[str, str] = {
    "CUDA out of memory": r"CUDA out of memory|OutOfMemoryError",
    "NCCL error": (
        r"NCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclRemoteError"
        r"|ncclInvalidUsage|ncclInvalidArgument|Watchdog caught collective operation timeout"
    ),
    "trainer failure": r"\[trainer\] FAILED:",
    "invalid configuration": r"\[entrypoint\] invalid configuration:",
    "worker process failed": r"ChildFailedError",
}
"""Log patterns (Logs Insights regexes: plain alternations, no groups) of the errors that end runs. The trainer writes
``[trainer] FAILED: <reason>`` (training/train.py) and ``[entrypoint] invalid configuration:
<reason>`` (training/entrypoint.py); torchrun reports a dead rank as ``ChildFailedError``."""


def trainer_metric(field: str) -> str:
    """The SageMaker metric name of a trainer log field (e.g. ``loss`` -> ``train:loss``).

    Raises:
        KeyError: ``field`` is not in ``platform_spec.metric_lines.FIELDS``, or has no
            ``MetricDefinitions`` entry (so the metric would never be published).
    """
    names = {f: metric for f, metric, _ in FIELDS}
    if field not in names:
        raise KeyError(f"trainer metric field {field!r}; expected one of {sorted(names)}")
    defined = {d["Name"] for d in METRIC_DEFINITIONS}
    if names[field] not in defined:
        raise KeyError(f"{names[field]!r} has no MetricDefinitions entry; SageMaker would not publish it")
    return names[field]


def _trainer_unit(field: str) -> str:
    return next(unit for f, _, unit in FIELDS if f == field)


def _quote(name: str) -> str:
    return name if name.isalnum() else f'"{name}"'


def search_expression(
    namespace: str, dimensions: Sequence[str], metric_name: str, statistic: str, period: cdk.Duration
) -> str:
    """``SEARCH('{"ns",Dim} MetricName="name"', 'Statistic', seconds)``: every metric of that schema and name.

    Names with characters other than letters and digits are double-quoted, as
    the SEARCH syntax requires.
    """
    schema = ",".join(_quote(part) for part in (namespace, *dimensions))
    return f"SEARCH('{{{schema}}} MetricName=\"{metric_name}\"', '{statistic}', {int(period.to_seconds())})"


def dimension_label(dimension: str, suffix: str = "") -> str:
    """A CloudWatch dynamic label naming each SEARCH result by its dimension value (job, host or plan)."""
    return f"${{PROP('Dim.{dimension}')}}" + (f" {suffix}" if suffix else "")


def _search(
    namespace: str, dimension: str, metric_name: str, statistic: str, period: cdk.Duration, suffix: str = ""
) -> cloudwatch.SearchExpression:
    return cloudwatch.SearchExpression(
        expression=search_expression(namespace, [dimension], metric_name, statistic, period),
        label=dimension_label(dimension, suffix),
        period=period,
    )


def header(title: str, text: str = "") -> Row:
    """A full-width section title."""
    markdown = f"## {title}" + (f"\n{text}" if text else "")
    return [cloudwatch.TextWidget(markdown=markdown, width=24, height=2 if text else 1)]


# -- sections -----------------------------------------------------------------------------------


def fleet_rows(gpus_per_host: Iterable[int], period: cdk.Duration) -> list[Row]:
    """Per-host utilisation of every training instance (SEARCH on dimension ``Host``).

    ``gpus_per_host``: the GPU counts of the allowed instance types; each is
    drawn as a line at ``100 x GPUs`` % on the GPU graphs.
    """
    counts = sorted({int(g) for g in gpus_per_host if g})
    annotations = [
        cloudwatch.HorizontalAnnotation(
            value=100 * g, label=f"{g} GPU{'s' if g > 1 else ''} fully busy", color="#7f7f7f"
        )
        for g in counts
    ]

    def graph(metric: InstanceMetric, width: int) -> cloudwatch.GraphWidget:
        if metric.summed_over:
            title = f"{metric.title} (% summed over the host's {metric.summed_over}s)"
            axis = f"% x {metric.summed_over}s"
        else:
            title, axis = f"{metric.title} (%)", "%"
        statistic = cloudwatch.Stats.AVERAGE
        return cloudwatch.GraphWidget(
            title=title,
            left=[_search(SAGEMAKER_METRIC_NAMESPACE, HOST_DIMENSION, metric.name, statistic, period)],
            left_y_axis=cloudwatch.YAxisProps(label=axis, min=0, show_units=False),
            left_annotations=annotations if metric.summed_over == "GPU" else None,
            legend_position=cloudwatch.LegendPosition.RIGHT if width >= 12 else cloudwatch.LegendPosition.BOTTOM,
            width=width,
            height=GRAPH_HEIGHT,
        )

    by_name = {m.name: m for m in INSTANCE_METRICS}
    gpu_note = ", ".join(f"{100 * g}% = {g} GPU{'s' if g > 1 else ''}" for g in counts) or "100% per GPU"
    return [
        header(
            "Fleet",
            "Every training instance of every job, one line per host (`<job>/algo-<n>`). SageMaker reports GPU "
            f"and CPU utilisation summed over the host's devices: {gpu_note} at 100%.",
        ),
        [graph(by_name["GPUUtilization"], 12), graph(by_name["GPUMemoryUtilization"], 12)],
        [
            graph(by_name["CPUUtilization"], 8),
            graph(by_name["MemoryUtilization"], 8),
            graph(by_name["DiskUtilization"], 8),
        ],
    ]


def training_progress_rows(period: cdk.Duration) -> list[Row]:
    """The trainer's metrics per job (SEARCH on dimension ``TrainingJobName``)."""

    def graph(
        title: str, fields: Sequence[str], statistic: str, axis: str, labels: Sequence[str] = ("",)
    ) -> cloudwatch.GraphWidget:
        # each line is named by its job; several searches in one graph add a suffix each
        left = [
            _search(SAGEMAKER_METRIC_NAMESPACE, TRAINING_JOB_DIMENSION, trainer_metric(field), statistic, period, label)
            for field, label in zip(fields, labels, strict=True)
        ]
        return cloudwatch.GraphWidget(
            title=title,
            left=left,
            left_y_axis=cloudwatch.YAxisProps(label=axis, show_units=False),
            legend_position=cloudwatch.LegendPosition.BOTTOM,
            width=8,
            height=GRAPH_HEIGHT,
        )

    avg, peak = cloudwatch.Stats.AVERAGE, cloudwatch.Stats.MAXIMUM
    return [
        header(
            "Training progress",
            "The trainer's `[metrics]` log lines as SageMaker publishes them (MetricDefinitions), one line per job.",
        ),
        [
            graph(
                "Loss",
                ["loss", "validation_loss"],
                avg,
                _trainer_unit("loss"),
                labels=("train", "validation"),
            ),
            graph("Throughput (tokens/s per job)", ["tokens_per_sec"], avg, "tokens/s"),
            graph("MFU (%)", ["mfu"], avg, "% of dense peak"),
        ],
        [
            graph("Model TFLOP/s per GPU", ["tflops_per_gpu"], avg, "TFLOP/s"),
            graph(
                "Peak GPU memory (GB)",
                ["peak_mem_allocated_gb", "peak_mem_reserved_gb"],
                peak,
                "GB (1e9 bytes)",
                labels=("allocated", "reserved"),
            ),
            graph("Gradient norm (before clipping)", ["grad_norm"], avg, "L2 norm"),
        ],
    ]


def training_plan_rows(publisher, plan_names: Sequence[str], period: cdk.Duration) -> list[Row]:
    """Reserved capacity: every plan the publisher reports (SEARCH), then one tile per configured plan."""
    ns, dim = settings.PLAN_METRICS_NAMESPACE, settings.DIMENSION_TRAINING_PLAN_NAME

    def graph(title: str, metric: str, statistic: str, axis: str) -> cloudwatch.GraphWidget:
        return cloudwatch.GraphWidget(
            title=title,
            left=[_search(ns, dim, metric, statistic, period)],
            left_y_axis=cloudwatch.YAxisProps(label=axis, min=0, show_units=False),
            legend_position=cloudwatch.LegendPosition.BOTTOM,
            width=8,
            height=GRAPH_HEIGHT,
        )

    rows: list[Row] = [
        header(
            "Training plans",
            f"Reserved capacity, published every {settings.PUBLISH_SCHEDULE_MINUTES} minutes from DescribeTrainingPlan "
            "for each plan in the platform's SSM parameter. Idle instances of a plan that ends soon are capacity "
            "about to be wasted.",
        ),
        [
            graph(
                "Available (idle) instances per plan",
                settings.METRIC_AVAILABLE_INSTANCES,
                cloudwatch.Stats.MINIMUM,
                "instances",
            ),
            graph("In-use instances per plan", settings.METRIC_IN_USE_INSTANCES, cloudwatch.Stats.MAXIMUM, "instances"),
            graph("Hours until each plan ends", settings.METRIC_HOURS_UNTIL_END, cloudwatch.Stats.MINIMUM, "hours"),
        ],
    ]
    tiles: Row = [
        cloudwatch.SingleValueWidget(
            title=f"All usable plans ({' or '.join(USABLE_PLAN_STATUSES)})",
            metrics=[
                publisher.metric_available_instance_count(period=period, label="available"),
                publisher.metric_in_use_instance_count(period=period, label="in use"),
                publisher.metric_total_instance_count(period=period, label="total"),
            ],
            width=12,
            height=3,
        )
    ]
    for name in plan_names:
        tiles.append(
            cloudwatch.SingleValueWidget(
                title=f"Plan {name}",
                metrics=[
                    publisher.metric_available_instance_count(name, period=period, label="available"),
                    publisher.metric_in_use_instance_count(name, period=period, label="in use"),
                    publisher.metric_total_instance_count(name, period=period, label="total"),
                    publisher.metric_hours_until_end(name, period=period, label="hours until end"),
                ],
                width=12,
                height=3,
            )
        )
    rows.append(tiles)  # the dashboard wraps a row wider than 24 columns onto the next line
    return rows


def job_outcome_rows(handler, period: cdk.Duration) -> list[Row]:
    """Completed / Failed / Stopped counts and the failure reasons of recent failed jobs."""
    colours = {"Completed": "#2ca02c", "Failed": "#d62728", "Stopped": "#ff7f0e"}
    hourly = cdk.Duration.hours(1)
    failures_query = [
        f"fields @timestamp, {', '.join(f for f in settings.OUTCOME_LOG_FIELDS if f not in ('training_job_status', 'training_plan_arn'))}",
        f'filter message = "{settings.OUTCOME_LOG_MESSAGE}" and training_job_status = "Failed"',
        "sort @timestamp desc",
        "limit 50",
    ]
    return [
        header(
            "Job outcomes",
            "Training jobs that completed, failed or stopped (EventBridge `SageMaker Training Job State Change`, "
            "each job and status counted once).",
        ),
        [
            cloudwatch.GraphWidget(
                title="Job outcomes per hour",
                left=[
                    handler.metric_training_job_outcomes(s, period=hourly, label=s, color=colours[s])
                    for s in TERMINAL_JOB_STATUSES
                ],
                stacked=True,
                left_y_axis=cloudwatch.YAxisProps(label="jobs", min=0, show_units=False),
                width=16,
                height=GRAPH_HEIGHT,
            ),
            cloudwatch.SingleValueWidget(
                title="Jobs ended in the dashboard's time range",
                metrics=[
                    handler.metric_training_job_outcomes(s, period=period, label=s, color=colours[s])
                    for s in TERMINAL_JOB_STATUSES
                ],
                set_period_to_time_range=True,
                width=8,
                height=GRAPH_HEIGHT,
            ),
        ],
        [
            cloudwatch.LogQueryWidget(
                title="Recent failed jobs and their FailureReason",
                log_group_names=[handler.log_group.log_group_name],
                query_lines=failures_query,
                view=cloudwatch.LogQueryVisualizationType.TABLE,
                width=24,
                height=6,
            )
        ],
    ]


def run_decisions_query() -> list[str]:
    """Logs Insights lines listing the continuation's decisions, newest first (one row per decision), with the
    fields of its decision log line (``submitter.runtime.settings.RUN_DECISION_LOG_FIELDS``)."""
    return [
        f"fields @timestamp, {', '.join(submitter_settings.RUN_DECISION_LOG_FIELDS)}",
        f'filter message = "{submitter_settings.RUN_DECISION_LOG_MESSAGE}"',
        "sort @timestamp desc",
        "limit 100",
    ]


def run_rows(runs, wait_alarm_seconds: float | None, period: cdk.Duration) -> list[Row]:
    """Training runs: the continuation's decisions (by kind, and each with its reason), segments it started, and
    the longest wait for capacity against its alarm.

    Args:
        runs: the runs' metrics and decision log (:class:`~platform_constructs.submitter.construct.IRunMetrics`).
        wait_alarm_seconds: the ``RunWaitingForCapacity`` threshold, drawn on the wait graph. Default: no line.
        period: aggregation period of the single-value tile.
    """
    from platform_spec.runs import DECISIONS

    hourly = cdk.Duration.hours(1)
    wait = cloudwatch.GraphWidget(
        title="Longest wait for capacity (seconds)",
        left=[runs.metric_run_capacity_wait_seconds(label="longest wait of a waiting run")],
        left_y_axis=cloudwatch.YAxisProps(label="seconds", min=0, show_units=False),
        left_annotations=(
            [cloudwatch.HorizontalAnnotation(value=wait_alarm_seconds, label="RunWaitingForCapacity alarm")]
            if wait_alarm_seconds is not None
            else None
        ),
        width=8,
        height=GRAPH_HEIGHT,
    )
    return [
        header(
            "Training runs",
            "Runs carried across capacity blocks: the continuation judges each ended segment (its newest complete "
            "checkpoint against `max_steps` and the run's budget) and submits the next one; runs waiting for "
            "capacity are retried on its schedule.",
        ),
        [
            cloudwatch.GraphWidget(
                title="Run decisions per hour",
                left=[runs.metric_run_decisions(d, period=hourly, label=d) for d in DECISIONS],
                stacked=True,
                left_y_axis=cloudwatch.YAxisProps(label="decisions", min=0, show_units=False),
                width=12,
                height=GRAPH_HEIGHT,
            ),
            wait,
            cloudwatch.SingleValueWidget(
                title="Segments started",
                metrics=[runs.metric_run_segments_started(period=period, label="segments")],
                set_period_to_time_range=True,
                width=4,
                height=GRAPH_HEIGHT,
            ),
        ],
        [step_age_widget(runs)],
        [
            cloudwatch.LogQueryWidget(
                title="Run decisions (run, segment, decision, reason, newest step, next segment's job)",
                log_group_names=[runs.continuation_log_group.log_group_name],
                query_lines=run_decisions_query(),
                view=cloudwatch.LogQueryVisualizationType.TABLE,
                width=24,
                height=8,
            )
        ],
    ]


def step_age_widget(runs) -> cloudwatch.GraphWidget:
    """Seconds since the newest step of each run in training (``RunStepAgeSeconds`` per ``RunId``, SEARCH), as the
    continuation's tick measures it, against the ``RunStalled`` alarm's threshold (the default ``stall_minutes``).

    Args:
        runs: the runs' metrics (:class:`~platform_constructs.submitter.construct.IRunMetrics`).
    """
    from platform_spec.health import DEFAULT_STALL_MINUTES

    oldest = runs.metric_run_step_age_seconds(label="oldest")
    per_run = cloudwatch.SearchExpression(
        expression=search_expression(
            submitter_settings.METRICS_NAMESPACE,
            ["service", submitter_settings.DIMENSION_RUN_ID],
            submitter_settings.METRIC_RUN_STEP_AGE_SECONDS,
            "Maximum",
            oldest.period,
        ),
        label=dimension_label(submitter_settings.DIMENSION_RUN_ID),
        period=oldest.period,
    )
    return cloudwatch.GraphWidget(
        title="Time since the newest step, per run in training (seconds)",
        left=[per_run, oldest],
        left_y_axis=cloudwatch.YAxisProps(label="seconds", min=0, show_units=False),
        left_annotations=[cloudwatch.HorizontalAnnotation(value=DEFAULT_STALL_MINUTES * 60, label="RunStalled alarm")],
        width=24,
        height=GRAPH_HEIGHT,
    )


def _combined_pattern() -> str:
    return "|".join(TRAINING_LOG_ERRORS.values())


def training_log_query() -> list[str]:
    """Logs Insights lines finding :data:`TRAINING_LOG_ERRORS` in the training jobs' logs."""
    combined = _combined_pattern()
    return [
        "fields @timestamp, @logStream as job_host, @message",
        f"filter @message like /{combined}/",
        "sort @timestamp desc",
        "limit 100",
    ]


def training_log_counts_query() -> list[str]:
    """Logs Insights lines counting :data:`TRAINING_LOG_ERRORS` by kind (the matched phrase)."""
    combined = _combined_pattern()
    return [
        f"filter @message like /{combined}/",
        f"parse @message /(?<error>{combined})/",
        "stats count(*) as lines, count_distinct(@logStream) as hosts by error",
        "sort lines desc",
    ]


def log_rows() -> list[Row]:
    """Logs Insights over ``/aws/sagemaker/TrainingJobs`` for the errors that end runs."""
    return [
        header(
            "Logs",
            f"Errors that end runs in `{SAGEMAKER_LOG_GROUP}`: CUDA out of memory, NCCL errors and timeouts, the "
            "trainer's `[trainer] FAILED:` and `[entrypoint] invalid configuration:` lines.",
        ),
        [
            cloudwatch.LogQueryWidget(
                title="Errors that end runs, by kind",
                log_group_names=[SAGEMAKER_LOG_GROUP],
                query_lines=training_log_counts_query(),
                view=cloudwatch.LogQueryVisualizationType.TABLE,
                width=8,
                height=8,
            ),
            cloudwatch.LogQueryWidget(
                title="Latest error lines (log stream = <job>/algo-<n>-<epoch>)",
                log_group_names=[SAGEMAKER_LOG_GROUP],
                query_lines=training_log_query(),
                view=cloudwatch.LogQueryVisualizationType.TABLE,
                width=16,
                height=8,
            ),
        ],
    ]
