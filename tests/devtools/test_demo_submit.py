"""`make demo`'s submit step: a retried request with the same client_token replays the first job."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devtools import demo

pytestmark = pytest.mark.xdist_group("devtools-aws")


def test_the_demo_submit_step_shows_a_retry_replaying_the_one_job(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(demo, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(demo, "DEMO_DIR", tmp_path / ".demo")
    demo.step_submit()
    out = tmp_path / ".demo" / "submit"
    first = json.loads((out / "submitted.json").read_text())
    retried = json.loads((out / "retried.json").read_text())
    assert first["status"] == retried["status"] == "submitted"
    assert (first["replayed"], retried["replayed"]) == (False, True)
    assert retried["training_job_name"] == first["training_job_name"] == "guide-default-gpt-1b-mxfp8"
    assert retried["training_job_arn"] == first["training_job_arn"]
    printed = capsys.readouterr().out
    assert 'guide-default-gpt-1b-mxfp8 with "replayed": true: the first job came back and none was created' in printed
    assert "(jobs of that name in the emulator: 1)" in printed
    assert "Jobs in the emulator after the three requests: 1" in printed


def test_the_runs_length_is_sized_by_step_4s_measured_speed() -> None:
    """Regression: a fixed max_steps of 200 finished inside the first block on an idle machine, so the demo's
    run never reached a second segment. Step 4's speed (same model, batch and processes) sizes it instead."""
    tokens_per_step = demo.RUN_HYPERPARAMETERS["batch_size"] * demo.RUN_HYPERPARAMETERS["seq_length"] * 2
    assert demo.DEMO_PROCESSES == 2
    fast = [{"step": s, "tokens_per_sec": 4 * tokens_per_step} for s in (5, 10, 15)]  # 4 steps/s
    assert demo.run_max_steps(fast) == 4 * demo.RUN_SPAN_BLOCKS * demo.RUN_FIRST_BLOCK_TRAINING_S
    outlier = [*fast, {"step": 20, "tokens_per_sec": 400 * tokens_per_step}]  # the median, not the mean
    assert demo.run_max_steps(outlier) == demo.run_max_steps(fast)
    assert demo.run_max_steps([{"step": 5, "tokens_per_sec": 1.0}]) == 20  # a crawling machine: still a run
    assert demo.run_max_steps([]) == demo.run_max_steps([{"step": 1, "loss": 6.2}]) == 200  # nothing measured
    # foreign values are passed over, wherever they stand; an absurd speed is capped
    junk = [None, [], {"tokens_per_sec": float("nan")}, {"tokens_per_sec": float("inf")}, {"tokens_per_sec": -5},
            {"tokens_per_sec": 0}, {"tokens_per_sec": True}, {"tokens_per_sec": "6000"}, {"tokens_per_sec": 10**400}]  # fmt: skip
    assert demo.run_max_steps([*junk, *fast]) == demo.run_max_steps([*fast, *junk]) == demo.run_max_steps(fast)
    assert demo.run_max_steps(junk[:-1]) == 200
    assert demo.run_max_steps([{"tokens_per_sec": 1e12}]) == demo.RUN_MAX_STEPS_CAP
