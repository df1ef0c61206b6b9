"""One client_token, at most one job: records in S3, retries that add or drop job_name, races, upgrades.

Against the emulator over HTTP (S3 conditional writes and SageMaker Search are moto's).
"""

from __future__ import annotations

import collections
import concurrent.futures
import hashlib
import json
import threading
import uuid

import pytest

pytestmark = pytest.mark.xdist_group("submitter")

PREFIX = "submitter/client-tokens/"  # settings.CLIENT_TOKEN_RECORDS_PREFIX, as the emulator's environment names it


def test_the_emulator_configures_the_records_where_the_stack_does(aws, runtime):
    assert aws.env[runtime.settings.ENV_CLIENT_TOKEN_RECORDS] == f"s3://{aws.env['OUTPUT_BUCKET']}/{PREFIX}"
    assert runtime.settings.CLIENT_TOKEN_RECORDS_PREFIX == PREFIX


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def record_of(aws, token: str) -> dict | None:
    s3 = aws.client("s3")
    key = f"{PREFIX}{_digest(token)}.json"
    listed = s3.list_objects_v2(Bucket=aws.env["OUTPUT_BUCKET"], Prefix=key).get("Contents") or []
    if not listed:
        return None
    return json.loads(s3.get_object(Bucket=aws.env["OUTPUT_BUCKET"], Key=key)["Body"].read())


def record_keys(aws) -> set[str]:
    s3 = aws.client("s3")
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=aws.env["OUTPUT_BUCKET"], Prefix=PREFIX)
    return {o["Key"] for page in pages for o in page.get("Contents") or []}


def fingerprint_of(runtime, config, request: dict) -> str:
    return runtime.request.parse_request(request, config).fingerprint()


# --- retries that add or drop job_name ------------------------------------------------------------------


def test_adding_job_name_on_a_retry_returns_the_first_job(aws, token_jobs, submit, make_request):
    request = make_request(client_token="tok-b", capacity="on-demand")
    first = submit(request)
    assert first["status"] == "submitted" and first["replayed"] is False, first
    retry = submit({**request, "job_name": "tok-b-named"})
    assert retry["status"] == "submitted" and retry["replayed"] is True, retry
    assert retry["training_job_arn"] == first["training_job_arn"]
    assert retry["training_job_name"] == first["training_job_name"] != "tok-b-named"
    assert "tok-b-named" not in {j["name"] for j in aws.training_jobs()}
    assert token_jobs("tok-b") == [first["training_job_name"]]


def test_dropping_job_name_on_a_retry_returns_the_first_job(aws, token_jobs, submit, make_request):
    token, name = f"drop-{uuid.uuid4()}", f"named-{uuid.uuid4().hex[:12]}"
    first = submit(make_request(client_token=token, job_name=name, capacity="spot"))
    assert first["training_job_name"] == name, first
    retry = submit(make_request(client_token=token, capacity="spot"))
    assert retry["replayed"] is True and retry["training_job_arn"] == first["training_job_arn"]
    dry = submit(make_request(client_token=token, capacity="spot", dry_run=True, job_name="other-name"))
    assert dry["status"] == "validated" and dry["replayed"] is True and dry["training_job_name"] == name
    assert token_jobs(token) == [name]


def test_concurrent_retries_with_and_without_job_name_make_one_job(aws, token_jobs, submit, make_request):
    """Search alone is no lock: concurrent requests with one token and different job names all miss it.
    The record's conditional write lets exactly one create; the others settle on its job."""
    token = f"race-{uuid.uuid4()}"
    base = make_request(client_token=token, capacity="on-demand")
    variants = [base if i % 2 else {**base, "job_name": f"race-{i}-{uuid.uuid4().hex[:8]}"} for i in range(8)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(submit, variants))
    assert all(r["status"] == "submitted" for r in responses), responses
    assert len({r["training_job_arn"] for r in responses}) == 1
    assert sum(not r["replayed"] for r in responses) == 1
    assert token_jobs(token) == [responses[0]["training_job_name"]]


