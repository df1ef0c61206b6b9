"""The training platform stack: composes the constructs and wires the grants between them.

Constructs take each other's resources through interfaces (``iam.IRole``,
``s3.IBucket``, ``ecr.IRepository``, ``ssm.IStringParameter``, the trainer
image's :class:`~platform_constructs.trainer_image.ITrainerImage` and the
submitter's :class:`~platform_constructs.submitter.construct.ISubmitterMetrics`), never
each other's classes or props; this stack is where they meet.
"""

from __future__ import annotations

from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3

from constructs import Construct
from platform_constructs.buckets import TrainingBuckets, TrainingBucketsProps
from platform_constructs.execution_role import InputLocation, TrainingExecutionRole, TrainingExecutionRoleProps
from platform_constructs.fsx_lustre import FsxLustre, FsxLustreProps
from platform_constructs.network import PlatformNetwork, PlatformNetworkProps
from platform_constructs.observability.construct import PlatformObservability, PlatformObservabilityProps
from platform_constructs.submitter.construct import JobSubmitter, JobSubmitterProps
from platform_constructs.trainer_image import TrainerImage, TrainerImageProps
from platform_constructs.training_plans import TrainingPlans, TrainingPlansProps

from .config import PlatformConfig

__all__ = ["TrainingPlatformStack"]


