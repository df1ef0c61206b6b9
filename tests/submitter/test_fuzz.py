"""Property-based fuzzing of the event: never an unhandled exception, never a job for an invalid request."""

from __future__ import annotations

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import event as note_event
from hypothesis import strategies as st

from platform_spec.hyperparameters import SPECS

pytestmark = pytest.mark.xdist_group("submitter")

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**20), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)


def _or_junk(strategy):
    return st.one_of(strategy, strategy, strategy, json_values)


hyperparameter_values = st.one_of(
    st.sampled_from(
        ["gpt-tiny", "gpt-1b", "gpt-64b", "mxfp8", "fp8", "bf16", "off", "full", "true", "8", "2048", "-1", "1e9", ""]
    ),
    st.integers(min_value=-5, max_value=10**6),
    st.floats(min_value=-1, max_value=1e7),
    json_scalars,
)
hyperparameters = st.dictionaries(
    st.one_of(st.sampled_from(sorted(SPECS)), st.sampled_from(["SEQ-LENGTH", "batch-size", "unknown", ""])),
    hyperparameter_values,
    max_size=6,
)
channel_uris = st.one_of(
    st.sampled_from(
        ["datasets/x/", "s3://training-platform-data-local/d/", "s3://elsewhere/d/", "http://x/", "s3://", "/"]
    ),
    st.text(alphabet=string.printable, max_size=20),
)

fields = {
    "job_name": _or_junk(st.from_regex(r"[a-zA-Z0-9\-]{0,70}", fullmatch=True)),
    "client_token": _or_junk(st.text(alphabet=string.ascii_letters + string.digits + "-_:!", max_size=40)),
    "instance_type": _or_junk(
        st.sampled_from(["ml.p6-b200.48xlarge", "ml.p5.48xlarge", "ml.p6-b300.48xlarge", "ml.m5.large", "p5.48xlarge"])
    ),
    "instance_count": _or_junk(st.integers(min_value=-2, max_value=300)),
    "capacity": _or_junk(st.sampled_from(["training-plan", "spot", "on-demand", "auto", "SPOT", ""])),
    "training_plan_arn": _or_junk(
        st.sampled_from(
            [
                "arn:aws:sagemaker:us-east-1:123456789012:training-plan/b200-soon",
                "arn:aws:sagemaker:us-east-1:123456789012:training-plan/b200-expired",
                "arn:aws:sagemaker:us-east-1:123456789012:training-plan/unknown",
                "not-an-arn",
            ]
        )
    ),
    "hyperparameters": _or_junk(hyperparameters),
    "inputs": _or_junk(
        st.dictionaries(st.sampled_from(["train", "validation", "bad name", ""]), channel_uris, max_size=3)
    ),
    "max_runtime_hours": _or_junk(st.floats(min_value=-1, max_value=1000)),
    "max_wait_hours": _or_junk(st.floats(min_value=-1, max_value=1000)),
    "max_retry_attempts": _or_junk(st.integers(min_value=-1, max_value=40)),
    "tags": _or_junk(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4)),
    "auto_tune": _or_junk(st.booleans()),
    "dry_run": _or_junk(st.booleans()),
    "unexpected": json_values,
}
valid_fields = {
    "job_name": st.from_regex(r"[a-z][a-z0-9]{0,8}(-[a-z0-9]{1,8}){0,2}", fullmatch=True),
    "client_token": st.text(alphabet=string.ascii_letters + string.digits + "-", min_size=1, max_size=20),
    "instance_type": st.sampled_from(["ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge", "ml.p5.48xlarge"]),
    "instance_count": st.integers(min_value=1, max_value=6),
    "capacity": st.sampled_from(["training-plan", "spot", "on-demand", "auto"]),
    "max_runtime_hours": st.floats(min_value=0.5, max_value=400),
    "tags": st.dictionaries(
        st.sampled_from(["team", "project", "owner"]), st.text(alphabet=string.ascii_lowercase, max_size=8)
    ),
    "auto_tune": st.booleans(),
    "dry_run": st.booleans(),
}
base = {
    "hyperparameters": st.fixed_dictionaries(
        {
            "model": st.sampled_from(["gpt-tiny", "gpt-1b", "gpt-8b", "gpt-32b"]),
            "precision": st.sampled_from(["bf16", "fp8"]),
        },
        optional={"batch_size": st.integers(1, 64), "seq_length": st.sampled_from([512, 2048, 8192])},
    ),
    "inputs": st.just({"train": "datasets/x/"}),
}
events = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional=fields),
    # valid requests, and valid requests with one field fuzzed
    st.fixed_dictionaries(base, optional=valid_fields),
    st.fixed_dictionaries(base, optional=valid_fields).flatmap(
        lambda event: st.sampled_from(sorted(fields)).flatmap(
            lambda name: fields[name].map(lambda value: {**event, name: value})
        )
    ),
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(event=events)
def test_any_event_gets_an_answer_and_only_valid_ones_create_jobs(aws, submit, runtime, event):
    before = len(aws.training_jobs())
    response = submit(event)
    assert isinstance(response, dict)
    assert response["status"] in ("submitted", "validated", "rejected"), response
    note_event(response["status"] if response["status"] != "rejected" else response["error"]["code"])
    created = len(aws.training_jobs()) - before
    if response["status"] == "rejected":
        assert response["error"]["code"] in runtime.settings.ERROR_CODES
        assert isinstance(response["error"]["message"], str) and response["error"]["message"]
        assert created == 0, response
    elif response["status"] == "validated":
        assert created == 0
    else:
        assert created == (0 if response["replayed"] else 1)
    aws.complete_active_jobs()
