"""The submitter's environment has one home, ``runtime.settings.function_environment``: the synthesized
function and the emulator (``trainctl local-aws``) get the same variables from it, and the emulator
takes the stack's defaults (no second hand-written copy of the stack)."""

from __future__ import annotations

import json
import re

import pytest

from devtools.local_aws.stack import ACCOUNT_ID, StackResources, function_environment
from platform_constructs.intrinsics import ANGLE, render
from platform_constructs.submitter.runtime import config, settings

pytestmark = pytest.mark.xdist_group("cdk")

_REFERENCE = re.compile(re.escape(ANGLE.open) + r"[^<>]+" + re.escape(ANGLE.close))


def _synthesized(synth) -> dict:
    fn_id = synth.logical_id(synth.stack.submitter.function)
    return synth.resources[fn_id]["Properties"]["Environment"]["Variables"]


def _shape(value) -> re.Pattern[str]:
    """The template value as a pattern: its literal text, each resource or pseudo-parameter reference any text."""
    text = render(value)
    parts = _REFERENCE.split(text)
    return re.compile(".+".join(re.escape(part) for part in parts))


def test_the_emulator_sets_exactly_the_variables_the_synthesized_function_has(default_synth):
    synthesized = _synthesized(default_synth)
    emulated = function_environment("us-east-1", StackResources())
    assert sorted(emulated) == sorted(synthesized)

    # the stack's defaults, not the emulator's own: instance types, capacity order, Powertools' names
    for name in (settings.ENV_DEFAULT_INSTANCE_TYPE, settings.ENV_ALLOWED_INSTANCE_TYPES, settings.ENV_CAPACITY_FALLBACK,
                 "POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE"):  # fmt: skip
        assert emulated[name] == synthesized[name], name
    assert emulated[settings.ENV_ALLOWED_INSTANCE_TYPES] == ",".join(config.default_allowed_instance_types(("amd64",)))

    # the resources' values have the template's shape, the emulator's names in place of the references
    for name, value in synthesized.items():
        if name == settings.ENV_TRAINER_IMAGE_URIS:
            # the tag is the image's content hash at synth; the emulator's image is tagged `local`
            images, local = json.loads(render(value)), json.loads(emulated[name])
            assert set(images) == set(local) == {"amd64"}
            value = images["amd64"].rsplit(":", 1)[0]
            assert _shape(value).fullmatch(local["amd64"].rsplit(":", 1)[0]), (name, value, local)
        elif name == settings.ENV_PLATFORM_TAGS:
            # the deployment's tags (cdk.json's projectTag/costCenter) and the emulator's: both JSON objects
            assert isinstance(json.loads(value), dict) and isinstance(json.loads(emulated[name]), dict)
        else:
            assert _shape(value).fullmatch(emulated[name]), (name, render(value), emulated[name])
    assert emulated[settings.ENV_ACCOUNT_ID] == ACCOUNT_ID
    assert (
        emulated[settings.ENV_CLIENT_TOKEN_RECORDS]
        == f"s3://{StackResources().output_bucket}/{settings.CLIENT_TOKEN_RECORDS_PREFIX}"
    )


def test_the_configured_optional_variables_appear_in_both(variant_synth):
    """A deployment with extra input prefixes sets ALLOWED_INPUT_PREFIXES; the default one leaves it out,
    and so does the emulator (the same function decides)."""
    synthesized = _synthesized(variant_synth)
    assert synthesized[settings.ENV_ALLOWED_INPUT_PREFIXES] == "s3://shared-datasets/tokenized/"
    assert settings.ENV_ALLOWED_INPUT_PREFIXES not in function_environment("us-east-1", StackResources())
    assert settings.ENV_VOLUME_SIZE_GB not in synthesized  # the function's default volume, as in the emulator


def test_function_environment_leaves_out_what_is_not_configured_and_writes_the_rest():
    base = {
        "trainer_image_uris": {"amd64": "img"}, "execution_role_arn": "arn:aws:iam::123456789012:role/r", "data_bucket": "data-bucket",
        "checkpoint_bucket": "ckpt-bucket", "output_bucket": "out-bucket",
        "output_kms_key_arn": "arn:aws:kms:us-east-1:123456789012:key/0ca1a7f0-0000-4000-8000-00000000000f", "plan_arns_parameter": "/p", "account_id": "123456789012",
        "default_instance_type": "ml.p5.48xlarge", "allowed_instance_types": ("ml.p5.48xlarge", "ml.p6-b200.48xlarge"),
        "capacity_fallback": ("spot", "on-demand"),
    }  # fmt: skip
    env = settings.function_environment(**base)
    assert settings.ENV_ALLOWED_INPUT_PREFIXES not in env and settings.ENV_VOLUME_SIZE_GB not in env
    assert env[settings.ENV_ALLOWED_INSTANCE_TYPES] == "ml.p5.48xlarge,ml.p6-b200.48xlarge"
    assert env[settings.ENV_CAPACITY_FALLBACK] == "spot,on-demand" and env[settings.ENV_PLATFORM_TAGS] == "{}"
    assert env[settings.ENV_CLIENT_TOKEN_RECORDS] == "s3://out-bucket/submitter/client-tokens/"
    full = settings.function_environment(
        **base, allowed_input_prefixes=("s3://a/b/",), platform_tags={"b": "2", "a": "1"}, volume_size_gb=900
    )
    assert full[settings.ENV_ALLOWED_INPUT_PREFIXES] == "s3://a/b/" and full[settings.ENV_VOLUME_SIZE_GB] == "900"
    assert full[settings.ENV_PLATFORM_TAGS] == '{"a": "1", "b": "2"}'  # sorted: the same tags, the same text
    # what the function reads back is what was given
    read = config.SubmitterConfig.from_environ({**full, settings.ENV_REGION: "us-west-2"})
    assert (read.volume_size_gb, read.allowed_input_prefixes, dict(read.platform_tags)) == (
        900,
        ("s3://a/b/",),
        {"a": "1", "b": "2"},
    )
    assert (read.capacity_fallback, read.client_token_records) == (
        ("spot", "on-demand"),
        "s3://out-bucket/submitter/client-tokens/",
    )