def test_concurrent_different_requests_with_one_token_make_one_job(aws, token_jobs, submit, make_request):
    token = f"race-diff-{uuid.uuid4()}"
    requests = [make_request(client_token=token, capacity="on-demand", max_runtime_hours=h) for h in (2, 3, 4, 5, 6, 7)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        responses = list(pool.map(submit, requests))
    submitted = [r for r in responses if r["status"] == "submitted"]
    conflicts = [r for r in responses if r["status"] == "rejected"]
    assert len(submitted) == 1 and not submitted[0]["replayed"], responses
    assert len(conflicts) == 5 and {r["error"]["code"] for r in conflicts} == {"Conflict"}
    assert {r["error"]["field"] for r in conflicts} == {"client_token"}
    assert token_jobs(token) == [submitted[0]["training_job_name"]]


ONE_FREE_INSTANCE = {
    "TrainingPlanName": "one-free", "Status": "Active", "InstanceType": "ml.p6-b200.48xlarge",
    "TotalInstanceCount": 1, "StartTime": "now-1d", "EndTime": "now+10d",
}  # fmt: skip


def outcomes(responses: list[dict]) -> dict[str, int]:
    """How many answers created a job, replayed one, or were refused (by code)."""
    counted = collections.Counter(
        ("replayed" if r["replayed"] else "created") if r["status"] == "submitted" else r["error"]["code"]
        for r in responses
    )
    return dict(counted)


def one_free_instance_race(aws, runtime, env, config, events: list[dict]) -> list[dict]:
    """Submit ``events`` at once on a plan with one free instance, in the edge's worst order: every capacity
    choice but the first waits (up to 10 s) until a job was created, so the others find the instance taken."""
    from .conftest import PLANS

    clients = runtime.aws.Clients.create(environ=env)  # its own clients: the hooks below stay with them
    created, lock, first = threading.Event(), threading.Lock(), [True]

    def before_plan(**_: object) -> None:
        with lock:
            if first[0]:
                first[0] = False
                return
        created.wait(10)

    def after_create(parsed: dict, **_: object) -> None:
        if parsed.get("TrainingJobArn"):
            created.set()

    clients.sagemaker.meta.events.register("before-call.sagemaker.DescribeTrainingPlan", before_plan)
    clients.sagemaker.meta.events.register("after-call.sagemaker.CreateTrainingJob", after_create)
    aws.set_plans([ONE_FREE_INSTANCE])
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=len(events)) as pool:
            return list(pool.map(lambda e: runtime.service.submit(e, clients=clients, config=config), events))
    finally:
        aws.complete_active_jobs()
        aws.set_plans(PLANS)


def test_concurrent_duplicates_on_a_plan_with_one_free_instance_settle_on_one_job(
    aws, runtime, env, config, token_jobs, make_request
):
    """Edge: six parallel submissions of one client_token gave 1 created, 1 replayed and 4 NoCapacity
    ("nothing was created") although the token's job existed: the token's job was looked up before the
    capacity choice and the token claimed after it. Every concurrent duplicate settles on the one job."""
    request = make_request()  # capacity training-plan: the plan's one instance
    responses = one_free_instance_race(aws, runtime, env, config, [dict(request) for _ in range(6)])
    assert outcomes(responses) == {"created": 1, "replayed": 5}, responses
    assert len({r["training_job_arn"] for r in responses}) == 1
    assert token_jobs(request["client_token"]) == [responses[0]["training_job_name"]]


def test_a_capacity_refusal_settling_on_a_job_made_without_the_token_binds_the_token(
    aws, runtime, env, config, token_jobs, make_request
):
    """Review finding: a request with a token was refused capacity because the same request without the token had
    just taken the plan's one instance; it answered that job as a replay without binding the token to it, and a
    different request with the token then created a second job. The refusal settles as the main path does: the
    token is claimed naming the adopted job."""
    from .conftest import PLANS

    name = f"adopt-race-{uuid.uuid4().hex[:8]}"
    plain = make_request(client_token=None, job_name=name)  # capacity training-plan: the plan's one instance
    token = f"adopt-race-{uuid.uuid4()}"
    with_token, without_token = (runtime.aws.Clients.create(environ=env) for _ in range(2))
    made: list[dict] = []

    def before_plan(**_: object) -> None:  # the request without the token creates the job first
        if not made:
            made.append(runtime.service.submit(plain, clients=without_token, config=config))

    with_token.sagemaker.meta.events.register("before-call.sagemaker.DescribeTrainingPlan", before_plan)
    aws.set_plans([ONE_FREE_INSTANCE])
    try:
        answer = runtime.service.submit({**plain, "client_token": token}, clients=with_token, config=config)
    finally:
        aws.complete_active_jobs()
        aws.set_plans(PLANS)
    assert made[0]["status"] == "submitted" and made[0]["replayed"] is False, made
    assert answer["status"] == "submitted" and answer["replayed"] is True, answer
    assert answer["training_job_arn"] == made[0]["training_job_arn"]
    record = record_of(aws, token)
    assert record is not None, "the token was not bound to the job that answered it"
    assert (record["training_job_name"], record["state"], record["adopted"]) == (name, "claimed", True)
    different = make_request(client_token=token, capacity="on-demand", max_runtime_hours=2)
    other = runtime.service.submit(different, clients=without_token, config=config)
    assert (other["error"]["code"], other["error"]["field"]) == ("Conflict", "client_token"), other
    assert runtime.request.derived_job_name(token) not in {j["name"] for j in aws.training_jobs()}


