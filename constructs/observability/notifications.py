"""Where the platform's alarms go: a KMS-encrypted SNS topic and its subscriptions."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_chatbot as chatbot
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

__all__ = ["AlarmTopic", "AlarmTopicProps", "SlackChannel"]

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_HTTPS = re.compile(r"^https://[^\s/:?#]+(:\d+)?(/\S*)?$")
_SLACK_ID = re.compile(r"^[A-Z0-9]{2,32}$")


@dataclass(frozen=True)
class SlackChannel:
    """A Slack channel that AWS Chatbot posts the alarms to.

    The workspace must have been authorised once in the AWS Chatbot console
    (Amazon Q Developer in chat applications) before the stack is deployed.

    Attributes:
        workspace_id: the Slack team ID (``T...``).
        channel_id: the channel ID (``C...``; for a private channel, invite ``@aws`` first).
    """

    workspace_id: str
    channel_id: str

    @classmethod
    def parse(cls, text: str) -> SlackChannel:
        """``WORKSPACE_ID/CHANNEL_ID`` -> :class:`SlackChannel`.

        Raises:
            ValueError: not two Slack IDs separated by ``/``.
        """
        workspace, sep, channel = text.partition("/") if isinstance(text, str) else ("", "", "")
        if not sep or not _SLACK_ID.match(workspace) or not _SLACK_ID.match(channel):
            raise ValueError(f"got {text!r}; expected WORKSPACE_ID/CHANNEL_ID, e.g. T0123ABCD/C0456EFGH")
        return cls(workspace, channel)


@dataclass(frozen=True, kw_only=True)
class AlarmTopicProps:
    """Properties of :class:`AlarmTopic`.

    Attributes:
        emails: addresses subscribed by e-mail (each confirms once). Default: none.
        https_endpoints: ``https://`` URLs subscribed to the raw SNS messages
            (incident tools, chat relays that confirm SNS subscriptions). Default: none.
        slack_channels: Slack channels AWS Chatbot posts to. Default: none.
        removal_policy: what happens to the topic's KMS key when it leaves the
            stack. Default: it is retained.
    """

    emails: Sequence[str] = ()
    https_endpoints: Sequence[str] = ()
    slack_channels: Sequence[SlackChannel] = ()
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN


class AlarmTopic(Construct):
    """SNS topic for alarm notifications (primary child ``Resource``), encrypted with its own ``Key``.

    A customer-managed key is needed because CloudWatch alarms cannot publish
    to a topic encrypted with the AWS-managed ``aws/sns`` key: the key policy
    lets ``cloudwatch.amazonaws.com`` generate data keys. The topic policy
    denies publishing without TLS. Subscriptions: one per e-mail
    (``Email<i>``), HTTPS endpoint (``Https<i>``) and Slack channel
    (``Slack<i>``, an AWS Chatbot channel configuration whose role has no
    permissions: it only relays notifications).

    Attributes:
        topic: the SNS topic.
        key: its KMS key (rotation on).
        action: a CloudWatch alarm action publishing to the topic.
    """

    def __init__(self, scope: Construct, id: str, props: AlarmTopicProps | None = None) -> None:
        super().__init__(scope, id)
        props = props or AlarmTopicProps()
        _validate(props)
        stack = cdk.Stack.of(self)
        self.key = kms.Key(
            self,
            "Key",
            description=f"Encrypts the {stack.stack_name} alarm topic",
            enable_key_rotation=True,
            removal_policy=props.removal_policy,
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
            )
        )
        self.topic = sns.Topic(
            self,
            "Resource",
            display_name=f"{stack.stack_name} alarms",
            master_key=self.key,
            enforce_ssl=True,
        )
        for index, email in enumerate(props.emails):
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        for index, url in enumerate(props.https_endpoints):
            self.topic.add_subscription(subscriptions.UrlSubscription(url, protocol=sns.SubscriptionProtocol.HTTPS))
        self.slack_channels = [
            chatbot.SlackChannelConfiguration(
                self,
                f"Slack{index}",
                slack_channel_configuration_name=f"{stack.stack_name}-alarms-{channel.channel_id}"[:128],
                slack_workspace_id=channel.workspace_id,
                slack_channel_id=channel.channel_id,
                notification_topics=[self.topic],
                logging_level=chatbot.LoggingLevel.ERROR,
            )
            for index, channel in enumerate(props.slack_channels)
        ]
        self.action = cloudwatch_actions.SnsAction(self.topic)

    @property
    def topic_arn(self) -> str:
        return self.topic.topic_arn


def _validate(props: AlarmTopicProps) -> None:
    for index, email in enumerate(props.emails):
        if not isinstance(email, str) or not _EMAIL.match(email):
            raise ValueError(f"AlarmTopicProps.emails[{index}]: got {email!r}; expected an e-mail address")
    for index, url in enumerate(props.https_endpoints):
        if not isinstance(url, str) or not _HTTPS.match(url):
            raise ValueError(f"AlarmTopicProps.https_endpoints[{index}]: got {url!r}; expected an https:// URL")
    channels = [(c.workspace_id, c.channel_id) for c in props.slack_channels]
    if len(set(channels)) != len(channels):
        raise ValueError(f"AlarmTopicProps.slack_channels: got {channels}; expected each channel once")
