"""The caller's side of the job submitter: send one request, get one answer, never two jobs.

Two ways to reach the submitter, used by ``trainctl submit``, ``trainctl sweep``
and the demo:

* :func:`invoke_function`: the deployed function, by a synchronous Lambda
  ``Invoke`` (``InvocationType=RequestResponse``);
* :func:`submit_local`: the function's handler in this process, against the
  AWS emulator (``AWS_ENDPOINT_URL``; see :mod:`devtools.local_aws`). It
  refuses to run without ``AWS_ENDPOINT_URL`` (:func:`require_local_endpoint`),
  so leftover credentials never create real jobs from a laptop.

Sending a request at most once
------------------------------

A synchronous ``Invoke`` whose answer is lost (read timeout, connection
closed) may have run the function, and a function that ran has created its
job. botocore retries exactly those faults by default, and its default read
timeout is 60 s, so a submitter answering after 65 s was invoked three times,
each invocation creating its own job (the behaviour reported in
boto/boto3#883 and #1104). Therefore:

* the Lambda client makes one attempt (``retries={"total_max_attempts": 1}``);
* its read timeout, :data:`DEFAULT_INVOKE_READ_TIMEOUT_S`, exceeds any
  function's timeout: :data:`LAMBDA_MAX_TIMEOUT_S` (900 s, Lambda's maximum,
  https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html)
  plus :data:`INVOKE_READ_TIMEOUT_MARGIN_S`. Lambda itself ends a synchronous
  invocation at the function's own timeout with a function error, so this
  ceiling is reached only when the answer is lost. A fixed ceiling was chosen
  over reading the function's ``Timeout`` with ``GetFunctionConfiguration``:
  callers are granted ``lambda:InvokeFunction`` only (``grant_invoke``), and
  it saves a call;
* a request with neither ``job_name`` nor ``client_token`` gets a generated
  ``client_token`` (:func:`with_client_token`) before it is sent, so the one
  retry a person makes after a lost answer (with that token) returns the job
  the first invocation created instead of creating another.

Errors
------

Everything that keeps a request from getting an answer is a
:class:`SubmitError` whose message is one line naming what failed and what to
do; :attr:`SubmitError.may_have_run` says whether the submitter may have
received the request (then retry with the same ``client_token``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import sys
import uuid
from collections.abc import Mapping
from typing import Any

LAMBDA_MAX_TIMEOUT_S = 900
"""Lambda's maximum function timeout, seconds (https://docs.aws.amazon.com/lambda/latest/dg/configuration-timeout.html)."""

INVOKE_READ_TIMEOUT_MARGIN_S = 60
"""Seconds added to :data:`LAMBDA_MAX_TIMEOUT_S` for the answer to travel back."""

DEFAULT_INVOKE_READ_TIMEOUT_S = LAMBDA_MAX_TIMEOUT_S + INVOKE_READ_TIMEOUT_MARGIN_S
"""Read timeout of the synchronous ``Invoke``, seconds (960)."""

MAX_INVOKE_READ_TIMEOUT_S = 3600
"""The longest ``--read-timeout``, seconds: four times :data:`LAMBDA_MAX_TIMEOUT_S`. Lambda ends a
synchronous invocation at the function's timeout, so a longer wait only hides a lost answer."""

INVOKE_CONNECT_TIMEOUT_S = 10
"""Connect timeout of the Lambda client, seconds (nothing has been sent when it fires)."""

GENERATED_TOKEN_PREFIX = "trainctl-"
"""Prefix of a generated ``client_token`` (then a UUID4: 45 characters, within the submitter's 1-128)."""

LAMBDA_FUNCTION_ARN_RE = re.compile(
    r"arn:(?P<partition>aws[a-zA-Z-]*):lambda:(?P<region>[a-z]{2}(?:-[a-z]+)+-[0-9]+):(?P<account>[0-9]{12}):"
    r"function:(?P<name>[a-zA-Z0-9_-]+)(?::(?P<qualifier>[a-zA-Z0-9$_-]+))?"
)
"""A Lambda function ARN (Lambda's ``FunctionName`` pattern, full-ARN form); match it whole (``fullmatch``)."""

