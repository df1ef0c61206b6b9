"""`trainctl submit` fails like a command: one line and a documented exit status for every problem
of the user's own, and never more than one invocation of the function per command.

`--function` runs against ``fake_lambda`` (Lambda's Invoke REST API on 127.0.0.1, see conftest);
`--local` and the end-to-end replay against the `trainctl local-aws` emulator.
"""

from __future__ import annotations

import io
import json
import re
import socket
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from platform_constructs.submitter.runtime import handler as runtime_handler
from platform_constructs.submitter.runtime import request as runtime_request
from platform_constructs.submitter.runtime import settings as runtime_settings
from trainctl.cli import main
from trainctl.submit_request import EXIT_FAILED, EXIT_REJECTED, EXIT_SUBMITTED
from trainctl.submitter_client import (
    DEFAULT_INVOKE_READ_TIMEOUT_S,
    GENERATED_TOKEN_PREFIX,
    SubmitError,
    lambda_client,
    submit_local,
    with_client_token,
)

from .conftest import Reply, error_reply

FUNCTION = "training-platform-submitter"
REQUEST: dict[str, Any] = {  # the guide's request, without job_name or client_token
    "instance_type": "ml.p6-b200.48xlarge",
    "capacity": "on-demand",
    "hyperparameters": {"model": "gpt-1b", "precision": "mxfp8", "num_layers": 10, "batch_size": 8, "seq_length": 2048},
    "inputs": {"train": "datasets/guide/train/"},
    "max_runtime_hours": 2,
}
TOKEN_RE = re.compile(r"--client-token (trainctl-[0-9a-f-]{36})")


def _file(tmp_path: Path, request: Any = None, name: str = "request.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(REQUEST if request is None else request))
    return str(path)


def _one_line(err: str) -> str:
    """The last message on stderr of a failed command; every message is one line, and there is no traceback.

    Lines that are JSON objects are the submitter's structured logs (``--local``, and the
    function the fake Lambda runs in this process): skipped.
    """
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("{")]
    assert all(line.startswith("trainctl submit") for line in lines), lines
    return lines[-1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- 1. at most one invocation per command -----------------------------------------------------


def test_a_function_slower_than_the_read_timeout_is_invoked_once(lambda_env, tmp_path, capsys) -> None:
    # Today's bug: a function answering after 65 s was invoked three times (botocore's 60 s read
    # timeout, then retries), each invocation creating its own job, and the CLI died with a traceback.
    lambda_env.answer = lambda invocation: Reply(kind="stall", body={"status": "submitted"})
    assert main(["submit", _file(tmp_path), "--function", FUNCTION, "--read-timeout", "1"]) == EXIT_FAILED
    err = capsys.readouterr().err
    assert len(lambda_env.invocations) == 1
    (invocation,) = lambda_env.invocations
    token = invocation["payload"]["client_token"]
    assert token.startswith(GENERATED_TOKEN_PREFIX)
    # the token is printed before the request goes out, and again with the failure
    first, last = err.splitlines()[0], _one_line(err)
    assert first == (
        f"trainctl submit: client_token {token} (generated; to retry this request without a second job, "
        f"add --client-token {token})"
    )
    assert last == (
        f"trainctl submit: no answer from {FUNCTION} (us-west-2) within 1 s; the function may still be "
        f"running and may create the job; retry with --client-token {token} to get its job, never a second one"
    )


def test_a_lost_connection_is_not_retried(lambda_env, tmp_path, capsys) -> None:
    lambda_env.answer = lambda invocation: Reply(kind="close")
    assert main(["submit", _file(tmp_path), "--function", FUNCTION]) == EXIT_FAILED
    assert len(lambda_env.invocations) == 1
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"trainctl submit: the connection to {lambda_env.endpoint} broke before {FUNCTION} answered")
    assert TOKEN_RE.search(line).group(1) == lambda_env.invocations[0]["payload"]["client_token"]


