"""The request model, job naming and SageMaker limits, without AWS."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import jsonschema
import pytest

from platform_spec import runs as spec
from platform_spec.hyperparameters import Hyperparameters

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.xdist_group("submitter")  # one test reads the emulator's environment


def test_defaults(runtime, local_config):
    request = runtime.request.parse_request({"hyperparameters": {"synthetic_data": True}}, local_config)
    assert request.instance_type == "ml.p6-b200.48xlarge"
    assert request.instance_count == 1
    assert request.capacity == "training-plan"
    assert request.max_runtime_seconds == 24 * 3600
    assert request.max_retry_attempts == 3
    assert request.hyperparameters == Hyperparameters(synthetic_data=True)
    assert request.dry_run is False and request.auto_tune is False


@pytest.mark.parametrize(
    ("fields", "on"),
    [
        ({}, False),  # one instance: off
        ({"instance_count": 2}, True),  # several: on
        ({"instance_type": "ml.p5.48xlarge", "instance_count": 4}, True),
        ({"instance_type": "ml.p5.48xlarge", "instance_count": 1}, False),
        ({"instance_count": 2, "infra_check": False}, False),  # asked off
        ({"instance_count": 1, "infra_check": True}, True),  # asked on: the instance's own hardware is checked
        ({"instance_count": 2, "infra_check": None}, True),  # null is absent
    ],
)
def test_the_infrastructure_health_check_defaults_to_multi_node_jobs(runtime, local_config, fields, on):
    request = runtime.request.parse_request({"hyperparameters": {"synthetic_data": True}, **fields}, local_config)
    assert request.value("infra_check") is on
    # what the job is: sent, it is fingerprinted; absent, the default is not (stored jobs keep their fingerprints)
    assert ("infra_check" in request.sent) == (fields.get("infra_check") is not None)


def test_the_infrastructure_health_check_is_refused_where_it_does_not_apply(runtime, local_config, monkeypatch):
    from platform_spec import catalogue

    no_efa = dataclasses.replace(catalogue.INSTANCES["ml.p5.48xlarge"], efa_bandwidth_gb_s=0)
    monkeypatch.setitem(catalogue.INSTANCES, "ml.p5.48xlarge", no_efa)  # none is catalogued without EFA yet
    event = {"hyperparameters": {"synthetic_data": True}, "instance_type": "ml.p5.48xlarge", "instance_count": 2}
    assert runtime.request.parse_request(event, local_config).value("infra_check") is False  # the default: off
    with pytest.raises(runtime.errors.Refusal) as refused:
        runtime.request.parse_request({**event, "infra_check": True}, local_config)
    assert refused.value.field == "infra_check" and "ml.p5.48xlarge has no EFA" in refused.value.message
    # an instance type the catalogue does not know is refused naming instance_type, by check_instance
    unknown = runtime.request.parse_request(
        {**event, "instance_type": "ml.m5.xlarge", "infra_check": True}, local_config
    )
    with pytest.raises(runtime.errors.Refusal) as refused:
        runtime.request.check_instance(unknown, local_config)
    assert refused.value.field == "instance_type"


def test_inputs_resolve_under_the_data_bucket_or_allowed_prefixes(runtime, local_config):
    request = runtime.request.parse_request(
        {"inputs": {"train": "/datasets/a/", "validation": "s3://shared-datasets/public/val/"}}, local_config
    )
    assert request.inputs == {"train": "s3://data/datasets/a/", "validation": "s3://shared-datasets/public/val/"}


def test_fingerprint_is_the_same_for_equivalent_requests(runtime, local_config):
    parse = runtime.request.parse_request
    a = parse(
        {"hyperparameters": {"batch_size": 8, "precision": "mxfp8"}, "inputs": {"train": "x/"}, "instance_count": 1,
         "max_runtime_hours": 24},
        local_config,
    )  # fmt: skip
    b = parse(
        {"hyperparameters": {"BATCH_SIZE": "8", "precision": "MXFP8"}, "inputs": {"train": "s3://data/x/"}, "dry_run": True,
         "client_token": "other", "job_name": "named", "instance_count": 1.0, "max_runtime_hours": 24.0, "tags": None},
        local_config,
    )  # fmt: skip
    c = parse({"hyperparameters": {"batch_size": 16}, "inputs": {"train": "x/"}, "instance_count": 1}, local_config)
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != c.fingerprint()


# The fingerprint of the guide's default request (examples/guide-default-request.json's fields), as
# stored in the platform:request-sha256-v2 tag of every job made from it. If this changes, retries of
# stored jobs answer Conflict: change the algorithm only with a new tag version.
GOLDEN_REQUEST = {
    "instance_type": "ml.p6-b200.48xlarge",
    "capacity": "training-plan",
    "hyperparameters": {"model": "gpt-1b", "precision": "mxfp8", "num_layers": 10, "batch_size": 8, "seq_length": 2048},
    "inputs": {"train": "datasets/guide/train/"},
    "max_runtime_hours": 24,
    "tags": {"team": "research"},
}
GOLDEN_FINGERPRINT = "5f641bd5a14e08d05b78b27d7392165de02aec7afd178d6448f505b51c7e30e9"


def test_the_fingerprint_is_pinned(runtime, local_config):
    request = runtime.request.parse_request(GOLDEN_REQUEST, local_config)
    assert request.sent == {
        "instance_type": "ml.p6-b200.48xlarge",
        "capacity": "training-plan",
        "hyperparameters": {
            "batch_size": "8",
            "model": "gpt-1b",
            "num_layers": "10",
            "precision": "mxfp8",
            "seq_length": "2048",
        },
        "inputs": {"train": "s3://data/datasets/guide/train/"},
        "max_runtime_hours": 24.0,
        "tags": {"team": "research"},
    }
    assert request.fingerprint() == GOLDEN_FINGERPRINT


def test_the_fingerprint_ignores_fields_not_sent(runtime, local_config):
    """Adding an optional field with a default to the request model must not change stored fingerprints:
    only what the caller sent is hashed (here: a request that omits every optional field)."""
    parse = runtime.request.parse_request
    minimal = parse({"hyperparameters": {"synthetic_data": True}}, local_config)
    assert minimal.sent == {"hyperparameters": {"synthetic_data": "true"}}
    assert (
        minimal.fingerprint()
        == parse({"hyperparameters": {"synthetic_data": "TRUE"}, "auto_tune": None}, local_config).fingerprint()
    )


def test_hyperparameter_values_are_canonicalised_by_the_trainers_formatter(runtime, local_config):
    from platform_spec.hyperparameters import format_value

    parse = runtime.request.parse_request
    base = {"inputs": {"train": "x/"}}
    spellings = [{"learning_rate": 0.0003}, {"LEARNING-RATE": "3e-4"}, {"learning_rate": "0.00030"}]
    prints = {parse({**base, "hyperparameters": hp}, local_config).fingerprint() for hp in spellings}
    assert len(prints) == 1
    sent = parse({**base, "hyperparameters": spellings[1]}, local_config).sent["hyperparameters"]
    assert sent == {"learning_rate": format_value(0.0003)}


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
        assert runtime.request.job_name_re().match(name)


def test_the_derived_name_form_is_reserved_for_its_own_token(runtime, local_config):
    """Review finding: token C could create ``job-<24 hex of sha256(D)>`` and squat token D's name.
    A job_name of the derived form is refused unless it is the request's own token's derived name."""
    parse = runtime.request.parse_request
    base = {"hyperparameters": {"synthetic_data": True}}
    own = runtime.request.derived_job_name("token-d")
    assert own == "job-" + hashlib.sha256(b"token-d").hexdigest()[:24]
    assert runtime.job.job_name_for(parse({**base, "client_token": "token-d"}, local_config)) == own
    # the token's own derived name may be sent back (a retry echoing the name it was given): the same request
    echoed = parse({**base, "client_token": "token-d", "job_name": own}, local_config)
    assert echoed.fingerprint() == parse({**base, "client_token": "token-d"}, local_config).fingerprint()
    for event, hint in [
        ({"client_token": "token-c", "job_name": own}, "this request's client_token derives 'job-"),
        ({"job_name": own}, "(this request has none)"),
        ({"client_token": "token-d", "job_name": own.upper()}, "reserved for the names derived from a client_token"),
        ({"client_token": "token-c", "job_name": "job-" + "0" * 24}, "reserved"),
    ]:
        with pytest.raises(runtime.errors.Refusal) as refused:
            parse({**base, **event}, local_config)
        assert (refused.value.code, refused.value.field) == ("InvalidRequest", "job_name")
        assert hint in refused.value.message and "job-<24 hex digits>" in refused.value.message
    # near misses are ordinary names
    for name in ("job-" + "0" * 23, "job-" + "0" * 25, "job-" + "g" * 24, "myjob-" + "0" * 24):
        assert parse({**base, "job_name": name}, local_config).job_name == name


def test_the_segment_name_form_is_reserved_for_runs(runtime, local_config):
    """Issue 24: a plain job named ``<run_id>-seg-002`` stood where the run's segment 2 goes, and the run
    stalled. A job_name of the segment form (any letter case) is refused, naming the field and the form."""
    parse = runtime.request.parse_request
    base = {"hyperparameters": {"synthetic_data": True}}
    for name in ("myrun-seg-002", "MyRun-Seg-001", "a-seg-999", spec.segment_job_name("x" * 48, 1)):
        with pytest.raises(runtime.errors.Refusal) as refused:
            parse({**base, "job_name": name}, local_config)
        assert (refused.value.code, refused.value.field) == ("InvalidRequest", "job_name")
        assert refused.value.message.startswith(f"job_name: got {name!r}, expected a name not of the form ")
        assert "<run_id>-seg-<3 digits>" in refused.value.message
    # near misses are ordinary names
    for name in ("myrun-seg-02", "myrun-seg-0002", "myrun-seg-000", "myrun-seg-002x", "1run-seg-002", "run-seg"):
        assert parse({**base, "job_name": name}, local_config).job_name == name


def test_a_null_hyperparameter_is_absent(runtime, local_config):
    """Review finding: ``{"learning_rate": null}`` was refused while a top-level null means absent."""
    parse = runtime.request.parse_request
    base = {"inputs": {"train": "x/"}}
    with_nulls = parse(
        {**base, "hyperparameters": {"learning_rate": None, "num_layers": None, "batch_size": 4}}, local_config
    )
    plain = parse({**base, "hyperparameters": {"batch_size": 4}}, local_config)
    assert with_nulls.hyperparameters == plain.hyperparameters
    assert with_nulls.hyperparameters.learning_rate == Hyperparameters().learning_rate
    assert with_nulls.sent == plain.sent and with_nulls.fingerprint() == plain.fingerprint()
    for hyperparameters, field in [({"no_such_thing": None}, "hyperparameters.no_such_thing"),
                                   ({"seq_length": None, "SEQ-LENGTH": 4096}, "hyperparameters.seq_length")]:  # fmt: skip
        with pytest.raises(runtime.errors.Refusal) as refused:
            parse({**base, "hyperparameters": hyperparameters}, local_config)
        assert refused.value.field == field


@pytest.mark.parametrize(
    ("name", "text"),
    [("batch_size", "\u0668"), ("batch_size", "1_0"), ("batch_size", "\uff18"), ("learning_rate", "1_0"),
     ("learning_rate", "\u0663e-4"), ("learning_rate", "0.000\u0663"), ("seed", "\U0001d7ff")],
)  # fmt: skip
def test_numbers_as_text_are_ascii_decimal(runtime, local_config, name, text):
    """Review finding: Python's int()/float() read "\u0668" (Arabic-Indic 8) as 8 and "1_0" as 10."""
    with pytest.raises(runtime.errors.Refusal) as refused:
        runtime.request.parse_request({"inputs": {"train": "x/"}, "hyperparameters": {name: text}}, local_config)
    assert refused.value.field == f"hyperparameters.{name}"


