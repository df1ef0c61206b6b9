"""The request model, job naming and SageMaker limits, without AWS."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from training.hyperparameters import Hyperparameters

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.xdist_group("submitter")  # one test reads the emulator's environment


@pytest.fixture(scope="module")
def local_config(runtime):
    return runtime.config.SubmitterConfig(
        trainer_image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/trainer:1",
        execution_role_arn="arn:aws:iam::123456789012:role/exec",
        data_bucket="data",
        checkpoint_bucket="ckpt",
        output_bucket="out",
        training_plan_arns_parameter="/plans",
        allowed_input_prefixes=("s3://shared-datasets/public/",),
        platform_tags={"platform": "tp"},
    )


def test_defaults(runtime, local_config):
    request = runtime.request.parse_request({"hyperparameters": {"synthetic_data": True}}, local_config)
    assert request.instance_type == "ml.p6-b200.48xlarge"
    assert request.instance_count == 1
    assert request.capacity == "training-plan"
    assert request.max_runtime_seconds == 24 * 3600
    assert request.max_retry_attempts == 3
    assert request.hyperparameters == Hyperparameters(synthetic_data=True)
    assert request.dry_run is False and request.auto_tune is False


def test_inputs_resolve_under_the_data_bucket_or_allowed_prefixes(runtime, local_config):
    request = runtime.request.parse_request(
        {"inputs": {"train": "/datasets/a/", "validation": "s3://shared-datasets/public/val/"}}, local_config
    )
    assert request.inputs == {"train": "s3://data/datasets/a/", "validation": "s3://shared-datasets/public/val/"}


def test_fingerprint_is_the_same_for_equivalent_requests(runtime, local_config):
    parse = runtime.request.parse_request
    a = parse({"hyperparameters": {"batch_size": 8, "precision": "mxfp8"}, "inputs": {"train": "x/"}}, local_config)
    b = parse(
        {"hyperparameters": {"BATCH_SIZE": "8", "precision": "MXFP8"}, "inputs": {"train": "s3://data/x/"}, "dry_run": True,
         "client_token": "other", "instance_count": 1.0},
        local_config,
    )  # fmt: skip
    c = parse({"hyperparameters": {"batch_size": 16}, "inputs": {"train": "x/"}}, local_config)
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != c.fingerprint()


def test_duplicate_spellings_of_a_hyperparameter_are_refused(runtime, local_config):
    with pytest.raises(runtime.errors.Refusal) as refused:
        runtime.request.parse_request({"hyperparameters": {"seq_length": 1024, "seq-length": 2048}}, local_config)
    assert refused.value.field == "hyperparameters.seq_length"


def test_an_integer_too_large_for_a_float_field_is_refused_not_raised(runtime, local_config):
    with pytest.raises(runtime.errors.Refusal) as refused:
        runtime.request.parse_request({"hyperparameters": {"learning_rate": 10**400}}, local_config)
    assert refused.value.field == "hyperparameters.learning_rate"


def test_job_names(runtime, local_config):
    parse, name_for = runtime.request.parse_request, runtime.job.job_name_for
    base = {"hyperparameters": {"model": "gpt-8b", "precision": "fp8"}, "inputs": {"train": "x/"}}
    by_token = name_for(parse({**base, "client_token": "abc"}, local_config))
    assert by_token == name_for(parse({**base, "client_token": "abc", "max_runtime_hours": 3}, local_config))
    assert by_token.startswith("job-") and len(by_token) == 28
    assert name_for(parse({**base, "job_name": "mine-1"}, local_config)) == "mine-1"
    derived = name_for(parse(base, local_config))
    assert derived.startswith("gpt-8b-fp8-")
    for name in (by_token, derived):
        assert runtime.request.JOB_NAME_RE.match(name)


def _params(runtime, local_config, **request):
    parsed = runtime.request.parse_request({"inputs": {"train": "x/"}, **request}, local_config)
    choice = runtime.capacity.CapacityChoice("on-demand", "test")
    return runtime.job.build_create_training_job(parsed, job_name="j", capacity=choice, config=local_config)


def test_sagemaker_limits_are_checked_with_the_field_named(runtime, local_config):
    params = _params(runtime, local_config)
    check = runtime.job.check_limits
    check(params)  # within limits
    too_many = dict(params, HyperParameters={f"k{i}": "v" for i in range(101)})
    with pytest.raises(runtime.errors.Refusal, match="at most 100") as refused:
        check(too_many)
    assert refused.value.field == "hyperparameters"
    too_long = dict(params, HyperParameters={"model": "x" * 2501})
    with pytest.raises(runtime.errors.Refusal) as refused:
        check(too_long)
    assert refused.value.field == "hyperparameters.model"
    with pytest.raises(runtime.errors.Refusal) as refused:
        check(dict(params, TrainingJobName="a" * 64))
    assert refused.value.field == "job_name"


def test_tags_beyond_sagemakers_fifty_are_refused(runtime, local_config):
    # the platform sets 1 tag here and the submitter 3 bookkeeping tags: 46 remain for the request
    _params(runtime, local_config, tags={f"t{i}": "v" for i in range(46)})
    with pytest.raises(runtime.errors.Refusal) as refused:
        _params(runtime, local_config, tags={f"t{i}": "v" for i in range(47)})
    assert refused.value.field == "tags"
    assert "at most 46" in refused.value.message


def test_request_json_schema_accepts_the_examples_and_rejects_unknown_fields(runtime):
    schema = runtime.request.request_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    example = json.loads((REPO / "examples" / "guide-default-request.json").read_text())
    assert list(validator.iter_errors(example)) == []
    assert list(validator.iter_errors({**example, "instance_typ": "x"}))
    assert list(validator.iter_errors({**example, "capacity": "cheap"}))
    assert set(schema["properties"]) == set(runtime.request.REQUEST_FIELDS)


def test_configuration_errors_name_the_variable(runtime, env):
    broken = {k: v for k, v in env.items() if k != "EXECUTION_ROLE_ARN"}
    with pytest.raises(runtime.errors.ConfigurationError, match="EXECUTION_ROLE_ARN"):
        runtime.config.SubmitterConfig.from_environ(broken)
    with pytest.raises(runtime.errors.ConfigurationError, match="CAPACITY_FALLBACK"):
        runtime.config.SubmitterConfig.from_environ({**env, "CAPACITY_FALLBACK": "spot,cheap"})


def test_every_error_code_is_known(runtime):
    with pytest.raises(ValueError):
        runtime.errors.Refusal("Oops", "x")
    assert runtime.errors.Refusal("Conflict", "m", field="job_name").to_response() == {
        "status": "rejected",
        "error": {"code": "Conflict", "message": "m", "field": "job_name"},
    }