def test_the_fake_function_sees_botocores_default_retries(lambda_env) -> None:
    # the harness can fail the test above: a default Lambda client sends a lost invocation again
    import boto3
    from botocore.exceptions import ConnectionClosedError

    lambda_env.answer = lambda invocation: Reply(kind="close")
    client = boto3.client("lambda", region_name="us-west-2", endpoint_url=lambda_env.endpoint)
    with pytest.raises(ConnectionClosedError):
        client.invoke(FunctionName=FUNCTION, Payload=b"{}")
    assert len(lambda_env.invocations) > 1


def test_the_lambda_client_makes_one_attempt_and_outwaits_any_function(lambda_env) -> None:
    client = lambda_client(FUNCTION)
    assert client.meta.config.retries == {"mode": "standard", "total_max_attempts": 1}
    # Lambda's maximum function timeout, 900 s, plus 60 s for the answer to come back
    assert client.meta.config.read_timeout == DEFAULT_INVOKE_READ_TIMEOUT_S == 960
    assert client.meta.region_name == "us-west-2"


def test_a_client_token_is_generated_only_for_requests_without_an_idempotency_key() -> None:
    request, token = with_client_token(REQUEST)
    assert token is not None and request["client_token"] == token and "client_token" not in REQUEST
    assert runtime_request.CLIENT_TOKEN_RE.match(token)  # the submitter accepts it
    assert with_client_token(REQUEST)[1] != token  # one per request
    assert with_client_token({**REQUEST, "job_name": "my-job"}) == ({**REQUEST, "job_name": "my-job"}, None)
    assert with_client_token({**REQUEST, "client_token": "t-1"}) == ({**REQUEST, "client_token": "t-1"}, None)
    assert with_client_token({**REQUEST, "dry_run": True}) == ({**REQUEST, "dry_run": True}, None)
    run = {**REQUEST, "run": {"run_id": "r1"}}  # a run is keyed by its run_id (a token with it is refused)
    assert with_client_token(run) == (run, None)
    for action in ({"action": "describe", "job_name": "j"}, {"action": "list"}, {"action": "list_runs"}):
        assert with_client_token(action) == (action, None)  # creates no job: nothing to key
    assert with_client_token({**REQUEST, "action": "submit"})[1] is not None
    assert with_client_token(REQUEST, "t-2") == ({**REQUEST, "client_token": "t-2"}, None)
    assert with_client_token({**REQUEST, "client_token": "t-2"}, "t-2")[0]["client_token"] == "t-2"
    with pytest.raises(ValueError, match="client_token: the request carries 't-1' and --client-token is 't-2'"):
        with_client_token({**REQUEST, "client_token": "t-1"}, "t-2")


def test_client_token_flag_is_sent_and_a_conflict_sends_nothing(lambda_env, tmp_path, capsys) -> None:
    assert main(["submit", _file(tmp_path), "--function", FUNCTION, "--client-token", "retry-7"]) == EXIT_SUBMITTED
    assert lambda_env.invocations[0]["payload"]["client_token"] == "retry-7"
    assert "generated" not in capsys.readouterr().err
    conflicting = _file(tmp_path, {**REQUEST, "client_token": "other"}, "conflict.json")
    assert main(["submit", conflicting, "--function", FUNCTION, "--client-token", "retry-7"]) == EXIT_FAILED
    assert "the request carries 'other' and --client-token is 'retry-7'" in _one_line(capsys.readouterr().err)
    assert len(lambda_env.invocations) == 1


def test_a_request_with_a_job_name_gets_no_token_and_a_safe_retry_hint(lambda_env, tmp_path, capsys) -> None:
    lambda_env.answer = lambda invocation: Reply(kind="close")
    named = _file(tmp_path, {**REQUEST, "job_name": "gpt-1b-run-3"})
    assert main(["submit", named, "--function", FUNCTION]) == EXIT_FAILED
    assert "client_token" not in lambda_env.invocations[0]["payload"]
    assert _one_line(capsys.readouterr().err).endswith(
        "retrying the same request is safe: its job_name gpt-1b-run-3 finds the job if one was created"
    )


