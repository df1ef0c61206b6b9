"""The observability functions: the training-plan metrics publisher and the job-state handler.

Both run the code in ``runtime/`` (one Lambda package, :data:`PACKAGE`: the
runtime and ``platform_spec``, laid out under their import names), each
with its own least-privilege role and log group, and expose ``metric_*``
methods named after the metrics they publish (names from
:mod:`.runtime.settings`), for the dashboard and the alarms.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm

from constructs import Construct
from platform_spec.runs import TERMINAL_JOB_STATUSES

from .. import acknowledgements as nag
from ..job_state_events import job_state_event_pattern
from ..network import IPlatformNetwork
from ..submitter.bundling import ARCHITECTURE, RUNTIME, LambdaPackage
from .runtime import settings

__all__ = [
    "JOB_EVENTS_HANDLER",
    "PACKAGE",
    "PLAN_METRICS_HANDLER",
    "JobStateHandler",
    "JobStateHandlerProps",
    "PlanMetricsPublisher",
    "PlanMetricsPublisherProps",
]

PLAN_METRICS_HANDLER = "platform_constructs.observability.runtime.plan_metrics.lambda_handler"
JOB_EVENTS_HANDLER = "platform_constructs.observability.runtime.job_events.lambda_handler"
PACKAGE = LambdaPackage(
    handlers=(PLAN_METRICS_HANDLER, JOB_EVENTS_HANDLER),
    roots=("platform_constructs.observability.runtime", "platform_constructs.lambda_runtime", "platform_spec"),
    requirements=Path(__file__).resolve().parent / "runtime" / "requirements.txt",
    display_name="observability functions package",
)
"""Both functions' package: their runtime, ``platform_constructs.lambda_runtime`` (the deadline on AWS calls, as
the submitter's), ``platform_spec`` (the training-plan ARN rule, the job-state event's names), boto3 and
Powertools; no planner or trainer code."""


class _ObservabilityFunction(Construct):
    """A function of :data:`PACKAGE` with its ``LogGroup``, ``Role`` and ``Resource`` children."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        handler: str,
        description: str,
        service: str,
        environment: dict[str, str],
        metrics_namespace: str,
        log_retention: logs.RetentionDays,
        removal_policy: cdk.RemovalPolicy,
        timeout: cdk.Duration,
        retry_attempts: int,
        network: IPlatformNetwork | None,
    ) -> None:
        super().__init__(scope, id)
        self.log_group = logs.LogGroup(self, "LogGroup", retention=log_retention, removal_policy=removal_policy)
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=description,
        )
        self.log_group.grant_write(self.role)
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PutMetricData",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],  # PutMetricData has no resource-level permissions
                conditions={"StringEquals": {"cloudwatch:namespace": metrics_namespace}},
            )
        )
        nag.acknowledge(
            self.role,
            nag.IAM5,
            "cloudwatch:PutMetricData has no resource-level permissions (AWS requires '*'); the statement is "
            f"limited to the namespace {metrics_namespace} by the cloudwatch:namespace condition.",
            finding="Resource::*",
        )
        self.function = lambda_.Function(
            self,
            "Resource",
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=handler,
            code=PACKAGE.code(),
            role=self.role,
            memory_size=256,
            timeout=timeout,
            retry_attempts=retry_attempts,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            environment={"POWERTOOLS_SERVICE_NAME": service, **environment},
            **(network.function_options(self.role) if network is not None else {}),
        )
        nag.acknowledge(
            self.function,
            "AwsSolutions-L1",
            f"Runtime pinned to {RUNTIME.name}, like the submitter: the package's dependencies are installed for "
            "exactly this CPython version (bundling.PYTHON_VERSION); moving to a newer runtime changes both together.",
        )


# -- training-plan metrics ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PlanMetricsPublisherProps:
    """Properties of :class:`PlanMetricsPublisher`.

    Attributes:
        plan_arns_parameter: the SSM String parameter holding the plan ARNs as a JSON list
            (:class:`~platform_constructs.training_plans.TrainingPlans`' ``parameter``), read on every run.
        schedule: how often the plans are described and published. Default:
            every 5 minutes (:data:`.runtime.settings.PUBLISH_SCHEDULE_MINUTES`).
        log_retention: retention of the function's log group. Default: three months.
        removal_policy: what happens to the log group when it leaves the stack.
            Default: it is retained.
        network: VPC mode: the function runs in the network's private subnets with its functions' group.
            Default: outside any VPC.
    """

    plan_arns_parameter: ssm.IStringParameter
    schedule: cdk.Duration = field(default_factory=lambda: cdk.Duration.minutes(settings.PUBLISH_SCHEDULE_MINUTES))
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    network: IPlatformNetwork | None = None


