"""Runs through the submission path and the job API: segment 1, run.json, replays and conflicts,
the run's capacity rule, ``describe`` / ``list_runs`` / ``stop`` with ``run_id``."""

from __future__ import annotations

import base64
import json
import math
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from botocore.exceptions import ClientError

from platform_spec import runs as spec
from platform_spec.capacity import CAPACITY_BLOCK_RECLAIM_S, STOP_MARGIN_S
from platform_spec.runs import DEFAULT_MIN_SEGMENT_MINUTES

pytestmark = pytest.mark.xdist_group("submitter")


def new_run_id() -> str:
    return f"r{uuid.uuid4().hex[:12]}"


def test_a_run_creates_segment_1_on_the_run_prefix_with_its_tags(aws, submit, run_kit, config, clients):
    run_id = new_run_id()
    answer = submit(run_kit.request(run_id, max_segments=4))
    assert answer["status"] == "submitted", answer
    name = spec.segment_job_name(run_id, 1)
    assert answer["training_job_name"] == name and answer["replayed"] is False
    assert answer["run"] == {
        "run_id": run_id,
        "segment": 1,
        "checkpoint_s3_uri": f"s3://{config.checkpoint_bucket}/run-checkpoints/{run_id}/",
    }
    job = aws.describe_training_job(name)
    assert job["CheckpointConfig"]["S3Uri"] == f"s3://{config.checkpoint_bucket}/run-checkpoints/{run_id}/"
    tags = {t["Key"]: t["Value"] for t in aws.client("sagemaker").list_tags(ResourceArn=job["TrainingJobArn"])["Tags"]}
    assert tags[spec.TAG_RUN_ID] == run_id and tags[spec.TAG_RUN_SEGMENT] == "1"
    stored = json.loads(
        aws.client("s3").get_object(Bucket=config.output_bucket, Key=f"submitter/runs/{run_id}/run.json")["Body"].read()
    )
    assert stored["request"]["run"] == {"run_id": run_id, "max_segments": 4}
    assert stored["max_steps"] == 100 and stored["budget"] == {"run_id": run_id, "max_segments": 4}


def test_a_retry_of_the_first_submission_replays_and_another_request_is_a_conflict(submit, run_kit, aws):
    run_id = new_run_id()
    first = submit(run_kit.request(run_id))
    again = submit(run_kit.request(run_id))
    assert again["status"] == "submitted" and again["replayed"] is True
    assert again["training_job_arn"] == first["training_job_arn"]
    other = run_kit.request(run_id)
    other["hyperparameters"]["batch_size"] = 4
    refused = submit(other)
    assert refused["status"] == "rejected"
    assert refused["error"]["code"] == "Conflict" and refused["error"]["field"] == "run.run_id"
    budget = submit(run_kit.request(run_id, max_segments=2))  # the budget is part of the request
    assert budget["error"]["code"] == "Conflict" and budget["error"]["field"] == "run.run_id"
    assert run_kit.jobs(run_id) == [spec.segment_job_name(run_id, 1)]


def test_concurrent_first_submissions_make_one_run(submit, run_kit):
    import concurrent.futures

    run_id = new_run_id()
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda _: submit(run_kit.request(run_id)), range(4)))
    assert {a["status"] for a in answers} == {"submitted"}
    assert sum(not a["replayed"] for a in answers) == 1
    assert run_kit.jobs(run_id) == [spec.segment_job_name(run_id, 1)]