# --- 2. one line and a documented exit status ---------------------------------------------------


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "cannot read {path}: No such file or directory"),
        (b"\xff\xfe{}", "{path} is not UTF-8 text (byte 0xff at offset 0); expected a JSON object"),
        (
            b'{"capacity": "on-demand",',
            "{path} is not JSON: Expecting property name enclosed in double quotes at line 1 column 26",
        ),
        (b"", "{path} is not JSON: Expecting value at line 1 column 1"),
        (b'["a list"]', "{path}: expected a JSON object (a submit request), got a JSON list"),
    ],
    ids=["missing", "not-utf8", "cut-short", "empty", "not-an-object"],
)
def test_an_unreadable_request_file_is_one_line_and_exit_2(lambda_env, tmp_path, capsys, content, expected) -> None:
    path = tmp_path / "request.json"
    if content is not None:
        path.write_bytes(content)
    assert main(["submit", str(path), "--function", FUNCTION]) == EXIT_FAILED
    assert _one_line(capsys.readouterr().err) == "trainctl submit: " + expected.format(path=path)
    assert lambda_env.invocations == []


def test_a_folder_or_non_utf8_stdin_is_refused(lambda_env, tmp_path, capsys, monkeypatch) -> None:
    assert main(["submit", str(tmp_path), "--local"]) == EXIT_FAILED
    assert _one_line(capsys.readouterr().err) == f"trainctl submit --local: cannot read {tmp_path}: Is a directory"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b'{"a": "\xe9"}')))
    assert main(["submit", "-", "--function", FUNCTION]) == EXIT_FAILED
    assert _one_line(capsys.readouterr().err) == (
        "trainctl submit: stdin is not UTF-8 text (byte 0xe9 at offset 7); expected a JSON object"
    )
    assert lambda_env.invocations == []


def test_a_utf8_bom_is_accepted(lambda_env, tmp_path) -> None:
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(REQUEST).encode())
    assert main(["submit", str(path), "--function", FUNCTION]) == EXIT_SUBMITTED
    assert lambda_env.invocations[0]["payload"]["capacity"] == "on-demand"


@pytest.mark.parametrize(
    ("body", "status", "headers", "code", "message"),
    [
        ({"status": "submitted", "training_job_name": "j"}, 200, {}, EXIT_SUBMITTED, None),
        ({"status": "validated"}, 200, {}, EXIT_SUBMITTED, None),
        ({"status": "rejected", "error": {"code": "NoCapacity", "message": "no plan"}}, 200, {}, EXIT_REJECTED, None),
        (
            {"status": "queued"},
            200,
            {},
            EXIT_FAILED,
            "the submitter answered status 'queued'; expected submitted, validated or rejected",
        ),
        (
            b"<html>502</html>",
            200,
            {},
            EXIT_FAILED,
            f"{FUNCTION} (us-west-2) answered something that is not JSON: '<html>502</html>'",
        ),
        (
            {
                "errorType": "ClientError",
                "errorMessage": "An error occurred (InternalFailure) when calling\nCreateTrainingJob",
            },
            200,
            {"X-Amz-Function-Error": "Unhandled"},
            EXIT_FAILED,
            f"{FUNCTION} (us-west-2) failed: ClientError: An error occurred (InternalFailure) when calling CreateTrainingJob",
        ),
    ],
    ids=["submitted", "validated", "rejected", "unknown-status", "not-json", "function-error"],
)
def test_exit_status_follows_the_answer(lambda_env, tmp_path, capsys, body, status, headers, code, message) -> None:
    lambda_env.answer = lambda invocation: Reply(status=status, body=body, headers=headers)
    assert main(["submit", _file(tmp_path), "--function", FUNCTION]) == code
    out, err = capsys.readouterr()
    if message is None:
        assert json.loads(out) == body
    else:
        assert _one_line(err).startswith(f"trainctl submit: {message}")
    assert len(lambda_env.invocations) == 1


