"""The planner's input error: one type callers catch (a ``ValueError``)."""

from __future__ import annotations

from typing import Any


class PlanInputError(ValueError):
    """A plan input is unknown, out of range or unsupported on the chosen hardware.

    Attributes:
        field: the input's name (hyperparameter names where one exists, e.g.
            ``"batch_size"``, ``"precision"``; else ``"instance_type"``,
            ``"instance_count"``, ``"price_per_hour"``, ``"tokens"``).
        value: the value received.
        expected: a human description of the allowed values.
        detail: extra context (e.g. which GPU lacks the precision), or ``""``.
    """

    def __init__(self, field: str, value: Any, expected: str, *, detail: str = "") -> None:
        self.field = field
        self.value = value
        self.expected = expected
        self.detail = detail
        message = f"{field}: got {value!r}, expected {expected}"
        if detail:
            message += f" ({detail})"
        super().__init__(message)