class TrainingPlatformStack(cdk.Stack):
    """Everything a training job needs: image, buckets, execution role, plans, submitter, dashboard.

    Construct IDs (stable): ``Network`` (with ``vpc`` only), ``TrainerImage``, ``Buckets``, ``FsxLustre`` (with
    ``fsxLustre`` only, in the network's first job subnet), ``ExecutionRole``,
    ``TrainingPlans``, ``Submitter`` (submitter, reader and run continuation functions),
    ``Observability`` (dashboard, alarms, alarm topic, plan-metrics publisher, job-state handler).
    """

    def __init__(self, scope: Construct, id: str, *, config: PlatformConfig, **kwargs: Any) -> None:
        super().__init__(
            scope,
            id,
            env=config.env,
            description="SageMaker training platform: trainer image, buckets, execution role, job submitter, observability",
            **kwargs,
        )
        self.config = config
        removal = config.cdk_removal_policy
        if config.permissions_boundary_arn is not None:
            # every role of the stack, CDK's helper roles (custom-resource providers, auto-delete) included
            iam.PermissionsBoundary.of(self).apply(
                iam.ManagedPolicy.from_managed_policy_arn(self, "PermissionsBoundary", config.permissions_boundary_arn)
            )
        self.network = (
            PlatformNetwork(
                self,
                "Network",
                PlatformNetworkProps(vpc=config.vpc, log_retention=config.log_retention, removal_policy=removal),
            )
            if config.vpc is not None
            else None
        )

        self.trainer_image = TrainerImage(
            self,
            "TrainerImage",
            TrainerImageProps(
                architectures=config.image_architectures,
                image_retain_count=config.image_retain_count,
                removal_policy=removal,
            ),
        )
        self.buckets = TrainingBuckets(self, "Buckets", TrainingBucketsProps(removal_policy=removal))

        self.file_system: FsxLustre | None = None
        if config.fsx_lustre is not None:
            assert self.network is not None  # config: fsxLustre needs vpc
            self.file_system = FsxLustre(
                self,
                "FsxLustre",
                FsxLustreProps(
                    vpc=self.network.vpc,
                    subnet=self.network.job_subnets[0],
                    encryption_key=self.buckets.encryption_key,
                    data_bucket=self.buckets.data,
                    client_security_group=self.network.job_security_group,
                    options=config.fsx_lustre,
                    removal_policy=removal,
                ),
            )

        extra_inputs = [
            InputLocation(
                bucket=s3.Bucket.from_bucket_name(self, f"Input{index}", location.bucket),
                prefix=location.prefix,
            )
            for index, location in enumerate(config.allowed_input_prefixes)
        ]
        self.execution_role = TrainingExecutionRole(
            self,
            "ExecutionRole",
            TrainingExecutionRoleProps(
                data_bucket=self.buckets.data,
                checkpoint_bucket=self.buckets.checkpoints,
                output_bucket=self.buckets.output,
                repository=self.trainer_image.repository,
                extra_inputs=extra_inputs,
            ),
        )
        if self.network is not None:
            self.network.grant_training_network_interfaces(self.execution_role.role)
        self.training_plans = TrainingPlans(
            self,
            "TrainingPlans",
            TrainingPlansProps(
                plan_arns=config.training_plan_arns,
                parameter_name=f"/{config.stack_name}/training-plan-arns",
            ),
        )
        self.submitter = JobSubmitter(
            self,
            "Submitter",
            JobSubmitterProps(
                trainer_image=self.trainer_image,
                execution_role=self.execution_role.role,
                data_bucket=self.buckets.data,
                checkpoint_bucket=self.buckets.checkpoints,
                output_bucket=self.buckets.output,
                plan_arns_parameter=self.training_plans.parameter,
                default_instance_type=config.default_instance_type,
                allowed_instance_types=config.allowed_instance_types,
                capacity_fallback=config.capacity_fallback,
                allowed_input_prefixes=[location.uri for location in config.allowed_input_prefixes],
                platform_tags=config.tags,
                log_retention=config.log_retention,
                removal_policy=removal,
                reserved_concurrent_executions=config.submitter_reserved_concurrency,
                continuation_schedule=cdk.Duration.minutes(config.run_continuation_schedule_minutes),
                network=self.network,
                file_system=self.file_system,
            ),
        )
        for principal_arn in config.invoker_principals:
            self.submitter.grant_submit(iam.ArnPrincipal(principal_arn))
        for principal_arn in config.reader_principals:
            self.submitter.grant_read(iam.ArnPrincipal(principal_arn))
        self.observability = PlatformObservability(
            self,
            "Observability",
            PlatformObservabilityProps(
                submitter=self.submitter,
                instance_types=config.allowed_instance_types,
                plan_arns_parameter=self.training_plans.parameter,
                plan_arns=self.training_plans.plan_arns,
                alarm_emails=config.alarm_emails,
                alarm_https_endpoints=config.alarm_https_endpoints,
                alarm_slack_channels=config.alarm_slack_channels,
                idle_capacity_hours=config.idle_capacity_alarm_hours,
                log_retention=config.log_retention,
                removal_policy=removal,
                runs=self.submitter,
                run_capacity_wait_minutes=config.run_capacity_wait_alarm_minutes,
                network=self.network,
            ),
        )

        for key, value in config.tags.items():
            cdk.Tags.of(self).add(key, value)

        self._outputs()

    def _outputs(self) -> None:
        outputs = {
            "TrainerImageUri": (
                self.trainer_image.image_uri,
                "Trainer image (content-derived tag) in the platform repository",
            ),
            "TrainerRepositoryName": (
                self.trainer_image.repository.repository_name,
                "ECR repository of the trainer image",
            ),
            "SubmitterFunctionName": (self.submitter.function.function_name, "Job submitter Lambda function name"),
            "SubmitterFunctionArn": (self.submitter.function.function_arn, "Job submitter Lambda function ARN"),
            "ReaderFunctionName": (
                self.submitter.reader_function.function_name,
                "Read-only job API Lambda function name (describe, list, list_runs)",
            ),
            "ReaderFunctionArn": (self.submitter.reader_function.function_arn, "Read-only job API Lambda function ARN"),
            "RunContinuationFunctionName": (
                self.submitter.continuation_function.function_name,
                "Run continuation Lambda function name (its log group holds every run decision)",
            ),
            "DataBucketName": (self.buckets.data.bucket_name, "Training data bucket"),
            "CheckpointBucketName": (self.buckets.checkpoints.bucket_name, "Checkpoint bucket (versioned)"),
            "OutputBucketName": (self.buckets.output.bucket_name, "Job output bucket (versioned)"),
            "AccessLogsBucketName": (self.buckets.access_logs.bucket_name, "Server access logs bucket"),
            "BucketKeyArn": (self.buckets.encryption_key.key_arn, "KMS key of the data, checkpoint and output buckets"),
            "ExecutionRoleArn": (self.execution_role.role_arn, "SageMaker execution role of training jobs"),
            "TrainingPlanParameterName": (
                self.training_plans.parameter_name,
                "SSM parameter with the training-plan ARNs (JSON list)",
            ),
            "DashboardName": (self.observability.dashboard_name, "CloudWatch dashboard of the platform"),
            "AlarmTopicArn": (self.observability.topic_arn, "SNS topic (KMS-encrypted) every platform alarm notifies"),
        }
        if self.network is not None:
            outputs["VpcId"] = (self.network.vpc.vpc_id, "VPC of the platform's jobs and functions")
            outputs["JobSubnetIds"] = (
                cdk.Fn.join(",", [subnet.subnet_id for subnet in self.network.job_subnets]),
                "Private subnets of the jobs, comma-separated (a processing job's NetworkConfig)",
            )
            outputs["JobSecurityGroupId"] = (
                self.network.job_security_group.security_group_id,
                "Security group of every training job (all traffic among its members: EFA)",
            )
        if self.file_system is not None:
            outputs["FsxFileSystemId"] = (self.file_system.file_system_id, "FSx for Lustre file system (channels)")
            outputs["FsxMountName"] = (
                self.file_system.mount_name,
                "Its mount name: a channel's directory_path starts with /<mount name>/",
            )
        for output_id, (value, description) in outputs.items():
            cdk.CfnOutput(self, output_id, value=value, description=description)
