"""The planner against independent published measurements (benchmarks/planner_published.py and its points):
memory is never under-predicted by more than 5% and within 15%, runs that completed are never called out of
memory, and tokens/s on Hopper are within 25% but for the named misses. Properties of the model, not timings."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "planner_published.py"
spec = importlib.util.spec_from_file_location("planner_published", SCRIPT)
published = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = published  # its dataclasses look their module up
spec.loader.exec_module(published)


@pytest.fixture(scope="module")
def comparison():
    return published.compare()


def test_every_point_names_its_source_and_what_was_published():
    for point in published.load_points():
        source = point["source"]
        assert source.get("commit") or source.get("document"), point["id"]
        if "repository" in source:
            assert len(source["commit"]) == 40 and source["path"] and source["where"], point["id"]
        assert point["published"], point["id"]
        assert point.get("modelled", True) or point["reason"], point["id"]


def test_memory_is_never_under_predicted_by_more_than_5_percent_and_within_15(comparison):
    rows, _ = comparison
    memory = [r for r in rows if r.quantity.startswith("memory_")]
    assert any(not r.calibration for r in memory), "an independent measured memory point"
    for r in memory:
        assert -published.MEMORY_NEVER_BELOW <= r.error <= published.MEMORY_WITHIN, (r.point, r.error)


def test_runs_that_completed_are_never_called_out_of_memory(comparison):
    """llm-foundry's 30B and 70B runs with gradient accumulation on 80 GB H100s: the planner once said they
    did not fit (it kept unsharded gradients alive through accumulation)."""
    rows, _ = comparison
    ran = [r for r in rows if r.quantity == "ran_on_hbm_gb"]
    assert len(ran) >= 10
    for r in ran:
        assert r.status != "out-of-memory", (r.point, r.predicted)


KNOWN_SPEED_MISSES = {"llm-foundry-mpt-1b-8k-8gpu"}
"""Hopper points outside the 25% target, named: MPT-1B at sequence 8192 is over-predicted by ~31% (a 2048-wide
model whose step the planner's roofline makes faster than llm-foundry measured). The test once allowed any
quarter of the points to miss; a new miss (or this one fixed) now fails it."""


def test_tokens_per_second_on_hopper_are_within_25_percent_but_for_the_named_misses(comparison):
    rows, _ = comparison
    hopper = [r for r in rows if r.quantity == "tokens_per_second_per_gpu" and r.within_target is not None]
    assert len(hopper) >= 10 and all(r.architecture == "hopper" for r in hopper)
    assert {r.point for r in hopper if not r.within_target} == KNOWN_SPEED_MISSES


def test_the_script_prints_every_point(capsys, comparison):
    assert published.main([]) == 0
    text = capsys.readouterr().out
    rows, unmodelled = comparison
    for point in {r.point for r in rows} | {u.point for u in unmodelled}:
        assert point in text
    assert published.main(["--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["rows"]) == len(rows) and len(data["not_modelled"]) == len(unmodelled)