class PlanMetricsPublisher(Construct):
    """Publishes each training plan's capacity to CloudWatch on an EventBridge schedule.

    Children: ``Function`` (with ``LogGroup``, ``Role``, ``Resource``) and
    ``Schedule`` (the EventBridge rule). Metrics: namespace
    :data:`.runtime.settings.PLAN_METRICS_NAMESPACE`; see
    :mod:`.runtime.plan_metrics`.

    Attributes:
        function / role / log_group: the publisher function and its role and logs.
        rule: the schedule rule.
    """

    def __init__(self, scope: Construct, id: str, props: PlanMetricsPublisherProps) -> None:
        super().__init__(scope, id)
        minutes = props.schedule.to_seconds() / 60  # to_minutes() raises on a part of a minute
        if minutes < 1 or minutes != int(minutes):
            raise ValueError(
                f"PlanMetricsPublisherProps.schedule: got {minutes:g} minutes; expected whole minutes, at least 1"
            )
        stack = cdk.Stack.of(self)
        fn = _ObservabilityFunction(
            self,
            "Function",
            handler=PLAN_METRICS_HANDLER,
            description="Publishes training-plan capacity (available, in use, total instances, hours until end)",
            service=settings.PLAN_METRICS_SERVICE,
            environment={settings.ENV_TRAINING_PLAN_ARNS_PARAMETER: props.plan_arns_parameter.parameter_name},
            metrics_namespace=settings.PLAN_METRICS_NAMESPACE,
            log_retention=props.log_retention,
            removal_policy=props.removal_policy,
            timeout=cdk.Duration.seconds(settings.PLAN_METRICS_TIMEOUT_S),
            retry_attempts=0,  # the next scheduled run is the retry
            network=props.network,
        )
        self.function, self.role, self.log_group = fn.function, fn.role, fn.log_group
        # GetParameter only: the function reads the one parameter (grant_read would add DescribeParameters,
        # GetParameters and GetParameterHistory, which nothing calls; the emulator's authorization shows it)
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadTrainingPlanArns",
                actions=["ssm:GetParameter"],
                resources=[props.plan_arns_parameter.parameter_arn],
            )
        )
        plans = stack.format_arn(service="sagemaker", resource="training-plan", resource_name="*")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="DescribeTrainingPlans", actions=["sagemaker:DescribeTrainingPlan"], resources=[plans]
            )
        )
        nag.acknowledge(
            self.role,
            nag.IAM5,
            "Training plans change at run time through the SSM parameter (no redeploy), so DescribeTrainingPlan "
            "is granted on the account's training-plan ARNs in this region, as for the submitter.",
            finding=nag.resource(self, plans),
        )
        self.rule = events.Rule(
            self,
            "Schedule",
            description=f"Publishes training-plan capacity metrics every {int(minutes)} minutes",
            schedule=events.Schedule.rate(props.schedule),
            targets=[targets.LambdaFunction(self.function, retry_attempts=0)],
        )

    # -- metrics --------------------------------------------------------------------------------

    def _plan_metric(self, name: str, plan_name: str | None, statistic: str, props: dict) -> cloudwatch.Metric:
        options = {"statistic": statistic, "period": cdk.Duration.minutes(5), **props}
        dims = {settings.DIMENSION_TRAINING_PLAN_NAME: plan_name} if plan_name else None
        return cloudwatch.Metric(
            namespace=settings.PLAN_METRICS_NAMESPACE, metric_name=name, dimensions_map=dims, **options
        )

    def metric_available_instance_count(self, plan_name: str | None = None, **props) -> cloudwatch.Metric:
        """``AvailableInstanceCount`` of one plan, or of all usable plans when ``plan_name`` is omitted (maximum)."""
        return self._plan_metric(settings.METRIC_AVAILABLE_INSTANCES, plan_name, cloudwatch.Stats.MAXIMUM, props)

    def metric_in_use_instance_count(self, plan_name: str | None = None, **props) -> cloudwatch.Metric:
        """``InUseInstanceCount`` of one plan, or of all usable plans (maximum)."""
        return self._plan_metric(settings.METRIC_IN_USE_INSTANCES, plan_name, cloudwatch.Stats.MAXIMUM, props)

    def metric_total_instance_count(self, plan_name: str | None = None, **props) -> cloudwatch.Metric:
        """``TotalInstanceCount`` of one plan, or of all usable plans (maximum)."""
        return self._plan_metric(settings.METRIC_TOTAL_INSTANCES, plan_name, cloudwatch.Stats.MAXIMUM, props)

    def metric_hours_until_end(self, plan_name: str, **props) -> cloudwatch.Metric:
        """``HoursUntilEnd`` of one plan (minimum)."""
        return self._plan_metric(settings.METRIC_HOURS_UNTIL_END, plan_name, cloudwatch.Stats.MINIMUM, props)

    def metric_errors(self, **props) -> cloudwatch.Metric:
        """The publisher function's ``Errors`` (sum): runs that failed, e.g. a plan not describable."""
        return self.function.metric_errors(**props)