@pytest.mark.parametrize(
    ("status", "code", "expected", "may_have_run"),
    [
        (
            429,
            "TooManyRequestsException",
            f"Lambda throttled {FUNCTION} (us-west-2) and did not run it (TooManyRequestsException: Rate Exceeded.); try again later",
            False,
        ),
        (
            500,
            "ServiceException",
            f"Lambda failed invoking {FUNCTION} (us-west-2) (HTTP 500 ServiceException: Rate Exceeded.)",
            True,
        ),
        (
            403,
            "AccessDeniedException",
            f"not allowed to invoke {FUNCTION} (us-west-2) (AccessDeniedException: Rate Exceeded.); the stack's "
            "invokerPrincipals grant lambda:InvokeFunction",
            False,
        ),
        (
            404,
            "ResourceNotFoundException",
            f"function {FUNCTION} (us-west-2) not found (ResourceNotFoundException: Rate Exceeded.); expected the stack "
            "output SubmitterFunctionName, in its region",
            False,
        ),
    ],
    ids=["throttled", "5xx", "access-denied", "not-found"],
)
def test_lambda_faults_are_one_line_exit_2_and_never_retried(
    lambda_env, tmp_path, capsys, status, code, expected, may_have_run
) -> None:
    lambda_env.answer = lambda invocation: error_reply(status, code, "Rate Exceeded.")
    assert main(["submit", _file(tmp_path), "--function", FUNCTION]) == EXIT_FAILED
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"trainctl submit: {expected}")
    assert bool(TOKEN_RE.search(line)) is may_have_run  # a retry hint only where the function may have run
    assert len(lambda_env.invocations) == 1


def test_an_unreachable_endpoint(lambda_env, tmp_path, capsys, monkeypatch) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    assert main(["submit", _file(tmp_path), "--function", FUNCTION]) == EXIT_FAILED
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"trainctl submit: cannot reach Lambda at {endpoint}: Could not connect to the endpoint URL")
    assert "--client-token" not in line  # nothing was sent


def test_no_region_and_no_credentials_send_nothing(lambda_env, tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("AWS_REGION")
    assert main(["submit", _file(tmp_path), "--function", FUNCTION]) == EXIT_FAILED
    assert _one_line(capsys.readouterr().err) == (
        "trainctl submit: no AWS region: pass --region, set AWS_REGION, or give the function's ARN"
    )
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    assert main(["submit", _file(tmp_path), "--function", FUNCTION]) == EXIT_FAILED
    assert _one_line(capsys.readouterr().err).startswith("trainctl submit: no AWS credentials found")
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    assert main(["submit", _file(tmp_path), "--function", FUNCTION]) == EXIT_FAILED
    assert _one_line(capsys.readouterr().err) == (
        "trainctl submit: cannot set up AWS access: The config profile (no-such-profile) could not be found"
    )
    assert lambda_env.invocations == []


def _signed_region(invocation: dict[str, Any]) -> str:
    """The region of the SigV4 credential scope: ``Credential=KEY/DATE/REGION/lambda/aws4_request``."""
    return re.search(r"Credential=[^/]+/\d{8}/([a-z0-9-]+)/lambda/aws4_request", invocation["authorization"]).group(1)


@pytest.mark.parametrize(
    ("environ", "flags", "function", "region"),
    [
        ({"AWS_REGION": "eu-central-1"}, [], FUNCTION, "eu-central-1"),  # the README's `export AWS_REGION=...`
        ({"AWS_REGION": "eu-central-1", "AWS_DEFAULT_REGION": "us-east-1"}, [], FUNCTION, "eu-central-1"),
        ({"AWS_DEFAULT_REGION": "us-east-1"}, [], FUNCTION, "us-east-1"),
        ({"AWS_REGION": "eu-central-1"}, ["--region", "ap-south-1"], FUNCTION, "ap-south-1"),
        (
            {"AWS_REGION": "eu-central-1"},
            [],
            f"arn:aws:lambda:ap-southeast-2:123456789012:function:{FUNCTION}",
            "ap-southeast-2",
        ),
    ],
    ids=["AWS_REGION", "AWS_REGION-over-default", "AWS_DEFAULT_REGION", "--region", "function-arn"],
)
def test_the_region_is_the_flag_the_arn_or_aws_region(
    lambda_env, tmp_path, monkeypatch, environ, flags, function, region
) -> None:
    monkeypatch.delenv("AWS_REGION")
    for key, value in environ.items():
        monkeypatch.setenv(key, value)
    assert main(["submit", _file(tmp_path), "--function", function, *flags]) == EXIT_SUBMITTED
    (invocation,) = lambda_env.invocations
    assert _signed_region(invocation) == region and invocation["function"] == function


def test_an_arn_from_another_region_than_region_is_refused(lambda_env, tmp_path, capsys) -> None:
    arn = f"arn:aws:lambda:ap-southeast-2:123456789012:function:{FUNCTION}"
    assert main(["submit", _file(tmp_path), "--function", arn, "--region", "us-west-2"]) == EXIT_FAILED
    assert _one_line(capsys.readouterr().err) == (
        f"trainctl submit: --function {arn} is in ap-southeast-2 but --region is us-west-2; expected the same region "
        "(drop --region, or pass the function's name)"
    )
    assert lambda_env.invocations == []


def test_read_timeout_must_be_positive(capsys) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["submit", "x.json", "--function", FUNCTION, "--read-timeout", "0"])
    assert exited.value.code == 2
    assert "argument --read-timeout: '0': expected seconds > 0" in capsys.readouterr().err