_LOCAL_CACHE: dict[tuple[tuple[str, str], ...], tuple[Any, Any, tuple[str, ...] | None]] = {}


class SubmitError(RuntimeError):
    """A request got no answer from the submitter.

    The message is one line: what failed, and what to do.

    Attributes:
        may_have_run: the submitter may have received the request (an answer
            lost, a function error, a persistent fault half-way): a retry must
            carry the same ``client_token`` (or ``job_name``) to get that job
            back rather than a second one. ``False``: nothing was sent or
            nothing ran (no region, credentials or endpoint; throttled; not
            found; not allowed).
        unavailable: the same error would answer every request (endpoint,
            credentials, permissions, function name): callers sending many
            requests (a sweep) stop at the first.
    """

    def __init__(self, message: str, *, may_have_run: bool, unavailable: bool = False) -> None:
        super().__init__(message)
        self.may_have_run = may_have_run
        self.unavailable = unavailable


class FunctionError(SubmitError):
    """The deployed function raised (unhandled error or timeout); the message is its ``errorType: errorMessage``."""

    def __init__(self, message: str) -> None:
        super().__init__(message, may_have_run=True)


class LocalEndpointRequired(SubmitError):
    """In-process submission without ``AWS_ENDPOINT_URL``: it would use the environment's credentials against real AWS."""

    def __init__(self, message: str) -> None:
        super().__init__(message, may_have_run=False, unavailable=True)


# --- the request ---------------------------------------------------------------------------------


def with_client_token(request: Mapping[str, Any], client_token: str | None = None) -> tuple[dict[str, Any], str | None]:
    """``request`` with the ``client_token`` it will be sent with.

    * ``client_token`` given: it is set (the request may carry the same one);
    * else a request with neither ``job_name`` nor ``client_token`` (absent or
      ``null``, which the submitter reads as absent) that is not a dry run gets
      a generated one, :data:`GENERATED_TOKEN_PREFIX` + UUID4;
    * else the request is unchanged (``job_name`` is its idempotency key; a
      dry run creates nothing; a ``run`` is keyed by its ``run_id`` and names
      its jobs itself; a job-API ``action`` other than ``submit`` creates no
      job). A value the caller gave is never replaced,
      even an empty or malformed one: the submitter refuses it
      (``InvalidRequest`` naming the field).

    Returns:
        ``(copy of the request, the generated token or None)``.

    Raises:
        ValueError: ``client_token`` differs from the request's own.
    """
    out = dict(request)
    if client_token is not None:
        own = out.get("client_token")
        if own is not None and own != client_token:
            raise ValueError(
                f"client_token: the request carries {own!r} and --client-token is {client_token!r}; "
                "expected one token (drop one of them)"
            )
        out["client_token"] = client_token
        return out, None
    if (
        out.get("dry_run") is True
        or out.get("job_name") is not None
        or out.get("client_token") is not None
        or out.get("run") is not None
        or out.get("action", "submit") != "submit"
    ):
        return out, None
    token = f"{GENERATED_TOKEN_PREFIX}{uuid.uuid4()}"
    out["client_token"] = token
    return out, token


# --- the deployed function -----------------------------------------------------------------------