def test_numbers_as_text_keep_their_ascii_forms(runtime, local_config):
    parse = runtime.request.parse_request
    hp = parse(
        {"inputs": {"train": "x/"}, "hyperparameters": {"batch_size": " +08 ", "learning_rate": "3E-4", "seed": '"7"'}},
        local_config,
    )
    assert (hp.hyperparameters.batch_size, hp.hyperparameters.learning_rate, hp.hyperparameters.seed) == (8, 3e-4, 7)


@pytest.mark.parametrize(
    "key", ["aws:x", "AWS:x", "Aws:cost", "aWs:", "platform:x", "Platform:x", "PLATFORM:request-sha256-v2"]
)
def test_reserved_tag_prefixes_are_refused_in_any_letter_case(runtime, local_config, key):
    """AWS reserves ``aws:`` in any case combination (AWS Batch User Guide, Tag restrictions); the
    submitter's ``platform:`` bookkeeping keys likewise."""
    with pytest.raises(runtime.errors.Refusal) as refused:
        runtime.request.parse_request({"inputs": {"train": "x/"}, "tags": {key: "v"}}, local_config)
    assert refused.value.field == f"tags.{key}" and "(reserved)" in refused.value.message
    assert runtime.request.parse_request(
        {"inputs": {"train": "x/"}, "tags": {"awsx": "v", "platformx": "v"}}, local_config
    ).tags