def test_concurrent_first_submissions_on_a_plan_with_one_free_instance_settle_on_one_job(
    aws, runtime, env, config, run_kit
):
    """Edge: as for a client_token, six parallel first submissions of one run_id on a plan with one free
    instance gave NoCapacity refusals although the run's segment 1 existed. They settle on it."""
    from .test_idempotency import one_free_instance_race, outcomes

    run_id = new_run_id()
    answers = one_free_instance_race(aws, runtime, env, config, [run_kit.request(run_id) for _ in range(6)])
    assert outcomes(answers) == {"created": 1, "replayed": 5}, answers
    assert {a["training_job_name"] for a in answers} == {spec.segment_job_name(run_id, 1)}
    assert run_kit.jobs(run_id) == [spec.segment_job_name(run_id, 1)]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"job_name": "mine"}, "job_name"),
        ({"client_token": "tok-1"}, "client_token"),
        ({"run": {"run_id": "Bad_Id"}}, "run.run_id"),
        ({"run": {"run_id": "ok", "deadline": "2020-01-01T00:00:00Z"}}, "run.deadline"),
        ({"run": {"run_id": "ok", "deadline": "0001-01-01T00:00:00+14:00"}}, "run.deadline"),  # before year 1 in UTC
    ],
)
def test_bad_run_requests_are_refused_and_create_nothing(submit, run_kit, aws, config, extra, field):
    run_id = new_run_id()
    body = {**run_kit.request(run_id), **extra}
    answer = submit(body)
    assert answer["status"] == "rejected" and answer["error"]["code"] == "InvalidRequest", answer
    assert answer["error"]["field"] == field
    assert run_kit.jobs(run_id) == [] and run_kit.jobs("ok") == []
    listed = aws.client("s3").list_objects_v2(Bucket=config.output_bucket, Prefix=f"submitter/runs/{run_id}/")
    assert listed.get("KeyCount", 0) == 0


def test_a_dry_run_of_a_run_writes_nothing(submit, run_kit, aws, config):
    run_id = new_run_id()
    answer = submit({**run_kit.request(run_id), "dry_run": True})
    assert answer["status"] == "validated", answer
    params = answer["create_training_job"]
    assert params["TrainingJobName"] == spec.segment_job_name(run_id, 1)
    assert params["CheckpointConfig"]["S3Uri"].endswith(f"/run-checkpoints/{run_id}/")
    listed = aws.client("s3").list_objects_v2(Bucket=config.output_bucket, Prefix=f"submitter/runs/{run_id}/")
    assert listed.get("KeyCount", 0) == 0 and run_kit.jobs(run_id) == []


def test_a_run_whose_metric_lines_come_slower_than_stall_minutes_is_refused(submit, run_kit):
    """The watch dates the newest step by the [metrics] lines: a run whose planned log_interval x step time is over
    its stall_minutes (sent or defaulted) would have every healthy segment stopped, so it is refused naming it."""
    body = run_kit.request(new_run_id())
    planned = submit({**body, "dry_run": True})
    assert planned["status"] == "validated", planned
    step_s = planned["estimate"]["step_time_s"]
    slow = {**body["hyperparameters"], "log_interval": math.ceil(45 * 60 / step_s)}  # 45 min between lines
    for extra, named in (({}, "stall_minutes defaults to 30"), ({"stall_minutes": 40}, "between two [metrics] lines")):
        answer = submit({**body, "hyperparameters": slow, **extra, "dry_run": True})
        assert answer["status"] == "rejected" and answer["error"]["field"] == "stall_minutes", answer
        assert named in answer["error"]["message"] and "log_interval" in answer["error"]["message"], answer
    for extra in ({"stall_minutes": 0}, {"stall_minutes": 60}):
        assert submit({**body, "hyperparameters": slow, **extra, "dry_run": True})["status"] == "validated"


def test_a_run_may_use_a_block_shorter_than_its_runtime(submit, run_kit, make_request):
    """b200-short ends in 3 h: too short for a 24 h job, but a run's segment ends at the block's end."""
    plain = submit(make_request())
    assert plain["capacity"]["training_plan_arn"].endswith("/b200-soon"), plain["capacity"]
    run = submit(run_kit.request(new_run_id()))
    assert run["capacity"]["training_plan_arn"].endswith("/b200-short"), run["capacity"]
    assert "the run continues" in run["capacity"]["reason"]