def test_a_create_refused_while_a_duplicate_creates_the_job_answers_with_that_job(
    aws, runtime, env, config, token_jobs, make_request
):
    """Edge (review): concurrent duplicates of one token, SageMaker refusing the first create (quota): the refused
    caller answered QuotaExceeded ("nothing was created") and released the token's claim while a duplicate, which
    had found the claim in flight, created the job. A refused create settles again before answering, and a claim
    whose job exists is never released."""
    request = make_request(capacity="on-demand")
    first, second = (runtime.aws.Clients.create(environ=env) for _ in range(2))
    duplicate: list[dict] = []

    def after_create(parsed: dict, **_: object) -> None:  # the first create was refused: the duplicate runs now
        if not duplicate:
            duplicate.append(runtime.service.submit(dict(request), clients=second, config=config))

    first.sagemaker.meta.events.register("after-call.sagemaker.CreateTrainingJob", after_create)
    aws.inject_fault("CreateTrainingJob", "ResourceLimitExceeded", message="limit 'ml.p6-b200.48xlarge' is 0")
    answer = runtime.service.submit(dict(request), clients=first, config=config)
    assert duplicate[0]["status"] == "submitted" and duplicate[0]["replayed"] is False, duplicate
    assert answer["status"] == "submitted" and answer["replayed"] is True, answer
    assert answer["training_job_arn"] == duplicate[0]["training_job_arn"]
    record = record_of(aws, request["client_token"])
    assert record["state"] == "claimed" and record["training_job_name"] == answer["training_job_name"], record
    assert token_jobs(request["client_token"]) == [answer["training_job_name"]]


# --- the record ----------------------------------------------------------------------------------------


def test_the_record_names_the_job_and_the_request(aws, runtime, submit, config, make_request):
    request = make_request(capacity="on-demand")
    response = submit(request)
    record = record_of(aws, request["client_token"])
    assert record is not None
    assert record["schema"] == 1 and record["state"] == "claimed"
    assert record["training_job_name"] == response["training_job_name"]
    assert record["request_sha256"] == fingerprint_of(runtime, config, request)


def test_a_dry_run_writes_nothing(aws, submit, make_request):
    before = record_keys(aws)
    request = make_request(capacity="on-demand", dry_run=True)
    assert submit(request)["status"] == "validated"
    assert submit({**request, "job_name": f"dry-{uuid.uuid4().hex[:8]}"})["status"] == "validated"
    assert record_keys(aws) == before
    assert record_of(aws, request["client_token"]) is None


def _crashed_record(aws, runtime, config, request: dict, job_name: str) -> None:
    """What a function killed between claiming the token and CreateTrainingJob leaves behind."""
    body = {
        "schema": 1,
        "training_job_name": job_name,
        "request_sha256": fingerprint_of(runtime, config, request),
        "state": "claimed",
        "created": "2026-01-01T00:00:00+00:00",
    }
    aws.client("s3", access_key=aws.env["AWS_ACCESS_KEY_ID"]).put_object(  # as the submitter: only it writes there
        Bucket=aws.env["OUTPUT_BUCKET"],
        Key=f"{PREFIX}{_digest(request['client_token'])}.json",
        Body=json.dumps(body).encode(),
    )


