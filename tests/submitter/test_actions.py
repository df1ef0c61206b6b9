"""The submitter's job API (``runtime/actions.py``): describe, list and stop against the embedded AWS.

Jobs are created by the real submission path; their lifecycle is driven through the emulator's admin
endpoint (``set_job_status``).
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from platform_spec.capacity import CAPACITY_BLOCK_RECLAIM_S
from platform_spec.metric_lines import format_line
from platform_spec.runs import TAG_RUN_ID

pytestmark = pytest.mark.xdist_group("submitter")


@pytest.fixture(scope="module")
def act(runtime, clients, config):
    """``act(event, **kwargs)`` -> the function's answer (``actions.dispatch``)."""

    def _act(event, **kwargs):
        return runtime.actions.dispatch(event, clients=clients, config=config, **kwargs)

    return _act


def _submitted(submit, make_request, **overrides) -> str:
    response = submit(make_request(**overrides))
    assert response["status"] == "submitted", response
    return response["training_job_name"]


def _on_demand(submit, make_request, **overrides) -> str:
    """A job that holds no plan instances (so a test may create several)."""
    return _submitted(submit, make_request, capacity="on-demand", **overrides)


def _refusal(response) -> tuple[str, str | None]:
    assert response["status"] == "rejected", response
    return response["error"]["code"], response["error"].get("field")


# --- dispatch ------------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["delete", 5, "", "Describe"])
def test_an_unknown_action_is_refused_naming_action_and_the_actions(act, action):
    response = act({"action": action, "job_name": "x"})
    assert _refusal(response) == ("InvalidRequest", "action")
    assert "describe, list, stop" in response["error"]["message"]


def test_a_field_the_action_does_not_take_is_refused_naming_it(act):
    response = act({"action": "describe", "job_name": "some-job", "status": "InProgress"})
    assert _refusal(response) == ("InvalidRequest", "status")
    assert "job_name" in response["error"]["message"]


def test_action_submit_is_the_same_request_as_no_action(act, aws, submit, make_request):
    request = make_request(capacity="on-demand")
    first = submit(request)
    again = act({**request, "action": "submit"})
    assert again["status"] == "submitted" and again["replayed"] is True
    assert again["training_job_name"] == first["training_job_name"]


def test_a_reader_refuses_submit_and_stop_and_creates_nothing(act, aws, runtime, submit, make_request):
    reader = runtime.actions.allowed_actions_from_environ(
        {runtime.settings.ENV_ALLOWED_ACTIONS: ",".join(runtime.actions.READ_ACTIONS)}
    )
    assert reader == runtime.actions.READ_ACTIONS
    request = make_request(capacity="on-demand", job_name=f"reader-{uuid.uuid4().hex[:12]}")
    response = act(request, allowed_actions=reader)
    assert _refusal(response) == ("ActionNotAllowed", "action")
    assert response["error"]["details"] == {"allowed_actions": list(runtime.actions.READ_ACTIONS)}
    assert request["job_name"] not in {j["name"] for j in aws.training_jobs()}

    name = _on_demand(submit, make_request)
    assert _refusal(act({"action": "stop", "job_name": name}, allowed_actions=reader)) == ("ActionNotAllowed", "action")
    assert aws.describe_training_job(name)["TrainingJobStatus"] == "InProgress"
    assert act({"action": "describe", "job_name": name}, allowed_actions=reader)["status"] == "described"


def test_the_handler_answers_only_the_actions_of_its_environment(runtime, clients, config, monkeypatch):
    monkeypatch.setenv(runtime.settings.ENV_ALLOWED_ACTIONS, "describe, list")
    monkeypatch.setattr(runtime.handler, "_allowed_actions", [])
    allowed = runtime.handler.allowed_actions()
    assert allowed == ("describe", "list")
    response = runtime.handler.handle(
        {"action": "stop", "job_name": "x"}, clients=clients, config=config, allowed_actions=allowed
    )
    assert _refusal(response) == ("ActionNotAllowed", "action")


