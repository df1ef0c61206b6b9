"""The observability context keys and construct props: bad values fail early, naming the key and the expectation."""

from __future__ import annotations

import aws_cdk as cdk
import pytest

from platform_constructs.observability import SlackChannel
from platform_constructs.observability.notifications import AlarmTopic, AlarmTopicProps
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


def test_alarm_topic_rejects_bad_props():
    stack = cdk.Stack(cdk.App(), "Test")
    with pytest.raises(ValueError, match=r"AlarmTopicProps.emails\[0\]: got 'oncall'; expected an e-mail address"):
        AlarmTopic(stack, "A", AlarmTopicProps(emails=["oncall"]))
    with pytest.raises(ValueError, match=r"https_endpoints\[1\]: got 'ftp://x'; expected an https:// URL"):
        AlarmTopic(stack, "B", AlarmTopicProps(https_endpoints=["https://ok.example.com", "ftp://x"]))
    twice = SlackChannel("T1", "C1")
    with pytest.raises(ValueError, match="slack_channels: .* expected each channel once"):
        AlarmTopic(stack, "C", AlarmTopicProps(slack_channels=[twice, twice]))
