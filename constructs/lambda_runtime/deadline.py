"""botocore's retries, bounded by the invocation's deadline: the platform's one mechanism for it.

**Retries.** Throttling and 5xx answers are retried by botocore itself
(``standard`` mode by default: exponential backoff with jitter and a retry
quota; ``adaptive`` adds client-side rate limiting). When they persist,
botocore raises the last ``ClientError``. ``AWS_RETRY_MODE`` and
``AWS_MAX_ATTEMPTS`` override the defaults, as for any AWS SDK
(:func:`client_config`).

**Deadline.** A client's ``Config`` (timeouts, attempts) is fixed when the
client is made, but an invocation has only the time Lambda gives it
(``context.get_remaining_time_in_millis()``). Without a bound, one call
against an endpoint that accepts the connection and never answers lives
``attempts x (connect + read timeout) + backoff`` (5 x 25 s + backoff with
the observability functions' former fixed configuration, against their 60 s
and 30 s timeouts) and Lambda kills the function mid-call. :class:`Deadline`
is the invocation's end; while one is active (:func:`deadline_scope`), two
hooks on every client's event system (:func:`install_deadline_hooks`) keep
each call inside it:

* ``before-send``: an attempt starts only if ``connect timeout + 1 s`` of read
  time (:data:`MIN_READ_TIMEOUT_S`) fits before the deadline less
  :data:`DEADLINE_RESERVE_S` (kept to log and answer); its read timeout is cut
  to what is left (botocore's per-request ``read_timeout``);
* ``needs-retry`` (first in line): a retry that botocore's standard rules
  would make is made only if its worst-case backoff plus such an attempt fits.

Otherwise :class:`DeadlineExceeded` (the deadline's :attr:`Deadline.error_type`)
is raised. It says what is known: that the call was not sent, or that attempt
N was sent and what became of it (:func:`attempt_outcome`: no answer in time,
or AWS's answer), so a write whose answer was lost is reported as "may have
taken effect", never as "nothing was sent". Each function names what its
writes may have done and what a retry does (a subclass of
:class:`DeadlineExceeded`, raised through a subclass of :class:`Deadline`).
Client-side parameter validation (botocore's ``parameter_validation``) stays
on: a misspelt or mistyped field fails before it leaves the function.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

from botocore.config import Config

if TYPE_CHECKING:  # botocore-stubs, for the type checker only: the Lambda packages do not carry them
    from botocore.client import BaseClient
    from botocore.retries.standard import RetryEventAdapter, StandardRetryConditions

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
"""Read timeout per attempt (cut further by the deadline). The SageMaker, SSM, S3, CloudWatch and
DynamoDB calls the functions make answer within seconds; botocore's default is 60 s."""
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


# --- what is raised ---------------------------------------------------------------------------