def test_a_record_whose_job_was_never_created_is_finished_by_the_same_request(
    aws, token_jobs, runtime, submit, config, make_request
):
    request = make_request(capacity="on-demand")
    recorded = f"crashed-{uuid.uuid4().hex[:12]}"
    _crashed_record(aws, runtime, config, request, recorded)
    aws.clear_calls()
    other = submit({**request, "max_runtime_hours": 5})
    assert other["status"] == "rejected" and other["error"]["code"] == "Conflict", other
    assert other["error"]["field"] == "client_token"
    assert other["error"]["details"]["training_job_name"] == recorded
    assert "in flight or was interrupted" in other["error"]["message"]
    assert aws.calls("CreateTrainingJob") == []
    dry = submit({**request, "dry_run": True})
    assert dry["status"] == "validated" and dry["training_job_name"] == recorded and dry["replayed"] is False
    finished = submit({**request, "job_name": f"other-{uuid.uuid4().hex[:8]}"})  # job_name is not part of the job
    assert finished["status"] == "submitted" and finished["replayed"] is False, finished
    assert finished["training_job_name"] == recorded
    again = submit(request)
    assert again["replayed"] is True and again["training_job_arn"] == finished["training_job_arn"]
    assert token_jobs(request["client_token"]) == [recorded]


def test_a_job_refused_by_sagemaker_frees_the_token_for_a_corrected_request(aws, token_jobs, submit, make_request):
    request = make_request(capacity="on-demand")
    aws.inject_fault("CreateTrainingJob", "ResourceLimitExceeded")
    refused = submit(request)
    assert refused["error"]["code"] == "QuotaExceeded", refused
    record = record_of(aws, request["client_token"])
    assert record["state"] == "released" and record["reason"].startswith("QuotaExceeded")
    corrected = submit({**request, "capacity": "spot"})
    assert corrected["status"] == "submitted" and corrected["replayed"] is False, corrected
    assert record_of(aws, request["client_token"])["state"] == "claimed"
    assert submit({**request, "capacity": "spot"})["replayed"] is True
    assert submit(request)["error"]["code"] == "Conflict"  # the token now stands for the corrected request
    assert token_jobs(request["client_token"]) == [corrected["training_job_name"]]


def test_a_job_name_held_by_another_request_leaves_the_token_free(aws, submit, make_request):
    name = f"held-{uuid.uuid4().hex[:12]}"
    submit(make_request(job_name=name, capacity="on-demand"))
    token = f"free-{uuid.uuid4()}"
    taken = submit(make_request(client_token=token, job_name=name, capacity="spot"))
    assert taken["error"]["code"] == "Conflict" and taken["error"]["field"] == "job_name", taken
    assert record_of(aws, token) is None
    renamed = submit(make_request(client_token=token, job_name=f"{name}-2", capacity="spot"))
    assert renamed["status"] == "submitted" and renamed["training_job_name"] == f"{name}-2"


def test_a_token_whose_recorded_name_another_request_took_first(aws, token_jobs, runtime, submit, config, make_request):
    """The race the name lock settles: another request (another token) creates the recorded name first.
    The token never got a job, so its record binds none: the name stays refused (it is another token's),
    and the same request under another name is free to create (the record is replaced)."""
    name = f"raced-{uuid.uuid4().hex[:12]}"
    submit(make_request(job_name=name, capacity="on-demand"))  # the other request
    request = make_request(job_name=name, capacity="spot")
    _crashed_record(aws, runtime, config, request, name)  # this token claimed the name, then lost the race
    taken = submit(request)
    assert taken["error"]["code"] == "Conflict" and taken["error"]["field"] == "job_name", taken
    # the message says whose job it is (it said "already exists for this job_name")
    assert f"training job {name!r} belongs to another client_token" in taken["error"]["message"]
    renamed = submit({**request, "job_name": f"{name}-2"})
    assert renamed["status"] == "submitted" and renamed["training_job_name"] == f"{name}-2", renamed
    assert record_of(aws, request["client_token"])["training_job_name"] == f"{name}-2"
    assert token_jobs(request["client_token"]) == [f"{name}-2"]