# --- against the emulator: --local faults, and a lost answer replayed ----------------------------


pytestmark_aws = pytest.mark.xdist_group("trainctl-aws")


def _aws_environ(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)


@pytestmark_aws
def test_local_persistent_fault_is_one_line_and_creates_nothing(aws, tmp_path, capsys, monkeypatch) -> None:
    _aws_environ(monkeypatch, {**aws.env, "AWS_MAX_ATTEMPTS": "2"})
    before = {j["name"] for j in aws.training_jobs()}
    aws.inject_fault("CreateTrainingJob", "InternalFailure", count=-1)
    try:
        assert main(["submit", "--local", _file(tmp_path)]) == EXIT_FAILED
    finally:
        aws.clear_faults()
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(
        "trainctl submit --local: CreateTrainingJob answered InternalFailure: We encountered an internal error. "
        "Please try again. (after 2 attempts); retry with --client-token trainctl-"
    )
    assert {j["name"] for j in aws.training_jobs()} == before


@pytestmark_aws
def test_local_unreachable_endpoint_is_one_line(aws, tmp_path, capsys, monkeypatch) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    _aws_environ(monkeypatch, {**aws.env, "AWS_ENDPOINT_URL": endpoint, "AWS_MAX_ATTEMPTS": "1"})
    assert main(["submit", "--local", _file(tmp_path)]) == EXIT_FAILED
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"trainctl submit --local: cannot reach AWS_ENDPOINT_URL {endpoint} (")
    assert line.endswith("is `trainctl local-aws` running?")


@pytestmark_aws
def test_local_with_an_incomplete_environment_is_one_line_naming_the_variable(
    aws, tmp_path, capsys, monkeypatch
) -> None:
    """The in-process runtime's ConfigurationError is caught by its type (it was matched by class name)."""
    _aws_environ(monkeypatch, aws.env)
    monkeypatch.delenv("EXECUTION_ROLE_ARN")
    before = {j["name"] for j in aws.training_jobs()}
    assert main(["submit", "--local", _file(tmp_path)]) == EXIT_FAILED
    assert _one_line(capsys.readouterr().err) == (
        "trainctl submit --local: environment variable EXECUTION_ROLE_ARN is required and not set "
        "(source the env file of `trainctl local-aws`)"
    )
    assert {j["name"] for j in aws.training_jobs()} == before