@pytest.mark.parametrize("value", ["", " , ", "describe,descibe", "submit,delete"])
def test_allowed_actions_naming_no_action_or_an_unknown_one_is_a_configuration_error(runtime, value):
    with pytest.raises(runtime.errors.ConfigurationError, match="SUBMITTER_ALLOWED_ACTIONS"):
        runtime.actions.allowed_actions_from_environ({runtime.settings.ENV_ALLOWED_ACTIONS: value})
    assert runtime.actions.allowed_actions_from_environ({}) is None


def test_a_deadline_already_past_raises_before_any_call(act, runtime, aws):
    aws.clear_calls()
    with pytest.raises(runtime.errors.DeadlineExceeded):
        act({"action": "describe", "job_name": "any-job"}, deadline=runtime.aws.Deadline(0.0))
    assert aws.calls("DescribeTrainingJob") == []


# --- describe -----------------------------------------------------------------------------------

_PATHS = {
    "InProgress": [],
    "Completed": [("Completed", {})],
    "Failed": [("Failed", {"failure_reason": "AlgorithmError: CUDA out of memory"})],
    "Stopping": [("Stopping", {})],
    "Stopped": [("Stopping", {}), ("Stopped", {})],
}


@pytest.mark.parametrize("status", list(_PATHS))
def test_describe_shows_a_job_in_each_status(act, aws, submit, make_request, status):
    name = _submitted(submit, make_request, tags={"team": "nlp"})
    line = format_line({"step": 120, "loss": 3.25, "tokens_per_sec": 51234.5, "mfu": 18.3})
    aws.set_job_status(name, "InProgress", secondary_status="Training", log_lines=[line])
    for target, fields in _PATHS[status]:
        aws.set_job_status(name, target, **fields)
    sent = aws.describe_training_job(name)

    job = act({"action": "describe", "job_name": name})["job"]

    assert job["training_job_name"] == name and job["training_job_arn"] == sent["TrainingJobArn"]
    assert job["training_job_status"] == status
    assert job["secondary_status"] == sent["SecondaryStatus"]
    assert job["metrics"]["step"] == 120 and isinstance(job["metrics"]["step"], int)
    assert job["metrics"]["loss"] == 3.25 and job["metrics"]["tokens_per_sec"] == 51234.5
    assert job["metrics"]["mfu"] == pytest.approx(18.3)
    assert job["failure_reason"] == ("AlgorithmError: CUDA out of memory" if status == "Failed" else None)
    assert job["capacity"]["type"] == "training-plan"
    assert job["capacity"]["training_plan_arn"] == sent["ResourceConfig"]["TrainingPlanArn"]
    assert job["tags"]["team"] == "nlp" and job["tags"]["platform:submitted-by"]
    assert job["checkpoint"] == {"s3_uri": sent["CheckpointConfig"]["S3Uri"], "newest_complete_step": None}
    assert job["creation_time"].endswith("Z") and job["training_start_time"]
    ended = status in ("Completed", "Failed", "Stopped")
    assert (job["training_end_time"] is not None) == ended
    block = job["capacity"]["block"]
    if ended:
        assert block == {"training_plan_arn": job["capacity"]["training_plan_arn"], "ended": True}
    else:
        assert block["running"] is True and block["seconds_left"] > 0


def test_describe_gives_the_time_left_in_the_block_until_its_reclaim(act, aws, submit, make_request):
    name = _submitted(submit, make_request)
    plan_arn = aws.describe_training_job(name)["ResourceConfig"]["TrainingPlanArn"]
    (block,) = aws.client("sagemaker").describe_training_plan(TrainingPlanName=plan_arn)["ReservedCapacitySummaries"]
    now = datetime.now(UTC)
    job = act({"action": "describe", "job_name": name}, now=now)["job"]
    usable_until = block["EndTime"] - timedelta(seconds=CAPACITY_BLOCK_RECLAIM_S)
    assert job["capacity"]["block"] == {
        "training_plan_arn": plan_arn,
        "reserved_capacity_arn": block["ReservedCapacityArn"],
        "start_time": block["StartTime"].astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "end_time": block["EndTime"].astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "usable_until": usable_until.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "seconds_left": int((usable_until - now).total_seconds()),
        "running": True,
    }
    past_reclaim = act({"action": "describe", "job_name": name}, now=usable_until + timedelta(minutes=5))["job"]
    assert past_reclaim["capacity"]["block"]["seconds_left"] == 0


