"""boto3 clients for the observability functions (botocore's ``standard`` retry mode)."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

CLIENT_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 5},
    connect_timeout=5,
    read_timeout=20,
)
"""Throttling and 5xx answers are retried with backoff by botocore; what persists raises."""


def client(service: str, session: boto3.session.Session | None = None) -> Any:
    """A boto3 client for ``service`` in the function's region (``AWS_ENDPOINT_URL`` honoured by boto3)."""
    return (session or boto3.session.Session()).client(service, config=CLIENT_CONFIG)


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ``ClientError`` (``None`` for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("Error", {}).get("Code")
    return None


def put_metric_data(cloudwatch: Any, namespace: str, datums: list[dict[str, Any]], *, batch: int = 500) -> int:
    """``PutMetricData`` in batches of ``batch`` datums (the API takes up to 1000 per call).

    Returns the number of calls made. Errors propagate (botocore has already retried).
    """
    calls = 0
    for start in range(0, len(datums), batch):
        cloudwatch.put_metric_data(Namespace=namespace, MetricData=datums[start : start + batch])
        calls += 1
    return calls
