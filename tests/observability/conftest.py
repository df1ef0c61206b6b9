"""One ``trainctl local-aws`` emulator for the observability runtime tests (xdist group ``observability``).

Plans are replaced per test with :meth:`LocalAws.set_plans`; the idempotency
table the job-state handler uses in Lambda is created here as the stack would.
"""

from __future__ import annotations

import pytest

from devtools.local_aws.client import LocalAws

IDEMPOTENCY_TABLE = "training-platform-job-events-idempotency"


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
