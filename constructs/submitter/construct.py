"""The job submitter's construct: a Lambda function that turns a job request into ``CreateTrainingJob``.

Its logic lives in :mod:`platform_constructs.submitter.runtime`, a plain
package; its deployment package is what the handler (:data:`HANDLER`) imports
(:data:`.bundling.SUBMITTER`). This construct deploys it with its own
least-privilege role, its environment (:func:`.runtime.settings.function_environment`),
a log group with a retention period, and exposes
``grant_invoke`` and ``metric_*`` methods for the dashboard and alarms
(:class:`ISubmitterMetrics`, what observability takes). It takes the other
resources through interfaces: the image as an
:class:`~platform_constructs.trainer_image.ITrainerImage`, the role, buckets
and plan parameter as ``iam.IRole``, ``s3.IBucket`` and ``ssm.IStringParameter``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm

from constructs import Construct
from platform_spec.capacity import (
    CAPACITY_FALLBACK_EXPECTED,
    CAPACITY_TYPES,
    DEFAULT_CAPACITY_FALLBACK,
    capacity_fallback_problem,
)
from platform_spec.errors import FieldError

from .. import acknowledgements as nag
from ..trainer_image import ITrainerImage
from . import bundling
from .bundling import ARCHITECTURE, RUNTIME
from .runtime import settings

__all__ = [
    "AUTO_DELETE_PROVIDER_ID",
    "DEFAULT_RESERVED_CONCURRENCY",
    "HANDLER",
    "MAX_RESERVED_CONCURRENCY",
    "RECORD_WRITE_ACTIONS",
    "ISubmitterMetrics",
    "JobSubmitter",
    "JobSubmitterProps",
]

HANDLER = bundling.SUBMITTER.handlers[0]
"""The function's handler, ``platform_constructs.submitter.runtime.handler.lambda_handler``: the
bundle lays the code out under its import names, so Lambda imports the module the tests import."""

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
    """The submitter's metrics, as the dashboard and the alarms read them (implemented by :class:`JobSubmitter`).

    Each method returns a ``cloudwatch.Metric``; keyword arguments are
    ``cloudwatch.MetricOptions`` (``period``, ``statistic``, ``label``, ...)
    overriding its defaults. Lambda's standard metrics of the function
    (namespace ``AWS/Lambda``): ``Invocations``, ``Errors``, ``Throttles``
    (sums) and ``Duration`` (milliseconds). The function's own (namespace
    :data:`.runtime.settings.METRICS_NAMESPACE`): ``Submissions`` by capacity
    type and ``Refusals`` by error code (sums; values from
    :data:`platform_spec.capacity.CAPACITY_TYPES` and :data:`.runtime.settings.ERROR_CODES`,
    others raise ``ValueError``).
    """

    def metric_invocations(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_errors(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_throttles(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_duration(self, **props: Any) -> cloudwatch.Metric: ...

    def metric_submissions(self, capacity_type: str, **props: Any) -> cloudwatch.Metric: ...

    def metric_refusals(self, error_code: str, **props: Any) -> cloudwatch.Metric: ...


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


class JobSubmitter(Construct):
    """The submitter Lambda (primary child ``Resource``), its ``Role`` and ``LogGroup``.

    Attributes:
        function: the Lambda function.
        role: the function's role.
        log_group: the function's log group.
    """

    def __init__(self, scope: Construct, id: str, props: JobSubmitterProps) -> None:
        super().__init__(scope, id)
        _validate(props)
        stack = cdk.Stack.of(self)

        self.log_group = logs.LogGroup(
            self,
            "LogGroup",
            retention=props.log_retention,
            removal_policy=props.removal_policy,
        )
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Job submitter: creates SageMaker training jobs with the platform's execution role",
        )
        self.log_group.grant_write(self.role)

        training_jobs = stack.format_arn(service="sagemaker", resource="training-job", resource_name="*")
        training_plans = stack.format_arn(service="sagemaker", resource="training-plan", resource_name="*")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="TrainingJobs",
                # ListTags: idempotency compares the request hash tag of an existing job of the same name.
                actions=[
                    "sagemaker:CreateTrainingJob",
                    "sagemaker:DescribeTrainingJob",
                    "sagemaker:AddTags",
                    "sagemaker:ListTags",
                ],
                resources=[training_jobs],
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="DescribeTrainingPlans",
                actions=["sagemaker:DescribeTrainingPlan"],
                resources=[training_plans],
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListTrainingPlans",
                actions=["sagemaker:ListTrainingPlans"],
                resources=["*"],  # List* actions have no resource-level permissions
            )
        )
        iam.Grant.add_to_principal(
            grantee=self.role,
            actions=["iam:PassRole"],
            resource_arns=[props.execution_role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
        )
        props.plan_arns_parameter.grant_read(self.role)

        # Client-token records (runtime/idempotency.py): read and conditionally write objects under one
        # prefix of the output bucket, and list that prefix only (GetObject of a missing key answers 403,
        # not 404, without s3:ListBucket). No delete: a record is released by an overwrite.
        records = props.output_bucket.arn_for_objects(f"{settings.CLIENT_TOKEN_RECORDS_PREFIX}*")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(sid="ClientTokenRecords", actions=["s3:GetObject", "s3:PutObject"], resources=[records])
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListClientTokenRecords",
                actions=["s3:ListBucket"],
                resources=[props.output_bucket.bucket_arn],
                conditions={"StringLike": {"s3:prefix": [f"{settings.CLIENT_TOKEN_RECORDS_PREFIX}*"]}},
            )
        )
        self._protect_records(props.output_bucket, records)
        if props.output_bucket.encryption_key is not None:
            # SSE-KMS: GenerateDataKey to write a record, Decrypt to read one
            props.output_bucket.encryption_key.grant(self.role, "kms:Decrypt", "kms:GenerateDataKey")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="SearchTrainingJobs",
                actions=["sagemaker:Search"],  # jobs of the previous version, by their client-token tag
                resources=["*"],  # Search has no resource-level permissions
            )
        )

        self.function = lambda_.Function(
            self,
            "Resource",
            description="Validates training-job requests and submits them to SageMaker",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=HANDLER,
            code=bundling.SUBMITTER.code(),
            role=self.role,
            memory_size=props.memory_size,
            timeout=props.timeout,
            reserved_concurrent_executions=props.reserved_concurrent_executions,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            environment=self._environment(props),
        )
        # The image must be in the repository before the function can submit jobs with it.
        self.function.node.add_dependency(props.trainer_image.deployment)

        nag.acknowledge(
            self.role,
            nag.IAM5,
            "Training-job names are generated per request, so CreateTrainingJob/DescribeTrainingJob/AddTags/ListTags "
            "are granted on the account's training-job ARNs in this region only.",
            finding=nag.resource(self, training_jobs),
        )
        nag.acknowledge(
            self.role,
            nag.IAM5,
            "Training plans change at run time through the SSM parameter (no redeploy), so DescribeTrainingPlan "
            "is granted on the account's training-plan ARNs in this region.",
            finding=nag.resource(self, training_plans),
        )
        nag.acknowledge(
            self.role,
            nag.IAM5,
            "sagemaker:ListTrainingPlans and sagemaker:Search have no resource-level permissions (AWS requires "
            "'*'); Search finds the training jobs of a client token by its tag.",
            finding="Resource::*",
        )
        nag.acknowledge(
            self.role,
            nag.IAM5,
            "Client-token records are one object per token (named by its SHA-256) under one prefix of the "
            "output bucket; GetObject/PutObject are granted on that prefix only.",
            finding=nag.resource(self, records),
        )
        nag.acknowledge(
            self.function,
            "AwsSolutions-L1",
            f"Runtime pinned to {RUNTIME.name}: the package's dependencies are installed for exactly this "
            "CPython version (bundling.PYTHON_VERSION) and it is supported by Lambda; moving to a newer "
            "runtime changes both together.",
        )

    def _protect_records(self, bucket: s3.IBucket, records: str) -> None:
        """Deny every principal but this function's role writing or deleting the client-token records.

        The records are the idempotency lock: a job, a person or another
        function overwriting or deleting one could make a retry create a second
        job. Identity policies grant nobody else these keys (the execution role
        writes below ``settings.TRAINING_JOB_OUTPUT_PREFIX`` only); this bucket
        policy statement also holds against a broad grant added later (an
        administrator's ``s3:*``). With ``removal_policy=DESTROY`` CDK's
        auto-delete function, which empties the bucket when the stack is
        deleted, is exempt too. Lifecycle expiration is not subject to bucket
        policies. A record that must be repaired by hand needs this statement
        lifted first. An imported bucket's policy is left alone.
        """
        exempt = [self.role.role_arn]
        auto_delete = cdk.Stack.of(bucket).node.try_find_child(AUTO_DELETE_PROVIDER_ID)
        if auto_delete is not None:
            exempt.append(auto_delete.role_arn)
        bucket.add_to_resource_policy(
            iam.PolicyStatement(
                sid="ClientTokenRecordsSubmitterOnly",
                effect=iam.Effect.DENY,
                principals=[iam.AnyPrincipal()],
                actions=list(RECORD_WRITE_ACTIONS),
                resources=[records],
                conditions={"ArnNotEquals": {"aws:PrincipalArn": exempt}},
            )
        )

    @staticmethod
    def _environment(props: JobSubmitterProps) -> dict[str, str]:
        return settings.function_environment(
            trainer_image_uri=props.trainer_image.image_uri,
            execution_role_arn=props.execution_role.role_arn,
            data_bucket=props.data_bucket.bucket_name,
            checkpoint_bucket=props.checkpoint_bucket.bucket_name,
            output_bucket=props.output_bucket.bucket_name,
            plan_arns_parameter=props.plan_arns_parameter.parameter_name,
            # Plans of other accounts are refused at run time (Lambda sets AWS_REGION itself).
            account_id=cdk.Aws.ACCOUNT_ID,
            default_instance_type=props.default_instance_type,
            allowed_instance_types=props.allowed_instance_types,
            capacity_fallback=props.capacity_fallback,
            allowed_input_prefixes=props.allowed_input_prefixes,
            platform_tags=props.platform_tags,
            volume_size_gb=props.volume_size_gb,
        )

    # -- grants ---------------------------------------------------------------

    def grant_invoke(self, grantee: iam.IGrantable) -> iam.Grant:
        """Allow ``grantee`` to invoke the submitter (``lambda:InvokeFunction``)."""
        return self.function.grant_invoke(grantee)

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
        options = {"statistic": cloudwatch.Stats.SUM, "period": cdk.Duration.minutes(5), **props}
        return cloudwatch.Metric(
            namespace=settings.METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={"service": settings.SERVICE_NAME, dimension: value},
            **options,
        )


def _check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    if value not in choices:
        raise ValueError(f"{name}: got {value!r}; expected one of {', '.join(choices)}")


def _validate(props: JobSubmitterProps) -> None:
    from platform_spec.catalogue import INSTANCE_TYPES

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
    from .runtime.sagemaker_rules import training_instance_types

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
    if props.volume_size_gb is not None and not 1 <= props.volume_size_gb <= 16384:
        raise ValueError(
            f"JobSubmitterProps.volume_size_gb: got {props.volume_size_gb!r}; expected an integer from 1 to 16384"
        )
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
    if not isinstance(props.trainer_image, ITrainerImage):
        raise ValueError(
            f"JobSubmitterProps.trainer_image: got {type(props.trainer_image).__name__}; expected an ITrainerImage "
            "(image_uri and deployment), e.g. a TrainerImage"
        )