def test_describe_finds_the_newest_complete_checkpoint(act, aws, submit, make_request):
    name = _on_demand(submit, make_request)
    uri = aws.describe_training_job(name)["CheckpointConfig"]["S3Uri"]
    bucket, prefix = uri[len("s3://") :].split("/", 1)
    s3 = aws.client("s3")
    for key in (
        "step-5/.complete", "step-10/.complete",
        "step-20/__0_0.distcp",  # cut short: no marker
        "step-030/.complete", "other/.complete", "step-40/deeper/.complete",  # not the trainer's names
        "step-50/.complete", "step-50/trainer_state.json",  # a damaged state (below): the run could not resume it
    ):  # fmt: skip
        s3.put_object(Bucket=bucket, Key=prefix + key, Body=b"x")
    state = {"step": 10, "data": {"step": 10, "samples_consumed": 80}, "run": {"hyperparameters": {}}}
    s3.put_object(Bucket=bucket, Key=prefix + "step-10/trainer_state.json", Body=json.dumps(state).encode())
    job = act({"action": "describe", "job_name": name})["job"]
    # the same judgement as the run continuation's: the newest marked folder whose trainer_state.json verifies
    assert job["checkpoint"] == {"s3_uri": uri, "newest_complete_step": 10}
    assert job["capacity"] == {"type": "on-demand", "training_plan_arn": None, "block": None}


