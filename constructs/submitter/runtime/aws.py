"""AWS clients for the submitter: botocore's retries, bounded by the invocation's deadline.

**Retries.** Throttling and 5xx answers are retried by botocore itself
(``standard`` mode by default: exponential backoff with jitter and a retry
quota; ``adaptive`` adds client-side rate limiting). When they persist,
botocore raises the last ``ClientError`` and the submitter lets it propagate,
so Lambda reports a function error and the caller's own retry applies.
``AWS_RETRY_MODE`` and ``AWS_MAX_ATTEMPTS`` override the defaults, as for any
AWS SDK.

**Deadline.** A client's ``Config`` (timeouts, attempts) is fixed when the
client is made, but an invocation has only the time Lambda gives it
(``context.get_remaining_time_in_millis()``; the construct's default timeout
is 60 s). Without a bound, one call against an endpoint that accepts the
connection and never answers lives ``attempts x read timeout + backoff``
(5 x 30 s = 150 s with the fixed configuration this replaced) and Lambda kills
the function mid-call. :class:`Deadline` is the invocation's end; while one is active
(:func:`deadline_scope`), two hooks on every client's event system
(:func:`install_deadline_hooks`) keep each call inside it:

* ``before-send``: an attempt starts only if ``connect timeout + 1 s`` of read
  time (:data:`MIN_READ_TIMEOUT_S`) fits before the deadline less
  :data:`DEADLINE_RESERVE_S` (kept to log and answer); its read timeout is cut
  to what is left (botocore's per-request ``read_timeout``);
* ``needs-retry`` (first in line): a retry that botocore's standard rules
  would make is made only if its worst-case backoff plus such an attempt fits.

Otherwise :class:`~.errors.DeadlineExceeded` is raised (a function error the
caller retries; see :mod:`.errors`). It says what is known: that the call was
not sent, or that attempt N was sent and what became of it
(:func:`attempt_outcome`: no answer in time, or AWS's answer), so a
``CreateTrainingJob`` whose answer was lost is reported as "the training job
may exist", never as "nothing was sent". Client-side parameter validation
(botocore's ``parameter_validation``) stays on: a misspelt or mistyped field
fails before it leaves the function.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from botocore.config import Config

from .errors import DeadlineExceeded
from .sagemaker_rules import shared_loader

if TYPE_CHECKING:  # boto3-stubs, for the type checker only: the Lambda package does not carry them
    import boto3
    from aws_lambda_powertools.utilities.parameters import SSMProvider
    from botocore.client import BaseClient
    from botocore.retries.standard import RetryEventAdapter, StandardRetryConditions
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sagemaker import SageMakerClient
    from mypy_boto3_ssm import SSMClient

RetryMode = Literal["standard", "adaptive", "legacy"]
RETRY_MODES: tuple[RetryMode, ...] = ("standard", "adaptive", "legacy")
"""botocore's retry modes (``AWS_RETRY_MODE``); another value means the default."""
DEFAULT_RETRY_MODE: RetryMode = "standard"
DEFAULT_MAX_ATTEMPTS = 5
"""Total attempts per AWS call (first try + 4 retries), botocore ``total_max_attempts``."""

CONNECT_TIMEOUT_S = 2.0
"""TCP (and TLS) connect timeout per attempt. A regional AWS endpoint answers a connect from
Lambda in milliseconds; botocore's default is 60 s."""
READ_TIMEOUT_S = 20.0
"""Read timeout per attempt (cut further by the deadline). The SageMaker, SSM and S3 calls the
submitter makes answer within seconds; botocore's default is 60 s."""
DEADLINE_RESERVE_S = 1.0
"""Seconds kept after the last AWS call to build, log and return the answer."""
MIN_READ_TIMEOUT_S = 1.0
"""The least read time an attempt is started with."""
THROTTLING_BACKOFF_BASE_S = 1.0
MAX_BACKOFF_S = 20.0
RETRY_AFTER_EXTRA_S = 5.0
"""botocore's standard backoff (``botocore.retries.standard.ExponentialBackoff``): the
delay before retry ``i`` is ``rand(0, 1) * min(base * 2**(i-1), 20 s)`` with base 1 s for
throttling (0.05 s otherwise), raised by at most 5 s by an ``x-amz-retry-after`` header."""

PLAN_ARNS_MAX_AGE_S = 60
"""Seconds the SSM list of training plan ARNs is cached in a warm function."""