def test_a_record_whose_name_another_token_took_leaves_the_token_its_own_job(
    aws, token_jobs, runtime, submit, config, make_request
):
    """Review finding (idem2 "crash2"): the token's record named a job that another token then created
    with the same body; a retry replayed that other token's job. Now the token gets a job of its own."""
    request = make_request(capacity="on-demand")
    token, taken = request["client_token"], f"taken-{uuid.uuid4().hex[:12]}"
    _crashed_record(aws, runtime, config, request, taken)
    other = submit({**request, "client_token": f"other-{uuid.uuid4()}", "job_name": taken})
    assert other["status"] == "submitted" and other["training_job_name"] == taken, other
    retry = submit(request)
    assert retry["status"] == "submitted" and retry["replayed"] is False, retry
    derived = runtime.request.derived_job_name(token)
    assert retry["training_job_name"] == derived != taken
    assert record_of(aws, token)["training_job_name"] == derived
    again = submit(request)
    assert again["replayed"] is True and again["training_job_arn"] == retry["training_job_arn"]
    assert token_jobs(token) == [derived]


def test_a_token_is_never_answered_by_another_tokens_job(aws, token_jobs, runtime, submit, make_request):
    """Review finding (idem1 part 1): token B sending A's body with A's job_name replayed A's job and
    wrote no record; B with another body then created a job, so B's first body got Conflict: one token,
    two jobs. A job of another token is a Conflict on job_name; a token answers with one job, ever."""
    name = f"shared-{uuid.uuid4().hex[:12]}"
    a = make_request(job_name=name, capacity="on-demand")
    first = submit(a)
    assert first["status"] == "submitted", first
    b = {**a, "client_token": f"b-{uuid.uuid4()}"}
    for event in (b, {**b, "dry_run": True}):  # the dry run answers as the submission does
        refused = submit(event)
        assert (refused["error"]["code"], refused["error"]["field"]) == ("Conflict", "job_name"), refused
        assert f"training job {name!r} belongs to another client_token" in refused["error"]["message"]
        assert refused["error"]["details"]["training_job_arn"] == first["training_job_arn"]
    assert record_of(aws, b["client_token"]) is None  # refusals write nothing
    own = submit({**b, "job_name": None, "max_runtime_hours": 12})
    assert own["status"] == "submitted" and own["replayed"] is False, own
    assert own["training_job_name"] == runtime.request.derived_job_name(b["client_token"])
    first_body = submit({**b, "job_name": None})
    assert (first_body["error"]["code"], first_body["error"]["field"]) == ("Conflict", "client_token"), first_body
    assert first_body["error"]["details"]["training_job_name"] == own["training_job_name"]
    assert "a client_token stands for one request" in first_body["error"]["message"]
    assert token_jobs(b["client_token"]) == [own["training_job_name"]]
    assert token_jobs(a["client_token"]) == [name]


def test_a_job_made_without_a_token_is_adopted_by_the_same_request_with_one(
    aws, token_jobs, runtime, submit, make_request
):
    """A job a request made with job_name alone: the same request with a client_token binds the token
    to it (the record names it, adopted) instead of answering Conflict; the token then answers with it."""
    name = f"untokened-{uuid.uuid4().hex[:12]}"
    plain = make_request(client_token=None, job_name=name, capacity="on-demand")
    first = submit(plain)
    token = f"adopt-{uuid.uuid4()}"
    dry = submit({**plain, "client_token": token, "dry_run": True})
    assert dry["status"] == "validated" and dry["replayed"] is True and dry["training_job_name"] == name, dry
    assert record_of(aws, token) is None  # a dry run writes nothing
    adopted = submit({**plain, "client_token": token})
    assert adopted["status"] == "submitted" and adopted["replayed"] is True, adopted
    assert adopted["training_job_arn"] == first["training_job_arn"]
    record = record_of(aws, token)
    assert (record["training_job_name"], record["state"], record["adopted"]) == (name, "claimed", True)
    without_name = submit({**plain, "client_token": token, "job_name": None})  # found by the record
    assert without_name["replayed"] is True and without_name["training_job_arn"] == first["training_job_arn"]
    changed = submit({**plain, "client_token": token, "job_name": None, "max_runtime_hours": 5})
    assert (changed["error"]["code"], changed["error"]["field"]) == ("Conflict", "client_token"), changed
    other = submit({**plain, "client_token": f"other-{uuid.uuid4()}", "max_runtime_hours": 5})
    assert (other["error"]["code"], other["error"]["field"]) == ("Conflict", "job_name"), other
    assert "was created without a client_token by a different request" in other["error"]["message"]
    assert [j["name"] for j in aws.training_jobs() if j["name"] in (name, runtime.request.derived_job_name(token))] == [
        name
    ]
    assert token_jobs(token) == []  # the job keeps the tags it was made with; the record binds it


