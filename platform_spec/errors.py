"""The one field-level error type of the platform: which field, the value received, what was expected.

Every error that refuses one input value derives from :class:`FieldError` (a
``ValueError``): the trainer's ``HyperparameterError``, the planner's
``PlanInputError``, ``stacks.config.ConfigError``, the catalogue's instance
and precision refusals, the training-plan ARN rule. A caller that turns
refusals into answers (the submitter's ``InvalidRequest``, ``trainctl``'s exit
status 2, a sweep's skipped row) catches this one type and reads its
attributes instead of parsing a message.

Pure Python, standard library only.
"""

from __future__ import annotations

from typing import Any

__all__ = ["FieldError"]


class FieldError(ValueError):
    """One input value is missing, unknown, malformed or out of range.

    Args:
        field: the input's name as the caller wrote it (``"batch_size"``,
            ``"instance_type"``, ``"trainingPlanArns[2]"``).
        value: the value received, as received.
        expected: what would be accepted, in words (``"one of fp32, bf16"``,
            ``"an integer from 1 to 4096"``).
        detail: why this value in particular is refused (``"mxfp8 is not
            supported on H100"``), or ``""``.

    Attributes:
        field, value, expected, detail: as given.

    The message is ``"<field>: got <value!r>; expected <expected>"``, followed by
    ``" (<detail>)"`` when there is a detail. Subclasses that predate this type
    keep their own wording by overriding :meth:`format_message`; every one keeps
    the four attributes.
    """

    def __init__(self, field: str, value: Any, expected: str, *, detail: str = "") -> None:
        self.field = field
        self.value = value
        self.expected = expected
        self.detail = detail
        super().__init__(self.format_message())

    @property
    def reason(self) -> str:
        """The message without the field: ``"got <value!r>; expected <expected>[ (<detail>)]"``, for callers
        that name the field themselves (a list index, a props attribute)."""
        text = f"got {self.value!r}; expected {self.expected}"
        return f"{text} ({self.detail})" if self.detail else text

    def format_message(self) -> str:
        """The exception's message (see the class docstring)."""
        return f"{self.field}: {self.reason}"

    def __str__(self) -> str:  # KeyError subclasses would repr() the message otherwise
        return str(self.args[0]) if self.args else ""
