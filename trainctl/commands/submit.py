"""``trainctl submit REQUEST.json``: submit a training job through the job submitter.

Two ways, same code:

* ``--function NAME``: invoke the deployed submitter function (synchronous
  Lambda ``Invoke``, one attempt, a read timeout above any function's
  timeout; region from ``--region``, the function ARN, ``AWS_REGION`` or
  ``AWS_DEFAULT_REGION``);
* ``--local``: run the submitter's handler code in this process, against the
  AWS endpoint of the environment (``AWS_ENDPOINT_URL``, e.g. from
  ``trainctl local-aws --env-file``; refused without it) and the function's
  settings read from the environment exactly as the deployed function reads
  them, within the deployed function's default timeout (60 s: its AWS calls
  stop in time, and it fails with ``DeadlineExceeded`` as the function would).

A request with neither ``job_name`` nor ``client_token`` is sent with a
generated ``client_token``, printed on stderr before it is sent: if the answer
is lost, the same command with ``--client-token TOKEN`` returns the job the
first one created instead of creating a second (see
:mod:`trainctl.submitter_client`).

Prints the response JSON on stdout (logs and EMF metrics of ``--local`` go to
stderr); every failure is one line on stderr. Exit status
(:data:`EXIT_SUBMITTED`, :data:`EXIT_REJECTED`, :data:`EXIT_FAILED`):

* 0: submitted, or validated (``--dry-run``);
* 1: rejected by the submitter (the response says why; nothing was created);
* 2: no answer: the request file is unreadable (missing, not UTF-8, not a JSON
  object) or a flag is wrong; no region or credentials; the endpoint is
  unreachable or not a URL; Lambda refused the invocation (function not found,
  access denied, throttled, 5xx); an AWS fault persisted; or the function
  failed (deployed or ``--local``: ``DeadlineExceeded``, an unreadable
  client-token record, any other error), as ``errorType: errorMessage``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# The client functions live in a library (commands are not imported by libraries); kept importable from here.
from trainctl.submitter_client import FunctionError, SubmitError, invoke_function, submit_local  # noqa: F401

HELP = "Submit a training job request (JSON) to the job submitter: the deployed function or, with --local, in-process."

EXIT_SUBMITTED = 0
EXIT_REJECTED = 1
EXIT_FAILED = 2


def _read_timeout(text: str) -> float:
    """argparse type of ``--read-timeout``: a finite number of seconds in (0, MAX_INVOKE_READ_TIMEOUT_S]
    (``inf``, ``nan`` and ``1e400``, which is ``inf`` as a float, are refused)."""
    from trainctl.submitter_client import read_timeout_problem

    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    problem = read_timeout_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainctl.submitter_client import DEFAULT_INVOKE_READ_TIMEOUT_S, LAMBDA_MAX_TIMEOUT_S, MAX_INVOKE_READ_TIMEOUT_S

    parser.add_argument("request", metavar="REQUEST.json", help="the request (a JSON object, UTF-8); '-' reads stdin")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--function", metavar="NAME", help="invoke the deployed submitter function NAME (or ARN)")
    where.add_argument(
        "--local",
        action="store_true",
        help="run the handler in-process against AWS_ENDPOINT_URL (source the env file of `trainctl local-aws`)",
    )
    parser.add_argument("--dry-run", action="store_true", help="validate, choose capacity and estimate; create nothing")
    parser.add_argument(
        "--client-token",
        metavar="TOKEN",
        help="idempotency key (1-128 of A-Z a-z 0-9 . _ : / = + @ -): the same token returns the first job; "
        "default: the request's, else generated and printed when the request has no job_name",
    )
    parser.add_argument(
        "--region", help="AWS region for --function (default: the function ARN's, else AWS_REGION, else AWS_DEFAULT_REGION)"
    )
    parser.add_argument(
        "--read-timeout",
        type=_read_timeout,
        default=DEFAULT_INVOKE_READ_TIMEOUT_S,
        metavar="SECONDS",
        help=f"--function: seconds to wait for the answer, at most {MAX_INVOKE_READ_TIMEOUT_S} (default "
        f"{DEFAULT_INVOKE_READ_TIMEOUT_S}: Lambda's maximum function timeout, {LAMBDA_MAX_TIMEOUT_S} s, plus a margin); "
        "the invocation is never retried",
    )


def read_request(source: str) -> dict[str, Any]:
    """The request in file ``source`` (``-``: stdin): a JSON object in UTF-8 (a BOM is allowed).

    Raises:
        ValueError: one line naming the file and what is wrong with it.
    """
    name = "stdin" if source == "-" else source
    try:
        data = sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes()
    except OSError as exc:
        raise ValueError(f"cannot read {name}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); expected a JSON object") from None
    try:
        request = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(request, dict):
        raise ValueError(f"{name}: expected a JSON object (a submit request), got a JSON {type(request).__name__}")
    return request


def run(args: argparse.Namespace) -> int:
    import os

    from trainctl.submitter_client import with_client_token

    prog = "trainctl submit" + (" --local" if args.local else "")
    try:
        request = read_request(args.request)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if args.dry_run:
        request["dry_run"] = True
    try:
        request, generated = with_client_token(request, args.client_token)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if generated:
        # before sending: a person who loses the answer (or this process) still has the token
        print(f"{prog}: client_token {generated} (generated; to retry this request without a second job, "
              f"add --client-token {generated})", file=sys.stderr, flush=True)
    try:
        if args.local:
            response = submit_local(request, dict(os.environ))
        else:
            response = invoke_function(args.function, request, region=args.region, read_timeout=args.read_timeout)
    except SubmitError as exc:
        print(f"{prog}: {exc}{_retry_hint(exc, request)}", file=sys.stderr)
        return EXIT_FAILED
    except Exception as exc:
        if type(exc).__name__ != "ConfigurationError":  # the runtime's: a setting missing from the environment
            raise
        print(f"{prog}: {exc} (source the env file of `trainctl local-aws`)", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(response, indent=2))
    status = response.get("status")
    if status in ("submitted", "validated"):
        return EXIT_SUBMITTED
    if status == "rejected":
        return EXIT_REJECTED
    print(f"{prog}: the submitter answered status {status!r}; expected submitted, validated or rejected", file=sys.stderr)
    return EXIT_FAILED


def _retry_hint(exc: Any, request: dict[str, Any]) -> str:
    if not exc.may_have_run or request.get("dry_run") is True:
        return ""
    if request.get("client_token"):
        return f"; retry with --client-token {request['client_token']} to get its job, never a second one"
    if request.get("job_name"):
        return f"; retrying the same request is safe: its job_name {request['job_name']} finds the job if one was created"
    return ""
