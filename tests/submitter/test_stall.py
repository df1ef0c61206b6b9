"""The run continuation's stall watch (runtime/stall.py): the newest ``train:step`` as ``GetMetricData`` answers it
(botocore's Stubber checks each request and answer against CloudWatch's service model: no AWS account here), the
entry into ``Training``, and the request field ``stall_minutes``. The watch end to end (a frozen job stopped, its
run continued) is tests/devtools/test_run_end_to_end.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import botocore.session
import pytest
from botocore.stub import ANY, Stubber

from platform_constructs.submitter.runtime import stall
from platform_constructs.submitter.runtime.errors import Refusal
from platform_constructs.submitter.runtime.request import parse_request
from platform_spec import health

NOW = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)


def _cloudwatch():
    client = botocore.session.Session().create_client(
        "cloudwatch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    return client, Stubber(client)


def _expected(job: str) -> dict:
    return {
        "MetricDataQueries": [
            {
                "Id": "step",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "/aws/sagemaker/TrainingJobs",
                        "MetricName": "train:step",
                        "Dimensions": [{"Name": "TrainingJobName", "Value": job}],
                    },
                    "Period": 60,
                    "Stat": "Maximum",
                },
                "ReturnData": True,
            }
        ],
        "StartTime": ANY,
        "EndTime": ANY,
        "ScanBy": "TimestampDescending",
    }


def test_the_newest_step_is_the_newest_datapoint_across_pages():
    client, stub = _cloudwatch()
    empty = {"MetricDataResults": [{"Id": "step", "Timestamps": [], "Values": [], "StatusCode": "Complete"}]}
    stub.add_response("get_metric_data", {**empty, "NextToken": "t1"}, _expected("r-seg-001"))
    points = {
        "Id": "step",
        "Timestamps": [NOW - timedelta(minutes=3), NOW - timedelta(minutes=1), NOW - timedelta(minutes=2)],
        "Values": [38.0, 40.0, 39.0],
        "StatusCode": "Complete",
    }
    stub.add_response("get_metric_data", {"MetricDataResults": [points]}, {**_expected("r-seg-001"), "NextToken": "t1"})
    with stub:
        assert stall.newest_step(client, "r-seg-001", start=NOW - timedelta(hours=1), end=NOW) == (
            40,
            NOW - timedelta(minutes=1),
        )
    stub.assert_no_pending_responses()


def test_no_datapoint_is_no_step():
    client, stub = _cloudwatch()
    answer = {"MetricDataResults": [{"Id": "step", "Timestamps": [], "Values": [], "StatusCode": "Complete"}]}
    stub.add_response("get_metric_data", answer, _expected("r-seg-002"))
    with stub:
        assert stall.newest_step(client, "r-seg-002", start=NOW - timedelta(hours=1), end=NOW) is None


@pytest.mark.parametrize("code", ["InternalError", "Forbidden"])
def test_an_answer_that_cannot_say_is_not_no_step(code):
    """A result CloudWatch could not fill (its StatusCode) has no datapoints: read as "no step", a healthy job
    training for longer than stall_minutes would be stopped. It raises, and the segment is not judged."""
    client, stub = _cloudwatch()
    failed = {
        "Id": "step",
        "Timestamps": [],
        "Values": [],
        "StatusCode": code,
        "Messages": [{"Code": code, "Value": "x"}],
    }
    stub.add_response("get_metric_data", {"MetricDataResults": [failed]}, _expected("r-seg-003"))
    with stub, pytest.raises(stall.MetricDataUnavailable, match=f"{code}: x.*not judged"):
        stall.newest_step(client, "r-seg-003", start=NOW - timedelta(hours=1), end=NOW)


def test_partial_data_with_datapoints_is_read_newest_first():
    client, stub = _cloudwatch()
    points = {"Id": "step", "Timestamps": [NOW - timedelta(minutes=4)], "Values": [12.0], "StatusCode": "PartialData"}
    stub.add_response("get_metric_data", {"MetricDataResults": [points], "NextToken": "t2"}, _expected("r-seg-004"))
    with stub:
        assert stall.newest_step(client, "r-seg-004", start=NOW - timedelta(hours=1), end=NOW) == (
            12,
            NOW - timedelta(minutes=4),
        )


def test_training_since_is_the_newest_entry_into_training():
    transitions = [
        {"Status": "Starting", "StartTime": NOW - timedelta(minutes=30)},
        {"Status": "Training", "StartTime": NOW - timedelta(minutes=20)},
        {"Status": "Restarting", "StartTime": NOW - timedelta(minutes=15)},
        {"Status": "Training", "StartTime": NOW - timedelta(minutes=10)},
    ]
    assert stall.training_since({"SecondaryStatusTransitions": transitions}) == NOW - timedelta(minutes=10)
    assert stall.training_since({"SecondaryStatusTransitions": transitions[:1]}) is None
    assert stall.training_since({}) is None


def test_stall_minutes_defaults_and_zero_is_off():
    assert stall.stall_minutes_of({}) == stall.stall_minutes_of({"stall_minutes": None}) == health.DEFAULT_STALL_MINUTES
    assert stall.stall_minutes_of({"stall_minutes": 0}) == 0.0
    assert stall.stall_minutes_of({"stall_minutes": 45}) == 45.0


RUN = {"run_id": "stall-run"}


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"stall_minutes": 30}, "no stall_minutes without run"),
        ({"stall_minutes": 5, "run": RUN}, "0 (off) or a number of minutes >= 10"),
        ({"stall_minutes": -1, "run": RUN}, "a number of minutes >= 0"),
        ({"stall_minutes": "30", "run": RUN}, "a number of minutes"),
        ({"stall_minutes": 10**6, "run": RUN}, "<= 40320"),
    ],
)
def test_a_bad_stall_minutes_is_refused_naming_the_field(local_config, event, expected):
    with pytest.raises(Refusal) as refused:
        parse_request({"hyperparameters": {"synthetic_data": True}, **event}, local_config)
    assert "stall_minutes" in str(refused.value) and expected in str(refused.value), refused.value


@pytest.mark.parametrize("minutes", [0, 10, 90.5])
def test_stall_minutes_is_accepted_with_run(local_config, minutes):
    request = parse_request(
        {"hyperparameters": {"synthetic_data": True}, "run": RUN, "stall_minutes": minutes}, local_config
    )
    assert request.value("stall_minutes") == minutes