def test_a_job_not_made_by_the_platform_is_answered_as_one_that_does_not_exist(act, aws, config):
    foreign = f"foreign-{uuid.uuid4().hex[:12]}"
    aws.client("sagemaker").create_training_job(
        TrainingJobName=foreign,
        AlgorithmSpecification={"TrainingImage": config.trainer_image_uris["amd64"], "TrainingInputMode": "File"},
        RoleArn=config.execution_role_arn,
        OutputDataConfig={"S3OutputPath": f"s3://{config.output_bucket}/elsewhere/"},
        ResourceConfig={"InstanceType": "ml.p6-b200.48xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
        StoppingCondition={"MaxRuntimeInSeconds": 3600},
        Tags=[{"Key": "team", "Value": "other"}],
    )
    missing = f"missing-{uuid.uuid4().hex[:12]}"
    for action in ("describe", "stop"):
        seen, absent = act({"action": action, "job_name": foreign}), act({"action": action, "job_name": missing})
        assert _refusal(seen) == _refusal(absent) == ("NotFound", "job_name")
        assert seen["error"]["message"].replace(foreign, "J") == absent["error"]["message"].replace(missing, "J")
    assert aws.describe_training_job(foreign)["TrainingJobStatus"] == "InProgress"  # not stopped
    listed = act({"action": "list", "tags": {"team": "other"}})
    assert listed == {"status": "listed", "jobs": []}


@pytest.mark.parametrize(
    ("event", "field"),
    [
        ({"action": "describe"}, "job_name"),
        ({"action": "describe", "job_name": "bad_name!"}, "job_name"),
        ({"action": "describe", "job_name": 7}, "job_name"),
        ({"action": "describe", "job_name": "a", "run_id": "r"}, "run_id"),
        ({"action": "describe", "run_id": "Bad Run"}, "run_id"),
        ({"action": "stop", "job_name": "x" * 64}, "job_name"),
    ],
)
def test_bad_job_fields_are_refused_naming_the_field(act, event, field):
    assert _refusal(act(event)) == ("InvalidRequest", field)


# --- list ---------------------------------------------------------------------------------------


def test_list_pages_through_the_platforms_jobs_with_a_filter_newest_first(act, aws, submit, make_request):
    batch = uuid.uuid4().hex[:12]
    names = [_on_demand(submit, make_request, tags={"batch": batch}) for _ in range(5)]
    _on_demand(submit, make_request, tags={"batch": "another"})

    pages, token = [], None
    while True:
        event = {"action": "list", "tags": {"batch": batch}, "max_results": 2}
        if token:
            event["next_token"] = token
        page = act(event)
        assert page["status"] == "listed"
        pages.append([j["training_job_name"] for j in page["jobs"]])
        token = page.get("next_token")
        if not token:
            break
    assert [len(p) for p in pages] == [2, 2, 1]
    assert [n for p in pages for n in p] == list(reversed(names))  # newest first, each once

    aws.set_job_status(names[1], "Completed")
    completed = act({"action": "list", "tags": {"batch": batch}, "status": "Completed"})
    assert [j["training_job_name"] for j in completed["jobs"]] == [names[1]]
    assert completed["jobs"][0]["training_job_status"] == "Completed" and "next_token" not in completed


def test_list_filters_by_creation_time_exclusively(act, aws, submit, make_request):
    batch = uuid.uuid4().hex[:12]
    names = [_on_demand(submit, make_request, tags={"batch": batch}) for _ in range(3)]
    created = [aws.describe_training_job(n)["CreationTime"] for n in names]
    after = act({"action": "list", "tags": {"batch": batch}, "created_after": created[0]})
    assert [j["training_job_name"] for j in after["jobs"]] == [names[2], names[1]]
    before = act({"action": "list", "tags": {"batch": batch}, "created_before": created[2]})
    assert [j["training_job_name"] for j in before["jobs"]] == [names[1], names[0]]


def test_list_of_a_run_returns_its_jobs_only(act, aws, submit, make_request):
    run_id = f"run-{uuid.uuid4().hex[:10]}"
    response = submit(make_request(client_token=None, capacity="on-demand", run={"run_id": run_id}))
    assert response["status"] == "submitted", response
    _on_demand(submit, make_request)
    listed = act({"action": "list", "run_id": run_id})
    assert [j["training_job_name"] for j in listed["jobs"]] == [response["training_job_name"]]
    assert listed["jobs"][0]["run_id"] == run_id and listed["jobs"][0]["tags"][TAG_RUN_ID] == run_id


def _first_token(act, batch):
    page = act({"action": "list", "tags": {"batch": batch}, "max_results": 1})
    assert page["next_token"], page
    return page["next_token"]


def test_a_tampered_or_foreign_next_token_is_refused_naming_next_token(act, submit, make_request):
    batch = uuid.uuid4().hex[:12]
    for _ in range(2):
        _on_demand(submit, make_request, tags={"batch": batch})
    token = _first_token(act, batch)
    body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    body["t"] = body["t"][:-2] + "AA"
    edited = base64.urlsafe_b64encode(json.dumps(body).encode()).decode()
    for bad in (edited, token[:-3], "not-a-token", token + "x", 12):
        response = act({"action": "list", "tags": {"batch": batch}, "max_results": 1, "next_token": bad})
        assert _refusal(response) == ("InvalidRequest", "next_token"), bad
    other_query = act({"action": "list", "tags": {"batch": "another"}, "next_token": token})
    assert _refusal(other_query) == ("InvalidRequest", "next_token")
    assert "another query" in other_query["error"]["message"]
    same_twice = [
        act({"action": "list", "tags": {"batch": batch}, "max_results": 1, "next_token": token}) for _ in "ab"
    ]
    assert same_twice[0] == same_twice[1] and len(same_twice[0]["jobs"]) == 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"status": "Running"}, "status"),
        ({"tags": ["a"]}, "tags"),
        ({"tags": {"k": 1}}, "tags.k"),
        ({"tags": {f"k{i}": "v" for i in range(20)}}, "tags"),
        ({"created_after": "2025-06-01T00:00:00"}, "created_after"),
        ({"created_before": "yesterday"}, "created_before"),
        ({"created_after": "2025-06-02T00:00:00Z", "created_before": "2025-06-01T00:00:00Z"}, "created_before"),
        ({"run_id": "Run_1"}, "run_id"),
        ({"max_results": 0}, "max_results"),
        ({"max_results": 101}, "max_results"),
        ({"max_results": True}, "max_results"),
        ({"next_token": ""}, "next_token"),
        ({"created_after": "0001-01-01T00:00:00+14:00"}, "created_after"),  # before year 1 in UTC
        ({"created_before": "9999-12-31T23:59:59-14:00"}, "created_before"),  # after year 9999 in UTC
    ],
)
def test_bad_list_fields_are_refused_before_any_search(act, aws, fields, field):
    aws.clear_calls()
    assert _refusal(act({"action": "list", **fields})) == ("InvalidRequest", field)
    assert aws.calls("Search") == []


