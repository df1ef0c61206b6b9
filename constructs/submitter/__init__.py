"""The job submitter: a Lambda function that turns a job request into ``CreateTrainingJob``.

Its logic lives in :mod:`platform_constructs.submitter.runtime` (packaged as
``runtime/`` with handler ``runtime.handler.lambda_handler``); this construct
deploys it with its own least-privilege role, its environment (names from
:mod:`.runtime.settings`), a log group with a retention period, and exposes
``grant_invoke`` and ``metric_*`` methods for the dashboard and alarms.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from .. import acknowledgements as nag
from ..trainer_image import TrainerImage
from ..training_plans import TrainingPlans
from . import bundling
from .runtime import settings

__all__ = ["HANDLER", "JobSubmitter", "JobSubmitterProps"]

HANDLER = "runtime.handler.lambda_handler"
RUNTIME = lambda_.Runtime.PYTHON_3_13
ARCHITECTURE = lambda_.Architecture.ARM_64


@dataclass(frozen=True, kw_only=True)
class JobSubmitterProps:
    """Properties of :class:`JobSubmitter`.

    Attributes:
        trainer_image: the trainer image; its URI (content-derived tag) is what jobs run.
        execution_role: the SageMaker execution role passed to ``CreateTrainingJob``
            (``iam:PassRole`` is granted on it only, to SageMaker only).
        data_bucket: training data (its name is given to the function).
        checkpoint_bucket: checkpoints (name given to the function).
        output_bucket: job output (name given to the function).
        training_plans: the SSM parameter with the training-plan ARNs (read at run time).
        default_instance_type: instance type of requests that name none.
        allowed_instance_types: instance types requests may name; each must be
            in the planner catalogue (``planner.catalogue.INSTANCE_TYPES``).
        capacity_fallback: order tried for ``capacity=auto`` (values from
            ``settings.CAPACITY_TYPES``). Default: training plan, then spot, then on-demand.
        allowed_input_prefixes: extra ``s3://`` input prefixes requests may
            use; the data bucket is always allowed. Default: none.
        platform_tags: tags added to every training job. Default: none.
        volume_size_gb: training volume size per instance. Default: the
            function's own default.
        log_retention: retention of the function's log group. Default: three months.
        removal_policy: what happens to the log group when it leaves the stack.
            Default: it is retained.
        memory_size: function memory, MiB (CPU scales with it). Default: 512.
        timeout: function timeout. Default: 60 seconds.
    """

    trainer_image: TrainerImage
    execution_role: iam.IRole
    data_bucket: s3.IBucket
    checkpoint_bucket: s3.IBucket
    output_bucket: s3.IBucket
    training_plans: TrainingPlans
    default_instance_type: str
    allowed_instance_types: Sequence[str]
    capacity_fallback: Sequence[str] = ("training-plan", "spot", "on-demand")
    allowed_input_prefixes: Sequence[str] = ()
    platform_tags: Mapping[str, str] = field(default_factory=dict)
    volume_size_gb: int | None = None
    log_retention: logs.RetentionDays = logs.RetentionDays.THREE_MONTHS
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    memory_size: int = 512
    timeout: cdk.Duration = cdk.Duration.seconds(60)


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
        self.props = props
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
        props.training_plans.grant_read(self.role)

        self.function = lambda_.Function(
            self,
            "Resource",
            description="Validates training-job requests and submits them to SageMaker",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=HANDLER,
            code=lambda_.Code.from_asset(
                str(bundling.REPO_ROOT),
                asset_hash=bundling.asset_hash(),
                asset_hash_type=cdk.AssetHashType.CUSTOM,
                bundling=bundling.bundling_options(),
                display_name="job submitter package",
            ),
            role=self.role,
            memory_size=props.memory_size,
            timeout=props.timeout,
            log_group=self.log_group,
            logging_format=lambda_.LoggingFormat.JSON,
            environment=self._environment(props),
        )
        # The image must be in the repository before the function can submit jobs with it.
        self.function.node.add_dependency(props.trainer_image.deployment)

        nag.acknowledge(
            self.role, nag.IAM5,
            "Training-job names are generated per request, so CreateTrainingJob/DescribeTrainingJob/AddTags/ListTags "
            "are granted on the account's training-job ARNs in this region only.",
            finding=nag.resource(self, training_jobs),
        )
        nag.acknowledge(
            self.role, nag.IAM5,
            "Training plans change at run time through the SSM parameter (no redeploy), so DescribeTrainingPlan "
            "is granted on the account's training-plan ARNs in this region.",
            finding=nag.resource(self, training_plans),
        )
        nag.acknowledge(
            self.role, nag.IAM5,
            "sagemaker:ListTrainingPlans is a list action without resource-level permissions (AWS requires '*').",
            finding="Resource::*",
        )
        nag.acknowledge(
            self.function, "AwsSolutions-L1",
            f"Runtime pinned to {RUNTIME.name}: the package's dependencies are installed for exactly this "
            "CPython version (bundling.PYTHON_VERSION) and it is supported by Lambda; moving to a newer "
            "runtime changes both together.",
        )

    @staticmethod
    def _environment(props: JobSubmitterProps) -> dict[str, str]:
        env = {
            settings.ENV_TRAINER_IMAGE_URI: props.trainer_image.image_uri,
            settings.ENV_EXECUTION_ROLE_ARN: props.execution_role.role_arn,
            settings.ENV_DATA_BUCKET: props.data_bucket.bucket_name,
            settings.ENV_CHECKPOINT_BUCKET: props.checkpoint_bucket.bucket_name,
            settings.ENV_OUTPUT_BUCKET: props.output_bucket.bucket_name,
            settings.ENV_TRAINING_PLAN_ARNS_PARAMETER: props.training_plans.parameter_name,
            settings.ENV_DEFAULT_INSTANCE_TYPE: props.default_instance_type,
            settings.ENV_ALLOWED_INSTANCE_TYPES: ",".join(props.allowed_instance_types),
            settings.ENV_CAPACITY_FALLBACK: ",".join(props.capacity_fallback),
            settings.ENV_PLATFORM_TAGS: json.dumps(dict(props.platform_tags), sort_keys=True),
            # Powertools' own variables: the EMF namespace and the `service` dimension.
            "POWERTOOLS_SERVICE_NAME": settings.SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": settings.METRICS_NAMESPACE,
        }
        if props.allowed_input_prefixes:
            env[settings.ENV_ALLOWED_INPUT_PREFIXES] = ",".join(props.allowed_input_prefixes)
        if props.volume_size_gb is not None:
            env[settings.ENV_VOLUME_SIZE_GB] = str(props.volume_size_gb)
        return env

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
            ValueError: ``capacity_type`` is not one of ``settings.CAPACITY_TYPES``.
        """
        _check_choice("capacity_type", capacity_type, settings.CAPACITY_TYPES)
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
    from planner.catalogue import INSTANCE_TYPES

    allowed = list(props.allowed_instance_types)
    if not allowed:
        raise ValueError("JobSubmitterProps.allowed_instance_types: got an empty list; expected at least one instance type")
    unknown = [t for t in allowed if t not in INSTANCE_TYPES]
    if unknown:
        raise ValueError(
            f"JobSubmitterProps.allowed_instance_types: {unknown} not in the planner catalogue; "
            f"expected a subset of {', '.join(INSTANCE_TYPES)}"
        )
    if props.default_instance_type not in allowed:
        raise ValueError(
            f"JobSubmitterProps.default_instance_type: got {props.default_instance_type!r}; "
            f"expected one of allowed_instance_types ({', '.join(allowed)})"
        )
    bad = [c for c in props.capacity_fallback if c not in settings.CAPACITY_TYPES]
    if bad or not props.capacity_fallback or len(set(props.capacity_fallback)) != len(props.capacity_fallback):
        raise ValueError(
            f"JobSubmitterProps.capacity_fallback: got {list(props.capacity_fallback)}; expected a non-empty "
            f"list of distinct values from {', '.join(settings.CAPACITY_TYPES)}"
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