@pytest.mark.parametrize("key", ["platform", "Platform", "PLATFORM"])
def test_a_platform_tag_key_is_refused_in_any_letter_case(runtime, local_config, key):
    """Review finding: a caller's "Platform" tag was accepted next to the platform's own "platform" tag."""
    with pytest.raises(runtime.errors.Refusal) as refused:
        runtime.request.parse_request({"inputs": {"train": "x/"}, "tags": {key: "mine"}}, local_config)
    assert refused.value.field == f"tags.{key}" and "the platform sets tag 'platform'" in refused.value.message


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
    schema = runtime.request_schema.request_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    example = json.loads((REPO / "examples" / "guide-default-request.json").read_text())
    assert list(validator.iter_errors(example)) == []
    assert list(validator.iter_errors({**example, "instance_typ": "x"}))
    assert list(validator.iter_errors({**example, "capacity": "cheap"}))
    assert set(schema["properties"]) == {row.name for row in runtime.request.FIELDS}


def test_configuration_errors_name_the_variable(runtime, env):
    broken = {k: v for k, v in env.items() if k != "EXECUTION_ROLE_ARN"}
    with pytest.raises(runtime.errors.ConfigurationError, match="EXECUTION_ROLE_ARN"):
        runtime.config.SubmitterConfig.from_environ(broken)
    with pytest.raises(runtime.errors.ConfigurationError, match="CAPACITY_FALLBACK='spot,cheap': expected a non-empty"):
        runtime.config.SubmitterConfig.from_environ({**env, "CAPACITY_FALLBACK": "spot,cheap"})
    # the one rule (platform_spec.capacity.capacity_fallback_problem), as the construct and the stack apply it
    with pytest.raises(runtime.errors.ConfigurationError, match=r"'spot' is listed more than once"):
        runtime.config.SubmitterConfig.from_environ({**env, "CAPACITY_FALLBACK": "spot,on-demand,spot"})