def test_an_unreadable_record_creates_nothing(aws, runtime, submit, make_request, record_s3):
    request = make_request(capacity="on-demand")
    key = f"{PREFIX}{_digest(request['client_token'])}.json"
    record_s3.put_object(Bucket=aws.env["OUTPUT_BUCKET"], Key=key, Body=b'{"schema": 1, "training_job_na')
    aws.clear_calls()
    with pytest.raises(runtime.errors.IdempotencyRecordError, match=key):
        submit(request)
    assert aws.calls("CreateTrainingJob") == []


_GOOD_RECORD = {
    "schema": 1,
    "training_job_name": "job-x",
    "request_sha256": "a" * 64,
    "state": "claimed",
    "created": "x",
}


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"schema": True}, "not a schema-1 record"),  # json true == 1 in Python: was read as schema 1
        ({"schema": 1.0}, "not a schema-1 record"),
        ({"schema": "1"}, "not a schema-1 record"),
        ({"schema": 2}, "not a schema-1 record (schema 2: written by another version of the submitter)"),
        ({"training_job_name": "bad name!\n"}, "which is not a SageMaker TrainingJobName"),  # was echoed as a job name
        ({"training_job_name": "a" * 64}, "which is not a SageMaker TrainingJobName"),
        ({"request_sha256": "a"}, "is not 64 lower-case hex digits"),
        ({"adopted": "yes"}, "not a schema-1 record"),
        ({"state": "CLAIMED"}, "not a schema-1 record: its state 'CLAIMED' is neither 'claimed' nor 'released'"),
        ({"state": "released", "reason": 7}, "not a schema-1 record: its reason is a JSON int, not a string"),
    ],
)
def test_a_record_is_read_strictly_and_nothing_is_created_from_a_bad_one(
    aws, runtime, submit, make_request, change, says, record_s3
):
    request = make_request(capacity="on-demand")
    key = f"{PREFIX}{_digest(request['client_token'])}.json"
    record_s3.put_object(Bucket=aws.env["OUTPUT_BUCKET"], Key=key, Body=json.dumps({**_GOOD_RECORD, **change}).encode())
    aws.clear_calls()
    uri = f"s3://{aws.env['OUTPUT_BUCKET']}/{key}"
    with pytest.raises(runtime.errors.IdempotencyRecordError, match=f"client-token record {uri}") as raised:
        submit(request)
    assert says in str(
        raised.value
    ) and "to free the token, delete it with the output bucket policy's ClientTokenRecordsSubmitterOnly" in str(
        raised.value
    )
    assert "\n" not in str(raised.value)  # a hand-edited name is quoted, never echoed raw
    # "another version" only when the schema is another version's (it said so of a schema-1 record's bad state)
    assert ("another version" in str(raised.value)) == (change.get("schema") == 2)
    assert aws.calls("CreateTrainingJob") == []


# --- fingerprint versions: a job or a claim of another version is refused as such ----------------------


def _create_outside_the_submitter(aws, event: dict, *, name: str, tags: tuple = ()) -> str:
    """Create the job as a request outside this submitter would (no claim): ``tags``, the submitter's mark and
    (with a token) the token's tag."""
    tags = [{"Key": k, "Value": v} for k, v in tags] + [{"Key": "platform:submitted-by", "Value": "job-submitter"}]
    if event.get("client_token"):
        tags.append({"Key": "platform:client-token-sha256", "Value": _digest(event["client_token"])})
    created = aws.client("sagemaker").create_training_job(
        TrainingJobName=name,
        AlgorithmSpecification={
            "TrainingImage": json.loads(aws.env["TRAINER_IMAGE_URIS"])["amd64"],
            "TrainingInputMode": "FastFile",
        },
        RoleArn=aws.env["EXECUTION_ROLE_ARN"],
        OutputDataConfig={"S3OutputPath": f"s3://{aws.env['OUTPUT_BUCKET']}/training-jobs/"},
        ResourceConfig={
            "InstanceType": "ml.p6-b200.48xlarge",
            "InstanceCount": event.get("instance_count", 1),
            "VolumeSizeInGB": 500,
        },
        StoppingCondition={"MaxRuntimeInSeconds": round(event.get("max_runtime_hours", 24) * 3600)},
        Tags=tags,
    )
    return created["TrainingJobArn"]