# -- job outcomes --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class JobStateHandlerProps:
    """Properties of :class:`JobStateHandler`.

    Attributes:
        idempotency_ttl: how long a ``(job, status)`` pair suppresses duplicate
            events. Default: 7 days.
        log_retention: retention of the function's log group. Default: three months.
        removal_policy: what happens to the log group and the idempotency table
            when they leave the stack. Default: they are retained.
        network: VPC mode: the function runs in the network's private subnets with its functions' group.
            Default: outside any VPC.
    """

    idempotency_ttl: cdk.Duration = field(default_factory=lambda: cdk.Duration.days(7))
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    network: IPlatformNetwork | None = None


class JobStateHandler(Construct):
    """Counts training-job outcomes and logs failure reasons from EventBridge state-change events.

    Children: ``Function`` (with ``LogGroup``, ``Role``, ``Resource``), ``Rule``
    (the EventBridge rule, pattern
    :func:`~platform_constructs.job_state_events.job_state_event_pattern`) and
    ``IdempotencyTable`` (DynamoDB, on-demand, TTL attribute ``expiration``:
    Powertools idempotency records). See :mod:`.runtime.job_events`.

    Attributes:
        function / role / log_group: the handler function and its role and logs.
        rule: the EventBridge rule.
        table: the idempotency table.
    """

    def __init__(self, scope: Construct, id: str, props: JobStateHandlerProps | None = None) -> None:
        super().__init__(scope, id)
        props = props or JobStateHandlerProps()
        ttl_s = int(props.idempotency_ttl.to_seconds())
        if ttl_s < 3600:
            raise ValueError(f"JobStateHandlerProps.idempotency_ttl: got {ttl_s} s; expected at least 1 hour")
        self.table = dynamodb.Table(
            self,
            "IdempotencyTable",
            partition_key=dynamodb.Attribute(name="id", type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            time_to_live_attribute="expiration",
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            removal_policy=props.removal_policy,
        )
        nag.acknowledge(
            self.table,
            "AwsSolutions-DDB3",
            "The table holds only Powertools idempotency records that expire (TTL) after a few days; "
            "restoring them to a point in time has no use, so point-in-time recovery is not paid for.",
        )
        fn = _ObservabilityFunction(
            self,
            "Function",
            handler=JOB_EVENTS_HANDLER,
            description="Counts SageMaker training-job outcomes and logs failure reasons",
            service=settings.JOB_EVENTS_SERVICE,
            environment={
                settings.ENV_IDEMPOTENCY_TABLE: self.table.table_name,
                settings.ENV_IDEMPOTENCY_TTL_SECONDS: str(ttl_s),
            },
            metrics_namespace=settings.JOB_METRICS_NAMESPACE,
            log_retention=props.log_retention,
            removal_policy=props.removal_policy,
            timeout=cdk.Duration.seconds(settings.JOB_EVENTS_TIMEOUT_S),
            retry_attempts=settings.JOB_EVENTS_RETRY_ATTEMPTS,
            network=props.network,
        )
        self.function, self.role, self.log_group = fn.function, fn.role, fn.log_group
        # what Powertools' DynamoDB persistence layer calls, on this table only
        self.table.grant(
            self.role, "dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem"
        )
        self.rule = events.Rule(
            self,
            "Rule",
            description="SageMaker training jobs that completed, failed or stopped",
            event_pattern=job_state_event_pattern(),
            targets=[targets.LambdaFunction(self.function)],
        )

    # -- metrics --------------------------------------------------------------------------------

    def metric_training_job_outcomes(self, status: str, **props) -> cloudwatch.Metric:
        """``TrainingJobOutcomes`` with one ``TrainingJobStatus`` (sum): jobs that ended so.

        Raises:
            ValueError: ``status`` is not one of ``Completed``, ``Failed``, ``Stopped``.
        """
        if status not in TERMINAL_JOB_STATUSES:
            raise ValueError(f"status: got {status!r}; expected one of {', '.join(TERMINAL_JOB_STATUSES)}")
        options = {"statistic": cloudwatch.Stats.SUM, "period": cdk.Duration.minutes(5), **props}
        return cloudwatch.Metric(
            namespace=settings.JOB_METRICS_NAMESPACE,
            metric_name=settings.METRIC_JOB_OUTCOMES,
            dimensions_map={settings.DIMENSION_TRAINING_JOB_STATUS: status},
            **options,
        )

    def metric_errors(self, **props) -> cloudwatch.Metric:
        """The handler function's ``Errors`` (sum)."""
        return self.function.metric_errors(**props)
