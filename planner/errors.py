"""The planner's input error (a :class:`platform_spec.errors.FieldError`, so a ``ValueError``)."""

from __future__ import annotations

from typing import Any

from platform_spec.errors import FieldError


class PlanInputError(FieldError):
    """A plan input is unknown, out of range or unsupported on the chosen hardware.

    The catalogue's refusals (unknown or unsupported instance type, a precision the GPU cannot
    run) are :class:`FieldError` s of :mod:`platform_spec.catalogue`; catch :class:`FieldError`
    for every refusal of a plan input.

    Attributes:
        field: the input's name (hyperparameter names where one exists, e.g.
            ``"batch_size"``, ``"precision"``; else ``"instance_type"``,
            ``"instance_count"``, ``"price_per_hour"``, ``"tokens"``).
        value: the value received.
        expected: a human description of the allowed values.
        detail: extra context (e.g. which GPU lacks the precision), or ``""``.

    Message: ``"<field>: got <value!r>, expected <expected>[ (<detail>)]"``.
    """

    def __init__(self, field: str, value: Any, expected: str, *, detail: str = "") -> None:
        super().__init__(field, value, expected, detail=detail)

    def format_message(self) -> str:
        message = f"{self.field}: got {self.value!r}, expected {self.expected}"
        return f"{message} ({self.detail})" if self.detail else message