@pytest.mark.parametrize("tag", ["platform:request-sha256", "platform:request-sha256-v3"])
def test_a_job_fingerprinted_under_another_version_is_refused_as_such(aws, runtime, submit, config, make_request, tag):
    """A fingerprint change is a new version: a job whose tag is another version's is never compared with this
    version's fingerprint (the same request looks different) and never treated as a different request."""
    request = make_request(capacity="on-demand")
    name = runtime.request.derived_job_name(request["client_token"])
    arn = _create_outside_the_submitter(
        aws, request, name=name, tags=((tag, fingerprint_of(runtime, config, request)),)
    )
    aws.clear_calls()
    for event in (request, {**request, "dry_run": True}):
        refused = submit(event)
        assert (refused["error"]["code"], refused["error"]["field"]) == ("Conflict", "client_token"), refused
        message = refused["error"]["message"]
        assert f"its request fingerprint is of another version (tag {tag})" in message, message
        assert "platform:request-sha256-v2" in message and refused["error"]["details"]["training_job_arn"] == arn
    assert aws.calls("CreateTrainingJob") == [] and record_of(aws, request["client_token"]) is None


def test_a_claim_of_another_fingerprint_version_is_refused_as_such(
    aws, runtime, submit, config, make_request, record_s3
):
    request = make_request(capacity="on-demand")
    key = f"{PREFIX}{_digest(request['client_token'])}.json"
    claim = {
        "schema": 1, "training_job_name": f"v3-{uuid.uuid4().hex[:12]}", "request_sha256": "b" * 64,
        "fingerprint_version": 3, "state": "claimed", "created": "2026-01-01T00:00:00+00:00",
    }  # fmt: skip
    record_s3.put_object(Bucket=aws.env["OUTPUT_BUCKET"], Key=key, Body=json.dumps(claim).encode())
    aws.clear_calls()
    refused = submit(request)
    assert (refused["error"]["code"], refused["error"]["field"]) == ("Conflict", "client_token"), refused
    assert "under request fingerprint version 3 (this submitter computes version 2" in refused["error"]["message"]
    assert aws.calls("CreateTrainingJob") == []
    # a released claim of another version binds no job: the token is free
    record_s3.put_object(
        Bucket=aws.env["OUTPUT_BUCKET"],
        Key=key,
        Body=json.dumps({**claim, "state": "released", "reason": "x"}).encode(),
    )
    freed = submit(request)
    assert freed["status"] == "submitted" and freed["replayed"] is False, freed
    assert record_of(aws, request["client_token"])["fingerprint_version"] == 2


# --- derived names: the name space of job-<24 hex> ------------------------------------------------------


def test_a_derived_name_squatted_before_the_upgrade_is_refused_truthfully(
    aws, token_jobs, runtime, submit, make_request
):
    """Review finding: token C (previous version) created ``job-<24 hex of sha256(D)>``; token D then got
    Conflict "already exists for this client_token" (false), its record was released for good, a dry run
    answered validated, and a token E whose name C2 squatted with E's very body replayed C2's job."""
    d_token, c_token = f"d-{uuid.uuid4()}", f"c-{uuid.uuid4()}"
    squatted = runtime.request.derived_job_name(d_token)
    c_event = make_request(client_token=c_token, capacity="on-demand", max_runtime_hours=5)
    c_arn = _create_outside_the_submitter(aws, c_event, name=squatted)
    d_event = make_request(client_token=d_token, capacity="on-demand")
    aws.clear_calls()
    for event in ({**d_event, "dry_run": True}, d_event, {**c_event, "client_token": d_token}):
        refused = submit(event)
        assert (refused["error"]["code"], refused["error"]["field"]) == ("Conflict", "job_name"), refused
        message = refused["error"]["message"]
        assert f"training job {squatted!r} belongs to another client_token" in message
        assert "it is the name derived from this client_token" in message and "send a job_name" in message
        assert "already exists for this client_token" not in message
        assert refused["error"]["details"]["training_job_arn"] == c_arn
    assert aws.calls("CreateTrainingJob") == [] and record_of(aws, d_token) is None
    named = submit({**d_event, "job_name": f"d-named-{uuid.uuid4().hex[:8]}"})
    assert named["status"] == "submitted" and named["replayed"] is False, named
    assert token_jobs(d_token) == [named["training_job_name"]]
    assert token_jobs(c_token) == [squatted]


