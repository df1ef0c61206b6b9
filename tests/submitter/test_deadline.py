"""The invocation's deadline bounds every AWS call: too little time left is a retriable DeadlineExceeded.

The Lambda context knows the time left (``get_remaining_time_in_millis``); a
client's Config cannot. Against an endpoint that accepts connections and never
answers, botocore's timeouts x attempts + backoff outlive a 60 s function
several times over, and Lambda kills it mid-call. With the deadline hooks the
function answers ``DeadlineExceeded`` first.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass

import pytest

from platform_constructs.lambda_runtime import deadline as hooks

pytestmark = pytest.mark.xdist_group("submitter")


class HangingEndpoint:
    """A TCP server on 127.0.0.1 that accepts every connection, reads, and never answers."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        self.connections = 0
        self._open: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> HangingEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        for conn in self._open:
            conn.close()
        self.server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            self.connections += 1
            self._open.append(conn)  # held open, never answered


@dataclass
class LambdaContext:
    remaining_ms: int
    function_name: str = "job-submitter"
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = "arn:aws:lambda:us-east-1:123456789012:function:job-submitter"
    aws_request_id: str = "9b1e8c1e-0000-4000-8000-00000000dead"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def _probe(clients, deadline_of):
    """Record, per attempt, the read timeout the hooks granted and the time left when it was sent."""
    seen: list[tuple[float, float]] = []

    def record(request, **_):
        seen.append((request.context.get("read_timeout"), deadline_of().remaining()))

    for client in (clients.sagemaker, clients.ssm, clients.s3):
        client.meta.events.register("before-send", record)  # runs after the hooks' more specific handler
    return seen


def test_an_endpoint_that_never_answers_ends_in_deadline_exceeded(runtime, env, config, make_request, monkeypatch):
    aws = runtime.aws
    request = make_request()
    # what the invocation does before its first AWS call (parsing, the planner's preflight, the new client's
    # first request) counts against the budget: a loaded machine once spent 0.6 s there, and a 4.5 s budget
    # (the first attempt needs 4 s) was gone before any connection. The preflight is warmed here, and the
    # budget leaves 2 s beyond one attempt
    runtime.service.preflight(runtime.request.parse_request(request, config))
    with HangingEndpoint() as endpoint:
        clients = aws.Clients.create(environ={**env, "AWS_ENDPOINT_URL": endpoint.url, "AWS_MAX_ATTEMPTS": "5"})
        seen = _probe(clients, hooks.current_deadline)
        monkeypatch.setattr(runtime.handler, "_dependencies", (clients, config))
        needed_ms = 1000 * (hooks.CONNECT_TIMEOUT_S + hooks.MIN_READ_TIMEOUT_S + hooks.DEADLINE_RESERVE_S)
        with pytest.raises(runtime.errors.DeadlineExceeded) as raised:
            runtime.handler.lambda_handler(request, LambdaContext(remaining_ms=round(needed_ms) + 2000))
    error = raised.value
    assert error.retriable is True
    assert error.operation == "s3.ListObjectsV2"  # the client token's record is read first
    assert "retry the same request with the same client_token" in str(error)
    assert endpoint.connections >= 1 and seen
    for granted, remaining in seen:
        # every attempt was sent with its connect + read time inside what was left, less the reserve
        assert hooks.MIN_READ_TIMEOUT_S <= granted <= hooks.READ_TIMEOUT_S
        assert hooks.CONNECT_TIMEOUT_S + granted <= remaining - hooks.DEADLINE_RESERVE_S + 0.05  # (probed just after)


def test_a_deadline_already_past_sends_nothing(aws, runtime, submit, clients, config, make_request):
    aws.clear_calls()
    with pytest.raises(runtime.errors.DeadlineExceeded):
        runtime.service.submit(make_request(), clients=clients, config=config, deadline=runtime.aws.Deadline(-1.0))
    assert aws.calls() == []
    # a request that needs no AWS call is still answered: validation does not wait for the network
    refused = runtime.service.submit(
        make_request(instance_count=0), clients=clients, config=config, deadline=runtime.aws.Deadline(-1.0)
    )
    assert refused["error"]["field"] == "instance_count"


def test_a_deadline_hit_inside_a_library_is_still_deadline_exceeded(aws, runtime, env, config, make_request):
    """Powertools wraps the SSM call's exception (GetParameterError): the answer stays DeadlineExceeded,
    not a broken-configuration error."""
    fresh = runtime.aws.Clients.create(environ=env)  # no cached plan list
    aws.clear_calls()
    with pytest.raises(runtime.errors.DeadlineExceeded) as raised:
        runtime.service.submit(
            make_request(client_token=None), clients=fresh, config=config, deadline=runtime.aws.Deadline(2.0)
        )
    assert raised.value.operation == "ssm.GetParameter"
    assert aws.calls("CreateTrainingJob") == []


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeRequest:
    def __init__(self) -> None:
        self.context: dict = {}