def client_config(environ: Mapping[str, str] | None = None) -> Config:
    """botocore ``Config`` with the retry mode and attempts from ``environ`` (default: the process's)."""
    env = os.environ if environ is None else environ
    requested = env.get("AWS_RETRY_MODE")
    mode = next((m for m in RETRY_MODES if m == requested), DEFAULT_RETRY_MODE)
    try:
        attempts = max(1, int(env.get("AWS_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)))
    except ValueError:
        attempts = DEFAULT_MAX_ATTEMPTS
    return Config(
        retries={"mode": mode, "total_max_attempts": attempts},
        connect_timeout=CONNECT_TIMEOUT_S,
        read_timeout=READ_TIMEOUT_S,
        parameter_validation=True,
    )


# --- the invocation's deadline ------------------------------------------------------------------


class Deadline:
    """The moment an invocation must have answered by.

    Args:
        seconds: time left from now, in seconds.
        clock: monotonic clock in seconds (tests pass their own).

    Attributes:
        at: the deadline on ``clock``.
        tripped: set once :meth:`exceeded` has been called (the invocation is
            answering ``DeadlineExceeded``; later faults are consequences).
        error: the first ``DeadlineExceeded`` made, or ``None``.
    """

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.at = clock() + seconds
        self.tripped = False
        self.error: DeadlineExceeded | None = None

    @classmethod
    def from_lambda_context(cls, context: Any) -> Deadline | None:
        """The deadline of a Lambda invocation (``context.get_remaining_time_in_millis()``), or ``None``."""
        remaining = getattr(context, "get_remaining_time_in_millis", None)
        if not callable(remaining):
            return None
        try:
            return cls(float(remaining()) / 1000.0)
        except (TypeError, ValueError):
            return None

    def remaining(self) -> float:
        """Seconds left (negative once past)."""
        return self.at - self.clock()

    def exceeded(
        self,
        operation: str,
        needed: float,
        *,
        attempts_sent: int = 0,
        last_attempt: str | None = None,
        may_have_taken_effect: bool = False,
    ) -> DeadlineExceeded:
        """A :class:`DeadlineExceeded` for ``operation`` needing ``needed`` seconds (marks this deadline tripped).

        ``attempts_sent``, ``last_attempt``, ``may_have_taken_effect``: what is known of the
        attempts already sent (see :class:`~.errors.DeadlineExceeded`).
        """
        self.tripped = True
        error = DeadlineExceeded(
            operation,
            remaining_s=max(0.0, self.remaining()),
            needed_s=needed,
            attempts_sent=attempts_sent,
            last_attempt=last_attempt,
            may_have_taken_effect=may_have_taken_effect,
        )
        if self.error is None:
            self.error = error
        return error

    def sleep(self, seconds: float, operation: str) -> None:
        """``time.sleep(seconds)`` when that leaves :data:`DEADLINE_RESERVE_S`, else raise ``DeadlineExceeded``."""
        if self.remaining() - DEADLINE_RESERVE_S < seconds:
            raise self.exceeded(operation, seconds + DEADLINE_RESERVE_S)
        time.sleep(seconds)


_CURRENT: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("submitter_deadline", default=None)


@contextlib.contextmanager
def deadline_scope(deadline: Deadline | None) -> Iterator[Deadline | None]:
    """Make ``deadline`` the current one (for this thread / context) while the block runs."""
    token = _CURRENT.set(deadline)
    try:
        yield deadline
    finally:
        _CURRENT.reset(token)


def current_deadline() -> Deadline | None:
    """The deadline of the invocation running in this context, or ``None`` (no bound)."""
    return _CURRENT.get()


def install_deadline_hooks(client: BaseClient) -> None:
    """Register the deadline hooks (module docstring) on ``client``'s events (idempotent)."""
    service = client.meta.service_model.service_id.hyphenize()
    config = client.meta.config
    connect = float(_option(config, "connect_timeout"))
    read = float(_option(config, "read_timeout"))
    attempts = int((_option(config, "retries") or {}).get("total_max_attempts") or DEFAULT_MAX_ATTEMPTS)
    client.meta.events.register(
        f"before-send.{service}",
        functools.partial(_before_send, connect, read),
        unique_id=f"submitter-deadline-before-send-{service}",
    )
    client.meta.events.register_first(
        f"needs-retry.{service}",
        # ignored: botocore-stubs type every event handler as returning None, but a needs-retry handler
        # answers (None: no opinion; False: do not retry), as botocore/retryhandler.py's own do
        functools.partial(_needs_retry, connect, _retry_checker(attempts)),  # type: ignore[arg-type]
        unique_id=f"submitter-deadline-needs-retry-{service}",
    )


def _option(config: Config, name: str) -> Any:
    """An option of a botocore ``Config`` (set as attributes at run time; botocore-stubs declare none)."""
    return getattr(config, name)


def _operation(event_name: str) -> str:
    return ".".join(event_name.split(".")[1:3]) or event_name


_LAST_ATTEMPT = "submitter_last_attempt"
"""Key, in botocore's per-call request context, of ``(text, may_have_taken_effect)``: what became
of the last attempt sent, noted by :func:`_needs_retry` when it lets botocore retry."""


def _before_send(connect: float, read: float, request: Any = None, event_name: str = "", **_: Any) -> None:
    deadline = current_deadline()
    if deadline is None or request is None:
        return None
    budget = deadline.remaining() - DEADLINE_RESERVE_S - connect
    if budget < MIN_READ_TIMEOUT_S:
        context = getattr(request, "context", None) or {}
        attempt = int((context.get("retries") or {}).get("attempt") or 1)  # botocore numbers this call's attempts
        last, uncertain = context.get(_LAST_ATTEMPT) or (None, False)
        raise deadline.exceeded(
            _operation(event_name),
            connect + MIN_READ_TIMEOUT_S + DEADLINE_RESERVE_S,
            attempts_sent=attempt - 1,
            last_attempt=last if attempt > 1 else None,
            may_have_taken_effect=bool(uncertain) and attempt > 1,
        )
    request.context["read_timeout"] = min(read, budget)
    return None


def attempt_outcome(caught: BaseException | None, response: Any, parsed: Any) -> tuple[str, bool]:
    """What became of an attempt that was sent, and whether AWS may have carried it out.

    Args:
        caught: the exception botocore caught (no answer), or ``None``.
        response: the HTTP response (``status_code``), when one came.
        parsed: the parsed response (``{"Error": {"Code"}}``), when one came.

    Returns:
        ``(phrase, may_have_taken_effect)``: a connection that never opened did
        not reach AWS; an answer that did not come (read timeout, connection
        closed) or a 5xx answer leaves the outcome unknown; other answers (4xx,
        throttling) were refusals.
    """
    from botocore.exceptions import ConnectionError as ConnectFailed  # connect timeout, refused, DNS, proxy

    if caught is not None:
        if isinstance(caught, ConnectFailed):
            return f"could not connect ({type(caught).__name__}), so it did not reach AWS", False
        return f"its answer was not received in time ({type(caught).__name__})", True
    status = getattr(response, "status_code", None)
    code = ((parsed or {}).get("Error") or {}).get("Code") if isinstance(parsed, dict) else None
    answer = code or f"HTTP {status}"
    if isinstance(status, int) and status >= 500:
        return f"was answered {answer} (a server fault: whether it took effect is not known)", True
    return f"was answered {answer}", False


@functools.lru_cache(maxsize=8)
def _retry_checker(attempts: int) -> tuple[RetryEventAdapter, StandardRetryConditions]:
    from botocore.retries.standard import RetryEventAdapter, StandardRetryConditions

    return RetryEventAdapter(), StandardRetryConditions(max_attempts=attempts)


def worst_backoff_s(attempt: int, *, retry_after: bool = False) -> float:
    """The longest delay botocore's standard mode can sleep after attempt ``attempt`` (1-based)."""
    delay = min(THROTTLING_BACKOFF_BASE_S * 2.0 ** (attempt - 1), MAX_BACKOFF_S)
    return delay + (RETRY_AFTER_EXTRA_S if retry_after else 0.0)


def _needs_retry(
    connect: float,
    checker: tuple[RetryEventAdapter, StandardRetryConditions],
    event_name: str = "",
    **kwargs: Any,
) -> bool | None:
    deadline = current_deadline()
    if deadline is None:
        return None
    caught = kwargs.get("caught_exception")
    if isinstance(caught, DeadlineExceeded):
        return False  # never retry past the deadline
    adapter, conditions = checker
    try:
        context = adapter.create_retry_context(**kwargs)
        retryable = conditions.is_retryable(context)
    except Exception:  # an event shape this botocore does not know: leave the decision to it
        return None
    if not retryable:
        return None
    response = context.http_response
    retry_after = response is not None and "x-amz-retry-after" in (response.headers or {})
    needed = worst_backoff_s(context.attempt_number, retry_after=retry_after) + connect + MIN_READ_TIMEOUT_S
    last, uncertain = attempt_outcome(caught, response, context.parsed_response)
    if deadline.remaining() - DEADLINE_RESERVE_S < needed:
        error = deadline.exceeded(
            _operation(event_name),
            needed + DEADLINE_RESERVE_S,
            attempts_sent=context.attempt_number,
            last_attempt=last,
            may_have_taken_effect=uncertain,
        )
        raise error from caught
    request_dict = kwargs.get("request_dict")
    if isinstance(request_dict, dict) and isinstance(request_dict.get("context"), dict):
        request_dict["context"][_LAST_ATTEMPT] = (last, uncertain)  # for the next attempt's send hook
    return None


# --- clients ----------------------------------------------------------------------------------


def client_kwargs(environ: Mapping[str, str] | None) -> dict[str, Any]:
    """The keyword arguments of ``create_client`` that ``environ`` decides (region, credentials and
    ``AWS_ENDPOINT_URL``, read from it rather than from the process, so several emulators can be used side
    by side); ``{}`` for ``None`` (botocore's own resolution: the function's environment and role)."""
    kwargs: dict[str, Any] = {}
    if environ is not None:
        kwargs["region_name"] = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None
        kwargs["aws_access_key_id"] = environ.get("AWS_ACCESS_KEY_ID") or None
        kwargs["aws_secret_access_key"] = environ.get("AWS_SECRET_ACCESS_KEY") or None
        kwargs["aws_session_token"] = environ.get("AWS_SESSION_TOKEN") or None
        if environ.get("AWS_ENDPOINT_URL"):
            kwargs["endpoint_url"] = environ["AWS_ENDPOINT_URL"]
    return kwargs


@dataclass
class Clients:
    """The AWS clients the submitter uses (create once per warm function and reuse).

    Attributes:
        sagemaker: SageMaker client.
        ssm: SSM client.
        s3: S3 client (the ledger, :mod:`.ledger`).
    """

    sagemaker: SageMakerClient
    ssm: SSMClient
    s3: S3Client
    _parameters: SSMProvider | None = field(default=None, repr=False)

    @classmethod
    def create(
        cls,
        *,
        environ: Mapping[str, str] | None = None,
        session: boto3.session.Session | None = None,
    ) -> Clients:
        """Clients for the region and endpoint of ``environ`` (default: the process environment).

        With an explicit ``environ`` (``trainctl submit --local``, tests) the
        region, credentials and ``AWS_ENDPOINT_URL`` are taken from it rather
        than from the process, so several emulators can be used side by side.
        Without ``session`` (a boto3 ``Session``) the clients share one
        botocore data loader with :mod:`.sagemaker_rules`, so the SageMaker
        model is parsed once per process. Every client gets the deadline hooks.
        """
        config = client_config(environ)
        kwargs = client_kwargs(environ)
        if session is not None:
            clients = cls(
                sagemaker=session.client("sagemaker", config=config, **kwargs),
                ssm=session.client("ssm", config=config, **kwargs),
                s3=session.client("s3", config=config, **kwargs),
            )
        else:
            import botocore.session

            core = botocore.session.Session()
            core.register_component("data_loader", shared_loader())
            # botocore builds each service's client from its model at run time (a BaseClient to the type
            # checker); what it builds is the service's client, whose type boto3-stubs declare
            clients = cls(
                sagemaker=cast("SageMakerClient", core.create_client("sagemaker", config=config, **kwargs)),
                ssm=cast("SSMClient", core.create_client("ssm", config=config, **kwargs)),
                s3=cast("S3Client", core.create_client("s3", config=config, **kwargs)),
            )
        for client in (clients.sagemaker, clients.ssm, clients.s3):
            install_deadline_hooks(client)
        return clients

    @property
    def parameters(self) -> SSMProvider:
        """Powertools ``SSMProvider`` over :attr:`ssm` (its cache lives as long as these clients)."""
        if self._parameters is None:
            from aws_lambda_powertools.utilities.parameters import SSMProvider

            self._parameters = SSMProvider(boto3_client=self.ssm)
        return self._parameters


NOT_FOUND_CODES = ("ValidationException", "ResourceNotFound")
"""Error codes of SageMaker's ``Describe*`` calls for a name no resource has: ``DescribeTrainingJob`` answers
``ValidationException``, ``DescribeTrainingPlan`` ``ResourceNotFound``."""


def error_code(exc: BaseException | None) -> str | None:
    """The AWS error code of a botocore ``ClientError`` (``None`` for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return code if isinstance(code, str) else None
    return None


def error_message(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Message", "")) or str(exc)
    return str(exc)
