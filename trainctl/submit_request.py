"""What ``trainctl submit`` does: read a request file, send it to the job submitter, print the answer.

Two ways, same code (:mod:`trainctl.submitter_client`): the deployed function
(a synchronous Lambda ``Invoke``, one attempt), or the submitter's handler in
this process against the environment's ``AWS_ENDPOINT_URL`` (the emulator's).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainctl.submitter_client import SubmitError

EXIT_SUBMITTED = 0
EXIT_REJECTED = 1
EXIT_FAILED = 2


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
        raise ValueError(
            f"{name} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); expected a JSON object"
        ) from None
    try:
        request = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(request, dict):
        raise ValueError(f"{name}: expected a JSON object (a submit request), got a JSON {type(request).__name__}")
    return request


def submit_and_print(
    source: str,
    *,
    local: bool = False,
    function: str | None = None,
    dry_run: bool = False,
    client_token: str | None = None,
    region: str | None = None,
    read_timeout: float | None = None,
) -> int:
    """``trainctl submit``: read the request in ``source`` (a file, ``-``: stdin), send it to the deployed
    ``function`` or, with ``local``, to the handler in process, and print the response JSON on stdout.

    A request with neither ``job_name`` nor ``client_token`` is sent with a generated ``client_token``,
    printed on stderr before it is sent. Every failure is one line on stderr.

    Returns:
        :data:`EXIT_SUBMITTED` (submitted or validated), :data:`EXIT_REJECTED` (the submitter refused it;
        nothing was created) or :data:`EXIT_FAILED` (no answer: see ``trainctl submit --help``).
    """

    from platform_constructs.submitter.runtime.errors import ConfigurationError
    from trainctl.submitter_client import DEFAULT_INVOKE_READ_TIMEOUT_S, SubmitError, send, with_client_token

    prog = "trainctl submit" + (" --local" if local else "")
    if not local and not function:
        print(
            f"{prog}: no submitter: give --function NAME (the stack output SubmitterFunctionName) or --local",
            file=sys.stderr,
        )
        return EXIT_FAILED
    try:
        request = read_request(source)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if dry_run:
        request["dry_run"] = True
    try:
        request, generated = with_client_token(request, client_token)
    except ValueError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if generated:
        # before sending: a person who loses the answer (or this process) still has the token
        print(
            f"{prog}: client_token {generated} (generated; to retry this request without a second job, "
            f"add --client-token {generated})",
            file=sys.stderr,
            flush=True,
        )
    try:
        response = send(
            request,
            local=local,
            function=function,
            region=region,
            read_timeout=DEFAULT_INVOKE_READ_TIMEOUT_S if read_timeout is None else read_timeout,
        )
    except SubmitError as exc:
        print(f"{prog}: {exc}{_retry_hint(exc, request)}", file=sys.stderr)
        return EXIT_FAILED
    except ConfigurationError as exc:  # the in-process runtime's: a setting missing from the environment
        print(f"{prog}: {exc} (source the env file of `trainctl local-aws`)", file=sys.stderr)
        return EXIT_FAILED
    print(json.dumps(response, indent=2))
    status = response.get("status")
    if status in ("submitted", "validated"):
        return EXIT_SUBMITTED
    if request.get("action", "submit") != "submit" and status != "rejected" and isinstance(status, str):
        return EXIT_SUBMITTED  # a job-API request (describe, list, stop, ...): answered
    if status == "rejected":
        return EXIT_REJECTED
    print(
        f"{prog}: the submitter answered status {status!r}; expected submitted, validated or rejected", file=sys.stderr
    )
    return EXIT_FAILED


def _retry_hint(exc: SubmitError, request: dict[str, Any]) -> str:
    if not exc.may_have_run or request.get("dry_run") is True:
        return ""
    if request.get("client_token"):
        return f"; retry with --client-token {request['client_token']} to get its job, never a second one"
    if request.get("job_name"):
        return (
            f"; retrying the same request is safe: its job_name {request['job_name']} finds the job if one was created"
        )
    return ""


__all__ = ["EXIT_FAILED", "EXIT_REJECTED", "EXIT_SUBMITTED", "read_request", "submit_and_print"]
