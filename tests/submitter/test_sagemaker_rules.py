"""SageMaker's rules from botocore's model: whole-string patterns, exact lengths, no control characters."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from platform_spec import catalogue

pytestmark = pytest.mark.xdist_group("submitter")


@pytest.fixture(scope="module")
def rules(runtime):
    from platform_constructs.submitter.runtime import sagemaker_rules

    return sagemaker_rules


def _refusal(runtime, local_config, **fields):
    event = {"inputs": {"train": "x/"}, **fields}
    with pytest.raises(runtime.errors.Refusal) as refused:
        request = runtime.request.parse_request(event, local_config)
        runtime.request.check_instance(request, local_config)
    return refused.value


def test_every_pattern_of_create_training_job_translates(rules):
    """A model update that brings Java syntax this module cannot translate fails here, not in production."""
    found: set[str] = set()

    def walk(shape, depth=0):
        if depth > 10:
            return
        if shape.type_name == "string" and "pattern" in shape.metadata:
            found.add(shape.metadata["pattern"])
        for child in {"structure": lambda: shape.members.values(), "list": lambda: [shape.member],
                      "map": lambda: [shape.key, shape.value]}.get(shape.type_name, lambda: [])():  # fmt: skip
            walk(child, depth + 1)

    walk(rules.service_model().operation_model("CreateTrainingJob").input_shape)
    assert len(found) > 10
    assert [p for p in found if rules.compile_pattern(p) is None] == []


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("gpt-1b-run-1", True),
        ("a" * 63, True),
        ("a" + "-" * 61 + "b", True),  # 63 characters
        ("a" * 64, False),
        ("a" + "-" * 98 + "b", False),  # the pattern allows it; the length (63) does not
        ("name\n", False),  # re.match with $ accepts this
        ("-name", False),
        ("name-", False),
        ("na_me", False),
        ("", False),
    ],
)
def test_job_names_match_sagemakers_rule_exactly(rules, runtime, local_config, value, accepted):
    assert rules.string_rule("TrainingJobName").accepts(value) is accepted
    assert bool(runtime.request.job_name_re().match(value)) is accepted  # match() is whole-string too
    if not accepted:
        refusal = _refusal(runtime, local_config, job_name=value)
        assert refusal.field == "job_name" and "1-63 letters, digits and hyphens" in refusal.message


@pytest.mark.parametrize("token", ["tok\n", "tok\x00", "tok en", "x" * 129, ""])
def test_client_tokens_with_control_characters_or_too_long_are_refused(runtime, local_config, token):
    assert _refusal(runtime, local_config, client_token=token).field == "client_token"


@pytest.mark.parametrize(
    ("channel", "accepted"),
    [
        ("train", True),
        ("train.v2_a-b", True),
        ("c" * 64, True),
        ("c" * 65, False),
        ("train\n", False),
        ("tr ain", False),
        ("", False),
    ],
)
def test_channel_names(rules, runtime, local_config, channel, accepted):
    assert rules.string_rule("InputDataConfig.member.ChannelName").accepts(channel) is accepted
    if not accepted:
        assert _refusal(runtime, local_config, inputs={"train": "x/", channel: "y/"}).field == "inputs"


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("team\n", "a", "tags"),
        ("te\x00am", "a", "tags"),
        ("k" * 129, "a", "tags"),
        ("team", "research\n", "tags.team"),
        ("team", "v" * 257, "tags.team"),
        ("team", "\ue000", "tags.team"),  # a private-use character is no letter
        ("team", "a#b", "tags.team"),
    ],
)
def test_tags_outside_sagemakers_pattern_are_refused(runtime, local_config, key, value, field):
    assert _refusal(runtime, local_config, tags={key: value}).field == field


def test_tags_with_unicode_letters_numbers_and_spaces_at_the_limits_are_accepted(runtime, local_config):
    tags = {"équipe 研究": "Ж٣ \u3000_.:/=+-@", "k" * 128: "v" * 256}
    request = runtime.request.parse_request({"inputs": {"train": "x/"}, "tags": tags}, local_config)
    assert dict(request.tags) == tags


def test_java_dot_excludes_line_terminators(rules):
    value = rules.string_rule("HyperParameters.value")  # pattern .*
    assert value.accepts("3e-4") and not value.accepts("x\ry") and not value.accepts("x\u2028y")


def test_instance_types_are_those_create_training_job_accepts(rules, runtime, local_config):
    accepted = rules.training_instance_types()
    assert "ml.p6-b200.48xlarge" in accepted and "ml.m5.large" in accepted
    # the GB200 UltraServers are in the planner catalogue but are not training-job instance types
    for ultraserver in ("ml.u-p6e-gb200x36", "ml.u-p6e-gb200x72"):
        assert ultraserver in catalogue.INSTANCE_TYPES and ultraserver not in accepted
        refusal = _refusal(runtime, local_config, instance_type=ultraserver)
        assert refusal.field == "instance_type" and "CreateTrainingJob accepts" in refusal.message
    allowed = runtime.request.allowed_instance_types(local_config)
    # ... nor the arm64 GB200 host, for which this deployment built no image (its trainer_image_uris: amd64 only)
    assert set(allowed) == set(catalogue.TRAINABLE_INSTANCE_TYPES) - {
        "ml.u-p6e-gb200x36",
        "ml.u-p6e-gb200x72",
        "ml.p6e-gb200.36xlarge",
    }
    # a configured type CreateTrainingJob does not accept is not offered either
    configured = dataclasses.replace(local_config, allowed_instance_types=("ml.p5.48xlarge", "ml.u-p6e-gb200x72"))
    assert runtime.request.allowed_instance_types(configured) == ("ml.p5.48xlarge",)


def test_limits_come_from_the_model(rules, runtime, local_config):
    assert rules.bounds("RetryStrategy.MaximumRetryAttempts") == (1, 30)
    assert rules.bounds("Tags") == (0, 50) and rules.bounds("InputDataConfig") == (1, 20)
    assert _refusal(runtime, local_config, max_retry_attempts=31).message.endswith("an integer from 1 to 30")
    many = {f"c{i}": "x/" for i in range(21)}
    assert "at most 20 channels" in _refusal(runtime, local_config, inputs=many).message


def test_the_model_loads_lazily_and_once(runtime, env):
    """Importing the runtime loads no model; after the clients exist, reading a rule parses nothing again."""
    code = (
        "import sys; import platform_constructs.submitter.runtime.handler\n"
        "from platform_constructs.submitter.runtime import sagemaker_rules as rules\n"
        "assert rules.service_model.cache_info().currsize == 0, 'loaded at import'\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr

    from platform_constructs.submitter.runtime import sagemaker_rules as rules

    runtime.aws.Clients.create(environ=env)  # loads the SageMaker model through the shared loader
    loader = rules.shared_loader()
    reads: list[tuple] = []
    original = loader.load_data_with_path

    def counting(*args, **kwargs):
        reads.append(args)
        return original(*args, **kwargs)

    rules.service_model.cache_clear()
    loader.load_data_with_path = counting
    try:
        assert rules.service_model().service_name == "sagemaker"
    finally:
        del loader.load_data_with_path
    assert reads == []