def test_a_block_must_leave_the_stop_margin_and_the_runs_least_segment_time(runtime, local_config, run_kit):
    request = runtime.request.parse_request(run_kit.request("r1"), local_config)
    now = datetime(2026, 3, 2, 12, tzinfo=UTC)
    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/edge"

    def plan(room_s: float) -> dict:
        end = now + timedelta(seconds=CAPACITY_BLOCK_RECLAIM_S + room_s)
        block = {
            "ReservedCapacityArn": "arn:aws:sagemaker:us-east-1:123456789012:reserved-capacity/rc-edge",
            "InstanceType": "ml.p6-b200.48xlarge", "TotalInstanceCount": 2, "Status": "Active",
            "StartTime": now - timedelta(days=1), "EndTime": end,
        }  # fmt: skip
        return {
            "TrainingPlanArn": arn, "Status": "Active", "TargetResources": ["training-job"],
            "AvailableInstanceCount": 2, "StartTime": block["StartTime"], "EndTime": end,
            "ReservedCapacitySummaries": [block],
        }  # fmt: skip

    least = STOP_MARGIN_S + DEFAULT_MIN_SEGMENT_MINUTES * 60
    assert not runtime.capacity.judge_plan(arn, plan(least - 1), request, now).eligible
    assert runtime.capacity.judge_plan(arn, plan(least), request, now).eligible
    # the run's own min_segment_minutes moves the edge; the refusal names it
    short = runtime.request.parse_request(run_kit.request("r1", min_segment_minutes=0.5), local_config)
    assert runtime.capacity.judge_plan(arn, plan(STOP_MARGIN_S + 30), short, now).eligible
    refused = runtime.capacity.judge_plan(arn, plan(STOP_MARGIN_S + 29), short, now)
    assert not refused.eligible and "min_segment_minutes=0.5" in refused.reason
    plain = runtime.request.parse_request({**run_kit.request("r1"), "run": None}, local_config)
    assert not runtime.capacity.judge_plan(arn, plan(3600), plain, now).eligible


def _act(runtime, clients, config, body):
    return runtime.actions.dispatch(body, clients=clients, config=config)


def _listed_runs(runtime, clients, config) -> dict[str, dict]:
    """Every run ``list_runs`` lists (every page), by run id."""
    runs: dict[str, dict] = {}
    token = None
    while True:
        page = _act(runtime, clients, config, {"action": "list_runs", "max_results": 100, "next_token": token})
        runs.update({r["run_id"]: r for r in page["runs"]})
        token = page.get("next_token")
        if token is None:
            return runs


def test_describe_list_and_stop_a_run(aws, submit, run_kit, runtime, clients, config):
    run_id = new_run_id()
    submit(run_kit.request(run_id, max_segments=3))
    name = spec.segment_job_name(run_id, 1)
    aws.set_job_status(name, "InProgress")
    run_kit.checkpoint(run_id, 10)
    described = _act(runtime, clients, config, {"action": "describe", "run_id": run_id})
    assert described["status"] == "described", described
    view = described["run"]
    assert view["state"] == "running" and view["max_steps"] == 100 and view["newest_complete_step"] == 10
    assert view["tokens_done"] == 10 * 8 * 2048
    [segment] = view["segments"]
    assert segment["training_job_name"] == name and segment["capacity"]["type"] == "training-plan"
    assert segment["first_step"] == 1 and segment["last_step"] == 10

    listed = _act(runtime, clients, config, {"action": "list_runs", "max_results": 100})
    pages, token = [listed], listed.get("next_token")
    while token:
        pages.append(_act(runtime, clients, config, {"action": "list_runs", "max_results": 100, "next_token": token}))
        token = pages[-1].get("next_token")
    mine = [r for p in pages for r in p["runs"] if r["run_id"] == run_id]
    assert mine and mine[0]["state"] == "active"

    stopped = _act(runtime, clients, config, {"action": "stop", "run_id": run_id})
    assert stopped["status"] == "stopping" and stopped["changed"] is True
    assert aws.describe_training_job(name)["TrainingJobStatus"] == "Stopping"
    again = _act(runtime, clients, config, {"action": "stop", "run_id": run_id})
    assert again["status"] == "stopping" and again["changed"] is False  # idempotent
    missing = _act(runtime, clients, config, {"action": "describe", "run_id": new_run_id()})
    assert missing["error"]["code"] == "NotFound" and missing["error"]["field"] == "run_id"


