"""The SageMaker execution role that training jobs run as (least privilege).

Granted, and nothing else (no ``AmazonSageMakerFullAccess``):

* read the data bucket (and any extra input locations); read, overwrite and
  delete current objects in the checkpoint bucket and, in the output bucket,
  below the prefix SageMaker writes job artifacts to (the submitter's
  ``OutputDataConfig.S3OutputPath``,
  :data:`~platform_constructs.submitter.runtime.settings.TRAINING_JOB_OUTPUT_PREFIX`),
  never the submitter's client-token records beside it, and never object
  versions, which are the undo history
  (:func:`~platform_constructs.buckets.grant_read_write_current_objects`); KMS
  use comes with the bucket grants;
* pull images from the trainer repository only (``ecr:GetAuthorizationToken``
  has no resource-level permissions and needs ``*``);
* write new objects (``s3:PutObject``, ``s3:AbortMultipartUpload``, the key's ``kms:GenerateDataKey``) in the
  data bucket below :data:`platform_spec.processing.PREPARED_PREFIX` only: the datasets of
  ``trainctl prepare-data --remote`` processing jobs (no delete: a dataset is never overwritten);
* create and write log streams in ``/aws/sagemaker/TrainingJobs`` and ``/aws/sagemaker/ProcessingJobs`` only;
* ``cloudwatch:PutMetricData`` restricted by the ``cloudwatch:namespace``
  condition to SageMaker's training-job namespace;
* experiment tracking (:mod:`platform_spec.tracking`): read, overwrite and delete
  current objects below the output bucket's ``tensorboard/`` prefix (SageMaker's
  upload of ``TensorBoardOutputConfig.LocalPath``), and the MLflow calls the
  trainer makes (``MLFLOW_LOGGING_ACTIONS``) on the SageMaker managed MLflow
  tracking servers of the stack's account and region.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import aws_cdk as cdk
from aws_cdk import aws_ecr as ecr
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from constructs import Construct
from platform_spec.metric_lines import SAGEMAKER_LOG_GROUP, SAGEMAKER_METRIC_NAMESPACE
from platform_spec.processing import LOG_GROUP as PROCESSING_LOG_GROUP
from platform_spec.processing import PREPARED_PREFIX
from platform_spec.tracking import MLFLOW_LOGGING_ACTIONS, TENSORBOARD_OUTPUT_PREFIX

from . import acknowledgements as nag
from .buckets import grant_read_write_current_objects
from .submitter.runtime import settings as submitter_settings

__all__ = [
    "InputLocation",
    "TrainingExecutionRole",
    "TrainingExecutionRoleProps",
]


@dataclass(frozen=True, kw_only=True)
class InputLocation:
    """An extra read-only S3 input location: a bucket and a key prefix.

    Attributes:
        bucket: the bucket.
        prefix: key prefix inside it, e.g. ``"datasets/"``. Default: the whole bucket.
    """

    bucket: s3.IBucket
    prefix: str = ""


@dataclass(frozen=True, kw_only=True)
class TrainingExecutionRoleProps:
    """Properties of :class:`TrainingExecutionRole`.

    Attributes:
        data_bucket: training data, read only.
        checkpoint_bucket: checkpoints: read, overwrite, delete current objects (not versions).
        output_bucket: model artifacts and job output: read, overwrite, delete current
            objects (not versions) below ``output_prefix``.
        output_prefix: the key prefix jobs write the output bucket under (their
            ``OutputDataConfig.S3OutputPath``); the rest of the bucket (the
            submitter's client-token records) is out of the role's reach.
            Default: the job submitter's, ``training-jobs/``
            (:data:`~platform_constructs.submitter.runtime.settings.TRAINING_JOB_OUTPUT_PREFIX`).
        repository: the trainer image repository; the role pulls from it only.
        extra_inputs: further read-only input locations. Default: none, only
            the data bucket is readable.
        metric_namespaces: CloudWatch namespaces the role may publish to.
            Default: SageMaker's training-job namespace only.
        role_name: physical role name. Default: CloudFormation generates one.
    """

    data_bucket: s3.IBucket
    checkpoint_bucket: s3.IBucket
    output_bucket: s3.IBucket
    repository: ecr.IRepository
    output_prefix: str = submitter_settings.TRAINING_JOB_OUTPUT_PREFIX
    extra_inputs: Sequence[InputLocation] = field(default_factory=tuple)
    metric_namespaces: Sequence[str] = (SAGEMAKER_METRIC_NAMESPACE,)
    role_name: str | None = None


class TrainingExecutionRole(Construct):
    """The role SageMaker training jobs assume (primary child ``Resource``).

    Trust: ``sagemaker.amazonaws.com`` with ``aws:SourceAccount`` equal to the
    stack's account and ``aws:SourceArn`` matching the account's training
    and processing jobs (confused-deputy protection).
    """

    def __init__(self, scope: Construct, id: str, props: TrainingExecutionRoleProps) -> None:
        super().__init__(scope, id)
        _validate(props)
        stack = cdk.Stack.of(self)

        job_arns = [
            stack.format_arn(service="sagemaker", resource=kind, resource_name="*")
            for kind in ("training-job", "processing-job")
        ]
        principal = iam.ServicePrincipal("sagemaker.amazonaws.com").with_conditions(
            {
                "StringEquals": {"aws:SourceAccount": stack.account},
                "ArnLike": {"aws:SourceArn": job_arns},
            }
        )
        self.role = iam.Role(
            self,
            "Resource",
            assumed_by=principal,
            role_name=props.role_name,
            description="SageMaker training jobs of the training platform (least privilege)",
        )

        props.data_bucket.grant_read(self.role)
        for location in props.extra_inputs:
            location.bucket.grant_read(self.role, f"{location.prefix}*" if location.prefix else "*")
        grant_read_write_current_objects(props.checkpoint_bucket, self.role)
        grant_read_write_current_objects(props.output_bucket, self.role, props.output_prefix)
        grant_read_write_current_objects(props.output_bucket, self.role, TENSORBOARD_OUTPUT_PREFIX)
        props.repository.grant_pull(self.role)
        self._tracking_servers_arn = stack.format_arn(
            service="sagemaker", resource="mlflow-tracking-server", resource_name="*"
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="MlflowTracking",
                actions=list(MLFLOW_LOGGING_ACTIONS),
                resources=[self._tracking_servers_arn],
            )
        )

        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="PreparedDatasets",
                actions=["s3:PutObject", "s3:AbortMultipartUpload"],
                resources=[props.data_bucket.arn_for_objects(f"{PREPARED_PREFIX}*")],
            )
        )
        if props.data_bucket.encryption_key is not None:
            props.data_bucket.encryption_key.grant(self.role, "kms:GenerateDataKey")

        self._log_group_arns = log_group_arns = [
            stack.format_arn(
                service="logs", resource="log-group", resource_name=group, arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME
            )
            for group in (SAGEMAKER_LOG_GROUP, PROCESSING_LOG_GROUP)
        ]
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="TrainingJobLogs",
                actions=[
                    "logs:CreateLogGroup",
                    "logs:CreateLogStream",
                    "logs:DescribeLogStreams",
                    "logs:PutLogEvents",
                ],
                resources=[arn for group in log_group_arns for arn in (group, f"{group}:log-stream:*")],
            )
        )
        self.role.add_to_principal_policy(
            iam.PolicyStatement(
                sid="TrainingJobMetrics",
                actions=["cloudwatch:PutMetricData"],
                resources=["*"],
                conditions={"StringEquals": {"cloudwatch:namespace": list(props.metric_namespaces)}},
            )
        )

        self._acknowledge_wildcards(props)

    def _acknowledge_wildcards(self, props: TrainingExecutionRoleProps) -> None:
        for name in _GRANT_WILDCARD_ACTIONS:
            nag.acknowledge(
                self.role,
                nag.IAM5,
                "Read-only action set of CDK's Bucket.grant_read (data bucket and extra inputs); every "
                "statement is scoped by resource to those buckets; nothing in it writes or deletes.",
                finding=nag.action(name),
            )
        for bucket in (props.data_bucket, props.checkpoint_bucket):
            nag.acknowledge(
                self.role,
                nag.IAM5,
                "Object-level access to every key of this one bucket: training jobs read datasets and "
                "write checkpoints under job-specific prefixes chosen at submit time.",
                finding=nag.resource(self, f"{bucket.bucket_arn}/*"),
            )
        nag.acknowledge(
            self.role,
            nag.IAM5,
            "Training jobs write their artifacts below the output prefix (OutputDataConfig.S3OutputPath), one "
            "folder per job named at submit time; the rest of the output bucket is out of reach.",
            finding=nag.resource(self, props.output_bucket.arn_for_objects(f"{props.output_prefix}*")),
        )
        nag.acknowledge(
            self.role,
            nag.IAM5,
            "Jobs with a tensorboard request field upload their event files below the output bucket's tensorboard/ "
            "prefix, one folder per job or experiment named at submit time.",
            finding=nag.resource(self, props.output_bucket.arn_for_objects(f"{TENSORBOARD_OUTPUT_PREFIX}*")),
        )
        nag.acknowledge(
            self.role,
            nag.IAM5,
            "A request's mlflow field names the tracking server at submit time; the submitter accepts only this "
            "account's and region's, and the role may only log runs to them (no model registry, no deletes).",
            finding=nag.resource(self, self._tracking_servers_arn),
        )
        for location in props.extra_inputs:
            nag.acknowledge(
                self.role,
                nag.IAM5,
                "Read-only access below an operator-configured input prefix (allowedInputPrefixes).",
                finding=nag.resource(self, location.bucket.arn_for_objects(f"{location.prefix}*")),
            )
        nag.acknowledge(
            self.role,
            nag.IAM5,
            "ecr:GetAuthorizationToken has no resource-level permissions (AWS requires '*'); "
            "cloudwatch:PutMetricData has none either and is restricted by the cloudwatch:namespace condition.",
            finding="Resource::*",
        )
        for group_arn in self._log_group_arns:
            nag.acknowledge(
                self.role,
                nag.IAM5,
                "SageMaker names a log stream per job and host (<job>/algo-<n>-<id>), so streams of the "
                "training and processing jobs' log groups are granted by wildcard; each group is named exactly.",
                finding=nag.resource(self, f"{group_arn}:log-stream:*"),
            )
        nag.acknowledge(
            self.role,
            nag.IAM5,
            f"Processing jobs (trainctl prepare-data --remote) write new objects below {PREPARED_PREFIX} of the "
            "data bucket, one folder per dataset named at launch; nothing else of the bucket is writable.",
            finding=nag.resource(self, props.data_bucket.arn_for_objects(f"{PREPARED_PREFIX}*")),
        )

    @property
    def role_arn(self) -> str:
        return self.role.role_arn

    def grant_pass_role(self, grantee: iam.IGrantable) -> iam.Grant:
        """``iam:PassRole`` on this role only, and only to SageMaker (``iam:PassedToService``)."""
        return iam.Grant.add_to_principal(
            grantee=grantee,
            actions=["iam:PassRole"],
            resource_arns=[self.role.role_arn],
            conditions={"StringEquals": {"iam:PassedToService": "sagemaker.amazonaws.com"}},
        )


_GRANT_WILDCARD_ACTIONS = (
    "s3:GetBucket*",
    "s3:GetObject*",
    "s3:List*",
)
"""Wildcard actions of CDK's ``Bucket.grant_read`` (the read-only data and input grants); the
checkpoint and output grants name every action (``grant_read_write_current_objects``)."""


def _validate(props: TrainingExecutionRoleProps) -> None:
    if not props.metric_namespaces:
        raise ValueError(
            "TrainingExecutionRoleProps.metric_namespaces: got an empty list; expected at least one namespace "
            f"(SageMaker publishes training metrics to {SAGEMAKER_METRIC_NAMESPACE!r})"
        )
    for location in props.extra_inputs:
        if location.prefix.startswith("/") or "*" in location.prefix or "?" in location.prefix:
            raise ValueError(
                f"TrainingExecutionRoleProps.extra_inputs: prefix {location.prefix!r}; expected a key prefix "
                "without a leading '/' or wildcards ('*', '?'), e.g. 'datasets/'"
            )
    prefix, records = props.output_prefix, submitter_settings.CLIENT_TOKEN_RECORDS_PREFIX
    if (
        not isinstance(prefix, str)
        or not prefix.endswith("/")
        or prefix.startswith("/")
        or "*" in prefix
        or "?" in prefix
        or records.startswith(prefix)
        or prefix.startswith(records)
    ):
        raise ValueError(
            f"TrainingExecutionRoleProps.output_prefix: got {prefix!r}; expected a key prefix ending in '/', without "
            f"a leading '/' or wildcards ('*', '?'), that neither holds nor lies within the submitter's "
            f"client-token records ({records!r}), e.g. {submitter_settings.TRAINING_JOB_OUTPUT_PREFIX!r}"
        )
