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
stderr); every failure is one line on stderr. This module parses the
arguments; :mod:`trainctl.submit_request` sends and prints. Exit status
(:data:`trainctl.submit_request.EXIT_SUBMITTED`, ``EXIT_REJECTED``, ``EXIT_FAILED``):

* 0: submitted, or validated (``--dry-run``), or answered (a job-API request with an ``action``:
  ``describe``, ``list``, ``stop``, ``list_runs``);
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

HELP = "Submit a training job request (JSON) to the job submitter: the deployed function or, with --local, in-process."


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
        "--region",
        help="AWS region for --function (default: the function ARN's, else AWS_REGION, else AWS_DEFAULT_REGION)",
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


def run(args: argparse.Namespace) -> int:
    from trainctl.submit_request import submit_and_print

    return submit_and_print(
        args.request,
        local=args.local,
        function=args.function,
        dry_run=args.dry_run,
        client_token=args.client_token,
        region=args.region,
        read_timeout=args.read_timeout,
    )