def test_list_runs_pages_and_refuses_a_tampered_token(submit, run_kit, runtime, clients, config):
    for _ in range(3):
        submit(run_kit.request(new_run_id()))
    first = _act(runtime, clients, config, {"action": "list_runs", "max_results": 2})
    assert len(first["runs"]) == 2 and first["next_token"]
    second = _act(
        runtime, clients, config, {"action": "list_runs", "max_results": 2, "next_token": first["next_token"]}
    )
    assert {r["run_id"] for r in second["runs"]}.isdisjoint({r["run_id"] for r in first["runs"]})
    bad = _act(runtime, clients, config, {"action": "list_runs", "max_results": 0})
    assert bad["error"]["field"] == "max_results"
    tampered = _act(runtime, clients, config, {"action": "list_runs", "next_token": first["next_token"][:-3] + "xyz"})
    assert tampered["status"] == "rejected" and tampered["error"]["field"] == "next_token", tampered
    foreign = _act(runtime, clients, config, {"action": "list_runs", "next_token": "not-a-token"})
    assert foreign["status"] == "rejected" and foreign["error"]["field"] == "next_token", foreign
    # made by hand (a position of the caller's choosing, well-formed but without this deployment's checksum)
    forged = base64.urlsafe_b64encode(json.dumps({"v": 2, "after": "a", "sum": "0" * 24}).encode()).decode()
    refused = _act(runtime, clients, config, {"action": "list_runs", "next_token": forged})
    assert refused["status"] == "rejected" and refused["error"]["field"] == "next_token", refused


def test_list_runs_lists_the_other_runs_past_a_damaged_record(
    submit, run_kit, aws, config, runtime, clients, record_s3
):
    good, bad = new_run_id(), new_run_id()
    for run_id in (good, bad):
        assert submit(run_kit.request(run_id))["status"] == "submitted"
    key = f"submitter/runs/{bad}/run.json"
    record_s3.put_object(Bucket=config.output_bucket, Key=key, Body=b"{cut sho")
    seen: dict[str, dict] = {}
    token = None
    try:
        while True:
            page = _act(runtime, clients, config, {"action": "list_runs", "max_results": 100, "next_token": token})
            assert page["status"] == "listed", page
            seen.update({r["run_id"]: r for r in page["runs"]})
            token = page.get("next_token")
            if token is None:
                break
    finally:
        aws.remove_object(config.output_bucket, key)  # the other tests list runs too; no role may delete it
    assert seen[good]["state"] == "active"
    assert seen[bad]["state"] == "unreadable" and key in seen[bad]["reason"]


def test_a_first_segment_sagemaker_refuses_releases_the_run_and_frees_its_id(
    aws, submit, run_kit, runtime, clients, config
):
    run_id = new_run_id()
    aws.inject_fault("CreateTrainingJob", "ValidationException", count=1, status=400)
    refused = submit(run_kit.request(run_id, max_steps=100))
    assert refused["status"] == "rejected", refused
    assert spec.segment_job_name(run_id, 1) not in [j["name"] for j in aws.training_jobs()]
    # the record is kept, marked released (the submitter may not delete), and the run does not exist for the API
    key = f"submitter/runs/{run_id}/run.json"
    record = json.loads(aws.client("s3").get_object(Bucket=config.output_bucket, Key=key)["Body"].read())
    assert record["state"] == "released" and record["reason"].startswith("InvalidRequest")
    described = _act(runtime, clients, config, {"action": "describe", "run_id": run_id})
    assert described["status"] == "rejected" and described["error"]["code"] == "NotFound"
    listed = _act(runtime, clients, config, {"action": "list_runs", "max_results": 100})
    assert run_id not in [r["run_id"] for r in listed["runs"]]
    # the run_id is free: another request (here a different max_steps) starts the run
    again = submit(run_kit.request(run_id, max_steps=200))
    assert again["status"] == "submitted", again
    record = json.loads(aws.client("s3").get_object(Bucket=config.output_bucket, Key=key)["Body"].read())
    assert record["state"] == "claimed" and "reason" not in record and record["max_steps"] == 200