@pytestmark_aws
def test_a_lost_answer_retried_with_the_printed_token_replays_the_one_job(lambda_env, aws, tmp_path, capsys) -> None:
    # The function runs the submitter against the emulator, creates the job, then its answer is lost.
    handled = threading.Event()

    def answer(invocation: dict[str, Any]) -> Reply:
        response = submit_local(invocation["payload"], aws.env)
        first = not handled.is_set()
        handled.set()
        return Reply(kind="stall" if first else "json", body=response)

    lambda_env.answer = answer
    request = _file(tmp_path)
    before = [j["name"] for j in aws.training_jobs()]
    assert main(["submit", request, "--function", FUNCTION, "--read-timeout", "1"]) == EXIT_FAILED
    token = TOKEN_RE.search(_one_line(capsys.readouterr().err)).group(1)
    assert handled.wait(60)  # the first invocation has created its job
    created = [j["name"] for j in aws.training_jobs() if j["name"] not in before]
    assert len(created) == 1

    # the person retries with the token the CLI printed: the same job comes back, none is added
    assert main(["submit", request, "--function", FUNCTION, "--client-token", token]) == EXIT_SUBMITTED
    response = json.loads(capsys.readouterr().out)
    assert response["replayed"] is True and response["training_job_name"] == created[0]
    assert [j["name"] for j in aws.training_jobs() if j["name"] not in before] == created
    assert [i["payload"]["client_token"] for i in lambda_env.invocations] == [token, token]


# --- review of issue 10: every failure one line, exit 2; empty tokens refused; a deadline for --local -----


