"""Properties (hypothesis): validation agrees with SageMaker's model; one client_token never makes two jobs."""

from __future__ import annotations

import concurrent.futures
import json
import math
import string
import uuid

import jsonschema
import pytest
from botocore.validate import ParamValidator
from hypothesis import HealthCheck, given, note, settings
from hypothesis import event as label
from hypothesis import strategies as st

from devtools.local_aws.shapes import operation_model, validate_input
from platform_constructs.submitter.runtime import request as request_module
from platform_spec import catalogue
from platform_spec.hyperparameters import SPECS

pytestmark = pytest.mark.xdist_group("submitter")

PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/b200-soon"


# Strings near every edge SageMaker's model draws: lengths around the limits, trailing newlines,
# control characters, Unicode letters / numbers / spaces (allowed in tags), private-use characters.
edge_chars = st.sampled_from(
    [*list("aZ09-_.:/=+@ "), "\n", "\r", "\t", "\x00", "\x7f", "é", "Ж", "٣", "\u3000", "\u2028", "\ue000", "💥"]
)
edgy_text = st.one_of(
    st.text(alphabet=edge_chars, max_size=12),
    st.builds(lambda n, tail: "a" * n + tail, st.integers(0, 300), st.sampled_from(["", "\n", "-", "b", "é"])),
)
job_names = st.one_of(
    st.from_regex(r"[a-zA-Z0-9](-{0,3}[a-zA-Z0-9]){0,70}", fullmatch=True),
    st.builds(lambda k: "a" + "-" * k + "b", st.integers(0, 120)),
    st.builds(lambda n: n + "\n", st.from_regex(r"[a-z]{1,10}", fullmatch=True)),
    edgy_text,
)
tokens = st.one_of(
    st.text(alphabet=string.ascii_letters + string.digits + "._:/=+@-", min_size=1, max_size=130), edgy_text
)
channels = st.one_of(
    st.sampled_from(["train", "validation", "train.v2", "a" * 64, "a" * 65, "", "bad name", "t\n"]), edgy_text
)
uris = st.one_of(
    st.sampled_from(
        ["datasets/x/", "s3://data/d/", "s3://shared-datasets/public/v/", "s3://elsewhere/d/", "s3://data/d/\n"]
    ),
    st.builds(lambda k: "s3://data/" + "k" * k, st.integers(997, 1017)),
    edgy_text,
)
tag_text = st.one_of(edgy_text, st.text(max_size=8), st.builds(lambda n: "v" * n, st.integers(126, 260)))
instance_types = st.sampled_from(
    [*sorted(set(catalogue.INSTANCE_TYPES)), "ml.m5.large", "ml.p4d.24xlarge", "p5.48xlarge", "ml.p5.48xlarge\n"]
)
hyperparameters = st.dictionaries(
    st.sampled_from(sorted(SPECS)),
    st.one_of(
        st.sampled_from(["gpt-tiny", "gpt-1b", "bf16", "fp8", "full", "off", "8", "2048", "true"]),
        st.integers(-1, 10**6),
        st.floats(0, 10),
    ),
    max_size=4,
)
edgy = {
    "job_name": job_names,
    "client_token": tokens,
    "instance_type": instance_types,
    "instance_count": st.integers(-1, 300),
    "training_plan_arn": st.sampled_from(
        [PLAN + "\n", PLAN.replace("b200-soon", "x" * 70), "arn:aws:sagemaker:us-east-1:1:training-plan/x"]
    ),
    "hyperparameters": hyperparameters,
    "inputs": st.dictionaries(channels, uris, max_size=3),
    "max_runtime_hours": st.floats(-1, 700),
    "max_retry_attempts": st.integers(-1, 40),
    "tags": st.dictionaries(tag_text, tag_text, max_size=4),
}

