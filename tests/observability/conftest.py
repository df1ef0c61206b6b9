"""One ``trainctl local-aws`` emulator for the observability runtime tests (xdist group ``observability``).

Plans are replaced per test with :meth:`LocalAws.set_plans`; the idempotency
table the job-state handler uses in Lambda is created here as the stack would.
"""

from __future__ import annotations

import pytest

from devtools.local_aws.client import LocalAws
from devtools.local_aws.stack import StackResources

IDEMPOTENCY_TABLE = StackResources().job_events_table
"""The table the emulator's authorization names in the job-outcomes role's grants."""
JOB_EVENTS_HANDLER = "platform_constructs.observability.runtime.job_events.lambda_handler"
PLAN_METRICS_HANDLER = "platform_constructs.observability.runtime.plan_metrics.lambda_handler"


@pytest.fixture(scope="session")
def aws():
    with LocalAws() as emulator:
        dynamodb = emulator.client("dynamodb")
        dynamodb.create_table(
            TableName=IDEMPOTENCY_TABLE,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        dynamodb.update_time_to_live(
            TableName=IDEMPOTENCY_TABLE, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expiration"}
        )
        yield emulator


@pytest.fixture(scope="session")
def cloudwatch(aws):
    return aws.client("cloudwatch")


@pytest.fixture(autouse=True)
def _clear_faults(request):
    yield
    if "aws" in request.fixturenames:
        request.getfixturevalue("aws").clear_faults()


@pytest.fixture
def stalled_endpoint():
    """The URL of a socket that accepts connections (the kernel's backlog) and never answers."""
    import socket

    with socket.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(16)
        yield f"http://127.0.0.1:{stalled.getsockname()[1]}"


class LambdaContext:
    """A Lambda context whose invocation ends ``seconds`` after it was made (``get_remaining_time_in_millis``)."""

    def __init__(self, function_name: str, seconds: float) -> None:
        import time

        self.function_name = function_name
        self.memory_limit_in_mb = 256
        self.aws_request_id = f"req-{function_name}"
        self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{function_name}"
        self._ends = time.monotonic() + seconds
        self._clock = time.monotonic

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._ends - self._clock()) * 1000))


def emulator_environ(monkeypatch, aws, handler: str, **overrides: str) -> None:
    """The AWS environment (region, keys, ``AWS_ENDPOINT_URL``) of the function whose handler is ``handler``,
    pointed at the emulator, as boto3 in Lambda reads it (its role's keys), with ``overrides``."""
    env = aws.function_env(handler)
    for key in ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(key, overrides.get(key, env[key]))
