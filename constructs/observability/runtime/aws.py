"""boto3 clients for the observability functions, bounded by the invocation's deadline.

Each client has the platform's retry configuration and deadline hooks
(:mod:`platform_constructs.lambda_runtime.deadline`, as the submitter's):
throttling and 5xx answers are retried with backoff by botocore (``standard``
mode, 5 attempts; ``AWS_RETRY_MODE`` and ``AWS_MAX_ATTEMPTS`` override them),
what persists raises, and while a handler's deadline is in scope no attempt or
retry starts that would end after it. The clients are typed with boto3-stubs'
service types (``mypy_boto3_*``, imported for the type checker only: the
deployed package does not carry the stubs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypeVar

import boto3

from ...lambda_runtime.deadline import client_config, install_deadline_hooks
from ...lambda_runtime.deadline import error_code as error_code  # the runtime's modules take it from here

if TYPE_CHECKING:
    from botocore.client import BaseClient
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_cloudwatch.type_defs import MetricDatumTypeDef
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sagemaker import SageMakerClient
    from mypy_boto3_ssm import SSMClient

Client = TypeVar("Client", bound="BaseClient")


def _bounded(client: Client) -> Client:
    install_deadline_hooks(client)
    return client


def cloudwatch_client(session: boto3.session.Session | None = None) -> CloudWatchClient:
    """A CloudWatch client in the function's region (``AWS_ENDPOINT_URL`` honoured by boto3)."""
    return _bounded((session or boto3.session.Session()).client("cloudwatch", config=client_config()))


def dynamodb_client(session: boto3.session.Session | None = None) -> DynamoDBClient:
    """A DynamoDB client (the job-state handler's idempotency records)."""
    return _bounded((session or boto3.session.Session()).client("dynamodb", config=client_config()))


def sagemaker_client(session: boto3.session.Session | None = None) -> SageMakerClient:
    """A SageMaker client (``DescribeTrainingPlan``)."""
    return _bounded((session or boto3.session.Session()).client("sagemaker", config=client_config()))


def ssm_client(session: boto3.session.Session | None = None) -> SSMClient:
    """An SSM client (the plan-ARNs parameter)."""
    return _bounded((session or boto3.session.Session()).client("ssm", config=client_config()))


def put_metric_data(
    cloudwatch: CloudWatchClient, namespace: str, datums: Sequence[MetricDatumTypeDef], *, batch: int = 500
) -> int:
    """``PutMetricData`` in batches of ``batch`` datums (the API takes up to 1000 per call).

    Returns the number of calls made. Errors propagate (botocore has already retried; a deadline in
    scope raises its ``DeadlineExceeded``).
    """
    calls = 0
    for start in range(0, len(datums), batch):
        cloudwatch.put_metric_data(Namespace=namespace, MetricData=datums[start : start + batch])
        calls += 1
    return calls
