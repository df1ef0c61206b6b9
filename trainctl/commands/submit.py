"""``trainctl submit REQUEST.json``: submit a training job through the job submitter.

Two ways, same code:

* ``--function NAME``: invoke the deployed submitter function (synchronous
  Lambda ``Invoke``) with the request as the event;
* ``--local``: run the submitter's handler code in this process, against the
  AWS endpoint of the environment (``AWS_ENDPOINT_URL``, e.g. from
  ``trainctl local-aws --env-file``) and the function's settings read from
  the environment exactly as the deployed function reads them.

Prints the response JSON on stdout (logs and EMF metrics of ``--local`` go
to stderr). Exit status: 0 submitted / validated, 1 rejected, 2 the function
failed or the request file is unreadable.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

HELP = "Submit a training job request (JSON) to the job submitter: the deployed function or, with --local, in-process."

_LOCAL_CACHE: dict[tuple[tuple[str, str], ...], tuple[Any, Any]] = {}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("request", metavar="REQUEST.json", help="the request (a JSON object); '-' reads stdin")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--function", metavar="NAME", help="invoke the deployed submitter function NAME (or ARN)")
    where.add_argument(
        "--local",
        action="store_true",
        help="run the handler in-process against AWS_ENDPOINT_URL (source the env file of `trainctl local-aws`)",
    )
    parser.add_argument("--dry-run", action="store_true", help="validate, choose capacity and estimate; create nothing")
    parser.add_argument("--region", help="AWS region for --function (default: the environment's)")


def run(args: argparse.Namespace) -> int:
    import os

    try:
        text = sys.stdin.read() if args.request == "-" else open(args.request, encoding="utf-8").read()
        request = json.loads(text)
    except (OSError, json.JSONDecodeError) as exc:
        print(f"trainctl submit: cannot read {args.request}: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        if not isinstance(request, dict):
            print("trainctl submit: the request must be a JSON object", file=sys.stderr)
            return 2
        request["dry_run"] = True
    if args.local:
        if not os.environ.get("AWS_ENDPOINT_URL"):
            # --local is for the emulator: never let leftover credentials create real jobs.
            print(
                "trainctl submit --local: AWS_ENDPOINT_URL is not set; start `trainctl local-aws --env-file FILE` "
                "and `source FILE` first (use --function NAME for the deployed submitter)",
                file=sys.stderr,
            )
            return 2
        import botocore.exceptions

        from trainctl.submitter_runtime import load

        try:
            response = submit_local(request, dict(os.environ))
        except (load("errors").ConfigurationError, botocore.exceptions.NoRegionError) as exc:
            print(f"trainctl submit --local: {exc} (source the env file of `trainctl local-aws`)", file=sys.stderr)
            return 2
    else:
        try:
            response = invoke_function(args.function, request, region=args.region)
        except FunctionError as exc:
            print(f"trainctl submit: the function failed: {exc}", file=sys.stderr)
            return 2
    print(json.dumps(response, indent=2))
    return 0 if response.get("status") in ("submitted", "validated") else 1


def submit_local(request: Any, env: Mapping[str, str]) -> dict[str, Any]:
    """Run the submitter's handler in-process with ``env`` as the function's environment.

    ``env`` supplies ``AWS_ENDPOINT_URL``, region, credentials and the
    submitter's settings (e.g. :attr:`trainctl.local_aws.LocalAws.env`);
    the process environment is not modified. Clients are reused for the same
    ``env`` (like a warm function).

    Returns:
        The response (JSON-serialisable), e.g. ``{"status": "submitted", ...}``.

    Raises:
        botocore.exceptions.ClientError: persistent AWS faults (as the function would).
        ConfigurationError: ``env`` lacks a setting.
    """
    import contextlib
    import logging

    from trainctl.submitter_runtime import load

    handler = load("handler")
    key = tuple(sorted(env.items()))
    if key not in _LOCAL_CACHE:
        aws, config = load("aws"), load("config")
        settings = config.SubmitterConfig.from_environ(env)  # the clearer error first: a missing setting
        _LOCAL_CACHE[key] = (aws.Clients.create(environ=env), settings)
    clients, config = _LOCAL_CACHE[key]
    # stdout carries the response: the handler's JSON logs and EMF metrics go to this call's
    # stderr, and the log handlers get their own streams back afterwards, so they never keep a
    # stream that the caller may close later (pytest's capture, a sweep's log file). The streams
    # are swapped by assignment: StreamHandler.setStream would flush, and fail on, a closed one.
    streams = [(h, h.stream) for h in handler.logger.handlers if isinstance(h, logging.StreamHandler)]
    _set_streams([(h, sys.stderr) for h, _ in streams])
    try:
        with contextlib.redirect_stdout(sys.stderr):
            response = handler.handle(request, clients=clients, config=config)
    finally:
        _set_streams(streams)
    return json.loads(json.dumps(response, default=str))


def _set_streams(pairs: Any) -> None:
    for log_handler, stream in pairs:
        with log_handler.lock:
            log_handler.stream = stream


class FunctionError(RuntimeError):
    """The deployed function raised (its error payload is the message)."""


def invoke_function(name: str, request: Any, *, region: str | None = None) -> dict[str, Any]:
    """Invoke the deployed submitter ``name`` synchronously with ``request``; returns its response.

    Raises:
        FunctionError: the function failed (unhandled error, timeout).
        botocore.exceptions.ClientError: Lambda refused the invocation.
    """
    import boto3

    client = boto3.client("lambda", region_name=region)
    answer = client.invoke(FunctionName=name, InvocationType="RequestResponse", Payload=json.dumps(request).encode())
    payload = answer["Payload"].read().decode()
    if answer.get("FunctionError"):
        raise FunctionError(payload)
    return json.loads(payload)