def test_a_squatted_derived_name_with_the_very_same_body_is_not_replayed(
    aws, token_jobs, runtime, submit, config, make_request
):
    """The E case: a squatter (token C2) made E's derived name with E's exact body (the fingerprint tag
    matches): the job is C2's, so E is refused, not answered with it."""
    e_token = f"e-{uuid.uuid4()}"
    e_event = make_request(client_token=e_token, capacity="on-demand")
    squatted = runtime.request.derived_job_name(e_token)
    c2 = {**e_event, "client_token": f"c2-{uuid.uuid4()}"}
    same_body = (("platform:request-sha256-v2", fingerprint_of(runtime, config, e_event)),)
    _create_outside_the_submitter(aws, c2, name=squatted, tags=same_body)
    refused = submit(e_event)
    assert (refused["error"]["code"], refused["error"]["field"]) == ("Conflict", "job_name"), refused
    assert "belongs to another client_token" in refused["error"]["message"]
    assert token_jobs(e_token) == [] and record_of(aws, e_token) is None


def test_a_derived_name_cannot_be_squatted_now(aws, runtime, submit, make_request):
    d_token = f"d-{uuid.uuid4()}"
    squat = submit(make_request(job_name=runtime.request.derived_job_name(d_token), capacity="on-demand"))
    assert (squat["error"]["code"], squat["error"]["field"]) == ("InvalidRequest", "job_name"), squat
    assert runtime.request.derived_job_name(d_token) not in {j["name"] for j in aws.training_jobs()}
    own = submit(make_request(client_token=d_token, capacity="on-demand"))
    assert own["status"] == "submitted" and own["training_job_name"] == runtime.request.derived_job_name(d_token)


# --- S3's answers the emulator cannot produce (botocore's Stubber) -------------------------------------


@pytest.mark.parametrize(("code", "status"), [("PreconditionFailed", 412), ("ConditionalRequestConflict", 409)])
def test_a_conditional_write_that_lost_is_not_a_claim(runtime, code, status):
    """412: another writer's record exists; 409: a concurrent conditional write to the key is in flight."""
    from botocore.stub import Stubber

    from platform_constructs.submitter.runtime import ledger

    s3 = runtime.aws.Clients.create(
        environ={"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}
    ).s3
    records = ledger.TokenLedger(s3, "s3://out-bucket/submitter/client-tokens/")
    claim = {"replace": None, "adopted": False}
    with Stubber(s3) as stub:
        stub.add_client_error("put_object", service_error_code=code, http_status_code=status)
        assert records.claim("ab" * 32, "job-1", "f" * 64, "2026-01-01T00:00:00+00:00", **claim) is None
        stub.add_client_error("put_object", service_error_code="AccessDenied", http_status_code=403)
        with pytest.raises(s3.exceptions.ClientError, match="AccessDenied"):
            records.claim("ab" * 32, "job-1", "f" * 64, "2026-01-01T00:00:00+00:00", **claim)


@pytest.mark.parametrize(
    "location", ["s3://out-bucket/submitter/client-tokens", "out-bucket/prefix/", "s3://Bad_Bucket/p/", ""]
)
def test_a_malformed_records_location_is_a_configuration_error(runtime, location):
    from platform_constructs.submitter.runtime import ledger

    with pytest.raises(runtime.errors.ConfigurationError, match="client-token records location"):
        ledger.TokenLedger(object(), location)


def test_the_records_location_is_required_by_the_configuration(runtime, env):
    broken = {k: v for k, v in env.items() if k != runtime.settings.ENV_CLIENT_TOKEN_RECORDS}
    with pytest.raises(runtime.errors.ConfigurationError, match=runtime.settings.ENV_CLIENT_TOKEN_RECORDS):
        runtime.config.SubmitterConfig.from_environ(broken)
    with pytest.raises(runtime.errors.ConfigurationError, match="expected s3://<bucket>/<prefix>/"):
        runtime.config.SubmitterConfig.from_environ(
            {**env, runtime.settings.ENV_CLIENT_TOKEN_RECORDS: "s3://b/no-slash"}
        )
