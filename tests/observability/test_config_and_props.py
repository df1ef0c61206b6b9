"""The observability context keys and construct props: bad values fail early, naming the key and the expectation."""

from __future__ import annotations

import re

import aws_cdk as cdk
import pytest

from platform_constructs.intrinsics import render
from platform_constructs.observability.construct import SlackChannel
from platform_constructs.observability.notifications import (
    ALARM_NAME_SEPARATOR,
    SLACK_CONFIGURATION_NAME_MAX_LENGTH,
    AlarmTopic,
    AlarmTopicProps,
    slack_configuration_name,
)
from stacks.config import ConfigError, load_config
from stacks.platform_app import cdk_json_context


def config_for(context: dict):
    merged = cdk_json_context()
    merged.update(context)
    return load_config(cdk.App(context=merged).node, {})


def test_defaults():
    config = config_for({})
    assert config.alarm_emails == () and config.alarm_https_endpoints == () and config.alarm_slack_channels == ()
    assert config.idle_capacity_alarm_hours == 24


def test_values_from_context_and_from_cli_strings():
    config = config_for(
        {
            "alarmHttpsEndpoints": "https://a.example.com/sns,https://b.example.com:8443/hook?x=1",
            "alarmSlackChannels": '["T0123ABCD/C0456EFGH", "T0123ABCD/C0999"]',
            "idleCapacityAlarmHours": "48",
        }
    )
    assert config.alarm_https_endpoints == ("https://a.example.com/sns", "https://b.example.com:8443/hook?x=1")
    assert config.alarm_slack_channels == (SlackChannel("T0123ABCD", "C0456EFGH"), SlackChannel("T0123ABCD", "C0999"))
    assert config.idle_capacity_alarm_hours == 48


@pytest.mark.parametrize(
    ("context", "key", "expected"),
    [
        ({"alarmHttpsEndpoints": ["http://insecure.example.com"]}, "alarmHttpsEndpoints[0]", "an https:// URL"),
        ({"alarmSlackChannels": ["#ml-alerts"]}, "alarmSlackChannels[0]", "WORKSPACE_ID/CHANNEL_ID"),
        ({"alarmSlackChannels": ["T0123ABCD"]}, "alarmSlackChannels[0]", "WORKSPACE_ID/CHANNEL_ID"),
        ({"idleCapacityAlarmHours": 0}, "idleCapacityAlarmHours", "an integer from 1 to 720"),
        ({"idleCapacityAlarmHours": "a day"}, "idleCapacityAlarmHours", "an integer"),
        ({"idleCapacityAlarmHour": 12}, "idleCapacityAlarmHour", "did you mean 'idleCapacityAlarmHours'"),
    ],
)
def test_bad_values_name_the_key(context, key, expected):
    with pytest.raises(ConfigError) as info:
        config_for(context)
    assert info.value.key == key
    assert expected in str(info.value)


def test_slack_channel_parse():
    assert SlackChannel.parse("T0123ABCD/C0456EFGH") == SlackChannel("T0123ABCD", "C0456EFGH")
    with pytest.raises(ValueError, match="got 't0123/c0456'; expected WORKSPACE_ID/CHANNEL_ID"):
        SlackChannel.parse("t0123/c0456")
    for text in ("T0123ABCD/C0456EFGH\n", "T0123ABCD\n/C0456EFGH", "T0123ABCD/C0456EFGH ", "T0123ABCD/C0456EFG\u0660"):
        with pytest.raises(ValueError, match="expected WORKSPACE_ID/CHANNEL_ID"):
            SlackChannel.parse(text)


@pytest.mark.parametrize(
    ("prop", "value"),
    [
        ("emails", "oncall@example.com\n"), ("emails", "on call@example.com"), ("emails", "oncall@exämple.com"),
        ("emails", "oncall@example.com\x00"), ("https_endpoints", "https://hooks.example.com/sns\n"),
        ("https_endpoints", "https://hooks.example.com:８443/x"), ("https_endpoints", "https://hooks.example.com/a b"),
    ],
)  # fmt: skip
def test_alarm_topic_refuses_a_trailing_newline_or_non_ascii_endpoint(prop, value):
    stack = cdk.Stack(cdk.App(), "Test")
    with pytest.raises(ValueError, match=rf"AlarmTopicProps.{prop}\[0\]: got {re.escape(repr(value))}; expected "):
        AlarmTopic(stack, "Topic", AlarmTopicProps(**{prop: [value]}))


def test_a_sibling_stacks_alarms_cannot_publish_to_the_topic():
    """With ``<stack>-`` prefixes, TrainingPlatform-Dev's alarms (``TrainingPlatform-Dev-...``) matched
    TrainingPlatform's ``aws:SourceArn`` pattern ``...:alarm:TrainingPlatform-*``: they could publish to its
    topic and use its key. ``/`` cannot occur in a stack name, so neither pattern matches the other's alarms."""
    import fnmatch

    env = cdk.Environment(account="123456789012", region="us-west-2")
    app = cdk.App()
    topics = {name: AlarmTopic(cdk.Stack(app, name, env=env), "Alarms")
              for name in ("TrainingPlatform", "TrainingPlatform-Dev", "Training")}  # fmt: skip
    patterns = {name: render(cdk.Stack.of(t).resolve(t.alarm_arn_pattern)) for name, t in topics.items()}
    patterns = {name: pattern.replace("<AWS::Partition>", "aws") for name, pattern in patterns.items()}
    for name, topic in topics.items():
        own = f"arn:aws:cloudwatch:us-west-2:123456789012:alarm:{topic.alarm_name_prefix}SubmitterErrors"
        for other, pattern in patterns.items():
            assert fnmatch.fnmatchcase(own, pattern) is (other == name), (name, other, pattern)
    assert patterns["TrainingPlatform"] == "arn:aws:cloudwatch:us-west-2:123456789012:alarm:TrainingPlatform/*"


