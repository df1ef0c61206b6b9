"""Refusals: the submitter's answer when it will not create a job.

Every refusal is a :class:`Refusal` carrying one of
:data:`.settings.ERROR_CODES`; :meth:`Refusal.to_response` renders the
documented response shape::

    {"status": "rejected",
     "error": {"code": "InvalidRequest", "message": "...", "field": "instance_count",
               "details": {...}}}

``field`` (a dotted path into the request, e.g. ``hyperparameters.batch_size``)
and ``details`` appear only when they carry information. An ``InvalidRequest``
is built by :func:`invalid` from one :class:`platform_spec.errors.FieldError`,
the platform's one field-error type, which request parsing raises. A refusal is raised
before anything is created, so refusing is always side-effect free.

Faults that are not the caller's (throttling, 5xx, access denied, a broken
deployment, too little time left: :class:`DeadlineExceeded`) are *not*
refusals: they propagate as exceptions so that Lambda reports a function error
(``errorType`` = the exception's class name) and the caller's retry policy
applies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from platform_spec.errors import FieldError

from ...lambda_runtime import deadline as lambda_deadline
from .settings import ERROR_CODES


class Refusal(Exception):
    """The request is refused; nothing was created.

    Attributes:
        code: one of :data:`.settings.ERROR_CODES`.
        message: one human sentence saying what is wrong and what was expected.
        field: dotted path of the offending request field, or ``None``.
        details: JSON-serialisable detail (plans skipped, the estimate, the quota ...).
    """

    def __init__(self, code: str, message: str, *, field: str | None = None, details: dict[str, Any] | None = None):
        if code not in ERROR_CODES:
            raise ValueError(f"unknown refusal code {code!r}; expected one of {', '.join(ERROR_CODES)}")
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.details = details

    def to_response(self) -> dict[str, Any]:
        """The refusal as the function's response (``status: rejected``)."""
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            error["field"] = self.field
        if self.details:
            error["details"] = self.details
        return {"status": "rejected", "error": error}


def invalid(error: FieldError, *, details: dict[str, Any] | None = None) -> Refusal:
    """The ``InvalidRequest`` refusal of one :class:`platform_spec.errors.FieldError`.

    Args:
        error: the field (a dotted path into the request, e.g. ``hyperparameters.batch_size``;
            ``""`` for the request as a whole, which names no field), the value received and
            what was expected (and a detail, when there is one).
        details: JSON-serialisable detail for the response.

    Returns:
        A :class:`Refusal` with ``field`` = ``error.field`` (``None`` for ``""``) and the message
        ``"<field>: got <value>, expected <expected>[ (<detail>)]"``, the value's ``repr`` cut to
        120 characters.
    """
    expected = f"{error.expected} ({error.detail})" if error.detail else error.expected
    where = f"{error.field}: " if error.field else ""
    message = f"{where}got {_short_repr(error.value)}, expected {expected}"
    return Refusal("InvalidRequest", message, field=error.field or None, details=details)


def action_not_allowed(action: str, allowed: Iterable[str]) -> Refusal:
    """The ``ActionNotAllowed`` refusal: this function is not deployed to answer ``action``.

    Args:
        action: the request's action.
        allowed: the actions the function answers (its ``SUBMITTER_ALLOWED_ACTIONS``).

    Returns:
        A :class:`Refusal` with ``field`` ``action`` and ``details.allowed_actions``.
    """
    allowed = tuple(allowed)
    return Refusal(
        "ActionNotAllowed",
        f"action: got {_short_repr(action)}, expected one this function answers: {', '.join(allowed)} "
        "(another action needs the function it is granted on)",
        field="action",
        details={"allowed_actions": list(allowed)},
    )


def not_found(field: str, value: str, what: str) -> Refusal:
    """The ``NotFound`` refusal: ``what`` (e.g. ``"training job 'x'"``) does not exist or is not the platform's.

    A resource this platform did not make is answered exactly as one that does not exist, so a
    caller learns nothing of the account's other jobs.
    """
    return Refusal(
        "NotFound",
        f"{field}: no {what} made by this platform exists in this account and region",
        field=field,
        details={field: value},
    )


class DeadlineExceeded(lambda_deadline.DeadlineExceeded):
    """Too little of the invocation's time is left for the next AWS call; answered as a function error.

    The platform's :class:`platform_constructs.lambda_runtime.deadline.DeadlineExceeded` (its attributes
    and message; raised by :class:`.aws.Deadline`), with what the submitter's writes may have done
    (for ``CreateTrainingJob``: whether the job may exist) and what a retry does.

    It is **retriable**: with a ``client_token``, a retry of the same request
    returns the job if this invocation created it, or creates it, never a
    second one (the token's record and the job's name settle it; see
    :mod:`.ledger`). Without a ``client_token`` or ``job_name`` a retry
    after a ``CreateTrainingJob`` that was sent but not answered may create a
    second job.
    """

    EFFECTS: ClassVar[Mapping[str, str]] = {
        "CreateTrainingJob": "the training job may exist",
        "PutObject": "the client-token record may have been written",
    }
    RETRY = (
        "Retriable: retry the same request with the same client_token (safe): it returns the job if one was "
        "created and creates it otherwise (without a client_token or job_name a retry may create a second job)"
    )


class IdempotencyRecordError(RuntimeError):
    """A record of the ledger (:mod:`.ledger`: a client token's, a run's) cannot be read as one (not JSON,
    another schema, wrong fields).

    Not a refusal: nothing is created while it stands; the message names the
    object to inspect (and, for a client token's, how to delete it to free the token: only the submitter may
    write there, so an operator lifts the bucket policy's statement first).
    """


class SegmentNotEnded(RuntimeError):
    """A run's segment was reported ended (SageMaker's state-change event) while ``DescribeTrainingJob`` still
    answers ``InProgress`` or ``Stopping``: the event is early for the API, not stale.

    Not a refusal and not dropped: the continuation's invocation fails, so Lambda's asynchronous retries
    (``CONTINUATION_EVENT_RETRIES``, about 1 and 2 minutes apart) read the job again; after them the event
    is dead-lettered, and the scheduled tick decides the segment once the job reads ended.
    """


class ConfigurationError(RuntimeError):
    """The function's own configuration (environment, SSM parameter) is broken.

    Not a refusal: the caller cannot fix it, so it is raised and alarms on the
    function's errors.
    """


def _short_repr(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
