"""``Platform.from_stack``: the deployed stack's outputs name the submitter function, which answers the
preflight and the submissions (``lambda:InvokeFunction``).

CloudFormation is the emulator's (moto: a stack with the platform's ``SubmitterFunctionName``
output); Lambda's ``Invoke`` is a small HTTP server on 127.0.0.1 (moto's Lambda needs Docker) whose
function runs the submitter's handler against the emulator, as the deployed function would.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from trainctl.sdk import SUBMITTER_FUNCTION_OUTPUT, Platform, PlatformRefusal
from trainctl.submitter_client import submit_local

pytestmark = pytest.mark.xdist_group("sdk")

FUNCTION = "training-platform-submitter"


@pytest.fixture
def function(aws: Any) -> Iterator[list[dict[str, Any]]]:
    """Lambda's Invoke API on 127.0.0.1 running the submitter against the emulator; yields the invocations."""
    invocations: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            payload = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
            invocations.append({"path": self.path, "payload": payload})
            body = json.dumps(submit_local(payload, aws.env)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    server.invocations = invocations  # type: ignore[attr-defined]
    server.endpoint = f"http://127.0.0.1:{server.server_address[1]}"  # type: ignore[attr-defined]
    yield server  # type: ignore[misc]
    server.shutdown()
    server.server_close()


@pytest.fixture
def deployed(aws: Any, function: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> str:
    """A stack named like the platform's, with its submitter output; the process environment of a notebook
    (credentials and region; endpoints: the emulator, Lambda's the fake function's)."""
    name = f"Platform{uuid.uuid4().hex[:8]}"
    template = {
        "Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {SUBMITTER_FUNCTION_OUTPUT: {"Value": FUNCTION}, "DataBucketName": {"Value": "data"}},
    }
    aws.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(template))
    for variable in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", aws.region)
    monkeypatch.setenv("AWS_ENDPOINT_URL", aws.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL_LAMBDA", function.endpoint)
    return name


def test_the_stacks_submitter_answers_the_preflight_and_the_sdk_creates_the_job(aws, function, deployed, tiny) -> None:
    platform = Platform.from_stack(deployed, telemetry=False, validate_role=False)
    trainer = platform.model_trainer(tiny)
    assert [i["payload"].get("dry_run") for i in function.invocations] == [True]
    assert all(i["path"] == f"/2015-03-31/functions/{FUNCTION}/invocations" for i in function.invocations)
    trainer.train(wait=False, logs=False)
    name = trainer.training_job.training_job_name
    assert aws.describe_training_job(name)["RoleArn"] == trainer.create_training_job["RoleArn"]

    # through the function: it answers from the SDK's job (same token), one job
    job = platform.submit(tiny)
    assert job.training_job_name == name and function.invocations[-1]["payload"].get("dry_run") is None
    assert sum(1 for j in aws.training_jobs() if j["name"] == name) == 1

    with pytest.raises(PlatformRefusal) as caught:
        platform.model_trainer({**tiny, "instance_count": 0})
    assert (caught.value.code, caught.value.field) == ("InvalidRequest", "instance_count")


def test_a_stack_that_is_not_there_or_not_the_platforms_is_named(aws, deployed) -> None:
    with pytest.raises(LookupError, match=r"stack_name: no stack 'NoSuchStack'"):
        Platform.from_stack("NoSuchStack", telemetry=False)
    other = f"Other{uuid.uuid4().hex[:8]}"
    template = {"Resources": {"Handle": {"Type": "AWS::CloudFormation::WaitConditionHandle"}}}
    aws.client("cloudformation").create_stack(StackName=other, TemplateBody=json.dumps(template))
    with pytest.raises(LookupError, match=rf"stack {other!r} has no {SUBMITTER_FUNCTION_OUTPUT} output"):
        Platform.from_stack(other, telemetry=False)


def test_an_empty_stack_name_or_no_region_is_named_before_any_stack_is_read(aws, deployed, monkeypatch) -> None:
    # DescribeStacks without a name describes every stack: the first one's outputs must never be taken
    for name in ("", "  "):
        with pytest.raises(ValueError, match=r"stack_name: got .*, expected the platform stack's name"):
            Platform.from_stack(name, telemetry=False)
    from trainctl.submitter_client import SubmitError

    monkeypatch.delenv("AWS_REGION")
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    with pytest.raises(SubmitError, match=r"cannot read stack .*region") as caught:
        Platform.from_stack(deployed, telemetry=False)
    assert caught.value.may_have_run is False