def test_a_retry_sagemaker_refuses_releases_the_run_the_first_attempt_claimed(
    aws, submit, run_kit, runtime, clients, config
):
    """Review finding: the first submission's create failed (a fault: run.json stays claimed, to be finished by a
    retry); the retry was refused (quota) and released the token's claim but not run.json, which it had found
    as its own: the run stayed "continuing" with no segment, listed as active. The retry holds what it found."""
    run_id = new_run_id()
    body = run_kit.request(run_id)
    aws.inject_fault("CreateTrainingJob", "InternalFailure", count=-1, status=500)
    with pytest.raises(ClientError):
        submit(body)
    aws.clear_faults()
    aws.inject_fault("CreateTrainingJob", "ResourceLimitExceeded", message="limit 'ml.p6-b200.48xlarge' is 0")
    assert submit(body)["error"]["code"] == "QuotaExceeded"
    key = f"submitter/runs/{run_id}/run.json"
    record = json.loads(aws.client("s3").get_object(Bucket=config.output_bucket, Key=key)["Body"].read())
    assert record["state"] == "released" and record["reason"].startswith("QuotaExceeded"), record
    for action in ("describe", "stop"):
        answer = _act(runtime, clients, config, {"action": action, "run_id": run_id})
        assert answer["status"] == "rejected" and answer["error"]["code"] == "NotFound", answer
    assert run_id not in _listed_runs(runtime, clients, config)


def _stopped_during_create(run_id, env, runtime, clients, config) -> tuple[object, list[dict]]:
    """Clients for a submission whose CreateTrainingJob call is preceded by a stop of ``run_id`` (once), and the
    stop's answers."""
    submitting = runtime.aws.Clients.create(environ=env)
    stops: list[dict] = []

    def stop_meanwhile(**_: object) -> None:
        if not stops:
            stops.append(_act(runtime, clients, config, {"action": "stop", "run_id": run_id}))

    submitting.sagemaker.meta.events.register("before-call.sagemaker.CreateTrainingJob", stop_meanwhile)
    return submitting, stops


def test_a_new_claim_of_a_released_run_id_starts_clean_of_the_old_claims_records(
    aws, env, submit, run_kit, runtime, clients, config
):
    """Review finding: a stop of the run while its first segment was being created (run.json claimed, no segment:
    stop.json and end.json "stopped"), then SageMaker refused the segment (the run released), then a corrected
    request started the run again: its segment ran, yet describe said "stopped" and stop answered changed:false
    without stopping it. A new claim's records are its own (keyed by the claim's generation)."""
    run_id = new_run_id()
    submitting, stops = _stopped_during_create(run_id, env, runtime, clients, config)
    aws.inject_fault("CreateTrainingJob", "ResourceLimitExceeded", message="limit 'ml.p6-b200.48xlarge' is 0")
    refused = runtime.service.submit(run_kit.request(run_id), clients=submitting, config=config)
    assert refused["error"]["code"] == "QuotaExceeded", refused
    assert (stops[0]["status"], stops[0]["state"], stops[0]["changed"]) == ("stopped", spec.STOPPED, True), stops
    corrected = submit(run_kit.request(run_id, max_steps=200))
    assert corrected["status"] == "submitted" and corrected["replayed"] is False, corrected
    name = spec.segment_job_name(run_id, 1)
    aws.set_job_status(name, "InProgress")
    view = _act(runtime, clients, config, {"action": "describe", "run_id": run_id})["run"]
    assert view["state"] == "running" and "stop_requested" not in view and view["max_steps"] == 200, view
    assert _listed_runs(runtime, clients, config)[run_id]["state"] == "active"
    stopped = _act(runtime, clients, config, {"action": "stop", "run_id": run_id})
    assert (stopped["status"], stopped["changed"]) == ("stopping", True), stopped
    assert aws.describe_training_job(name)["TrainingJobStatus"] == "Stopping"