class DeadlineExceeded(RuntimeError):
    """Too little of the invocation's time is left for the next AWS call; answered as a function error.

    Raised before the call (or before botocore's next retry) rather than
    letting Lambda kill the function mid-call. Lambda reports it as
    ``{"errorType": "DeadlineExceeded", "errorMessage": ...}``; the message
    says what is known: whether ``operation`` was sent at all and, when an
    attempt was sent, what became of it (no answer in time, or AWS's answer)
    and whether it may have taken effect, then what a retry does
    (:attr:`RETRY`). A function's subclass (keeping this class name, Lambda's
    ``errorType``) sets :attr:`EFFECTS` and :attr:`RETRY`.

    Attributes:
        operation: the AWS operation that was not (re)tried, e.g. ``sagemaker.CreateTrainingJob``.
        remaining_s: seconds of the invocation left when it was raised.
        needed_s: seconds the operation needed (connect timeout + least read time + reserve,
            plus the worst-case backoff for a retry).
        attempts_sent: attempts of ``operation`` already sent by this call (0: it was never sent).
        last_attempt: what became of the last attempt sent (``None`` when none was), e.g.
            ``"its answer was not received in time (ReadTimeoutError)"``.
        may_have_taken_effect: the last attempt sent may have been carried out by AWS (no
            answer, or a server fault).
        retriable: always ``True``.
    """

    retriable = True
    EFFECTS: ClassVar[Mapping[str, str]] = {}
    """What an unanswered call of an operation (by its name, e.g. ``PutMetricData``) may have done; an
    operation not named here says ``<name> may have taken effect``, unless it is a read (:data:`READS`)."""
    RETRY: ClassVar[str] = "Retriable: the invocation may be run again."
    """The message's last sentence: what a retry of the invocation does."""
    READS: ClassVar[tuple[str, ...]] = ("Describe", "Get", "List", "Search", "Head")
    """Prefixes of the operations that only read (an unanswered read did nothing to report)."""

    def __init__(
        self,
        operation: str,
        *,
        remaining_s: float,
        needed_s: float,
        attempts_sent: int = 0,
        last_attempt: str | None = None,
        may_have_taken_effect: bool = False,
    ) -> None:
        self.operation = operation
        self.remaining_s = remaining_s
        self.needed_s = needed_s
        self.attempts_sent = attempts_sent
        self.last_attempt = last_attempt
        self.may_have_taken_effect = may_have_taken_effect
        name = operation.rsplit(".", 1)[-1]
        if attempts_sent == 0:
            known = f"too few for {operation} (needs {needed_s:.1f} s), so {name} was not sent"
        else:
            known = (
                f"too few for another attempt at {operation} (needs {needed_s:.1f} s): attempt {attempts_sent} "
                f"was sent and {last_attempt or 'its outcome is not known'}"
            )
            effect = self.EFFECTS.get(name, None if name.startswith(self.READS) else f"{name} may have taken effect")
            if may_have_taken_effect and effect:
                known += f"; {effect}"
        super().__init__(f"{remaining_s:.1f} s of this invocation remain, {known}. {self.RETRY}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild,
            (
                type(self),
                self.operation,
                self.remaining_s,
                self.needed_s,
                self.attempts_sent,
                self.last_attempt,
                self.may_have_taken_effect,
            ),
        )


def _rebuild(
    cls: type[DeadlineExceeded],
    operation: str,
    remaining_s: float,
    needed_s: float,
    attempts_sent: int,
    last_attempt: str | None,
    may_have_taken_effect: bool,
) -> DeadlineExceeded:
    return cls(
        operation,
        remaining_s=remaining_s,
        needed_s=needed_s,
        attempts_sent=attempts_sent,
        last_attempt=last_attempt,
        may_have_taken_effect=may_have_taken_effect,
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
        error_type: what :meth:`exceeded` makes (a function's subclass sets its own).
    """

    error_type: ClassVar[type[DeadlineExceeded]] = DeadlineExceeded

    def __init__(self, seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.at = clock() + seconds
        self.tripped = False
        self.error: DeadlineExceeded | None = None

    @classmethod
    def from_lambda_context(cls, context: Any) -> Self | None:
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

    def earlier(self, seconds: float) -> Self:
        """A deadline ``seconds`` before this one (same clock and error type), for work that must leave
        time for what follows it, e.g. a publish after the reads that feed it."""
        return type(self)(self.remaining() - seconds, clock=self.clock)

    def exceeded(
        self,
        operation: str,
        needed: float,
        *,
        attempts_sent: int = 0,
        last_attempt: str | None = None,
        may_have_taken_effect: bool = False,
    ) -> DeadlineExceeded:
        """A :attr:`error_type` for ``operation`` needing ``needed`` seconds (marks this deadline tripped).

        ``attempts_sent``, ``last_attempt``, ``may_have_taken_effect``: what is known of the
        attempts already sent (see :class:`DeadlineExceeded`).
        """
        self.tripped = True
        error = self.error_type(
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


_CURRENT: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar("invocation_deadline", default=None)


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
        unique_id=f"deadline-before-send-{service}",
    )
    client.meta.events.register_first(
        f"needs-retry.{service}",
        # ignored: botocore-stubs type every event handler as returning None, but a needs-retry handler
        # answers (None: no opinion; False: do not retry), as botocore/retryhandler.py's own do
        functools.partial(_needs_retry, connect, _retry_checker(attempts)),  # type: ignore[arg-type]
        unique_id=f"deadline-needs-retry-{service}",
    )


def _option(config: Config, name: str) -> Any:
    """An option of a botocore ``Config`` (set as attributes at run time; botocore-stubs declare none)."""
    return getattr(config, name)


def _operation(event_name: str) -> str:
    return ".".join(event_name.split(".")[1:3]) or event_name


_LAST_ATTEMPT = "deadline_last_attempt"
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


def error_code(exc: BaseException | None) -> str | None:
    """The AWS error code of a botocore ``ClientError`` (``None`` for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code")
        return code if isinstance(code, str) else None
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