# Valid-looking requests that reach the limits: names and tags at their exact maximum lengths, Unicode
# letters, numbers and spaces in tags, 64-character channel names, URIs near 1024 characters.
tag_chars = st.one_of(st.characters(categories=["L", "N", "Zs"]), st.sampled_from(list("_.:/=+-@")))
valid = {
    "job_name": st.one_of(
        st.from_regex(r"[a-zA-Z0-9](-?[a-zA-Z0-9]){0,40}", fullmatch=True),
        st.just("a" * 63),
        st.just("a" + "-" * 61 + "b"),
    ),
    "client_token": st.text(alphabet=string.ascii_letters + string.digits + "._:/=+@-", min_size=1, max_size=128),
    "instance_type": st.sampled_from(
        ["ml.p6-b200.48xlarge", "ml.p5.48xlarge", "ml.p6-b300.48xlarge", "ml.p5en.48xlarge"]
    ),
    "instance_count": st.integers(1, 256),
    "capacity": st.sampled_from(["training-plan", "spot", "on-demand", "auto"]),
    "hyperparameters": st.fixed_dictionaries(
        {"model": st.sampled_from(["gpt-tiny", "gpt-1b"]), "precision": st.sampled_from(["bf16", "fp8"])}
    ),
    "inputs": st.dictionaries(
        st.from_regex(r"[A-Za-z0-9.\-_]{1,64}", fullmatch=True),
        st.builds(
            lambda k: "datasets/" + k, st.text(alphabet=string.ascii_letters + string.digits + "-_/.", max_size=1000)
        ),
        min_size=1,
        max_size=3,
    ).map(lambda d: {"train": "datasets/x/", **d}),
    "max_runtime_hours": st.floats(0.001, 672),
    "max_retry_attempts": st.integers(1, 30),
    "tags": st.dictionaries(
        st.text(alphabet=tag_chars, min_size=1, max_size=128).filter(
            lambda k: not k.lower().startswith(("aws:", "platform"))
        ),
        st.text(alphabet=tag_chars, max_size=256),
        max_size=5,
    ),
}
valid_events = st.fixed_dictionaries(
    {"inputs": valid["inputs"]}, optional={k: v for k, v in valid.items() if k != "inputs"}
)
events = st.one_of(
    valid_events,
    valid_events.flatmap(lambda e: st.sampled_from(sorted(edgy)).flatmap(lambda f: edgy[f].map(lambda v: {**e, f: v}))),
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(event=events)
def test_every_request_the_submitter_validates_passes_botocore_validation(runtime, local_config, event):
    rq, job, capacity = runtime.request, runtime.job, runtime.capacity
    try:
        request = rq.parse_request(event, local_config)
        rq.check_instance(request, local_config)
        name = job.job_name_for(request)
        choices = [capacity.CapacityChoice("on-demand", "t"), capacity.CapacityChoice("spot", "t")]
        if request.capacity in ("training-plan", "auto"):
            choices.append(
                capacity.CapacityChoice("training-plan", "t", training_plan_arn=request.training_plan_arn or PLAN)
            )
        built = [
            job.build_create_training_job(request, job_name=name, capacity=c, config=local_config) for c in choices
        ]
    except runtime.errors.Refusal as refusal:
        label(f"refused: {(refusal.field or '').split('.')[0]}")
        return
    label("accepted")
    shape = operation_model("sagemaker", "CreateTrainingJob").input_shape
    for params in built:
        report = ParamValidator().validate(params, shape)
        assert not report.has_errors(), report.generate_report()
        assert validate_input("sagemaker", "CreateTrainingJob", params) == []
        # and what the platform adds beyond the model: no control characters anywhere it writes
        assert not any(ord(c) < 32 for c in json.dumps(params, ensure_ascii=False) if c not in "\n")


# --- the JSON Schema and the parser, both derived from the one table, agree ----------------------------

SCALAR_ROWS = [row for row in request_module.FIELDS if row.type != "object"]
PLAN_ARNS = [
    PLAN,
    PLAN + "\n",
    PLAN.replace("b200-soon", "x" * 70),
    "arn:aws:sagemaker:us-east-1:1:training-plan/x",
    "b200-soon",
]
any_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 300), st.just(10**400), st.text(max_size=12),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-1, 700),
)  # fmt: skip
field_values = {
    "job_name": st.one_of(job_names, st.just("job-" + "0" * 24)),
    "client_token": tokens,
    "instance_type": instance_types,
    "capacity": st.sampled_from(["training-plan", "spot", "on-demand", "auto", "SPOT", "cheap", ""]),
    "training_plan_arn": st.sampled_from(PLAN_ARNS),
    "max_runtime_hours": st.sampled_from([0, 1e-4, 0.001, 672, 672.0000001, 673, 24]),
    "max_wait_hours": st.sampled_from([0, 24, 672, 672.0000001, 48.5]),
}


def _refused_by_the_parser_alone(row, value) -> bool:
    """What only the parser can know: the deployment's instance types, the derived-name reservation,
    durations that round to under a second or that are shorter than the run (cross-field), and ``stall_minutes``,
    which needs ``run`` (these events have none)."""
    if row.name in ("instance_type", "stall_minutes") or (
        row.name == "job_name" and isinstance(value, str) and value.lower().startswith("job-")
    ):
        return True
    return row.unit == "hours" and isinstance(value, (int, float)) and not isinstance(value, bool) and value < 0.01


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(data=st.data())
def test_the_schema_and_the_parser_agree_on_every_scalar_field(runtime, local_config, data):
    """Both come from the request's table (runtime/request.py): the schema takes every value the parser takes and,
    but for what only the deployment or another field decides, refuses every value the parser refuses."""
    row = data.draw(st.sampled_from(SCALAR_ROWS), label="field")
    value = data.draw(st.one_of(field_values.get(row.name, any_scalar), any_scalar), label="value")
    event = {"inputs": {"train": "x/"}, "hyperparameters": {"precision": "bf16"}, "capacity": "auto", "max_runtime_hours": 0.005,
             row.name: value}  # fmt: skip
    try:
        request = runtime.request.parse_request(event, local_config)
        runtime.request.check_instance(request, local_config)
        accepted = True
    except runtime.errors.Refusal as refusal:
        assert refusal.field == row.name, refusal.message
        accepted = False
    if isinstance(value, float) and not math.isfinite(value):
        # not JSON (RFC 8259 has no NaN or Infinity; Python's json reads them): refused, beyond the schema's domain
        assert not accepted, (row.name, value)
        return
    absent = value is None or (row.blank_is_absent and value == "")
    valid = _request_validator(runtime).is_valid({k: v for k, v in event.items() if not (absent and k == row.name)})
    label(f"{row.name}: {'accepted' if accepted else 'refused'}")
    if accepted:
        assert valid, (row.name, value)
    elif not _refused_by_the_parser_alone(row, value):
        assert not valid, (row.name, value)