def test_the_send_hook_cuts_the_read_timeout_to_the_time_left(runtime):
    aws = runtime.aws
    clock = FakeClock()
    deadline = aws.Deadline(10.0, clock=clock)
    request = FakeRequest()
    with hooks.deadline_scope(deadline):
        hooks._before_send(2.0, 20.0, request=request, event_name="before-send.sagemaker.CreateTrainingJob")
        assert request.context["read_timeout"] == pytest.approx(10.0 - hooks.DEADLINE_RESERVE_S - 2.0)
        clock.now += 6.5  # 3.5 s left: 0.5 s of read time after connect and reserve, under the 1 s minimum
        with pytest.raises(aws.DeadlineExceeded) as raised:
            hooks._before_send(2.0, 20.0, request=FakeRequest(), event_name="before-send.sagemaker.CreateTrainingJob")
    assert raised.value.operation == "sagemaker.CreateTrainingJob"
    assert raised.value.needed_s == pytest.approx(2.0 + hooks.MIN_READ_TIMEOUT_S + hooks.DEADLINE_RESERVE_S)
    assert deadline.tripped
    # without a deadline in scope nothing is changed
    untouched = FakeRequest()
    hooks._before_send(2.0, 20.0, request=untouched, event_name="before-send.s3.GetObject")
    assert untouched.context == {}


def test_a_retry_is_made_only_when_its_worst_backoff_and_an_attempt_fit(runtime, clients):
    import botocore.exceptions

    aws = runtime.aws
    operation = clients.sagemaker.meta.service_model.operation_model("DescribeTrainingJob")
    failure = botocore.exceptions.ConnectTimeoutError(endpoint_url="http://127.0.0.1:9")
    kwargs = {
        "response": None,
        "endpoint": None,
        "operation": operation,
        "attempts": 3,
        "caught_exception": failure,
        "request_dict": {"context": {}},
        "event_name": "needs-retry.sagemaker.DescribeTrainingJob",
    }
    checker = hooks._retry_checker(5)
    needed = hooks.worst_backoff_s(3) + 2.0 + hooks.MIN_READ_TIMEOUT_S
    assert hooks.worst_backoff_s(3) == 4.0  # botocore: min(1 s * 2**(3-1), 20 s) for throttling
    clock = FakeClock()
    with hooks.deadline_scope(aws.Deadline(needed + hooks.DEADLINE_RESERVE_S + 0.1, clock=clock)):
        assert hooks._needs_retry(2.0, checker, **kwargs) is None  # fits: botocore decides (and retries)
    with (
        hooks.deadline_scope(aws.Deadline(needed + hooks.DEADLINE_RESERVE_S - 0.1, clock=clock)),
        pytest.raises(aws.DeadlineExceeded) as raised,
    ):
        hooks._needs_retry(2.0, checker, **kwargs)
    assert raised.value.__cause__ is failure
    # the last attempt is botocore's to end: its own error, not DeadlineExceeded
    with hooks.deadline_scope(aws.Deadline(0.5, clock=clock)):
        assert hooks._needs_retry(2.0, checker, **{**kwargs, "attempts": 5}) is None


def test_the_pinned_botocore_honours_a_per_request_read_timeout():
    """The send hook cuts ``request.context["read_timeout"]``; botocore's HTTP session must apply it
    (a contract of the pinned botocore, runtime/requirements.txt)."""
    from botocore.httpsession import URLLib3Session

    session = URLLib3Session(timeout=(2.0, 20.0))
    request = FakeRequest()
    request.context["read_timeout"] = 1.5
    timeout = session._get_request_timeout(request)
    assert (timeout.connect_timeout, timeout.read_timeout) == (2.0, 1.5)


# --- what DeadlineExceeded says: whether the call was sent, and what became of it ----------------------


def test_an_unsent_call_is_reported_as_not_sent(runtime):
    aws = runtime.aws
    clock = FakeClock()
    with hooks.deadline_scope(aws.Deadline(2.0, clock=clock)), pytest.raises(aws.DeadlineExceeded) as raised:
        hooks._before_send(2.0, 20.0, request=FakeRequest(), event_name="before-send.sagemaker.CreateTrainingJob")
    error = raised.value
    assert (error.attempts_sent, error.last_attempt, error.may_have_taken_effect) == (0, None, False)
    assert "so CreateTrainingJob was not sent" in str(error)
    assert "may exist" not in str(error)


