"""boto3 clients for the observability functions (botocore's ``standard`` retry mode).

The clients are typed with boto3-stubs' service types (``mypy_boto3_*``, imported for the type checker
only: the deployed package does not carry the stubs).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_cloudwatch.type_defs import MetricDatumTypeDef
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_sagemaker import SageMakerClient
    from mypy_boto3_ssm import SSMClient

CLIENT_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 5},
    connect_timeout=5,
    read_timeout=20,
)
"""Throttling and 5xx answers are retried with backoff by botocore; what persists raises."""


def cloudwatch_client(session: boto3.session.Session | None = None) -> CloudWatchClient:
    """A CloudWatch client in the function's region (``AWS_ENDPOINT_URL`` honoured by boto3)."""
    return (session or boto3.session.Session()).client("cloudwatch", config=CLIENT_CONFIG)


def dynamodb_client(session: boto3.session.Session | None = None) -> DynamoDBClient:
    """A DynamoDB client (the job-state handler's idempotency records)."""
    return (session or boto3.session.Session()).client("dynamodb", config=CLIENT_CONFIG)


def sagemaker_client(session: boto3.session.Session | None = None) -> SageMakerClient:
    """A SageMaker client (``DescribeTrainingPlan``)."""
    return (session or boto3.session.Session()).client("sagemaker", config=CLIENT_CONFIG)


def ssm_client(session: boto3.session.Session | None = None) -> SSMClient:
    """An SSM client (the plan-ARNs parameter)."""
    return (session or boto3.session.Session()).client("ssm", config=CLIENT_CONFIG)


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ``ClientError`` (``None`` for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return code if isinstance(code, str) else None
    return None


def put_metric_data(
    cloudwatch: CloudWatchClient, namespace: str, datums: Sequence[MetricDatumTypeDef], *, batch: int = 500
) -> int:
    """``PutMetricData`` in batches of ``batch`` datums (the API takes up to 1000 per call).

    Returns the number of calls made. Errors propagate (botocore has already retried).
    """
    calls = 0
    for start in range(0, len(datums), batch):
        cloudwatch.put_metric_data(Namespace=namespace, MetricData=datums[start : start + batch])
        calls += 1
    return calls
