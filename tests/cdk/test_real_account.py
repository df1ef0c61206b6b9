"""Limits a real account enforces at deploy time, refused at synth instead: reserved concurrency, the image copy's wait.

No synthesis here (the template values are checked on the session synths): the config is loaded, or the
constructs are built and their L1 properties read.
"""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from platform_constructs.submitter.construct import (
    DEFAULT_RESERVED_CONCURRENCY,
    MAX_RESERVED_CONCURRENCY,
    JobSubmitter,
    JobSubmitterProps,
)
from platform_constructs.trainer_image import TrainerImage, TrainerImageProps, copy_settings_digest
from stacks.config import CONTEXT_KEYS, ConfigError, load_config
from stacks.platform_app import cdk_json_context, create_app

pytestmark = pytest.mark.xdist_group("cdk")

KEY = "submitterReservedConcurrency"


def config_for(context: dict):
    merged = cdk_json_context()
    merged.update(context)
    return load_config(cdk.App(context=merged).node, {})


@pytest.fixture(scope="module")
def app_and_stack():
    """The default app, built but not synthesized (no bundling, no cdk-nag)."""
    return create_app(context={"aws:cdk:bundling-stacks": []}, nag=False, environ={}, stack_traces=False)


def reserved_of(stack) -> int | None:
    return stack.submitter.function.node.default_child.reserved_concurrent_executions


# -- submitter reserved concurrency ------------------------------------------------------------


def test_reserved_concurrency_default_and_values():
    assert CONTEXT_KEYS[KEY] == DEFAULT_RESERVED_CONCURRENCY == cdk_json_context()[KEY] == 10
    assert MAX_RESERVED_CONCURRENCY == 900  # the default 1000-execution quota less Lambda's unreserved floor of 100
    assert config_for({}).submitter_reserved_concurrency == 10
    assert config_for({KEY: 1}).submitter_reserved_concurrency == 1
    assert config_for({KEY: "900"}).submitter_reserved_concurrency == 900  # -c values arrive as strings
    assert config_for({KEY: "none"}).submitter_reserved_concurrency is None
    assert config_for({KEY: " None "}).submitter_reserved_concurrency is None


@pytest.mark.parametrize("bad", [0, "0", -5, 901, 5000, "ten", 2.5, True, [], "unlimited"])
def test_bad_reserved_concurrency_names_the_key_and_the_floor(bad):
    with pytest.raises(ConfigError) as info:
        config_for({KEY: bad})
    assert info.value.key == KEY
    message = str(info.value)
    assert message.startswith(f"context key '{KEY}': got ")
    assert "an integer from 1 to 900" in message and "100" in message and '"none"' in message


def test_misspelled_key_is_caught():
    with pytest.raises(ConfigError, match="did you mean 'submitterReservedConcurrency'"):
        config_for({"submitterReservedConcurency": 5})


def test_reserved_concurrency_reaches_the_function(app_and_stack):
    _, stack = app_and_stack
    assert stack.config.submitter_reserved_concurrency == 10
    assert reserved_of(stack) == 10


def test_none_leaves_the_function_in_the_unreserved_pool():
    _, stack = create_app(
        context={KEY: "none", "aws:cdk:bundling-stacks": []}, nag=False, environ={}, stack_traces=False
    )
    assert reserved_of(stack) is None


@pytest.mark.parametrize("bad", [0, -1, 901, True])
def test_submitter_props_refuse_a_reservation_lambda_would_refuse(app_and_stack, bad):
    _, stack = app_and_stack
    props = JobSubmitterProps(
        trainer_image=stack.trainer_image,
        execution_role=stack.execution_role.role,
        data_bucket=stack.buckets.data,
        checkpoint_bucket=stack.buckets.checkpoints,
        output_bucket=stack.buckets.output,
        plan_arns_parameter=stack.training_plans.parameter,
        default_instance_type=stack.config.default_instance_type,
        allowed_instance_types=stack.config.allowed_instance_types,
        reserved_concurrent_executions=bad,
    )
    with pytest.raises(
        ValueError,
        match=rf"JobSubmitterProps.reserved_concurrent_executions: got {bad!r}; expected an integer from 1 to 900",
    ):
        JobSubmitter(stack, f"Refused{bad}", props)
    assert not stack.node.find_child(f"Refused{bad}").node.children  # nothing was built


# -- the image copy's service timeout ------------------------------------------------------------


@pytest.mark.parametrize(
    ("timeout", "expected"),
    [
        # not longer than the copy function's 15 minutes: CloudFormation would give up on a copy that may succeed
        (cdk.Duration.minutes(15), "got 900 s; expected more than the copy function's timeout \\(900 s\\)"),
        (cdk.Duration.minutes(10), "got 600 s; expected more than the copy function's timeout \\(900 s\\)"),
        (cdk.Duration.seconds(3601), "got 3601 s; expected whole seconds from 1 to 3600"),  # CloudFormation's limit
        (cdk.Duration.millis(1_000_500), "got 1000.5 s; expected whole seconds from 1 to 3600"),
    ],
)
def test_copy_timeout_must_exceed_the_copy_function_and_fit_cloudformation(timeout, expected):
    stack = cdk.Stack(cdk.App(), "Test")
    with pytest.raises(ValueError, match=rf"TrainerImageProps.copy_timeout: {expected}"):
        TrainerImage(stack, "Image", TrainerImageProps(copy_timeout=timeout))


def test_copy_settings_are_part_of_the_tag_and_of_the_copy_resource_id():
    """An in-place Update of the copy resource would re-push an existing immutable tag (and so would its rollback):
    new copy settings must mean a new tag and a new copy resource, exactly like a new image."""
    stacks, images = [], []
    for minutes in (20, 30, 20):
        stack = cdk.Stack(cdk.App(), "Test")
        stacks.append(stack)
        images.append(TrainerImage(stack, "Image", TrainerImageProps(copy_timeout=cdk.Duration.minutes(minutes))))
    default, longer, again = images
    asset_hash = default.asset.asset_hash
    assert default.image_tag == f"{asset_hash}-{copy_settings_digest(cdk.Duration.minutes(20))}"
    assert default.image_tag != asset_hash  # not the tag of a release whose copy had no service timeout
    assert longer.image_tag != default.image_tag and longer.image_tag.startswith(asset_hash)
    assert again.image_tag == default.image_tag  # deterministic: same settings, same tag, same resource
    ids = [
        stack.resolve(image.copies["amd64"].node.find_child("CustomResource").node.default_child.logical_id)
        for stack, image in zip(stacks, images, strict=True)
    ]
    assert ids[0] == ids[2] and ids[0] != ids[1]
    assert longer.image_uri.endswith(f":{longer.image_tag}")
    assert longer.copy_timeout.to_seconds() == 1800 and longer.copy_function_timeout.to_minutes() == 15
    # the template value (1200 s from the 20-minute default) is checked on the session synth, test_platform_stack.py
    assert TrainerImageProps().copy_timeout.to_minutes() == 20
