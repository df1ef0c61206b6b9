"""``trainctl runs``: the job API's run actions sent in-process (``--local``) against the emulator, drawn as
tables; the answers come from the real run store and the continuation (tests/submitter/conftest.py)."""

from __future__ import annotations

import json
import uuid

import pytest

from platform_spec import runs as spec
from trainctl.cli import main
from trainctl.runs import EXIT_FAILED, EXIT_OK, EXIT_REFUSED, run_blocks, run_request

pytestmark = pytest.mark.xdist_group("submitter")


@pytest.fixture
def local_env(env, monkeypatch):
    """The process environment of ``trainctl runs --local`` after ``source``-ing the emulator's env file."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("COLUMNS", "200")


def two_segment_run(aws, submit, run_kit) -> str:
    """A run whose segment 1 ended with its capacity at step 40 and whose segment 2 the continuation started."""
    run_id = f"r{uuid.uuid4().hex[:12]}"
    assert submit(run_kit.request(run_id, max_segments=3))["status"] == "submitted"
    run_kit.checkpoint(run_id, 40)
    first = spec.segment_job_name(run_id, 1)
    aws.set_job_status(first, "InProgress")
    aws.set_job_status(first, "Completed")
    assert run_kit.handle(run_kit.event(first))["decision"]["decision"] == spec.CONTINUE
    return run_id


def test_a_run_shows_both_segments_their_capacity_and_what_ended_the_first(aws, submit, run_kit, local_env, capsys):
    run_id = two_segment_run(aws, submit, run_kit)
    assert main(["runs", run_id, "--local"]) == EXIT_OK
    out = capsys.readouterr().out
    assert spec.segment_job_name(run_id, 1) in out and spec.segment_job_name(run_id, 2) in out
    assert "continue" in out and "training-plan" in out
    assert "state: running" in out
    assert "steps: 40 of 100" in out

    assert main(["runs", run_id, "--local", "--json"]) == EXIT_OK
    view = json.loads(capsys.readouterr().out)["run"]
    assert [s["index"] for s in view["segments"]] == [1, 2]
    assert view["segments"][0]["last_step"] == 40


def test_the_listing_names_the_run_and_a_stop_is_idempotent(aws, submit, run_kit, local_env, capsys):
    run_id = two_segment_run(aws, submit, run_kit)
    assert main(["runs", "--local", "--max-results", "100"]) == EXIT_OK
    assert run_id in capsys.readouterr().out

    assert main(["runs", run_id, "--local", "--stop"]) == EXIT_OK
    second = spec.segment_job_name(run_id, 2)
    assert capsys.readouterr().out.strip() == (
        f"run {run_id}: stopping: {second} gets StopTrainingJob; no next segment starts"
    )
    aws.set_job_status(second, "Stopped")
    assert main(["runs", run_id, "--local", "--stop", "--json"]) == EXIT_OK
    again = json.loads(capsys.readouterr().out)
    assert again["run_id"] == run_id and again["status"] == "stopped"  # its end is recorded now
    assert main(["runs", run_id, "--local", "--stop"]) == EXIT_OK
    assert capsys.readouterr().out.strip().endswith("(already; nothing changed)")


def test_an_unknown_run_is_refused_with_the_job_apis_answer(local_env, capsys):
    assert main(["runs", "no-such-run-0", "--local"]) == EXIT_REFUSED
    answer = json.loads(capsys.readouterr().out)
    assert answer["status"] == "rejected" and answer["error"]["field"] == "run_id"


def test_without_a_submitter_it_says_which_flag_is_missing(capsys, monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert main(["runs", "--local"]) == EXIT_FAILED
    assert "AWS_ENDPOINT_URL" in capsys.readouterr().err


def test_the_requests_it_sends():
    assert run_request(None) == {"action": "list_runs"}
    assert run_request("r1", stop=True) == {"action": "stop", "run_id": "r1"}
    with pytest.raises(ValueError, match="RUN_ID"):
        run_request(None, stop=True)
    budget = {"max_segments": 4, "deadline": None}
    assert run_request("r1", resume=True, budget=budget, client_token="t1") == {
        "action": "continue_run", "run_id": "r1", "client_token": "t1", "max_segments": 4,
    }  # fmt: skip
    assert run_request("r1", resume=True)["client_token"].startswith("trainctl-")
    with pytest.raises(ValueError, match="RUN_ID"):
        run_request(None, resume=True)
    with pytest.raises(ValueError, match="one of them"):
        run_request("r1", stop=True, resume=True)
    with pytest.raises(ValueError, match="--max-segments needs --continue"):
        run_request("r1", budget=budget)


def test_a_stopped_run_is_continued_from_the_command_line_and_the_sdk(aws, submit, run_kit, local_env, env, capsys):
    from trainctl.sdk import Platform

    run_id = two_segment_run(aws, submit, run_kit)
    assert main(["runs", run_id, "--local", "--max-segments", "5"]) == EXIT_FAILED  # a budget flag needs --continue
    assert "--max-segments needs --continue" in capsys.readouterr().err
    assert main(["runs", run_id, "--local", "--continue"]) == EXIT_REFUSED  # segment 2 still runs
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "Conflict"
    second = spec.segment_job_name(run_id, 2)
    aws.set_job_status(second, "InProgress")
    assert main(["runs", run_id, "--local", "--stop"]) == EXIT_OK
    aws.set_job_status(second, "Stopped")
    assert run_kit.handle(run_kit.event(second))["decision"]["decision"] == spec.STOPPED
    capsys.readouterr()

    argv = ["runs", run_id, "--local", "--continue", "--max-segments", "5", "--client-token", "cli-1"]
    assert main(argv) == EXIT_OK
    line = capsys.readouterr().out
    assert f"continued from stopped: segment 3, {spec.segment_job_name(run_id, 3)}" in line and "cli-1" in line
    assert main(argv) == EXIT_OK and "replayed" in capsys.readouterr().out
    answer = Platform.from_env(env).continue_run(run_id, client_token="cli-1", max_segments=5)
    assert (answer["training_job_name"], answer["replayed"]) == (spec.segment_job_name(run_id, 3), True)


def test_idle_gaps_sit_before_the_segment_they_precede():
    view = {
        "run_id": "r1", "state": "finished", "max_steps": 10, "newest_complete_step": 10, "tokens_done": 100,
        "idle_gaps_s": [90.0],
        "segments": [
            {"index": 1, "training_job_name": "r1-seg-001", "status": "Completed", "capacity": {"type": "spot"},
             "first_step": 1, "last_step": 4},
            {"index": 2, "training_job_name": "r1-seg-002", "status": "Completed", "capacity": {"type": "spot"},
             "first_step": 5, "last_step": 10},
        ],
    }  # fmt: skip
    _, table = run_blocks(view)
    idle = [c.header for c in table.columns].index("idle before")
    assert [cells[idle] for cells, _ in table.rows] == ["-", "90 s"]


def test_a_job_name_is_never_cut_even_at_80_columns(monkeypatch, capsys):
    from trainctl.tables import print_blocks

    monkeypatch.setenv("COLUMNS", "80")
    name = "a-rather-long-run-name-for-a-pretraining-seg-001"
    view = {
        "run_id": "a-rather-long-run-name-for-a-pretraining", "state": "running", "idle_gaps_s": [],
        "segments": [{"index": 1, "training_job_name": name, "status": "InProgress",
                      "capacity": {"type": "training-plan", "training_plan_arn": "arn:aws:sagemaker:us-east-1:1:training-plan/p"},
                      "first_step": 1, "last_step": 10, "tokens": 1000, "start_time": "2026-11-30T10:00:00Z"}],
    }  # fmt: skip
    print_blocks(run_blocks(view))
    assert name in capsys.readouterr().out


def test_a_run_in_its_capacity_backoff_says_when_its_next_segment_may_start(capsys, monkeypatch):
    from trainctl.tables import print_blocks

    monkeypatch.setenv("COLUMNS", "200")
    view = {
        "run_id": "r1", "state": spec.WAITING_FOR_CAPACITY, "idle_gaps_s": [], "segments": [],
        "waiting_since": "2026-11-30T10:00:00Z", "not_before": "2026-11-30T10:05:00Z",
    }  # fmt: skip
    print_blocks(run_blocks(view))
    out = capsys.readouterr().out
    assert (
        "waiting for capacity since 2026-11-30 10:00:00; the next segment starts no earlier than 2026-11-30 10:05:00"
        in out
    )