@pytest.mark.parametrize("value", ["inf", "1e400", "nan", "-inf", "-1", "0", "3601", "1e9", "ten"])
def test_read_timeout_must_be_a_finite_number_of_seconds_up_to_an_hour(capsys, value) -> None:
    # `--read-timeout inf` and `1e400` (inf as a float) were accepted
    with pytest.raises(SystemExit) as exited:
        main(["submit", "x.json", "--function", FUNCTION, f"--read-timeout={value}"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --read-timeout: {value!r}: expected " in err and "<= 3600" in err


def test_the_longest_read_timeout_is_accepted(lambda_env, tmp_path) -> None:
    assert main(["submit", _file(tmp_path), "--function", FUNCTION, "--read-timeout", "3600"]) == EXIT_SUBMITTED
    with pytest.raises(SubmitError, match="read timeout inf: expected a finite number of seconds"):
        lambda_client(FUNCTION, read_timeout=float("inf"))
    assert len(lambda_env.invocations) == 1


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL_LAMBDA", "AWS_ENDPOINT_URL"])
def test_an_endpoint_url_that_is_not_one_is_one_line_and_exit_2(
    lambda_env, tmp_path, capsys, monkeypatch, variable
) -> None:
    # `AWS_ENDPOINT_URL_LAMBDA=notaurl trainctl submit ... --function f` died with `ValueError: Invalid endpoint`
    monkeypatch.setenv(variable, "notaurl")
    assert main(["submit", _file(tmp_path), "--function", FUNCTION]) == EXIT_FAILED
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(
        "trainctl submit: cannot set up AWS access: Invalid endpoint: notaurl (from AWS_ENDPOINT_URL_LAMBDA"
    )
    assert "--client-token" not in line  # nothing was sent
    assert lambda_env.invocations == []


def test_an_empty_client_token_is_sent_as_given_never_replaced() -> None:
    # an empty token the caller gave was silently replaced by a generated one
    assert with_client_token({**REQUEST, "client_token": ""}) == ({**REQUEST, "client_token": ""}, None)
    assert with_client_token({**REQUEST, "job_name": ""}) == ({**REQUEST, "job_name": ""}, None)
    request, token = with_client_token({**REQUEST, "client_token": None})  # null is absent, as the submitter reads it
    assert token is not None and request["client_token"] == token
    with pytest.raises(ValueError, match="client_token: the request carries '' and --client-token is 't-1'"):
        with_client_token({**REQUEST, "client_token": ""}, "t-1")


@pytestmark_aws
def test_the_local_deadline_is_the_deployed_functions_timeout(aws, monkeypatch) -> None:
    import dataclasses

    from platform_constructs.submitter.construct import JobSubmitterProps

    settings = runtime_settings
    timeout = next(f for f in dataclasses.fields(JobSubmitterProps) if f.name == "timeout")
    default = timeout.default_factory()  # a Duration made per props object (RUF009)
    assert default.to_seconds() == settings.FUNCTION_TIMEOUT_S == 60  # the construct's default, from one home
    handler, seen = runtime_handler, {}

    def handle(event, *, deadline=None, **kwargs):
        seen["remaining"] = deadline.remaining()
        return {"status": "validated"}

    monkeypatch.setattr(handler, "handle", handle)
    assert submit_local({**REQUEST, "dry_run": True}, aws.env) == {"status": "validated"}
    assert 0 < seen["remaining"] <= settings.FUNCTION_TIMEOUT_S


@pytestmark_aws
def test_local_a_stalled_endpoint_ends_at_the_deadline_in_one_line(aws, tmp_path, capsys, monkeypatch) -> None:
    # `trainctl submit --local` had no deadline: one call waited 57 s on an endpoint that never answered
    with socket.socket() as stalled:  # accepts connections (the kernel's backlog), never answers
        stalled.bind(("127.0.0.1", 0))
        stalled.listen(16)
        endpoint = f"http://127.0.0.1:{stalled.getsockname()[1]}"
        _aws_environ(monkeypatch, {**aws.env, "AWS_ENDPOINT_URL": endpoint})
        monkeypatch.setattr(runtime_settings, "FUNCTION_TIMEOUT_S", 4)  # the deployed function's timeout, shortened
        assert main(["submit", "--local", _file(tmp_path), "--client-token", "stalled-1"]) == EXIT_FAILED
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("trainctl submit --local: the submitter failed: DeadlineExceeded: ")
    assert "s of this invocation remain, too few for " in line
    assert line.endswith("; retry with --client-token stalled-1 to get its job, never a second one")


@pytestmark_aws
def test_local_an_unreadable_token_record_is_one_line_and_creates_nothing(aws, tmp_path, capsys, monkeypatch) -> None:
    # a garbage record at the token's key printed IdempotencyRecordError's traceback and exited 1 ("rejected")
    import hashlib

    settings = runtime_settings
    token = f"garbage-record-{tmp_path.name}"
    key = f"{settings.CLIENT_TOKEN_RECORDS_PREFIX}{hashlib.sha256(token.encode()).hexdigest()}.json"
    s3 = aws.client("s3", access_key=aws.env["AWS_ACCESS_KEY_ID"])  # the submitter: only it writes its records
    s3.put_object(Bucket=aws.env[settings.ENV_OUTPUT_BUCKET], Key=key, Body=b"{trunc")
    _aws_environ(monkeypatch, aws.env)
    before = {j["name"] for j in aws.training_jobs()}
    assert main(["submit", "--local", _file(tmp_path), "--client-token", token]) == EXIT_FAILED
    line = _one_line(capsys.readouterr().err)
    uri = f"s3://{aws.env[settings.ENV_OUTPUT_BUCKET]}/{key}"
    assert line.startswith(
        f"trainctl submit --local: the submitter failed: IdempotencyRecordError: client-token record {uri} is not JSON"
    )
    assert (
        "inspect it; to free the token, delete it with the output bucket policy's ClientTokenRecordsSubmitterOnly"
        in line
    )
    assert {j["name"] for j in aws.training_jobs()} == before


@pytestmark_aws
def test_local_an_endpoint_url_that_is_not_one_is_one_line(aws, tmp_path, capsys, monkeypatch) -> None:
    _aws_environ(monkeypatch, {**aws.env, "AWS_ENDPOINT_URL": "notaurl"})
    assert main(["submit", "--local", _file(tmp_path)]) == EXIT_FAILED
    line = _one_line(capsys.readouterr().err)
    assert line.startswith("trainctl submit --local: cannot set up AWS access: Invalid endpoint: notaurl")


@pytestmark_aws
def test_local_with_the_readers_settings_refuses_a_submission_as_the_reader_does(aws, tmp_path, capsys, monkeypatch):
    # `trainctl submit --local` stands for the function whose environment it is given: with the reader's
    # SUBMITTER_ALLOWED_ACTIONS it let a submission through, which the deployed reader refuses
    from platform_constructs.submitter.construct import READER_ACTIONS

    reader_env = {**aws.env, runtime_settings.ENV_ALLOWED_ACTIONS: ",".join(READER_ACTIONS)}
    _aws_environ(monkeypatch, reader_env)
    before = {j["name"] for j in aws.training_jobs()}
    assert main(["submit", "--local", _file(tmp_path), "--client-token", f"reader-{tmp_path.name}"]) == EXIT_REJECTED
    error = json.loads(capsys.readouterr().out)["error"]
    assert (error["code"], error["field"]) == ("ActionNotAllowed", "action")
    assert error["details"]["allowed_actions"] == list(READER_ACTIONS)
    assert {j["name"] for j in aws.training_jobs()} == before
    # what the reader answers, it answers
    assert submit_local({"action": "list_runs"}, reader_env)["status"] == "listed"


@pytestmark_aws
def test_local_an_empty_client_token_is_refused_naming_the_field(aws, tmp_path, capsys, monkeypatch) -> None:
    _aws_environ(monkeypatch, aws.env)
    before = {j["name"] for j in aws.training_jobs()}
    assert main(["submit", "--local", _file(tmp_path, {**REQUEST, "client_token": ""})]) == EXIT_REJECTED
    out, err = capsys.readouterr()
    assert json.loads(out)["error"]["code"] == "InvalidRequest" and json.loads(out)["error"]["field"] == "client_token"
    assert "generated" not in err
    assert {j["name"] for j in aws.training_jobs()} == before


@pytestmark_aws
def test_the_jobs_output_path_is_the_prefix_the_execution_role_may_write(aws) -> None:
    settings = runtime_settings
    response = submit_local({**REQUEST, "dry_run": True}, aws.env)
    assert response["create_training_job"]["OutputDataConfig"] == {
        "S3OutputPath": f"s3://{aws.env[settings.ENV_OUTPUT_BUCKET]}/{settings.TRAINING_JOB_OUTPUT_PREFIX}",
        "KmsKeyId": aws.env[settings.ENV_OUTPUT_KMS_KEY_ARN],  # the platform's key, which the bucket policy requires
    }


@pytestmark_aws
def test_local_a_deadline_already_past_sends_nothing_and_creates_nothing(aws) -> None:
    from trainctl.submitter_client import FunctionError

    before = {j["name"] for j in aws.training_jobs()}
    with pytest.raises(
        FunctionError, match=r"^the submitter failed: DeadlineExceeded: 0\.0 s of this invocation remain"
    ) as raised:
        submit_local({**REQUEST, "client_token": "past-deadline-1"}, aws.env, timeout_s=0)
    assert raised.value.may_have_run  # a retry with the same token is the safe next step
    assert {j["name"] for j in aws.training_jobs()} == before


@pytestmark_aws
def test_local_a_run_and_a_job_api_request_go_through_trainctl_submit(aws, tmp_path, capsys, monkeypatch) -> None:
    _aws_environ(monkeypatch, aws.env)
    run_id = f"cli-{uuid.uuid4().hex[:10]}"
    run = {**REQUEST, "capacity": "training-plan", "run": {"run_id": run_id}}
    assert main(["submit", "--local", _file(tmp_path, run)]) == EXIT_SUBMITTED
    out, err = capsys.readouterr()
    submitted = json.loads(out)
    assert submitted["training_job_name"] == f"{run_id}-seg-001" and "generated" not in err
    describe = {"action": "describe", "job_name": submitted["training_job_name"]}
    assert main(["submit", "--local", _file(tmp_path, describe, "describe.json")]) == EXIT_SUBMITTED
    assert json.loads(capsys.readouterr().out)["status"] == "described"
    missing = {"action": "describe", "job_name": "no-such-job-here"}
    assert main(["submit", "--local", _file(tmp_path, missing, "missing.json")]) == EXIT_REJECTED
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "NotFound"