def test_alarm_topic_rejects_bad_props():
    stack = cdk.Stack(cdk.App(), "Test")
    with pytest.raises(ValueError, match=r"AlarmTopicProps.emails\[0\]: got 'oncall'; expected an e-mail address"):
        AlarmTopic(stack, "A", AlarmTopicProps(emails=["oncall"]))
    with pytest.raises(ValueError, match=r"https_endpoints\[1\]: got 'ftp://x'; expected an https:// URL"):
        AlarmTopic(stack, "B", AlarmTopicProps(https_endpoints=["https://ok.example.com", "ftp://x"]))
    twice = SlackChannel("T1", "C1")
    with pytest.raises(ValueError, match=r"slack_channels: .* expected each channel once"):
        AlarmTopic(stack, "C", AlarmTopicProps(slack_channels=[twice, twice]))


@pytest.mark.parametrize("prefix", ["", "*", "Training*", "Platform?", "a:b", "x" * 201, "tab\there"])
def test_alarm_topic_rejects_a_prefix_that_would_let_other_alarms_publish(prefix):
    stack = cdk.Stack(cdk.App(), "Test")
    with pytest.raises(
        ValueError, match=r"AlarmTopicProps\.alarm_name_prefix: got .*; expected 1-200 printable characters"
    ):
        AlarmTopic(stack, "Topic", AlarmTopicProps(alarm_name_prefix=prefix))
    assert (
        stack.node.try_find_child("Topic") is None or not stack.node.find_child("Topic").node.children
    )  # nothing built


def test_alarm_topic_prefix_defaults_to_the_stack_name():
    stack = cdk.Stack(cdk.App(), "Team-A", env=cdk.Environment(account="123456789012", region="eu-west-1"))
    default = AlarmTopic(stack, "Default")
    assert default.alarm_name_prefix == "Team-A/" == f"Team-A{ALARM_NAME_SEPARATOR}"
    assert stack.resolve(default.alarm_arn_pattern) == {
        "Fn::Join": ["", ["arn:", {"Ref": "AWS::Partition"}, ":cloudwatch:eu-west-1:123456789012:alarm:Team-A/*"]]
    }
    custom = AlarmTopic(stack, "Custom", AlarmTopicProps(alarm_name_prefix="ml-oncall/"))
    assert custom.alarm_arn_pattern.endswith(":alarm:ml-oncall/*")


_CONFIGURATION_NAME = re.compile(r"^[A-Za-z0-9-_]+$")  # AWS::Chatbot::SlackChannelConfiguration ConfigurationName


def test_slack_configuration_name_keeps_the_channel_and_fits_the_limit():
    # the name deployed before: unchanged, so an upgrade never replaces (and so re-creates) a configuration
    assert slack_configuration_name("TrainingPlatform", "C0456EFGH") == "TrainingPlatform-alarms-C0456EFGH"
    assert slack_configuration_name("P", "C1") != slack_configuration_name("P", "C2")
    longest_stack, longest_channel = "S" + "x" * 127, "C" * 32
    name = slack_configuration_name(longest_stack, longest_channel)
    assert len(name) == SLACK_CONFIGURATION_NAME_MAX_LENGTH and _CONFIGURATION_NAME.match(name), name
    assert name.endswith(f"-alarms-{longest_channel}")  # the stack name gives way, never the channel
    # two channels of one long-named stack stay apart (a plain cut at 128 characters made them equal)
    assert slack_configuration_name(longest_stack, "C" * 31 + "A") != slack_configuration_name(
        longest_stack, "C" * 31 + "B"
    )
    # two long stack names that share their first 100 characters stay apart (a hash of the full name)
    a = slack_configuration_name("S" * 100 + "-prod", longest_channel)
    b = slack_configuration_name("S" * 100 + "-test", longest_channel)
    assert a != b and len(a) == len(b) == SLACK_CONFIGURATION_NAME_MAX_LENGTH
    with pytest.raises(ValueError, match="channel_id: got 'c-1'; expected a Slack channel ID"):
        slack_configuration_name("P", "c-1")


@pytest.mark.parametrize("seconds", [30, 90])
def test_plan_metrics_schedule_of_a_part_of_a_minute_is_refused_naming_the_prop(seconds):
    # Before: Duration.to_minutes() raised jsii's "CannotConvertedIntoWhole" instead of the prop's error.
    from aws_cdk import aws_ssm as ssm

    from platform_constructs.observability.functions import PlanMetricsPublisher, PlanMetricsPublisherProps

    stack = cdk.Stack(cdk.App(context={"aws:cdk:bundling-stacks": []}), "Test")
    props = PlanMetricsPublisherProps(
        plan_arns_parameter=ssm.StringParameter.from_string_parameter_name(stack, "Plans", "/plans"),
        schedule=cdk.Duration.seconds(seconds),
    )
    with pytest.raises(ValueError, match=rf"PlanMetricsPublisherProps.schedule: got {seconds / 60:g} minutes; "
                                         "expected whole minutes, at least 1"):  # fmt: skip
        PlanMetricsPublisher(stack, "Refused", props)
    assert not stack.node.find_child("Refused").node.children