def test_a_create_whose_answer_was_lost_says_the_job_may_exist(aws, runtime, env, config, make_request, token_jobs):
    """Review finding: DeadlineExceeded said "nothing more was sent" when CreateTrainingJob had been sent
    and only its answer was lost. Here the request reaches the emulator (the job is created), its answer
    is dropped as a read timeout, and no time is left for botocore's retry."""
    import botocore.exceptions
    from botocore.httpsession import URLLib3Session

    clock = FakeClock()
    clients = runtime.aws.Clients.create(environ=env)
    session = URLLib3Session()

    def deliver_then_lose_the_answer(request, **_):
        session.send(request)  # the job is created
        clock.now += 100.0  # the answer never comes: the read timeout used what was left
        raise botocore.exceptions.ReadTimeoutError(endpoint_url=request.url)

    clients.sagemaker.meta.events.register("before-send.sagemaker.CreateTrainingJob", deliver_then_lose_the_answer)
    request = make_request(capacity="on-demand")
    with pytest.raises(runtime.errors.DeadlineExceeded) as raised:
        runtime.service.submit(
            request, clients=clients, config=config, deadline=runtime.aws.Deadline(60.0, clock=clock)
        )
    error = raised.value
    assert error.operation == "sagemaker.CreateTrainingJob"
    assert (error.attempts_sent, error.may_have_taken_effect) == (1, True)
    message = str(error)
    assert "attempt 1 was sent and its answer was not received in time (ReadTimeoutError)" in message
    assert "the training job may exist" in message
    assert "not sent" not in message and "nothing more was sent" not in message
    assert "retry the same request with the same client_token (safe)" in message
    # what the message promises: the same request with the same token returns the job that was created
    created = token_jobs(request["client_token"])
    assert len(created) == 1
    retry = runtime.service.submit(request, clients=runtime.aws.Clients.create(environ=env), config=config)
    assert retry["replayed"] is True and retry["training_job_name"] == created[0], retry


def test_a_retry_cut_short_reports_the_attempt_before_it(runtime, clients):
    """The send hook of attempt 2 knows what became of attempt 1 (noted when the retry was allowed)."""
    import botocore.exceptions

    aws = runtime.aws
    clock = FakeClock()
    operation = clients.sagemaker.meta.service_model.operation_model("CreateTrainingJob")
    context: dict = {"retries": {"attempt": 1}}
    kwargs = {
        "response": None, "endpoint": None, "operation": operation, "attempts": 1,
        "caught_exception": botocore.exceptions.ReadTimeoutError(endpoint_url="http://127.0.0.1:9"),
        "request_dict": {"context": context}, "event_name": "needs-retry.sagemaker.CreateTrainingJob",
    }  # fmt: skip
    with hooks.deadline_scope(aws.Deadline(30.0, clock=clock)):
        assert hooks._needs_retry(2.0, hooks._retry_checker(5), **kwargs) is None  # time for a retry: botocore retries
        clock.now += 27.0  # its backoff and the wait used the rest
        context["retries"]["attempt"] = 2
        retry = FakeRequest()
        retry.context = context
        with pytest.raises(aws.DeadlineExceeded) as raised:
            hooks._before_send(2.0, 20.0, request=retry, event_name="before-send.sagemaker.CreateTrainingJob")
    error = raised.value
    assert (error.attempts_sent, error.may_have_taken_effect) == (1, True)
    assert (
        "attempt 1 was sent and its answer was not received in time (ReadTimeoutError); the training job may exist"
        in str(error)
    )


def test_an_answer_that_refused_the_call_is_not_reported_as_maybe_done(runtime):
    outcome = hooks.attempt_outcome
    throttled = outcome(None, type("R", (), {"status_code": 400})(), {"Error": {"Code": "ThrottlingException"}})
    assert throttled == ("was answered ThrottlingException", False)
    fault = outcome(None, type("R", (), {"status_code": 500})(), {"Error": {"Code": "InternalFailure"}})
    assert fault[1] is True and "whether it took effect is not known" in fault[0]
    import botocore.exceptions

    unreachable = outcome(botocore.exceptions.ConnectTimeoutError(endpoint_url="http://x"), None, None)
    assert unreachable == ("could not connect (ConnectTimeoutError), so it did not reach AWS", False)


def test_deadline_exceeded_survives_pickling(runtime):
    import pickle

    error = runtime.errors.DeadlineExceeded(
        "sagemaker.CreateTrainingJob", remaining_s=1.0, needed_s=4.0, attempts_sent=2,
        last_attempt="its answer was not received in time (ReadTimeoutError)", may_have_taken_effect=True,
    )  # fmt: skip
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == str(error) and copy.attempts_sent == 2 and copy.may_have_taken_effect is True