def function_region(function: str, region: str | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The region to invoke ``function`` in, or None for botocore's own chain (its config file).

    Order: ``region`` (``--region``); the region of ``function`` when it is a
    function ARN; ``AWS_REGION``; ``AWS_DEFAULT_REGION``. ``AWS_REGION`` is
    read here because botocore reads only ``AWS_DEFAULT_REGION`` while the
    other AWS SDKs and the CLI v2 read ``AWS_REGION`` first
    (https://docs.aws.amazon.com/sdkref/latest/guide/feature-region.html).

    Raises:
        SubmitError: ``region`` differs from the region of the function ARN.
    """
    env = os.environ if environ is None else environ
    match = LAMBDA_FUNCTION_ARN_RE.fullmatch(function)
    arn_region = match.group("region") if match else None
    if region and arn_region and region != arn_region:
        raise SubmitError(
            f"--function {function} is in {arn_region} but --region is {region}; expected the same region "
            f"(drop --region, or pass the function's name)",
            may_have_run=False,
            unavailable=True,
        )
    return region or arn_region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None


def lambda_client(
    function: str,
    *,
    region: str | None = None,
    read_timeout: float = DEFAULT_INVOKE_READ_TIMEOUT_S,
    environ: Mapping[str, str] | None = None,
    session: Any = None,
) -> Any:
    """A Lambda client for invoking ``function``: one attempt, ``read_timeout`` seconds to answer.

    The region is :func:`function_region`'s; ``AWS_ENDPOINT_URL`` (or
    ``AWS_ENDPOINT_URL_LAMBDA``) and credentials come from ``environ`` when
    given (e.g. :attr:`devtools.local_aws.client.LocalAws.env`), else from botocore's
    usual chain; ``session``: a boto3 session to make the client from (its
    credentials, profile and endpoints; its region when none of the above is
    set). Credentials are resolved here, so a missing one fails before
    anything is sent.

    Raises:
        SubmitError: no region, no credentials, an unknown profile, an endpoint URL that is
            not one (``AWS_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_LAMBDA`` or the profile's), or a
            ``read_timeout`` that is not a number of seconds in (0, :data:`MAX_INVOKE_READ_TIMEOUT_S`].
    """
    import boto3
    import botocore.exceptions
    from botocore.config import Config

    problem = read_timeout_problem(read_timeout)
    if problem is not None:
        raise SubmitError(f"read timeout {read_timeout!r}: {problem}", may_have_run=False, unavailable=True)
    resolved = function_region(function, region, environ)
    endpoint: str | None = None
    try:
        if session is not None:  # the caller's boto3 session (trainctl.sdk): its credentials, profile and endpoints
            resolved = resolved or session.region_name
        elif environ is None:  # the process environment, through botocore's own chain (AWS_ENDPOINT_URL included)
            session = boto3.session.Session(region_name=resolved)
        else:
            session = boto3.session.Session(
                aws_access_key_id=environ.get("AWS_ACCESS_KEY_ID"),
                aws_secret_access_key=environ.get("AWS_SECRET_ACCESS_KEY"),
                aws_session_token=environ.get("AWS_SESSION_TOKEN"),
                region_name=resolved,
            )
            endpoint = environ.get("AWS_ENDPOINT_URL_LAMBDA") or environ.get("AWS_ENDPOINT_URL") or None
        if resolved is None and session.region_name is None:
            raise SubmitError(
                "no AWS region: pass --region, set AWS_REGION, or give the function's ARN",
                may_have_run=False,
                unavailable=True,
            )
        credentials = session.get_credentials()
        if credentials is None:
            raise SubmitError(
                "no AWS credentials found (environment, shared credentials/config files, SSO, instance role); "
                "configure them, e.g. `aws configure` or AWS_PROFILE",
                may_have_run=False,
                unavailable=True,
            )
        config = Config(
            retries={"mode": "standard", "total_max_attempts": 1},
            read_timeout=read_timeout,
            connect_timeout=INVOKE_CONNECT_TIMEOUT_S,
        )
        return session.client("lambda", region_name=resolved, config=config, endpoint_url=endpoint)
    except botocore.exceptions.BotoCoreError as exc:  # ProfileNotFound, a broken config file, SSO without a token
        raise SubmitError(f"cannot set up AWS access: {exc}", may_have_run=False, unavailable=True) from None
    except ValueError as exc:  # botocore's "Invalid endpoint: ..." for an endpoint URL that is not one
        raise SubmitError(
            f"cannot set up AWS access: {exc} (from AWS_ENDPOINT_URL_LAMBDA, AWS_ENDPOINT_URL or the profile's "
            "endpoint_url); expected a URL such as https://lambda.us-west-2.amazonaws.com",
            may_have_run=False,
            unavailable=True,
        ) from None


def read_timeout_problem(seconds: Any) -> str | None:
    """What is wrong with ``seconds`` as the invocation's read timeout, or ``None``: a finite number of
    seconds above 0 and at most :data:`MAX_INVOKE_READ_TIMEOUT_S`."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
        return f"expected a finite number of seconds, > 0 and <= {MAX_INVOKE_READ_TIMEOUT_S}"
    if not 0 < seconds <= MAX_INVOKE_READ_TIMEOUT_S:
        return f"expected seconds > 0 and <= {MAX_INVOKE_READ_TIMEOUT_S}"
    return None


def invoke_function(
    name: str,
    request: Any,
    *,
    region: str | None = None,
    read_timeout: float = DEFAULT_INVOKE_READ_TIMEOUT_S,
    client: Any = None,
) -> dict[str, Any]:
    """Invoke the deployed submitter ``name`` (name or ARN) once, synchronously, with ``request``.

    Args:
        region: see :func:`function_region`.
        read_timeout: seconds to wait for the answer (default
            :data:`DEFAULT_INVOKE_READ_TIMEOUT_S`, above any function's timeout).
        client: a client from :func:`lambda_client` (made for this call when None).

    Returns:
        The function's response, e.g. ``{"status": "submitted", ...}``.

    Raises:
        FunctionError: the function raised or timed out.
        SubmitError: Lambda refused the invocation, or its answer never came back.
    """
    import botocore.exceptions

    client = client if client is not None else lambda_client(name, region=region, read_timeout=read_timeout)
    endpoint = client.meta.endpoint_url
    where = f"{name} ({client.meta.region_name})"
    try:
        answer = client.invoke(
            FunctionName=name, InvocationType="RequestResponse", Payload=json.dumps(request).encode()
        )
        payload = answer["Payload"].read()
    except botocore.exceptions.ClientError as exc:
        raise _invoke_refusal(exc, where) from None
    except botocore.exceptions.ReadTimeoutError:
        timeout = client.meta.config.read_timeout
        raise SubmitError(
            f"no answer from {where} within {timeout:g} s; the function may still be running and may create the job",
            may_have_run=True,
        ) from None
    except botocore.exceptions.ConnectionError as exc:  # nothing was sent: connect refused / timed out, DNS, TLS, proxy
        raise SubmitError(f"cannot reach Lambda at {endpoint}: {exc}", may_have_run=False, unavailable=True) from None
    except botocore.exceptions.HTTPClientError as exc:  # the connection broke after the request went out
        raise SubmitError(
            f"the connection to {endpoint} broke before {name} answered: {exc}", may_have_run=True
        ) from None
    except botocore.exceptions.BotoCoreError as exc:
        raise SubmitError(f"invoking {where} failed: {exc}", may_have_run=True) from None
    try:
        response = json.loads(payload.decode("utf-8"))
    except ValueError:
        text = payload[:200].decode("utf-8", "replace")
        raise SubmitError(f"{where} answered something that is not JSON: {text!r}", may_have_run=True) from None
    if answer.get("FunctionError"):
        detail = response if isinstance(response, dict) else {}
        message = " ".join(str(detail.get("errorMessage", response)).split())
        raise FunctionError(f"{where} failed: {detail.get('errorType', answer['FunctionError'])}: {message}")
    if not isinstance(response, dict):
        raise SubmitError(f"{where} answered a JSON {type(response).__name__}, expected an object", may_have_run=True)
    return response


def _invoke_refusal(exc: Any, where: str) -> SubmitError:
    """The :class:`SubmitError` for Lambda's error answer to ``Invoke``."""
    error = exc.response.get("Error", {})
    code = error.get("Code", "Unknown")
    message = " ".join(str(error.get("Message") or "").split())
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
    said = f"{code}: {message}" if message else code
    if code == "ResourceNotFoundException":
        return SubmitError(
            f"function {where} not found ({said}); expected the stack output SubmitterFunctionName, in its region",
            may_have_run=False,
            unavailable=True,
        )
    if code in ("AccessDeniedException", "AccessDenied") or status == 403:
        return SubmitError(
            f"not allowed to invoke {where} ({said}); the stack's invokerPrincipals grant lambda:InvokeFunction",
            may_have_run=False,
            unavailable=True,
        )
    if code in ("TooManyRequestsException", "ThrottlingException") or status == 429:
        return SubmitError(f"Lambda throttled {where} and did not run it ({said}); try again later", may_have_run=False)
    if status >= 500:
        return SubmitError(f"Lambda failed invoking {where} (HTTP {status} {said})", may_have_run=True)
    return SubmitError(f"Lambda refused to invoke {where} (HTTP {status} {said})", may_have_run=False)


# --- in process, against the emulator ------------------------------------------------------------


def require_local_endpoint(env: Mapping[str, str]) -> str:
    """``env``'s ``AWS_ENDPOINT_URL``: in-process submission creates resources with ``env``'s credentials,
    so it runs only against an endpoint the user chose (the emulator's).

    Raises:
        LocalEndpointRequired: ``AWS_ENDPOINT_URL`` is not set.
    """
    endpoint = env.get("AWS_ENDPOINT_URL") or ""
    if not endpoint:
        raise LocalEndpointRequired(
            "AWS_ENDPOINT_URL is not set; in-process submission runs only against the emulator: start "
            "`trainctl local-aws --env-file FILE` and `source FILE` first (use --function NAME for the deployed submitter)"
        )
    return endpoint


def submit_local(request: Any, env: Mapping[str, str], *, timeout_s: float | None = None) -> dict[str, Any]:
    """Run the submitter's handler in-process with ``env`` as the function's environment.

    ``env`` supplies ``AWS_ENDPOINT_URL`` (required), region, credentials and
    the submitter's settings (e.g. :attr:`devtools.local_aws.client.LocalAws.env`);
    the process environment is not modified. It answers what the function with
    that environment answers: with the reader's ``SUBMITTER_ALLOWED_ACTIONS``
    (``describe,list,list_runs``) a submission is refused ``ActionNotAllowed``,
    as the deployed reader refuses it. Clients are reused for the same
    ``env`` (like a warm function). Throttling and 5xx answers are retried by
    botocore as in the function (``AWS_MAX_ATTEMPTS``).

    The call has the deployed function's time: the handler gets a deadline
    ``timeout_s`` from the start of the call, as Lambda's context gives it
    the invocation's remaining time, so its AWS calls stop in time and it
    answers ``DeadlineExceeded`` rather than waiting on a stalled endpoint.

    Args:
        request: the request (the function's event).
        env: the function's environment.
        timeout_s: seconds the call may take. Default: the deployed function's
            default timeout, ``settings.FUNCTION_TIMEOUT_S`` of the runtime (60 s).

    Returns:
        The response (JSON-serialisable), e.g. ``{"status": "submitted", ...}``.

    Raises:
        LocalEndpointRequired: ``env`` has no ``AWS_ENDPOINT_URL``.
        ConfigurationError: ``env`` lacks a submitter setting, or its ``SUBMITTER_ALLOWED_ACTIONS`` is blank or
            names no action (the runtime's ``errors.ConfigurationError``).
        FunctionError: the handler raised what the deployed function reports as a function
            error: ``DeadlineExceeded``, ``IdempotencyRecordError`` (a client-token record that
            cannot be read), or any other exception; its message is ``errorType: errorMessage``.
        SubmitError: the endpoint is unreachable or not a URL, no region or credentials, or
            an AWS fault persisted (the function would raise).
    """
    import botocore.exceptions

    from platform_constructs.submitter.runtime import actions, aws, config, errors, handler, settings

    endpoint = require_local_endpoint(env)
    deadline = aws.Deadline(settings.FUNCTION_TIMEOUT_S if timeout_s is None else timeout_s)
    key = tuple(sorted(env.items()))
    try:
        if key not in _LOCAL_CACHE:
            submitter_config = config.SubmitterConfig.from_environ(env)  # the clearer error first: a missing setting
            allowed = actions.allowed_actions_from_environ(env)
            try:
                _LOCAL_CACHE[key] = (aws.Clients.create(environ=env), submitter_config, allowed)
            except ValueError as exc:  # botocore's "Invalid endpoint: ..."
                raise SubmitError(
                    f"cannot set up AWS access: {exc} (AWS_ENDPOINT_URL); expected the emulator's URL, "
                    "e.g. http://127.0.0.1:5000",
                    may_have_run=False,
                    unavailable=True,
                ) from None
        clients, submitter_config, allowed = _LOCAL_CACHE[key]
        # stdout carries the response: the handler's JSON logs and EMF metrics go to this call's
        # stderr, and the log handlers get their own streams back afterwards, so they never keep a
        # stream that the caller may close later (pytest's capture, a sweep's log file). The streams
        # are swapped by assignment: StreamHandler.setStream would flush, and fail on, a closed one.
        streams = [(h, h.stream) for h in handler.logger.handlers if isinstance(h, logging.StreamHandler)]
        _set_streams([(h, sys.stderr) for h, _ in streams])
        try:
            with contextlib.redirect_stdout(sys.stderr):
                response = handler.handle(
                    request, clients=clients, config=submitter_config, allowed_actions=allowed, deadline=deadline
                )
        finally:
            _set_streams(streams)
    except botocore.exceptions.ClientError as exc:
        error = exc.response.get("Error", {})
        attempts = exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) + 1
        raise SubmitError(
            f"{exc.operation_name} answered {error.get('Code', 'Unknown')}: {error.get('Message', '')} "
            f"(after {attempts} attempt{'s' if attempts > 1 else ''})",
            may_have_run=True,
        ) from None
    except botocore.exceptions.NoRegionError:
        raise SubmitError(
            "no AWS region: set AWS_REGION (the env file of `trainctl local-aws` does)",
            may_have_run=False,
            unavailable=True,
        ) from None
    except (botocore.exceptions.NoCredentialsError, botocore.exceptions.PartialCredentialsError) as exc:
        raise SubmitError(
            f"no AWS credentials ({exc}); the env file of `trainctl local-aws` sets the emulator's",
            may_have_run=False,
            unavailable=True,
        ) from None
    except botocore.exceptions.ConnectionError as exc:
        raise SubmitError(
            f"cannot reach AWS_ENDPOINT_URL {endpoint} ({exc}); is `trainctl local-aws` running?",
            may_have_run=False,
            unavailable=True,
        ) from None
    except botocore.exceptions.BotoCoreError as exc:
        raise SubmitError(f"the submitter failed: {exc}", may_have_run=True) from None
    except SubmitError:
        raise
    except Exception as exc:
        if isinstance(exc, errors.ConfigurationError):  # a broken setting (callers name the fix)
            raise
        # What the deployed function reports as a function error (errorType: errorMessage), in one line.
        message = " ".join(str(exc).split())
        raise FunctionError(f"the submitter failed: {type(exc).__name__}: {message}") from None
    return json.loads(json.dumps(response, default=str))


def send(
    request: Any,
    *,
    local: bool,
    function: str | None,
    region: str | None = None,
    read_timeout: float = DEFAULT_INVOKE_READ_TIMEOUT_S,
) -> dict[str, Any]:
    """Send ``request`` to the submitter the way ``trainctl`` commands choose it: with ``local``, its handler in
    this process against the environment's emulator (:func:`submit_local` with ``os.environ``); else the
    deployed ``function`` (:func:`invoke_function`, one invocation).

    Raises:
        what :func:`submit_local` or :func:`invoke_function` raise.
    """
    if local:
        return submit_local(request, dict(os.environ))
    if not function:
        raise ValueError("function: expected the submitter function's name or ARN (or local)")
    return invoke_function(function, request, region=region, read_timeout=read_timeout)


def _set_streams(pairs: Any) -> None:
    for log_handler, stream in pairs:
        with log_handler.lock:
            log_handler.stream = stream


__all__ = [
    "DEFAULT_INVOKE_READ_TIMEOUT_S",
    "LAMBDA_MAX_TIMEOUT_S",
    "MAX_INVOKE_READ_TIMEOUT_S",
    "FunctionError",
    "LocalEndpointRequired",
    "SubmitError",
    "function_region",
    "invoke_function",
    "lambda_client",
    "read_timeout_problem",
    "require_local_endpoint",
    "send",
    "submit_local",
    "with_client_token",
]
