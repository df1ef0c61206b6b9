"""The observability construct: one CloudWatch dashboard, the alarms a platform team acts on, and their topic.

Composes:

* :class:`~.functions.PlanMetricsPublisher` (``PlanMetrics``): training-plan
  capacity every 5 minutes (EventBridge schedule -> ``DescribeTrainingPlan`` ->
  ``PutMetricData``);
* :class:`~.functions.JobStateHandler` (``JobOutcomes``): counts of
  Completed / Failed / Stopped jobs and their failure reasons (EventBridge
  ``SageMaker Training Job State Change``);
* :class:`~.notifications.AlarmTopic` (``AlarmTopic``): KMS-encrypted SNS topic,
  e-mail / HTTPS / Slack (AWS Chatbot) subscriptions;
* the dashboard (``Resource``), sections top to bottom: alarm status, Fleet,
  Training progress, Job submitter, Training plans, Job outcomes, Training runs
  (with ``runs``), Logs (see :mod:`.widgets`);
* the alarms (:attr:`PlatformObservability.alarms`).

Widgets and alarms are built from the constructs' ``metric_*`` methods, the
runtime settings and ``platform_spec.metric_lines``, never from hand-typed names.
Other resources come in through interfaces: the submitter as its metrics
(:class:`~platform_constructs.submitter.construct.ISubmitterMetrics`), the plan list as
an ``ssm.IStringParameter`` and the ARNs configured at synth time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm

from constructs import Construct
from platform_spec import health
from platform_spec.capacity import CAPACITY_TYPES, USABLE_PLAN_STATUSES
from platform_spec.training_plans import parse_training_plan_arn

from ..network import IPlatformNetwork
from ..submitter.construct import IRunMetrics, ISubmitterMetrics
from ..submitter.runtime import settings as submitter_settings
from . import widgets
from .functions import JobStateHandler, JobStateHandlerProps, PlanMetricsPublisher, PlanMetricsPublisherProps
from .notifications import AlarmTopic, AlarmTopicProps, SlackChannel

__all__ = [
    "DEFAULT_RUN_CAPACITY_WAIT_MINUTES",
    "MAX_IDLE_CAPACITY_HOURS",
    "MAX_RUN_CAPACITY_WAIT_MINUTES",
    "PlatformObservability",
    "PlatformObservabilityProps",
    "SlackChannel",
]

MAX_IDLE_CAPACITY_HOURS = 24 * 30
DEFAULT_RUN_CAPACITY_WAIT_MINUTES = 120
"""A run waiting for capacity this long raises ``RunWaitingForCapacity``: two hours is longer than the
usual wait for a spot or on-demand instance, shorter than a capacity block people would miss."""
MAX_RUN_CAPACITY_WAIT_MINUTES = 30 * 24 * 60


@dataclass(frozen=True, kw_only=True)
class PlatformObservabilityProps:
    """Properties of :class:`PlatformObservability`.

    Attributes:
        submitter: the job submitter's metrics, which the dashboard shows and the alarms
            watch (a :class:`~platform_constructs.submitter.construct.JobSubmitter`, or anything
            with its ``metric_*`` methods).
        instance_types: the instance types training jobs may use (the submitter's
            ``allowed_instance_types``); the Fleet section's GPU graphs mark
            100 % x the GPUs of each one's host. Default: no host size is marked
            (the section notes 100 % per GPU).
        plan_arns_parameter: the SSM String parameter holding the training-plan ARNs
            (:class:`~platform_constructs.training_plans.TrainingPlans`' ``parameter``),
            which the plan-metrics publisher reads on every run. Default: no
            plan-metrics publisher, plan section or plan alarms.
        plan_arns: the training plans configured at synth time (the parameter's value
            then); each gets a dashboard tile and an idle-capacity alarm. Needs
            ``plan_arns_parameter``. Default: none (the plan section shows the
            plans the publisher reports, without tiles).
        alarm_emails: addresses notified by the alarms (e-mail subscriptions).
            Default: nobody is notified by e-mail.
        alarm_https_endpoints: ``https://`` endpoints subscribed to the alarm
            topic. Default: none.
        alarm_slack_channels: Slack channels AWS Chatbot posts the alarms to.
            Default: none.
        idle_capacity_hours: a plan with idle instances that ends within this
            many hours raises the idle-capacity alarm. Default: 24.
        dashboard_name: dashboard name. Default: ``<stack name>-<region>``.
        period: aggregation period of the widgets. Default: 5 minutes.
        log_retention: retention of the observability functions' logs. Default: three months.
        removal_policy: what happens to the functions' logs, the idempotency table
            and the topic key when they leave the stack. Default: they are retained.
        runs: the training runs' metrics and decision log (a
            :class:`~platform_constructs.submitter.construct.JobSubmitter`, or anything with
            :class:`~platform_constructs.submitter.construct.IRunMetrics`' members); they get the
            ``RunWaitingForCapacity`` and ``RunContinuationDeadLetters`` alarms and the Training runs
            section. Default: no run alarms or section.
        run_capacity_wait_minutes: a run waiting for capacity longer than this many minutes
            raises ``RunWaitingForCapacity`` (1 to :data:`MAX_RUN_CAPACITY_WAIT_MINUTES`).
            Default: :data:`DEFAULT_RUN_CAPACITY_WAIT_MINUTES`.
        network: VPC mode: the plan-metrics and job-outcomes functions run in the network's private subnets.
            Default: outside any VPC.
    """

    submitter: ISubmitterMetrics
    instance_types: Sequence[str] = ()
    plan_arns_parameter: ssm.IStringParameter | None = None
    plan_arns: Sequence[str] = ()
    alarm_emails: Sequence[str] = ()
    alarm_https_endpoints: Sequence[str] = ()
    alarm_slack_channels: Sequence[SlackChannel] = ()
    idle_capacity_hours: int = 24
    dashboard_name: str | None = None
    period: cdk.Duration = field(default_factory=lambda: cdk.Duration.minutes(5))
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    runs: IRunMetrics | None = None
    run_capacity_wait_minutes: int = DEFAULT_RUN_CAPACITY_WAIT_MINUTES
    network: IPlatformNetwork | None = None


class PlatformObservability(Construct):
    """The platform dashboard (primary child ``Resource``), its alarms, their topic and the metric functions.

    Attributes:
        dashboard: the CloudWatch dashboard.
        alarm_topic: the :class:`AlarmTopic` every alarm notifies.
        alarm_name_prefix: the common prefix of every alarm's name (``<stack name>/``),
            the one the topic's policies let publish.
        plan_metrics: the :class:`PlanMetricsPublisher` (``None`` without ``plan_arns_parameter``).
        plan_names: the names of the plans configured at synth time (from ``plan_arns``).
        job_outcomes: the :class:`JobStateHandler`.
        alarms: every alarm by its short name (``SubmitterErrors``,
            ``TrainingJobFailed``, ``PlanIdleNearEnd-<plan>``, ``ReservedCapacityExhausted``
            (composite) with ``PlansHaveNoAvailableInstances`` and ``SubmissionsRefusedNoCapacity``,
            ``ObservabilityFunctionErrors``, and with ``runs`` ``RunWaitingForCapacity`` and
            ``RunContinuationDeadLetters``).
    """

    def __init__(self, scope: Construct, id: str, props: PlatformObservabilityProps) -> None:
        super().__init__(scope, id)
        _validate(props)
        self.plan_names: list[str] = _plan_names(props.plan_arns)
        gpus_per_host = _gpus_per_host(props.instance_types)
        stack = cdk.Stack.of(self)

        self.alarm_topic = AlarmTopic(
            self,
            "AlarmTopic",
            AlarmTopicProps(
                emails=props.alarm_emails,
                https_endpoints=props.alarm_https_endpoints,
                slack_channels=props.alarm_slack_channels,
                removal_policy=props.removal_policy,
            ),
        )
        # Every alarm is named with the prefix the topic's policies allow to publish.
        self.alarm_name_prefix: str = self.alarm_topic.alarm_name_prefix
        self.plan_metrics = (
            PlanMetricsPublisher(
                self,
                "PlanMetrics",
                PlanMetricsPublisherProps(
                    plan_arns_parameter=props.plan_arns_parameter,
                    log_retention=props.log_retention,
                    removal_policy=props.removal_policy,
                    network=props.network,
                ),
            )
            if props.plan_arns_parameter is not None
            else None
        )
        self.job_outcomes = JobStateHandler(
            self,
            "JobOutcomes",
            JobStateHandlerProps(
                log_retention=props.log_retention, removal_policy=props.removal_policy, network=props.network
            ),
        )
        self.alarms: dict[str, cloudwatch.AlarmBase] = {}
        self._create_alarms(props.submitter, props.idle_capacity_hours)
        self._runs = props.runs
        self._run_wait_alarm_seconds = props.run_capacity_wait_minutes * 60
        if props.runs is not None:
            self._create_run_alarms(props.runs, props.run_capacity_wait_minutes)

        # Dashboard names are unique per account across regions: include the region.
        name = props.dashboard_name or f"{stack.stack_name}-{stack.region}"
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Resource",
            dashboard_name=name,
            default_interval=cdk.Duration.days(1),
        )
        for row in self._rows(props.submitter, gpus_per_host, props.period):
            self.dashboard.add_widgets(*row)

    # -- alarms -------------------------------------------------------------------------------

    def _alarm(
        self, key: str, construct_id: str, *, notify_ok: bool = True, actions: bool = True, **props
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(self, construct_id, alarm_name=f"{self.alarm_name_prefix}{key}", **props)
        if actions:
            alarm.add_alarm_action(self.alarm_topic.action)
            if notify_ok:
                alarm.add_ok_action(self.alarm_topic.action)
        self.alarms[key] = alarm
        return alarm

    def _create_alarms(self, submitter: ISubmitterMetrics, idle_capacity_hours: int) -> None:
        gte = cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD
        quiet = cloudwatch.TreatMissingData.NOT_BREACHING
        five = cdk.Duration.minutes(5)

        self._alarm(
            "SubmitterErrors",
            "SubmitterErrorsAlarm",
            metric=submitter.metric_errors(period=five, statistic=cloudwatch.Stats.SUM),
            threshold=1,
            comparison_operator=gte,
            evaluation_periods=1,
            treat_missing_data=quiet,
            alarm_description=(
                "The job submitter raised (function errors): persistent AWS faults or a broken configuration. "
                "Requests are not being submitted; see the submitter's log group."
            ),
        )
        self._alarm(
            "TrainingJobFailed",
            "TrainingJobFailedAlarm",
            notify_ok=False,
            metric=self.job_outcomes.metric_training_job_outcomes("Failed", period=five),
            threshold=1,
            comparison_operator=gte,
            evaluation_periods=1,
            treat_missing_data=quiet,
            alarm_description=(
                "A SageMaker training job failed. The dashboard's 'Recent failed jobs' table has its FailureReason; "
                "the 'Logs' section finds CUDA out-of-memory and NCCL errors in the job's log."
            ),
        )

        functions = {"handler": self.job_outcomes.metric_errors(period=five, statistic=cloudwatch.Stats.SUM)}
        if self.plan_metrics is not None:
            functions["publisher"] = self.plan_metrics.metric_errors(period=five, statistic=cloudwatch.Stats.SUM)
        self._alarm(
            "ObservabilityFunctionErrors",
            "ObservabilityFunctionErrorsAlarm",
            metric=cloudwatch.MathExpression(
                expression=" + ".join(f"FILL({key}, 0)" for key in sorted(functions)),
                using_metrics=functions,
                label="observability function errors",
                period=five,
            ),
            threshold=1,
            comparison_operator=gte,
            evaluation_periods=3,
            datapoints_to_alarm=2,
            treat_missing_data=quiet,
            alarm_description=(
                "The plan-metrics publisher or the job-state handler keeps failing: plan capacity and job-outcome "
                "metrics (and the alarms on them) are stale. See the functions' log groups."
            ),
        )

        if self.plan_metrics is None:
            return
        publisher, hours = self.plan_metrics, idle_capacity_hours
        window = cdk.Duration.minutes(15)
        idle_periods = 2  # windows in a row with idle instances: the description's minutes derive from these
        for name in self.plan_names:
            self._alarm(
                f"PlanIdleNearEnd-{name}",
                f"PlanIdleNearEndAlarm-{name}",
                metric=cloudwatch.MathExpression(
                    expression=f"IF(hours > 0 AND hours <= {hours} AND available > 0, available, 0)",
                    using_metrics={
                        "available": publisher.metric_available_instance_count(
                            name, period=window, statistic=cloudwatch.Stats.MINIMUM
                        ),
                        "hours": publisher.metric_hours_until_end(name, period=window),
                    },
                    label=f"idle instances of {name} ending within {hours} h",
                    period=window,
                ),
                threshold=1,
                comparison_operator=gte,
                evaluation_periods=idle_periods,
                datapoints_to_alarm=idle_periods,
                treat_missing_data=quiet,
                alarm_description=(
                    f"Training plan {name} has had idle (available) instances for "
                    f"{idle_periods * window.to_minutes():g} minutes and ends within {hours} "
                    "hours: reserved capacity is about to be wasted. Submit jobs with capacity=training-plan, or "
                    "accept the loss."
                ),
            )

        ten = cdk.Duration.minutes(10)
        exhausted = self._alarm(
            "PlansHaveNoAvailableInstances",
            "PlansExhaustedAlarm",
            actions=False,
            metric=publisher.metric_available_instance_count(period=ten, statistic=cloudwatch.Stats.MAXIMUM),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.LESS_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=quiet,
            alarm_description=f"No usable training plan ({' or '.join(USABLE_PLAN_STATUSES)}) has an available instance. "
            "Part of ReservedCapacityExhausted.",
        )
        refusing = self._alarm(
            "SubmissionsRefusedNoCapacity",
            "NoCapacityRefusalsAlarm",
            actions=False,
            metric=submitter.metric_refusals("NoCapacity", period=ten),
            threshold=1,
            comparison_operator=gte,
            evaluation_periods=1,
            treat_missing_data=quiet,
            alarm_description="The submitter refused requests with NoCapacity. Part of ReservedCapacityExhausted.",
        )
        composite = cloudwatch.CompositeAlarm(
            self,
            "CapacityExhaustedAlarm",
            composite_alarm_name=f"{self.alarm_name_prefix}ReservedCapacityExhausted",
            alarm_rule=cloudwatch.AlarmRule.all_of(
                cloudwatch.AlarmRule.from_alarm(exhausted, cloudwatch.AlarmState.ALARM),
                cloudwatch.AlarmRule.from_alarm(refusing, cloudwatch.AlarmState.ALARM),
            ),
            alarm_description=(
                "Reserved capacity is exhausted: no training plan has an available instance and the submitter is "
                "refusing jobs with NoCapacity. Extend or buy a plan (SearchTrainingPlanOfferings), or let jobs use "
                "capacity=auto (spot / on-demand)."
            ),
        )
        composite.add_alarm_action(self.alarm_topic.action)
        composite.add_ok_action(self.alarm_topic.action)
        self.alarms["ReservedCapacityExhausted"] = composite

    def _create_run_alarms(self, runs: IRunMetrics, wait_minutes: int) -> None:
        quiet = cloudwatch.TreatMissingData.NOT_BREACHING
        wait = runs.metric_run_capacity_wait_seconds()
        self._alarm(
            "RunWaitingForCapacity",
            "RunWaitingForCapacityAlarm",
            metric=wait,
            threshold=wait_minutes * 60,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            # one value per scheduled run: 1 of 2 periods, so a tick published late does not clear the alarm
            evaluation_periods=2,
            datapoints_to_alarm=1,
            treat_missing_data=quiet,
            alarm_description=(
                f"A training run has waited for capacity longer than {wait_minutes} minutes: no eligible capacity "
                "(training plan, spot or on-demand, as its request allows) for its next segment. The dashboard's "
                "'Run decisions' table names the run; `trainctl runs RUN_ID` shows it. Extend or buy a plan, "
                "allow other capacity, or stop the run."
            ),
        )
        stall_minutes = health.DEFAULT_STALL_MINUTES
        self._alarm(
            "RunStalled",
            "RunStalledAlarm",
            metric=runs.metric_run_step_age_seconds(),
            threshold=stall_minutes * 60,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=2,
            datapoints_to_alarm=1,
            treat_missing_data=quiet,
            alarm_description=(
                f"A training run's segment has logged no step for longer than {stall_minutes:g} minutes (the default "
                "stall_minutes): a hung collective, a frozen node, a stalled data read. The continuation stops it at "
                "the run's own stall_minutes and the run continues on new instances (the 'Run decisions' table says "
                "so); a run whose stall_minutes is longer, or 0 (not watched), is only reported here. The "
                "dashboard's 'Time since the newest step' graph names the run; see its job's log."
            ),
        )
        self._alarm(
            "RunContinuationDeadLetters",
            "RunContinuationDeadLettersAlarm",
            metric=runs.metric_continuation_dead_letters(period=cdk.Duration.minutes(5)),
            threshold=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=quiet,
            alarm_description=(
                "The run continuation could not handle a job state change or a scheduled run after its retries; "
                "the event is in its dead-letter queue. A run may be stuck: see the continuation's log group, "
                "then resubmit or stop the run."
            ),
        )

    # -- dashboard ------------------------------------------------------------------------------

    def _rows(
        self, submitter: ISubmitterMetrics, gpus_per_host: Sequence[int], period: cdk.Duration
    ) -> list[list[cloudwatch.IWidget]]:
        rows: list[list[cloudwatch.IWidget]] = [
            [
                cloudwatch.TextWidget(
                    markdown=(
                        f"# {cdk.Stack.of(self).stack_name}: SageMaker training platform\n"
                        "Sections: **Fleet** · **Training progress** · **Job submitter** · **Training plans** · "
                        f"**Job outcomes** · {'**Training runs** · ' if self._runs is not None else ''}**Logs**. "
                        "Alarms notify the platform's SNS topic."
                    ),
                    width=24,
                    height=2,
                )
            ],
            [
                cloudwatch.AlarmStatusWidget(
                    title="Alarms",
                    alarms=list(self.alarms.values()),
                    sort_by=cloudwatch.AlarmStatusWidgetSortBy.STATE_UPDATED_TIMESTAMP,
                    width=24,
                    height=3,
                )
            ],
        ]
        rows += widgets.fleet_rows(gpus_per_host, period)
        rows += widgets.training_progress_rows(period)
        rows += _submitter_rows(submitter, period)
        if self.plan_metrics is not None:
            rows += widgets.training_plan_rows(self.plan_metrics, self.plan_names, period)
        rows += widgets.job_outcome_rows(self.job_outcomes, period)
        if self._runs is not None:
            rows += widgets.run_rows(self._runs, self._run_wait_alarm_seconds, period)
        rows += widgets.log_rows()
        return rows

    @property
    def dashboard_name(self) -> str:
        return self.dashboard.dashboard_name

    @property
    def topic_arn(self) -> str:
        return self.alarm_topic.topic_arn


def _submitter_rows(submitter: ISubmitterMetrics, period: cdk.Duration) -> list[list[cloudwatch.IWidget]]:
    return [
        widgets.header("Job submitter", "Requests to the submitter function and what it answered."),
        [
            cloudwatch.GraphWidget(
                title="Invocations, errors, throttles",
                left=[
                    submitter.metric_invocations(period=period),
                    submitter.metric_errors(period=period),
                    submitter.metric_throttles(period=period),
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Duration (ms)",
                left=[
                    submitter.metric_duration(period=period, statistic="p50", label="p50"),
                    submitter.metric_duration(period=period, statistic="p99", label="p99"),
                ],
                width=12,
            ),
        ],
        [
            cloudwatch.GraphWidget(
                title="Submissions by capacity type",
                left=[submitter.metric_submissions(c, period=period, label=c) for c in CAPACITY_TYPES],
                stacked=True,
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Refusals by error code",
                left=[submitter.metric_refusals(e, period=period, label=e) for e in submitter_settings.ERROR_CODES],
                stacked=True,
                width=12,
            ),
        ],
    ]


def _gpus_per_host(instance_types: Sequence[str]) -> list[int]:
    """GPU counts of one host of each instance type (the catalogue's ``gpus_per_host``: an UltraServer's
    hosts are its ``host_instance_type``).

    Raises:
        ValueError: an instance type is not in the catalogue.
    """
    from platform_spec.catalogue import INSTANCES

    unknown = [t for t in instance_types if t not in INSTANCES]
    if unknown:
        raise ValueError(
            f"PlatformObservabilityProps.instance_types: got {unknown}, not in the instance catalogue; "
            f"expected some of {', '.join(INSTANCES)}"
        )
    return sorted({INSTANCES[instance_type].gpus_per_host for instance_type in instance_types})


def _plan_names(plan_arns: Sequence[str]) -> list[str]:
    """The plans' names, in order.

    Raises:
        ValueError: an ARN is not a training-plan ARN, or two plans share a name (each
            gets a tile and an alarm named after it).
    """
    names = []
    for index, arn in enumerate(plan_arns):
        try:
            names.append(parse_training_plan_arn(arn)["name"])
        except ValueError as exc:
            raise ValueError(f"PlatformObservabilityProps.plan_arns[{index}]: {exc}") from None
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(
            f"PlatformObservabilityProps.plan_arns: plan names {repeated} occur more than once; expected each "
            "plan once (its dashboard tile and idle-capacity alarm are named after it)"
        )
    return names


def _validate(props: PlatformObservabilityProps) -> None:
    if not isinstance(props.submitter, ISubmitterMetrics):
        raise ValueError(
            f"PlatformObservabilityProps.submitter: got {type(props.submitter).__name__}; expected the submitter's "
            "metrics (ISubmitterMetrics: metric_invocations, metric_errors, metric_throttles, metric_duration, "
            "metric_submissions, metric_refusals), e.g. a JobSubmitter"
        )
    if props.plan_arns and props.plan_arns_parameter is None:
        raise ValueError(
            f"PlatformObservabilityProps.plan_arns: got {len(props.plan_arns)} plan(s) without plan_arns_parameter; "
            "expected the parameter too (the plan-metrics publisher reads it, and the tiles and alarms chart what it publishes)"
        )
    hours = props.idle_capacity_hours
    if isinstance(hours, bool) or not isinstance(hours, int) or not 1 <= hours <= MAX_IDLE_CAPACITY_HOURS:
        raise ValueError(
            f"PlatformObservabilityProps.idle_capacity_hours: got {hours!r}; expected an integer from 1 to {MAX_IDLE_CAPACITY_HOURS}"
        )
    if props.runs is not None and not isinstance(props.runs, IRunMetrics):
        raise ValueError(
            f"PlatformObservabilityProps.runs: got {type(props.runs).__name__}; expected the runs' metrics "
            "(IRunMetrics: continuation_log_group, metric_run_decisions, metric_run_segments_started, "
            "metric_run_capacity_wait_seconds, metric_continuation_dead_letters), e.g. a JobSubmitter"
        )
    wait = props.run_capacity_wait_minutes
    if isinstance(wait, bool) or not isinstance(wait, int) or not 1 <= wait <= MAX_RUN_CAPACITY_WAIT_MINUTES:
        raise ValueError(
            f"PlatformObservabilityProps.run_capacity_wait_minutes: got {wait!r}; expected an integer from 1 to "
            f"{MAX_RUN_CAPACITY_WAIT_MINUTES}"
        )
    seconds = props.period.to_seconds()
    if seconds < 60 or seconds % 60:
        raise ValueError(f"PlatformObservabilityProps.period: got {seconds} s; expected whole minutes, at least 1")