_VALIDATORS: dict[int, jsonschema.Draft202012Validator] = {}


def _request_validator(runtime) -> jsonschema.Draft202012Validator:
    key = id(runtime.request)
    if key not in _VALIDATORS:
        _VALIDATORS[key] = jsonschema.Draft202012Validator(runtime.request_schema.request_json_schema())
    return _VALIDATORS[key]


# --- any sequence of retries with one client_token leaves at most one job --------------------------------

BODIES = (
    {},
    {"max_runtime_hours": 5},  # a different request
    {"capacity": "spot"},  # another different request
)
step = st.one_of(
    st.tuples(st.just("send"), st.sampled_from(range(len(BODIES))), st.sampled_from([None, "a", "b"]), st.booleans()),
    st.tuples(
        st.just("burst"),
        st.lists(
            st.tuples(st.sampled_from(range(len(BODIES))), st.sampled_from([None, "a", "b"])), min_size=2, max_size=4
        ),
    ),
    st.tuples(st.just("crash"), st.sampled_from(range(len(BODIES))), st.sampled_from([None, "a", "b"])),
)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(steps=st.lists(step, min_size=1, max_size=5))
def test_any_sequence_of_retries_with_one_token_leaves_at_most_one_job(
    aws, runtime, submit, config, make_request, token_jobs, steps, record_s3
):
    token, run = f"prop-{uuid.uuid4()}", uuid.uuid4().hex[:8]
    digest, prefix = runtime.job.token_digest(token), runtime.settings.CLIENT_TOKEN_RECORDS_PREFIX
    base = make_request(client_token=token, capacity="on-demand")

    def event(body: int, name: str | None, dry_run: bool = False) -> dict:
        out = {**base, **BODIES[body]}
        if name is not None:
            out["job_name"] = f"prop-{run}-{name}"
        if dry_run:
            out["dry_run"] = True
        return out

    answers: list[tuple[dict, dict]] = []
    for kind, *args in steps:
        if kind == "send":
            body, name, dry = args
            answers.append((event(body, name, dry), submit(event(body, name, dry))))
        elif kind == "burst":
            (sends,) = args
            events = [event(body, name) for body, name in sends]
            with concurrent.futures.ThreadPoolExecutor(max_workers=len(events)) as pool:
                answers.extend(zip(events, pool.map(submit, events), strict=True))
        else:  # a function killed after claiming the token, before CreateTrainingJob
            body, name = args
            record = {
                "schema": 1, "training_job_name": event(body, name).get("job_name") or f"job-{digest[:24]}",
                "request_sha256": runtime.request.parse_request(event(body, name), config).fingerprint(), "state": "claimed",
                "created": "2026-01-01T00:00:00+00:00",
            }  # fmt: skip
            try:
                record_s3.put_object(
                    Bucket=aws.env["OUTPUT_BUCKET"], Key=f"{prefix}{digest}.json",
                    Body=json.dumps(record).encode(), IfNoneMatch="*",
                )  # fmt: skip
            except record_s3.exceptions.ClientError as exc:
                if exc.response["Error"]["Code"] != "PreconditionFailed":
                    raise
                # the token was claimed already: a crash now leaves nothing new
    jobs = token_jobs(token)
    note(f"steps={steps} jobs={jobs}")
    assert len(jobs) <= 1
    created = [a for _, a in answers if a["status"] == "submitted"]
    assert {a["training_job_name"] for a in created} <= set(jobs)
    assert sum(not a["replayed"] for a in created) == len(jobs)
    for _sent, answer in answers:
        assert answer["status"] in ("submitted", "validated", "rejected"), answer
        if answer["status"] == "rejected":
            assert answer["error"]["code"] == "Conflict" and answer["error"]["field"] in ("client_token", "job_name"), (
                answer
            )
    aws.complete_active_jobs()
