"""The job submitter's construct: the Lambda functions that run the job API and continue runs.

Its logic lives in :mod:`platform_constructs.submitter.runtime`, a plain
package; one deployment package (:data:`.bundling.SUBMITTER`, what the
handlers import) serves three functions, each with its own least-privilege
role, log group and environment (:func:`.runtime.settings.function_environment`):

* the submitter (``Resource``, handler :data:`HANDLER`): every action of the job API
  (submit, describe, list, stop, the runs'); other services get it with
  :meth:`JobSubmitter.grant_submit`;
* the reader (``Reader``): the same handler limited to :data:`READER_ACTIONS` by
  the ``SUBMITTER_ALLOWED_ACTIONS`` variable, with a role that can read jobs, plans,
  run records and checkpoints and change nothing (:meth:`JobSubmitter.grant_read`);
* the run continuation (``Continuation``, handler :data:`CONTINUATION_HANDLER`):
  SageMaker's terminal ``Training Job State Change`` events and a schedule decide
  and submit each run's next segment through the submitter's own code path.

It exposes ``grant_*`` and ``metric_*`` methods for the dashboard and alarms
(:class:`ISubmitterMetrics` and :class:`IRunMetrics`, what observability takes),
and takes the other resources through interfaces: the image as an
:class:`~platform_constructs.trainer_image.ITrainerImage`, the role, buckets
and plan parameter as ``iam.IRole``, ``s3.IBucket`` and ``ssm.IStringParameter``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from aws_cdk import aws_ssm as ssm

from constructs import Construct
from platform_spec.capacity import (
    CAPACITY_FALLBACK_EXPECTED,
    CAPACITY_TYPES,
    DEFAULT_CAPACITY_FALLBACK,
    capacity_fallback_problem,
)
from platform_spec.catalogue import INSTANCE_TYPES
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import HF_CONFIG_FILE, HF_INDEX_FILE, HF_WEIGHTS_FILE
from platform_spec.runs import DECISIONS as RUN_DECISIONS
from platform_spec.runs import RUN_CHECKPOINT_PREFIX

from .. import acknowledgements as nag
from ..job_state_events import job_state_event_pattern
from ..network import IPlatformNetwork
from ..trainer_image import ITrainerImage
from . import bundling
from .bundling import ARCHITECTURE, RUNTIME
from .runtime import actions, settings
from .runtime.sagemaker_rules import training_instance_types

__all__ = [
    "AUTO_DELETE_PROVIDER_ID",
    "CONTINUATION_HANDLER",
    "DEFAULT_CONTINUATION_SCHEDULE_MINUTES",
    "DEFAULT_RESERVED_CONCURRENCY",
    "HANDLER",
    "MAX_CONTINUATION_SCHEDULE_MINUTES",
    "MAX_RESERVED_CONCURRENCY",
    "READER_ACTIONS",
    "RECORD_WRITE_ACTIONS",
    "IRunMetrics",
    "ISubmitterMetrics",
    "JobSubmitter",
    "JobSubmitterProps",
]

HANDLER, CONTINUATION_HANDLER = bundling.SUBMITTER.handlers
"""The submitter's and reader's handler, ``platform_constructs.submitter.runtime.handler.lambda_handler``,
and the run continuation's, ``platform_constructs.submitter.runtime.continuation.lambda_handler``: the
bundle lays the code out under its import names, so Lambda imports the modules the tests import."""

READER_ACTIONS = actions.READ_ACTIONS
"""The actions of the job API the reader function serves (its ``SUBMITTER_ALLOWED_ACTIONS``): the ones that
change nothing (``actions.READ_ACTIONS``); its role is granted what they need and nothing more."""

DEFAULT_CONTINUATION_SCHEDULE_MINUTES = 5
"""How often the continuation retries the runs waiting for capacity and publishes the longest
wait (``RunCapacityWaitSeconds``), minutes."""
MAX_CONTINUATION_SCHEDULE_MINUTES = 24 * 60
"""The longest schedule: a run waiting for capacity is retried at least daily."""
CONTINUATION_TIMEOUT = cdk.Duration.minutes(2)
"""The continuation function's timeout: one event decides one run (a few AWS calls and at most
one submission, each bounded by the submitter's ``FUNCTION_TIMEOUT_S``); a scheduled tick
retries the waiting runs and reconciles the active ones, starting no run's work with less than
``FUNCTION_TIMEOUT_S`` left (``runtime.continuation.TICK_RESERVE_S``): the rest waits for the next tick."""
CONTINUATION_EVENT_RETRIES = 2
"""Attempts after the first, both for EventBridge delivering an event to the function and for
Lambda's asynchronous invocation of it (its maximum, 2); an event still failing then goes to the
dead-letter queue, where ``RunContinuationDeadLetters`` raises the alarm."""
CONTINUATION_MAX_EVENT_AGE = cdk.Duration.hours(6)
"""How long EventBridge and Lambda keep retrying an event before it is dead-lettered: Lambda's
maximum for asynchronous invocations (``MaximumEventAgeInSeconds``, 60-21600; EventBridge's
target retry policy allows up to 24 hours)."""
DEAD_LETTER_RETENTION = cdk.Duration.days(14)
"""How long a dead-lettered event is kept (SQS's maximum message retention)."""

UNRESERVED_CONCURRENCY_FLOOR = 100
"""Lambda keeps at least this many of an account's concurrent executions unreserved:
"You can reserve up to the Unreserved account concurrency value that is shown, minus 100
for functions that don't have reserved concurrency" (AWS Lambda Developer Guide,
"Configuring reserved concurrency for a function")."""
DEFAULT_ACCOUNT_CONCURRENCY = 1000
"""The default per-region Lambda concurrency quota (AWS Lambda Developer Guide, "Lambda
quotas"); new accounts may start lower and raise it through Service Quotas."""
MAX_RESERVED_CONCURRENCY = DEFAULT_ACCOUNT_CONCURRENCY - UNRESERVED_CONCURRENCY_FLOOR
"""The most the submitter may reserve (900): more fails the deployment in an account with the
default quota, and even 900 would leave every other function of the account 100."""
RECORD_WRITE_ACTIONS = ("s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion")
"""What only the submitter may do to its client-token records (``s3:PutObject`` covers copies
and multipart uploads); everyone else is denied them by the output bucket's policy."""
AUTO_DELETE_PROVIDER_ID = "Custom::S3AutoDeleteObjectsCustomResourceProvider"
"""Construct ID (a stack singleton) of CDK's auto-delete provider, which a bucket with
``auto_delete_objects`` (``removal_policy=DESTROY``) adds to its stack."""
DEFAULT_RESERVED_CONCURRENCY = 10
"""Submitter invocations that may run at once. One invocation makes a few API calls and
creates at most one training job, so 10 at once admits bursts of submissions (a sweep
submits one config at a time; 8 concurrent duplicates of one request all run) while a
runaway caller is throttled instead of creating jobs without bound; it takes only 10 from
the account's unreserved pool."""


@runtime_checkable
class ISubmitterMetrics(Protocol):
    """The submitter's metrics, as the dashboard and the alarms read them (implemented by :class:`JobSubmitter`):
    each a ``cloudwatch.Metric``, keyword arguments ``cloudwatch.MetricOptions`` overriding its defaults.
    Lambda's (``AWS/Lambda``): ``Invocations``, ``Errors``, ``Throttles`` (sums), ``Duration`` (ms); the
    function's own (:data:`.runtime.settings.METRICS_NAMESPACE`): ``Submissions`` by capacity type and
    ``Refusals`` by error code (sums; other values raise ``ValueError``)."""

    def metric_invocations(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_errors(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_throttles(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_duration(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_submissions(self, capacity_type: str, **props: Any) -> cloudwatch.Metric: ...

    def metric_refusals(self, error_code: str, **props: Any) -> cloudwatch.Metric: ...


@runtime_checkable
class IRunMetrics(Protocol):
    """The runs' metrics and decision log, as the dashboard and the alarms read them (implemented by
    :class:`JobSubmitter`), in the submitter's namespace as the continuation publishes them: ``RunDecisions`` by
    decision (sum; other values raise ``ValueError``), ``RunSegmentsStarted`` (sum), ``RunCapacityWaitSeconds``
    (maximum: the longest wait for capacity, 0 when none, every scheduled tick), ``RunStepAgeSeconds`` (maximum:
    the oldest newest step of a run in training, 0 when none, every scheduled tick; per run with the ``RunId``
    dimension) and the dead-letter queue's depth (maximum); ``continuation_log_group`` holds one structured line
    per decision."""

    continuation_log_group: logs.ILogGroup

    def metric_run_decisions(self, decision: str, **props: Any) -> cloudwatch.Metric: ...

    def metric_run_segments_started(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_run_capacity_wait_seconds(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_run_step_age_seconds(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_continuation_dead_letters(self, **props: Any) -> cloudwatch.Metric: ...


@runtime_checkable
class IJobFileSystem(Protocol):
    """The file system requests may read as a channel (implemented by
    :class:`~platform_constructs.fsx_lustre.FsxLustre`): its identity for the functions' environment
    (``settings.function_environment``'s ``fsx_lustre``) and the ``CreateTrainingJob`` conditions that hold
    requests to it (``{"ForAllValues:StringEquals": {condition key: values}}``)."""

    def function_environment_value(self) -> dict[str, str]: ...

    def create_training_job_conditions(self) -> dict[str, dict[str, list[str]]]: ...


@dataclass(frozen=True, kw_only=True)
class JobSubmitterProps:
    """Properties of :class:`JobSubmitter`.

    Attributes:
        trainer_image: the trainer image; its URI (content-derived tag) is what jobs run,
            and the function is created after the image is in its repository.
        execution_role: the SageMaker execution role passed to ``CreateTrainingJob``
            (``iam:PassRole`` is granted on it only, to SageMaker only).
        data_bucket: training data (its name is given to the function).
        checkpoint_bucket: checkpoints (name given to the function).
        output_bucket: job output (name given to the function); also holds the
            client-token records under ``settings.CLIENT_TOKEN_RECORDS_PREFIX``
            (the function may read, write and list that prefix only; its
            lifecycle rules must not expire current objects).
        plan_arns_parameter: the SSM String parameter holding the training-plan ARNs as a
            JSON list (:class:`~platform_constructs.training_plans.TrainingPlans`' ``parameter``);
            the function reads it at run time.
        default_instance_type: instance type of requests that name none.
        allowed_instance_types: instance types requests may name; each must be
            in the planner catalogue (``platform_spec.catalogue.INSTANCE_TYPES``).
        capacity_fallback: order tried for ``capacity=auto`` (values from
            :data:`platform_spec.capacity.CAPACITY_TYPES`). Default:
            :data:`platform_spec.capacity.DEFAULT_CAPACITY_FALLBACK` (training plan, then spot, then on-demand).
        allowed_input_prefixes: extra ``s3://`` input prefixes requests may
            use; the data bucket is always allowed. Default: none.
        platform_tags: tags added to every training job. Default: none.
        volume_size_gb: training volume size per instance, GB. Default: the
            function's own default (:data:`.runtime.config.DEFAULT_VOLUME_SIZE_GB`).
        log_retention: retention of the function's log group. Default: three months.
        removal_policy: what happens to the log group when it leaves the stack.
            Default: it is retained.
        memory_size: function memory, MiB (CPU scales with it). Default: 512.
        timeout: function timeout; every AWS call of an invocation is bounded by
            it (``runtime/aws.py``). Default: ``settings.FUNCTION_TIMEOUT_S``
            (60 seconds), also the deadline of ``trainctl submit --local``.
        reserved_concurrent_executions: the most invocations that run at once
            (Lambda reserved concurrency, 1 to :data:`MAX_RESERVED_CONCURRENCY`);
            further calls are throttled (``TooManyRequestsException``, retried by
            the callers' SDKs), so a runaway caller cannot submit jobs without
            bound. ``None`` reserves nothing and shares the account's unreserved
            pool (for accounts whose concurrency quota is too small to reserve
            from). Default: :data:`DEFAULT_RESERVED_CONCURRENCY`.
        continuation_schedule: how often the run continuation retries the runs
            waiting for capacity and publishes the longest wait (whole minutes, 1 to
            1440). Default: every :data:`DEFAULT_CONTINUATION_SCHEDULE_MINUTES` minutes.
        network: VPC mode: the three functions run in its job subnets with its functions' group, every job gets
            its job subnets and group (``VpcConfig``), and the submitter's and continuation's ``CreateTrainingJob``
            is allowed with those subnets and group only (``sagemaker:VpcSubnets`` and
            ``sagemaker:VpcSecurityGroupIds``, :func:`_in_network`). Default: no VPC; jobs get no ``VpcConfig``.
        file_system: the FSx for Lustre file system requests may read as a channel (needs ``network``): its
            identity goes into the functions' environment, and ``CreateTrainingJob`` is allowed with no other
            file system, read-only (its :meth:`~platform_constructs.fsx_lustre.FsxLustre.create_training_job_conditions`).
            Default: none; a request naming a file system is refused.
    """

    trainer_image: ITrainerImage
    execution_role: iam.IRole
    data_bucket: s3.IBucket
    checkpoint_bucket: s3.IBucket
    output_bucket: s3.IBucket
    plan_arns_parameter: ssm.IStringParameter
    default_instance_type: str
    allowed_instance_types: Sequence[str]
    capacity_fallback: Sequence[str] = DEFAULT_CAPACITY_FALLBACK
    allowed_input_prefixes: Sequence[str] = ()
    platform_tags: Mapping[str, str] = field(default_factory=dict)
    volume_size_gb: int | None = None
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    memory_size: int = 512
    timeout: cdk.Duration = field(default_factory=lambda: cdk.Duration.seconds(settings.FUNCTION_TIMEOUT_S))
    reserved_concurrent_executions: int | None = DEFAULT_RESERVED_CONCURRENCY
    continuation_schedule: cdk.Duration = field(
        default_factory=lambda: cdk.Duration.minutes(DEFAULT_CONTINUATION_SCHEDULE_MINUTES)
    )
    network: IPlatformNetwork | None = None
    file_system: IJobFileSystem | None = None

    def __post_init__(self) -> None:
        if self.file_system is not None and self.network is None:
            raise ValueError("JobSubmitterProps.file_system needs network: jobs reach the file system in the VPC only")


class JobSubmitter(Construct):
    """The submitter Lambda (primary child ``Resource``), its ``Role`` and ``LogGroup``; the ``Reader`` and the
    run ``Continuation`` (each a ``Resource`` function with its ``Role`` and ``LogGroup``; the continuation also
    its ``JobStateRule``, ``Schedule`` and ``DeadLetterQueue``).

    Each role is granted what its function's actions need (:data:`.runtime.actions.ACTIONS`, each entry's
    :class:`~.runtime.actions.Grant` on a symbolic resource mapped here to this deployment's ARNs:
    :func:`_resources`): the submitter every action's, the reader those of :data:`READER_ACTIONS`, the
    continuation those of :data:`.runtime.actions.CONTINUATION_ACTIONS` and its own
    (:data:`.runtime.actions.CONTINUATION_GRANTS`). The output
    bucket's policy denies writing the client-token records and the run store to every principal but the
    submitter's and the continuation's roles (:meth:`_protect_records`).

    Attributes:
        function: the submitter function (every action).
        role: the submitter function's role.
        log_group: the submitter function's log group.
        reader_function / reader_role / reader_log_group: the reader (read-only actions).
        continuation_function / continuation_role / continuation_log_group: the run continuation
            (its log group holds one structured line per decision).
        continuation_rule: the EventBridge rule of SageMaker's terminal job state changes.
        continuation_schedule: the EventBridge schedule rule.
        dead_letter_queue: events the continuation could not be given or could not handle.
    """

    def __init__(self, scope: Construct, id: str, props: JobSubmitterProps) -> None:
        super().__init__(scope, id)
        _validate(props)
        self._continuation_schedule = props.continuation_schedule
        code = bundling.SUBMITTER.code()  # one asset for the three functions
        environment = self._environment(props)
        resources = _resources(self, props)

        self.log_group, self.role, self.function = self._function(
            self,
            props,
            description="Validates training-job requests and submits them to SageMaker",
            role_description="Job submitter: creates SageMaker training jobs with the platform's execution role",
            handler=HANDLER,
            code=code,
            environment=environment,
            timeout=props.timeout,
            reserved_concurrent_executions=props.reserved_concurrent_executions,
        )
        _grant(self.role, resources, actions.grants(), props.network, props.file_system)
        # The image must be in the repository before the function can submit jobs with it.
        self.function.node.add_dependency(props.trainer_image.deployment)

        # -- the reader: read-only actions, a role that changes nothing ---------------------------
        self.reader_log_group, self.reader_role, self.reader_function = self._function(
            Construct(self, "Reader"),
            props,
            description="Job API, read-only: describes and lists training jobs and runs",
            role_description="Job API reader: reads training jobs, plans, run records and checkpoints; changes nothing",
            handler=HANDLER,
            code=code,
            environment=self._environment(props, allowed_actions=READER_ACTIONS),
            timeout=props.timeout,
            # Nothing reserved: it creates nothing, and a second reservation would take the submitter's again
            # from the account's unreserved pool (900 and 900 would fail the deployment).
            reserved_concurrent_executions=None,
        )
        _grant(self.reader_role, resources, actions.grants(READER_ACTIONS))

        # -- the run continuation --------------------------------------------------------------
        continuation = Construct(self, "Continuation")
        self.continuation_log_group, self.continuation_role, self.continuation_function = self._function(
            continuation,
            props,
            description="Continues training runs: decides on each ended segment and submits the next",
            role_description="Run continuation: submits a run's next segment as the submitter would, records decisions",
            handler=CONTINUATION_HANDLER,
            code=code,
            environment=environment,
            timeout=CONTINUATION_TIMEOUT,
            reserved_concurrent_executions=None,
        )
        self.continuation_function.node.add_dependency(props.trainer_image.deployment)
        grants = (*actions.grants(actions.CONTINUATION_ACTIONS), *actions.CONTINUATION_GRANTS)
        _grant(self.continuation_role, resources, grants, props.network, props.file_system)
        self._route_events(continuation, props)

        self._protect_records(props.output_bucket, writers=[self.role, self.continuation_role])

    # -- functions ----------------------------------------------------------------------------

    @staticmethod
    def _function(
        scope: Construct,
        props: JobSubmitterProps,
        *,
        description: str,
        role_description: str,
        handler: str,
        code: lambda_.Code,
        environment: Mapping[str, str],
        timeout: cdk.Duration,
        reserved_concurrent_executions: int | None,
    ) -> tuple[logs.LogGroup, iam.Role, lambda_.Function]:
        """A ``LogGroup``, a ``Role`` that may write it, and the ``Resource`` function of the package."""
        log_group = logs.LogGroup(scope, "LogGroup", retention=props.log_retention, removal_policy=props.removal_policy)
        role = iam.Role(
            scope, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"), description=role_description
        )
        log_group.grant_write(role)
        placement = props.network.function_options(role) if props.network is not None else {}
        function = lambda_.Function(
            scope,
            "Resource",
            description=description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=handler,
            code=code,
            role=role,
            memory_size=props.memory_size,
            timeout=timeout,
            reserved_concurrent_executions=reserved_concurrent_executions,
            log_group=log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            environment=dict(environment),
            **placement,
        )
        nag.acknowledge(
            function,
            "AwsSolutions-L1",
            f"Runtime pinned to {RUNTIME.name}: the package's dependencies are installed for exactly this "
            "CPython version (bundling.PYTHON_VERSION) and it is supported by Lambda; moving to a newer "
            "runtime changes both together.",
        )
        return log_group, role, function

    def _route_events(self, scope: Construct, props: JobSubmitterProps) -> None:
        """The continuation's triggers: SageMaker's terminal job state changes and a schedule, with retries and a DLQ."""
        minutes = int(props.continuation_schedule.to_minutes())
        self.dead_letter_queue = sqs.Queue(
            scope,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=DEAD_LETTER_RETENTION,
            removal_policy=props.removal_policy,
        )
        nag.acknowledge(
            self.dead_letter_queue,
            "AwsSolutions-SQS3",
            "This queue is itself the dead-letter queue of the run continuation (its EventBridge targets and its "
            "asynchronous invocations); a dead-letter queue of a dead-letter queue would only move the events.",
        )
        # Lambda's asynchronous invocation: retries of a failed run, then the queue.
        self.continuation_function.configure_async_invoke(
            retry_attempts=CONTINUATION_EVENT_RETRIES,
            max_event_age=CONTINUATION_MAX_EVENT_AGE,
            on_failure=destinations.SqsDestination(self.dead_letter_queue),
        )

        def target() -> targets.LambdaFunction:
            # EventBridge's delivery: retries of an undeliverable event (throttling), then the queue.
            return targets.LambdaFunction(
                self.continuation_function,
                dead_letter_queue=self.dead_letter_queue,
                retry_attempts=CONTINUATION_EVENT_RETRIES,
                max_event_age=CONTINUATION_MAX_EVENT_AGE,
            )

        self.continuation_rule = events.Rule(
            scope,
            "JobStateRule",
            description="SageMaker training jobs that completed, failed or stopped: continue their runs",
            event_pattern=job_state_event_pattern(),
            targets=[target()],
        )
        self.continuation_schedule = events.Rule(
            scope,
            "Schedule",
            description=f"Every {minutes} minutes: retries the training runs waiting for capacity, decides the "
            "ended segments whose event was lost",
            schedule=events.Schedule.rate(props.continuation_schedule),
            targets=[target()],
        )

    def _protect_records(self, bucket: s3.IBucket, *, writers: Sequence[iam.IRole]) -> None:
        """Deny every principal but ``writers`` writing or deleting the client-token records and the run store.

        The records are the idempotency lock (overwriting one could make a retry create a second job) and the
        run store holds what the continuation trusts. Identity policies grant nobody else these keys; this
        bucket policy also holds against a broad grant added later (an administrator's ``s3:*``). CDK's
        auto-delete function (``removal_policy=DESTROY``) is exempt; lifecycle expiration is not subject to
        bucket policies; an imported bucket's policy is left alone.
        """
        exempt = [role.role_arn for role in writers]
        auto_delete = cdk.Stack.of(bucket).node.try_find_child(AUTO_DELETE_PROVIDER_ID)
        if auto_delete is not None:
            exempt.append(auto_delete.role_arn)
        for sid, prefix in (
            (settings.CLIENT_TOKEN_RECORDS_SID, settings.CLIENT_TOKEN_RECORDS_PREFIX),
            ("RunRecordsSubmitterOnly", settings.RUN_STORE_PREFIX),
        ):
            bucket.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=sid,
                    effect=iam.Effect.DENY,
                    principals=[iam.AnyPrincipal()],
                    actions=list(RECORD_WRITE_ACTIONS),
                    resources=[bucket.arn_for_objects(f"{prefix}*")],
                    conditions={"ArnNotEquals": {"aws:PrincipalArn": exempt}},
                )
            )

    @staticmethod
    def _environment(props: JobSubmitterProps, allowed_actions: Sequence[str] | None = None) -> dict[str, str]:
        return settings.function_environment(
            trainer_image_uris=props.trainer_image.image_uris,
            execution_role_arn=props.execution_role.role_arn,
            data_bucket=props.data_bucket.bucket_name,
            checkpoint_bucket=props.checkpoint_bucket.bucket_name,
            output_bucket=props.output_bucket.bucket_name,
            output_kms_key_arn=_output_key(props).key_arn,
            plan_arns_parameter=props.plan_arns_parameter.parameter_name,
            # Plans of other accounts are refused at run time (Lambda sets AWS_REGION itself).
            account_id=cdk.Aws.ACCOUNT_ID,
            default_instance_type=props.default_instance_type,
            allowed_instance_types=props.allowed_instance_types,
            capacity_fallback=props.capacity_fallback,
            allowed_input_prefixes=props.allowed_input_prefixes,
            platform_tags=props.platform_tags,
            volume_size_gb=props.volume_size_gb,
            allowed_actions=allowed_actions,
            **_network_environment(props.network, props.file_system),
        )

    # -- grants ---------------------------------------------------------------

    def grant_submit(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow ``grantee`` to invoke the submitter function (``lambda:InvokeFunction``): every action of the job
        API (submit, describe, list, stop, the runs')."""
        return self.function.grant_invoke(grantee)

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Alias of :meth:`grant_submit` (the name before the job API had read-only callers)."""
        return self.grant_submit(grantee)

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow ``grantee`` to invoke the reader function only (``lambda:InvokeFunction``): the actions of
        :data:`READER_ACTIONS`. It cannot invoke the submitter function, so it cannot submit or stop a job."""
        return self.reader_function.grant_invoke(grantee)

    # -- Lambda's standard metrics (AWS/Lambda) -------------------------------

    def metric_invocations(self, **props) -> cloudwatch.Metric:
        """``Invocations`` (sum over 5 minutes unless overridden)."""
        return self.function.metric_invocations(**props)

    def metric_errors(self, **props) -> cloudwatch.Metric:
        """``Errors``: invocations that raised (sum)."""
        return self.function.metric_errors(**props)

    def metric_throttles(self, **props) -> cloudwatch.Metric:
        """``Throttles`` (sum)."""
        return self.function.metric_throttles(**props)

    def metric_duration(self, **props) -> cloudwatch.Metric:
        """``Duration`` in milliseconds (average unless overridden)."""
        return self.function.metric_duration(**props)

    # -- the submitter's EMF metrics (settings.METRICS_NAMESPACE) -------------

    def metric_submissions(self, capacity_type: str, **props) -> cloudwatch.Metric:
        """``Submissions`` of one capacity type (sum): jobs created with that capacity.

        Raises:
            ValueError: ``capacity_type`` is not one of :data:`platform_spec.capacity.CAPACITY_TYPES`.
        """
        _check_choice("capacity_type", capacity_type, CAPACITY_TYPES)
        return self._custom_metric(settings.METRIC_SUBMISSIONS, settings.DIMENSION_CAPACITY_TYPE, capacity_type, props)

    def metric_refusals(self, error_code: str, **props) -> cloudwatch.Metric:
        """``Refusals`` with one error code (sum): requests turned down.

        Raises:
            ValueError: ``error_code`` is not one of ``settings.ERROR_CODES``.
        """
        _check_choice("error_code", error_code, settings.ERROR_CODES)
        return self._custom_metric(settings.METRIC_REFUSALS, settings.DIMENSION_ERROR_CODE, error_code, props)

    def _custom_metric(self, name: str, dimension: str, value: str, props: dict) -> cloudwatch.Metric:
        return _metric(name, {"service": settings.SERVICE_NAME, dimension: value}, cloudwatch.Stats.SUM, props)

    def _run_metric(self, name: str, decision: str | None, props: dict, statistic: str) -> cloudwatch.Metric:
        dimensions = {"service": settings.CONTINUATION_SERVICE_NAME}
        if decision is not None:
            dimensions[settings.DIMENSION_DECISION] = decision
        return _metric(name, dimensions, statistic, props)

    # -- the runs' metrics (the continuation's, settings.METRICS_NAMESPACE) ----

    def metric_run_decisions(self, decision: str, **props) -> cloudwatch.Metric:
        """``RunDecisions`` with one decision (sum): what the continuation decided about ended segments and waiting runs.

        Raises:
            ValueError: ``decision`` is not one of the decision vocabulary (``platform_spec.runs``).
        """
        _check_choice("decision", decision, RUN_DECISIONS)
        return self._run_metric(settings.METRIC_RUN_DECISIONS, decision, props, cloudwatch.Stats.SUM)

    def metric_run_segments_started(self, **props) -> cloudwatch.Metric:
        """``RunSegmentsStarted`` (sum): segments the continuation submitted (a run's first is the submitter's)."""
        return self._run_metric(settings.METRIC_RUN_SEGMENTS_STARTED, None, props, cloudwatch.Stats.SUM)

    def metric_run_capacity_wait_seconds(self, **props) -> cloudwatch.Metric:
        """``RunCapacityWaitSeconds`` (maximum, seconds): the longest wait of a run waiting for capacity, 0 when
        none; published on every scheduled tick, so its default period is the schedule's (one value a period)."""
        props = {"period": self._continuation_schedule, **props}
        return self._run_metric(settings.METRIC_RUN_CAPACITY_WAIT_SECONDS, None, props, cloudwatch.Stats.MAXIMUM)

    def metric_run_step_age_seconds(self, **props) -> cloudwatch.Metric:
        """``RunStepAgeSeconds`` (maximum, seconds) without ``RunId``: the oldest newest step of the runs in
        training (``runtime/stall.py``), 0 when none trains; published on every scheduled tick (one value a
        period of the schedule). The per-run series carry the ``RunId`` dimension too."""
        props = {"period": self._continuation_schedule, **props}
        return self._run_metric(settings.METRIC_RUN_STEP_AGE_SECONDS, None, props, cloudwatch.Stats.MAXIMUM)

    def metric_continuation_dead_letters(self, **props) -> cloudwatch.Metric:
        """Events in the continuation's dead-letter queue (``ApproximateNumberOfMessagesVisible``, maximum): state
        changes or ticks the continuation never handled, so a run may be stuck."""
        options = {"statistic": cloudwatch.Stats.MAXIMUM, "period": cdk.Duration.minutes(5), **props}
        return self.dead_letter_queue.metric_approximate_number_of_messages_visible(**options)


@dataclass(frozen=True)
class _Resource:
    """A symbolic resource of :class:`.runtime.actions.Grant` in this deployment.

    Attributes:
        arns: its ARNs.
        why: why a wildcard in ``arns`` is acceptable (cdk-nag ``IAM5``, acknowledged on the roles granted it).
        bucket: for an S3 prefix, its bucket: ``arns`` are the objects below the prefixes, ``s3:ListBucket``
            is granted on the bucket for the prefixes only, and the bucket's key decrypts what is read and
            encrypts what is written.
        prefixes: the S3 key prefixes.
        conditions: the statement's conditions.
    """

    arns: tuple[str, ...]
    why: str = ""
    bucket: s3.IBucket | None = None
    prefixes: tuple[str, ...] = ()
    conditions: Mapping[str, Any] | None = None

    def statement(self, sid: str | None, iam_actions: list[str]) -> iam.PolicyStatement:
        if self.bucket is not None and iam_actions == ["s3:ListBucket"]:
            prefixes = {"StringLike": {"s3:prefix": [f"{prefix}*" for prefix in self.prefixes]}}
            return iam.PolicyStatement(
                sid=sid, actions=iam_actions, resources=[self.bucket.bucket_arn], conditions=prefixes
            )
        return iam.PolicyStatement(sid=sid, actions=iam_actions, resources=list(self.arns), conditions=self.conditions)


def _resources(scope: Construct, props: JobSubmitterProps) -> dict[str, _Resource]:
    """The symbolic resources of :class:`.runtime.actions.Grant` (its docstring says what each is) in this
    deployment: ``*`` in an ARN is every name of that kind in the stack's account and region."""
    stack = cdk.Stack.of(scope)

    def prefixes(bucket: s3.IBucket, *keys: str, why: str) -> _Resource:
        return _Resource(tuple(bucket.arn_for_objects(f"{key}*") for key in keys), why, bucket, keys)

    return {
        "training-job": _Resource(
            (stack.format_arn(service="sagemaker", resource="training-job", resource_name="*"),),
            "Training-job names are generated per request and per run segment, so the job actions are granted "
            "on the account's training-job ARNs in this region only.",
        ),
        "training-plan": _Resource(
            (stack.format_arn(service="sagemaker", resource="training-plan", resource_name="*"),),
            "Training plans change at run time through the SSM parameter (no redeploy), so DescribeTrainingPlan "
            "is granted on the account's training-plan ARNs in this region.",
        ),
        "plan-capacity": _Resource(
            tuple(
                stack.format_arn(service="sagemaker", resource=kind, resource_name="*")
                for kind in ("training-plan", "reserved-capacity")
            ),
            "A job on a training plan is authorized against the plan and its reserved capacity (SageMaker Developer "
            "Guide, 'IAM for SageMaker training plans'); plans change at run time through the SSM parameter, so "
            "CreateTrainingJob is granted on the account's training plans and reserved capacity in this region.",
        ),
        "*": _Resource(
            ("*",),
            "sagemaker:Search and cloudwatch:GetMetricData have no resource-level permissions (AWS requires '*'); "
            "the job API's list finds the platform's jobs with Search, by their submitter tag, and the run "
            "continuation reads its running segments' train:step metric with GetMetricData.",
        ),
        "execution-role": _Resource(
            (props.execution_role.role_arn,),
            conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
        ),
        "plan-parameter": _Resource((props.plan_arns_parameter.parameter_arn,)),
        "client-token-records": prefixes(
            props.output_bucket,
            settings.CLIENT_TOKEN_RECORDS_PREFIX,
            why="Client-token records are one object per token (named by its SHA-256) under one prefix of the "
            "output bucket; GetObject/PutObject are granted on that prefix only.",
        ),
        "run-records": prefixes(
            props.output_bucket,
            settings.RUN_STORE_PREFIX,
            why="Run records are objects per run (<run store prefix><run id>/...) under one prefix of the output "
            "bucket; they are read (and written, by the submitter and the continuation) under that prefix only.",
        ),
        "run-markers": prefixes(
            props.output_bucket,
            settings.RUN_WAITING_PREFIX,
            settings.RUN_ACTIVE_PREFIX,
            why="Waiting and active markers are one object per run waiting for capacity or in flight, under two "
            "prefixes of the run store; the continuation deletes them there only (never a version).",
        ),
        "checkpoints-prefix": prefixes(
            props.checkpoint_bucket,
            settings.JOB_CHECKPOINT_PREFIX,
            RUN_CHECKPOINT_PREFIX,
            why="Checkpoints are folders per job or per run named at submit time; they are read (never written) "
            "under the job and run checkpoint prefixes only, to find the newest complete step.",
        ),
        "run-checkpoints": prefixes(
            props.checkpoint_bucket,
            RUN_CHECKPOINT_PREFIX,
            why="Run checkpoints are folders per run (run-checkpoints/<run id>/step-<n>/) named at submit time; "
            "before a run's next segment every object there but its newest complete checkpoint is deleted (a "
            "noncurrent version stays: no DeleteObjectVersion), under the run checkpoint prefix only.",
        ),
        "model-folders": _Resource(
            tuple(
                arn
                for name in (HF_CONFIG_FILE, HF_INDEX_FILE, HF_WEIGHTS_FILE)
                for arn in (
                    props.data_bucket.arn_for_objects(f"*{name}"),
                    *(
                        f"arn:{stack.partition}:s3:::{uri[len('s3://') :]}*{name}"
                        for uri in props.allowed_input_prefixes
                    ),
                )
            ),
            "A request's init_from names any folder of the data bucket or the allowed input prefixes; the submitter "
            "reads its config.json and heads its weights' index or file there, so GetObject is granted on those "
            "three file names only.",
            bucket=props.data_bucket,
        ),
        "run-events": _Resource(
            (stack.format_arn(service="events", resource="event-bus", resource_name="default"),),
            conditions={"StringEquals": {"events:source": [settings.RUN_EVENT_SOURCE]}},
        ),
    }


_KMS = {"s3:GetObject": "kms:Decrypt", "s3:PutObject": "kms:GenerateDataKey"}
"""What reading and writing an object of an SSE-KMS bucket needs of its key."""


def _grant(
    role: iam.Role,
    resources: Mapping[str, _Resource],
    grants: Iterable[actions.Grant],
    network: IPlatformNetwork | None = None,
    file_system: IJobFileSystem | None = None,
) -> None:
    """Add ``grants`` to ``role``'s policy: one statement per Sid and resource (their actions merged), the
    bucket key's share for the objects, and cdk-nag's wildcard findings acknowledged with each resource's why.
    With ``network``, ``sagemaker:CreateTrainingJob`` gets a statement of its own (Sid suffixed ``InNetwork``)
    with :func:`_in_network`'s conditions (``file_system``'s too)."""
    statements: dict[tuple[str | None, str], list[str]] = {}
    for grant in grants:
        statements.setdefault((grant.sid, grant.resource), []).extend(grant.actions)
    for (sid, name), iam_actions in statements.items():
        resource = resources[name]
        if network is not None and _CREATE_JOB in iam_actions:
            iam_actions = [a for a in iam_actions if a != _CREATE_JOB]
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    sid=f"{sid}InNetwork",
                    actions=[_CREATE_JOB],
                    resources=list(resource.arns),
                    conditions=_in_network(network, file_system),
                )
            )
        if iam_actions:
            role.add_to_principal_policy(resource.statement(sid, iam_actions))
        key = resource.bucket.encryption_key if resource.bucket is not None else None
        if key is not None and any(a in _KMS for a in iam_actions):
            key.grant(role, *(_KMS[a] for a in iam_actions if a in _KMS))
        for arn in resource.arns if resource.why else ():
            nag.acknowledge(role, nag.IAM5, resource.why, finding=nag.resource(role, arn))


_CREATE_JOB = "sagemaker:CreateTrainingJob"


def _in_network(network: IPlatformNetwork, file_system: IJobFileSystem | None = None) -> dict[str, Any]:
    """``CreateTrainingJob``'s conditions in VPC mode: every subnet and security group of the job's ``VpcConfig``
    is the network's, and it has a ``VpcConfig`` (``Null`` false: ``ForAllValues`` alone holds for a request
    without the key). Both keys are CreateTrainingJob's (Service Authorization Reference, Amazon SageMaker).
    With ``file_system``, its conditions join (a file system channel names it, read-only)."""
    all_values: dict[str, list[str]] = {
        "sagemaker:VpcSubnets": [subnet.subnet_id for subnet in network.job_subnets],
        "sagemaker:VpcSecurityGroupIds": [network.job_security_group.security_group_id],
    }
    if file_system is not None:
        all_values.update(file_system.create_training_job_conditions()["ForAllValues:StringEquals"])
    return {
        "ForAllValues:StringEquals": all_values,
        "Null": {"sagemaker:VpcSubnets": "false", "sagemaker:VpcSecurityGroupIds": "false"},
    }


def _network_environment(network: IPlatformNetwork | None, file_system: IJobFileSystem | None) -> dict[str, Any]:
    """``settings.function_environment``'s VPC arguments: the job subnets (ID and zone), the jobs' group and the
    file system."""
    if network is None:
        return {}
    return {
        "fsx_lustre": file_system.function_environment_value() if file_system is not None else None,
        "vpc_subnets": [
            {"subnet_id": subnet.subnet_id, "availability_zone": subnet.availability_zone}
            for subnet in network.job_subnets
        ],
        "vpc_security_group_ids": [network.job_security_group.security_group_id],
    }


def _metric(name: str, dimensions: dict[str, str], statistic: str, props: dict) -> cloudwatch.Metric:
    """One of the submitter's EMF metrics (namespace ``settings.METRICS_NAMESPACE``), 5-minute periods unless
    ``props`` (``cloudwatch.MetricOptions``) say otherwise."""
    options = {"statistic": statistic, "period": cdk.Duration.minutes(5), **props}
    return cloudwatch.Metric(
        namespace=settings.METRICS_NAMESPACE, metric_name=name, dimensions_map=dimensions, **options
    )


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name}: got {value!r}; expected one of {', '.join(choices)}")


def _output_key(props: JobSubmitterProps) -> kms.IKey:
    """The output bucket's KMS key: every job's ``OutputDataConfig.KmsKeyId``.

    Raises:
        ValueError: the output bucket has no KMS key (an imported bucket, or one encrypted otherwise).
    """
    key = props.output_bucket.encryption_key
    if key is None:
        raise ValueError(
            "JobSubmitterProps.output_bucket: the bucket has no KMS key; expected a bucket encrypted with a "
            "customer managed KMS key (its key encrypts every job's output, OutputDataConfig.KmsKeyId)"
        )
    return key


def _validate(props: JobSubmitterProps) -> None:
    """Refuse props the deployment cannot honour, naming the prop, the value received and what was expected.

    Raises:
        ValueError, FieldError: the first bad prop.
    """
    _validate_instance_types(props)
    problem = capacity_fallback_problem(tuple(props.capacity_fallback))
    if problem is not None:
        raise FieldError(
            "JobSubmitterProps.capacity_fallback",
            list(props.capacity_fallback),
            CAPACITY_FALLBACK_EXPECTED,
            detail=problem,
        )
    for prefix in props.allowed_input_prefixes:
        if not prefix.startswith("s3://") or len(prefix) <= len("s3://"):
            raise ValueError(
                f"JobSubmitterProps.allowed_input_prefixes: got {prefix!r}; expected an s3://bucket/prefix URI"
            )
    _output_key(props)
    if props.volume_size_gb is not None and not 1 <= props.volume_size_gb <= 16384:
        raise ValueError(
            f"JobSubmitterProps.volume_size_gb: got {props.volume_size_gb!r}; expected an integer from 1 to 16384"
        )
    _validate_functions(props)


def _validate_instance_types(props: JobSubmitterProps) -> None:
    """The allowed types: in the planner catalogue and accepted by ``CreateTrainingJob``; the default among them."""
    allowed = list(props.allowed_instance_types)
    if not allowed:
        raise ValueError(
            "JobSubmitterProps.allowed_instance_types: got an empty list; expected at least one instance type"
        )
    unknown = [t for t in allowed if t not in INSTANCE_TYPES]
    if unknown:
        raise ValueError(
            f"JobSubmitterProps.allowed_instance_types: {unknown} not in the planner catalogue; "
            f"expected a subset of {', '.join(INSTANCE_TYPES)}"
        )
    refused = [t for t in allowed if t not in training_instance_types()]
    if refused:
        raise ValueError(
            f"JobSubmitterProps.allowed_instance_types: {refused} are not accepted by CreateTrainingJob; "
            "expected types of SageMaker's TrainingInstanceType (botocore's model)"
        )
    if props.default_instance_type not in allowed:
        raise ValueError(
            f"JobSubmitterProps.default_instance_type: got {props.default_instance_type!r}; "
            f"expected one of allowed_instance_types ({', '.join(allowed)})"
        )


def _validate_functions(props: JobSubmitterProps) -> None:
    """The functions' memory, reserved concurrency, the continuation's schedule and the image they run."""
    if not 128 <= props.memory_size <= 10240:
        raise ValueError(f"JobSubmitterProps.memory_size: got {props.memory_size!r}; expected 128 to 10240 MiB")
    reserved = props.reserved_concurrent_executions
    if reserved is not None and (
        isinstance(reserved, bool) or not isinstance(reserved, int) or not 1 <= reserved <= MAX_RESERVED_CONCURRENCY
    ):
        raise ValueError(
            f"JobSubmitterProps.reserved_concurrent_executions: got {reserved!r}; expected an integer from 1 to "
            f"{MAX_RESERVED_CONCURRENCY}, or None for no reservation (0 would throttle every invocation)"
        )
    seconds = props.continuation_schedule.to_seconds()  # to_minutes() raises on a part of a minute
    if seconds % 60 or not 1 <= seconds / 60 <= MAX_CONTINUATION_SCHEDULE_MINUTES:
        raise ValueError(
            f"JobSubmitterProps.continuation_schedule: got {seconds / 60:g} minutes; expected whole minutes from 1 to "
            f"{MAX_CONTINUATION_SCHEDULE_MINUTES} (an EventBridge rate)"
        )
    if not isinstance(props.trainer_image, ITrainerImage):
        raise ValueError(
            f"JobSubmitterProps.trainer_image: got {type(props.trainer_image).__name__}; expected an ITrainerImage "
            "(image_uris and deployment), e.g. a TrainerImage"
        )
