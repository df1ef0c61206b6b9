"""Refusals: the submitter's answer when it will not create a job.

Every refusal is a :class:`Refusal` carrying one of
:data:`.settings.ERROR_CODES`; :meth:`Refusal.to_response` renders the
documented response shape::

    {"status": "rejected",
     "error": {"code": "InvalidRequest", "message": "...", "field": "instance_count",
               "details": {...}}}

``field`` (a dotted path into the request, e.g. ``hyperparameters.batch_size``)
and ``details`` appear only when they carry information. A refusal is raised
before anything is created, so refusing is always side-effect free.

Faults that are not the caller's (throttling, 5xx, access denied, a broken
deployment) are *not* refusals: they propagate as exceptions so that Lambda
reports a function error and the caller's retry policy applies.
"""

from __future__ import annotations

from typing import Any

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


def invalid(field: str | None, value: Any, expected: str, *, details: dict[str, Any] | None = None) -> Refusal:
    """An ``InvalidRequest`` refusal naming ``field``, the value received and what was expected."""
    shown = _short_repr(value)
    where = f"{field}: " if field else ""
    return Refusal("InvalidRequest", f"{where}got {shown}, expected {expected}", field=field, details=details)


class ConfigurationError(RuntimeError):
    """The function's own configuration (environment, SSM parameter) is broken.

    Not a refusal: the caller cannot fix it, so it is raised and alarms on the
    function's errors.
    """


def _short_repr(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
