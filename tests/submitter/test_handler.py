"""The Lambda adapter: JSON logs with a correlation id, EMF metrics, refusals instead of exceptions."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import pytest

pytestmark = pytest.mark.xdist_group("submitter")


@dataclass
class LambdaContext:
    function_name: str = "job-submitter"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:job-submitter"
    aws_request_id: str = "9b1e8c1e-0000-4000-8000-000000000001"


@pytest.fixture
def lambda_env(env, runtime, monkeypatch):
    """The deployed function's situation: settings and AWS_ENDPOINT_URL in the process environment.

    Yields the log stream (Powertools binds its handler to the stdout of import time, so
    it is pointed at a buffer here); EMF metrics are printed and read with capsys.
    """
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(runtime.handler, "_dependencies", None)
    logs = io.StringIO()
    for handler in runtime.handler.logger.handlers:
        monkeypatch.setattr(handler, "stream", logs)
    yield logs
    runtime.handler._dependencies = None


def _records(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def test_a_submission_logs_json_with_the_correlation_id_and_emits_the_metric(runtime, lambda_env, capsys, make_request):
    request = make_request(capacity="on-demand")
    response = runtime.handler.lambda_handler(request, LambdaContext())
    assert response["status"] == "submitted", response
    records = _records(capsys.readouterr().out)
    logs = _records(lambda_env.getvalue())
    assert logs and all(r["correlation_id"] == request["client_token"] for r in logs)
    assert all(r["service"] == runtime.settings.SERVICE_NAME for r in logs)
    assert any(r.get("function_request_id") == LambdaContext.aws_request_id for r in logs)
    (emf,) = [r for r in records if "_aws" in r]
    directive = emf["_aws"]["CloudWatchMetrics"][0]
    assert directive["Namespace"] == runtime.settings.METRICS_NAMESPACE
    assert directive["Metrics"] == [{"Name": runtime.settings.METRIC_SUBMISSIONS, "Unit": "Count"}]
    assert sorted(directive["Dimensions"][0]) == sorted([runtime.settings.DIMENSION_CAPACITY_TYPE, "service"])
    assert emf[runtime.settings.DIMENSION_CAPACITY_TYPE] == "on-demand"
    assert emf[runtime.settings.METRIC_SUBMISSIONS] == [1.0]


@pytest.mark.parametrize("event", [None, "not json", [1, 2], {"capacity": 7}])
def test_a_malformed_event_is_answered_with_a_refusal_and_counted(runtime, lambda_env, capsys, event):
    response = runtime.handler.lambda_handler(event, LambdaContext())
    assert response["status"] == "rejected"
    assert response["error"]["code"] == "InvalidRequest"
    (emf,) = [r for r in _records(capsys.readouterr().out) if "_aws" in r]
    assert emf[runtime.settings.DIMENSION_ERROR_CODE] == "InvalidRequest"
    assert emf[runtime.settings.METRIC_REFUSALS] == [1.0]
    logs = _records(lambda_env.getvalue())
    assert logs and all(r["correlation_id"] == LambdaContext.aws_request_id for r in logs)
    assert any(r["message"] == "request refused" and r["refusal"]["code"] == "InvalidRequest" for r in logs)


def test_dry_runs_and_replays_emit_no_submission_metric(runtime, lambda_env, capsys, make_request):
    request = make_request(capacity="on-demand")
    runtime.handler.lambda_handler(request, LambdaContext())
    capsys.readouterr()
    replay = runtime.handler.lambda_handler(dict(request), LambdaContext())
    dry = runtime.handler.lambda_handler(make_request(dry_run=True), LambdaContext())
    assert replay["replayed"] is True and dry["status"] == "validated"
    assert [r for r in _records(capsys.readouterr().out) if "_aws" in r] == []


def test_a_broken_configuration_raises(runtime, lambda_env, monkeypatch):
    monkeypatch.delenv("DATA_BUCKET")
    with pytest.raises(runtime.errors.ConfigurationError, match="DATA_BUCKET"):
        runtime.handler.lambda_handler({}, LambdaContext())