def test_list_bounds_at_the_calendars_ends_list_without_overflowing(act):
    """A ``created_before`` within a second of 9999-12-31T23:59:59.999999Z cannot be widened to Search's whole
    second: it is filtered on the answer only (it once raised OverflowError, a function error)."""
    for fields in (
        {"created_before": "9999-12-31T23:59:59.5+00:00"},
        {"created_after": "9999-12-31T23:59:59+00:00"},
        {"created_before": "0001-01-01T00:00:00+00:00"},
    ):
        answer = act({"action": "list", **fields})
        assert answer["status"] == "listed", (fields, answer)
    assert act({"action": "list", "created_before": "9999-12-31T23:59:59.5+00:00", "max_results": 1})["jobs"]


# --- stop ---------------------------------------------------------------------------------------


def test_stop_twice_changes_the_job_once(act, aws, submit, make_request):
    name = _on_demand(submit, make_request)
    first, second = (act({"action": "stop", "job_name": name}) for _ in range(2))
    assert first["status"] == "stopping" and first["changed"] is True
    assert second["status"] == "stopping" and second["changed"] is False
    assert second["training_job_status"] == "Stopping" and second["training_job_name"] == name
    aws.set_job_status(name, "Stopped")
    third = act({"action": "stop", "job_name": name})
    assert (third["status"], third["changed"], third["training_job_status"]) == ("stopped", False, "Stopped")


def test_stop_from_two_threads_at_once_stops_the_job_once(act, aws, submit, make_request):
    name = _on_demand(submit, make_request)
    barrier = threading.Barrier(2)

    def _stop(_):
        barrier.wait()
        return act({"action": "stop", "job_name": name})

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(_stop, range(2)))
    assert sorted(a["changed"] for a in answers) == [False, True]
    assert {a["status"] for a in answers} == {"stopping"}
    assert len(aws.calls("StopTrainingJob")) >= 1
    assert aws.describe_training_job(name)["TrainingJobStatus"] == "Stopping"


@pytest.mark.parametrize(("ended", "answer"), [("Completed", "completed"), ("Failed", "failed")])
def test_stop_of_an_ended_job_answers_its_state(act, aws, submit, make_request, ended, answer):
    name = _on_demand(submit, make_request)
    aws.set_job_status(name, ended)
    aws.clear_calls()
    response = act({"action": "stop", "job_name": name})
    assert (response["status"], response["changed"], response["training_job_status"]) == (answer, False, ended)
    assert aws.calls("StopTrainingJob") == []


def test_stop_of_a_job_that_does_not_exist_is_not_found(act):
    response = act({"action": "stop", "job_name": f"nothing-{uuid.uuid4().hex[:8]}"})
    assert _refusal(response) == ("NotFound", "job_name")