def test_every_error_code_is_known(runtime):
    with pytest.raises(ValueError):
        runtime.errors.Refusal("Oops", "x")
    assert runtime.errors.Refusal("Conflict", "m", field="job_name").to_response() == {
        "status": "rejected",
        "error": {"code": "Conflict", "message": "m", "field": "job_name"},
    }


def test_hugging_face_weights_are_the_init_from_channel_with_their_config_as_the_shape(runtime, local_config):
    """The request's inputs.init_from (platform_spec's INIT_CHANNEL) is a channel like the others: under the
    allowed prefixes, in InputDataConfig; the shape comes from the same config.json as model_config."""
    from platform_spec.hyperparameters import INIT_CHANNEL

    config = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
              "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 512, "rope_theta": 500000.0,
              "tie_word_embeddings": True}  # fmt: skip
    params = _params(
        runtime,
        local_config,
        inputs={"train": "x/", INIT_CHANNEL: "models/tiny-llama/"},
        model_config=config,
        hyperparameters={"precision": "bf16"},
    )
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in params["InputDataConfig"]}
    assert channels[INIT_CHANNEL] == "s3://data/models/tiny-llama/"
    assert (params["HyperParameters"]["model"], params["HyperParameters"]["hidden_size"]) == ("llama", "64")
    with pytest.raises(runtime.errors.Refusal) as refused:
        _params(runtime, local_config, inputs={"train": "x/", INIT_CHANNEL: "s3://elsewhere/llama/"})
    assert refused.value.field == f"inputs.{INIT_CHANNEL}"
