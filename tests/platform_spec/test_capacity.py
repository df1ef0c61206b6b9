"""platform_spec.capacity: the capacity types, their default order and its rule, the usable plan statuses
(one home for the submitter's runtime and construct, the observability functions, the stack and the emulator)."""

from __future__ import annotations

import pytest

from platform_spec.capacity import (
    CAPACITY_FALLBACK_EXPECTED,
    CAPACITY_TYPES,
    DEFAULT_CAPACITY_FALLBACK,
    USABLE_PLAN_STATUSES,
    capacity_fallback_problem,
)


def test_the_facts():
    assert CAPACITY_TYPES == ("training-plan", "spot", "on-demand")
    assert DEFAULT_CAPACITY_FALLBACK == CAPACITY_TYPES  # reserved first, then spot, then on-demand
    assert USABLE_PLAN_STATUSES == ("Active", "Scheduled")
    assert CAPACITY_FALLBACK_EXPECTED == "a non-empty order of distinct values from training-plan, spot, on-demand"


@pytest.mark.parametrize(
    ("order", "problem"),
    [
        (DEFAULT_CAPACITY_FALLBACK, None),
        (("spot",), None),
        (("on-demand", "training-plan"), None),
        ((), "it is empty"),
        (("spot", "reserved"), "'reserved' is not a capacity type"),
        (("spot", "Spot"), "'Spot' is not a capacity type"),  # names are exact
        (("spot", "on-demand", "spot"), "'spot' is listed more than once"),
    ],
)
def test_the_fallback_rule(order, problem):
    assert capacity_fallback_problem(order) == problem
