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