def test_a_stop_while_the_first_segment_is_created_stops_that_segment(aws, env, run_kit, runtime, clients, config):
    """Review finding: a stop of the run while its first segment was being created saw no segment running and ended
    the run, then the segment was created and trained on. The submission, having created it, sees the stop and
    stops it (one of the two always sees the other)."""
    run_id = new_run_id()
    submitting, stops = _stopped_during_create(run_id, env, runtime, clients, config)
    created = runtime.service.submit(run_kit.request(run_id), clients=submitting, config=config)
    assert created["status"] == "submitted", created
    assert (stops[0]["status"], stops[0]["state"]) == ("stopped", spec.STOPPED), stops
    name = spec.segment_job_name(run_id, 1)
    assert aws.describe_training_job(name)["TrainingJobStatus"] == "Stopping"
    view = _act(runtime, clients, config, {"action": "describe", "run_id": run_id})["run"]
    assert view["state"] == spec.STOPPED, view


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"schema": 1, "run_id": "cut', "is not JSON"),  # a record cut short
        (b'{"schema": 2, "run_id": "x"}', "is not a schema-1 record (schema 2: written by another version"),
        (b'{"schema": 1, "run_id": "x"}', "is not a run record"),
    ],
)
def test_an_unreadable_run_record_stops_its_submission_before_anything_is_written(
    aws, submit, run_kit, runtime, config, body, says, record_s3
):
    """Strict reading: a run.json that is not a schema-1 run record raises the ledger's error naming it; no job,
    and no claim of the run's token, is written while it stands."""
    import hashlib

    run_id = new_run_id()
    key = f"submitter/runs/{run_id}/run.json"
    record_s3.put_object(Bucket=config.output_bucket, Key=key, Body=body)
    try:
        with pytest.raises(runtime.errors.IdempotencyRecordError, match=f"s3://{config.output_bucket}/{key}") as raised:
            submit(run_kit.request(run_id))
        assert says in str(raised.value)
        assert run_kit.jobs(run_id) == []
        token = hashlib.sha256(spec.segment_client_token(run_id, 1).encode()).hexdigest()
        listed = aws.client("s3").list_objects_v2(
            Bucket=config.output_bucket, Prefix=f"submitter/client-tokens/{token}"
        )
        assert listed.get("KeyCount", 0) == 0
    finally:
        aws.remove_object(config.output_bucket, key)  # the other tests list runs too; no role may delete it


def test_the_issues_dry_run_is_refused_by_its_budget_and_a_fitting_one_is_bounded(submit, run_kit, make_request):
    """Issue 24: 8 instances, max_runtime_hours 24, a deadline 10 min away and max_instance_hours 1 was validated with
    MaxRuntimeInSeconds 86400. Now refused naming the budget that binds; a budget that fits bounds the segment."""
    run_id = new_run_id()
    soon = spec.format_time(datetime.now(UTC) + timedelta(minutes=10))
    body = {
        **run_kit.request(run_id, deadline=soon, max_instance_hours=1),
        "instance_count": 8,
        "capacity": "on-demand",
        "dry_run": True,
    }
    answer = submit(body)
    assert answer["status"] == "rejected" and answer["error"]["field"] == "run.max_instance_hours", answer
    assert answer["error"]["details"]["budget_decision"] == spec.BUDGET_INSTANCE_HOURS
    assert "7.5 min" in answer["error"]["message"] and "35 min" in answer["error"]["message"]
    deadline_only = submit({**body, "run": {"run_id": run_id, "deadline": soon}})
    assert deadline_only["error"]["field"] == "run.deadline", deadline_only

    later = datetime.now(UTC) + timedelta(hours=3)
    fits = submit({**body, "run": {"run_id": run_id, "deadline": spec.format_time(later), "max_instance_hours": 16}})
    assert fits["status"] == "validated", fits
    assert fits["create_training_job"]["StoppingCondition"]["MaxRuntimeInSeconds"] == 7200  # 16 h / 8 instances
    assert fits["create_training_job"]["ResourceConfig"]["InstanceCount"] == 8  # never shrunk to fit
    by_deadline = submit({**body, "run": {"run_id": run_id, "deadline": spec.format_time(later)}})
    assert 3 * 3600 - 60 < by_deadline["create_training_job"]["StoppingCondition"]["MaxRuntimeInSeconds"] <= 3 * 3600


def test_a_spot_segments_wait_ends_by_the_deadline(submit, run_kit):
    """MaxWaitTimeInSeconds counts the wait and the run: a spot segment may not wait past the run's deadline."""
    later = datetime.now(UTC) + timedelta(hours=3)
    body = {**run_kit.request(new_run_id(), deadline=spec.format_time(later)), "capacity": "spot", "dry_run": True}
    stopping = submit(body)["create_training_job"]["StoppingCondition"]
    assert stopping["MaxRuntimeInSeconds"] <= stopping["MaxWaitTimeInSeconds"] <= 3 * 3600
