"""Fixtures of the trainctl command tests.

* ``fake_lambda``: Lambda's ``Invoke`` REST API on 127.0.0.1 (moto's Lambda
  needs Docker), counting invocations and answering as each test says:
  JSON, an error, a lost connection, or no answer until the test ends.
* ``lambda_env``: the process environment of ``trainctl submit --function``
  pointed at ``fake_lambda`` (``AWS_ENDPOINT_URL``), with dummy credentials,
  ``AWS_REGION`` only, and no AWS config files or instance metadata.
* ``aws``: one `trainctl local-aws` emulator (:class:`devtools.local_aws.client.LocalAws`) seeded with
  ``examples/plans.json``. Tests using it are in xdist group ``trainctl-aws``.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest

from devtools.local_aws.client import LocalAws

REPO = Path(__file__).resolve().parents[2]
INVOKE_PREFIX = "/2015-03-31/functions/"
INVOKE_SUFFIX = "/invocations"


@dataclass
class Reply:
    """What the fake function answers: ``kind`` is ``json`` (``status``, ``body``, ``headers``),
    ``close`` (drop the connection unanswered) or ``stall`` (answer ``body`` only when the test ends)."""

    kind: str = "json"
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def error_reply(status: int, code: str, message: str) -> Reply:
    """Lambda's error answer to ``Invoke`` (rest-json: ``x-amzn-ErrorType`` and ``{"Type", "message"}``)."""
    return Reply(
        status=status,
        body={"Type": "User" if status < 500 else "Service", "message": message},
        headers={"x-amzn-ErrorType": code},
    )


class FakeLambda:
    """Lambda's ``Invoke`` (``POST /2015-03-31/functions/NAME/invocations``) on 127.0.0.1.

    Attributes:
        endpoint: ``http://127.0.0.1:PORT``.
        invocations: per request received: ``{"function", "payload", "authorization"}``.
        answer: ``answer(invocation) -> Reply`` (default: a submitted job named after the token).
    """

    def __init__(self) -> None:
        self.invocations: list[dict[str, Any]] = []
        self.answer: Callable[[dict[str, Any]], Reply] = lambda invocation: Reply(body={"status": "submitted"})
        self.released = threading.Event()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not (self.path.startswith(INVOKE_PREFIX) and self.path.endswith(INVOKE_SUFFIX)):
                    self._send(error_reply(404, "UnknownOperationException", self.path))
                    return
                invocation = {
                    "function": unquote(self.path[len(INVOKE_PREFIX) : -len(INVOKE_SUFFIX)]),
                    "payload": json.loads(body or b"null"),
                    "authorization": self.headers.get("Authorization", ""),
                }
                with fake._lock:
                    fake.invocations.append(invocation)
                reply = fake.answer(invocation)
                if reply.kind == "close":
                    self.close_connection = True
                    return
                if reply.kind == "stall":
                    fake.released.wait(120)
                try:
                    self._send(reply)
                except OSError:  # the caller went away (what a stall is for)
                    self.close_connection = True

            def _send(self, reply: Reply) -> None:
                data = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-amzn-RequestId", str(uuid.uuid4()))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_lambda() -> Iterator[FakeLambda]:
    server = FakeLambda()
    yield server
    server.close()


AWS_VARIABLES = (
    "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_LAMBDA",
    "AWS_MAX_ATTEMPTS", "AWS_RETRY_MODE", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
)  # fmt: skip


@pytest.fixture
def lambda_env(monkeypatch: pytest.MonkeyPatch, fake_lambda: FakeLambda, tmp_path: Path) -> FakeLambda:
    """The process environment for ``--function`` against ``fake_lambda``: AWS_REGION=us-west-2 only."""
    for name in AWS_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", fake_lambda.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-west-2")
    return fake_lambda


@pytest.fixture(scope="session")
def aws() -> Iterator[LocalAws]:
    with LocalAws(plans=str(REPO / "examples" / "plans.json")) as emulator:
        yield emulator
