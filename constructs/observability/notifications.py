"""Where the platform's alarms go: a KMS-encrypted SNS topic and its subscriptions.

Who may publish. ``AWS::SNS::TopicPolicy`` replaces SNS's default topic policy,
so the topic policy must allow CloudWatch itself; the topic's KMS key must
let CloudWatch generate and decrypt data keys, or an alarm action fails with
"CloudWatch Alarms does not have authorization to access the SNS topic
encryption key" (the AWS-managed ``aws/sns`` key cannot be used at all). Both
statements carry the confused-deputy conditions AWS documents for a service
publishing to an SSE-KMS topic: ``aws:SourceAccount`` equal to this account
and ``aws:SourceArn`` ``ArnLike`` the platform's alarm ARNs
(``arn:<partition>:cloudwatch:<region>:<account>:alarm:<prefix>*``). Sources:

* Amazon SNS Developer Guide, "Key management", section "Enable compatibility
  between event sources from AWS services and encrypted topics"
  (https://docs.aws.amazon.com/sns/latest/dg/sns-key-management.html#compatibility-with-aws-services):
  the key policy statement for the service principal, ``kms:GenerateDataKey*``
  and ``kms:Decrypt``, with ``aws:SourceArn`` / ``aws:SourceAccount``;
* AWS re:Post Knowledge Center
  (https://repost.aws/knowledge-center/cloudwatch-receive-sns-for-alarm-trigger):
  the topic policy statement for ``cloudwatch.amazonaws.com`` with
  ``ArnLike`` ``aws:SourceArn`` on the alarm ARNs, and the alarm history's
  "is not authorized to perform: SNS:Publish" without it;
* AWS re:Post Knowledge Center
  (https://repost.aws/knowledge-center/cloudwatch-configure-alarm-sns): a
  customer managed key is required, and the error quoted above without the
  key policy statement.

CloudWatch alarms are the only publisher: no EventBridge rule targets the
topic, and AWS Chatbot reads it through its subscription (SNS delivers to
Chatbot), it does not publish to it.
"""

from __future__ import annotations

import hashlib
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

__all__ = [
    "ALARM_NAME_SEPARATOR",
    "EMAIL_PATTERN",
    "HTTPS_URL_PATTERN",
    "SLACK_ID_PATTERN",
    "AlarmTopic",
    "AlarmTopicProps",
    "SlackChannel",
    "slack_configuration_name",
]

EMAIL_PATTERN = re.compile(r"[!-?A-~]+@[!-?A-~]+\.[!-?A-~]+")
"""An e-mail subscription endpoint, matched whole (``fullmatch``): printable ASCII without spaces,
one ``@`` and a dot in the domain (no control character, no trailing newline)."""
HTTPS_URL_PATTERN = re.compile(r"https://[^\x00-\x20\x7f-\U0010ffff/:?#]+(?::[0-9]{1,5})?(?:/[!-~]*)?")
"""An HTTPS subscription endpoint, matched whole (``fullmatch``): ``https://host[:port][/path]`` in
printable ASCII."""
SLACK_ID_PATTERN = re.compile(r"[A-Z0-9]{2,32}")
"""A Slack workspace (team) or channel ID, matched whole (``fullmatch``)."""

ALARM_NAME_SEPARATOR = "/"
"""Ends the default alarm-name prefix, ``<stack name>/``, that the topic's policies allow.

It is a character no CloudFormation stack name holds ("A stack name can contain only alphanumeric
characters (case sensitive) and hyphens. It must start with an alphabetical character and can't be
longer than 128 characters": CloudFormation API Reference, ``CreateStack``, ``StackName``), so no
other stack's prefix starts with this one: with ``-``, the alarms of a sibling stack named
``<stack name>-Dev`` matched ``<stack name>-*`` and could publish to this topic and use its key.
CloudWatch accepts it in an alarm name (``AlarmName``: 1-255 UTF-8 characters without ASCII control
characters, CloudWatch API Reference, ``PutMetricAlarm``), and in the ``aws:SourceArn`` pattern it is
a literal: not a wildcard (``*``, ``?``) nor the ``:`` that separates an ARN's parts for ``ArnLike``."""

CLOUDWATCH_SERVICE_PRINCIPAL = "cloudwatch.amazonaws.com"

SLACK_CONFIGURATION_NAME_MAX_LENGTH = 128
"""``AWS::Chatbot::SlackChannelConfiguration`` ``ConfigurationName``: 1-128 characters
matching ``^[A-Za-z0-9-_]+$`` (the resource's CloudFormation registry schema)."""


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
        if not sep or not SLACK_ID_PATTERN.fullmatch(workspace) or not SLACK_ID_PATTERN.fullmatch(channel):
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
        alarm_name_prefix: only CloudWatch alarms of this account and region whose
            names start with this prefix may publish to the topic (and use its key).
            Name the alarms that notify the topic with it; a prefix that another
            prefix in the account can start with (``team-`` and ``team-dev-``)
            lets those alarms publish too. Default: ``<stack name>/``
            (:data:`ALARM_NAME_SEPARATOR`), which no other stack's alarms can match.
    """

    emails: Sequence[str] = ()
    https_endpoints: Sequence[str] = ()
    slack_channels: Sequence[SlackChannel] = ()
    removal_policy: cdk.RemovalPolicy = cdk.RemovalPolicy.RETAIN
    alarm_name_prefix: str | None = None


class AlarmTopic(Construct):
    """SNS topic for alarm notifications (primary child ``Resource``), encrypted with its own ``Key``.

    A customer-managed key is needed because CloudWatch alarms cannot publish
    to a topic encrypted with the AWS-managed ``aws/sns`` key. The topic
    policy denies publishing without TLS and allows ``sns:Publish`` to
    ``cloudwatch.amazonaws.com`` for this account's alarms named
    ``alarm_name_prefix*`` only; the key policy allows the same principal,
    under the same conditions, ``kms:Decrypt`` and ``kms:GenerateDataKey*``
    (see the module docstring for the sources). Subscriptions: one per e-mail,
    HTTPS endpoint and Slack channel (``Slack<i>``, an AWS Chatbot channel
    configuration whose role has no permissions: it only relays
    notifications; its name, unique per account, is
    :func:`slack_configuration_name`). AWS Chatbot accepts one configuration
    per Slack channel per account: when the platform runs in several regions
    of one account, each region needs its own channel.

    Attributes:
        topic: the SNS topic.
        key: its KMS key (rotation on).
        action: a CloudWatch alarm action publishing to the topic.
        alarm_name_prefix: the prefix an alarm's name needs to publish here.
        alarm_arn_pattern: the ``aws:SourceArn`` pattern of those alarms
            (``arn:<partition>:cloudwatch:<region>:<account>:alarm:<prefix>*``).
    """

    def __init__(self, scope: Construct, id: str, props: AlarmTopicProps | None = None) -> None:
        super().__init__(scope, id)
        props = props or AlarmTopicProps()
        _validate(props)
        stack = cdk.Stack.of(self)
        self.alarm_name_prefix: str = (
            props.alarm_name_prefix
            if props.alarm_name_prefix is not None
            else f"{stack.stack_name}{ALARM_NAME_SEPARATOR}"
        )
        self.alarm_arn_pattern: str = stack.format_arn(
            service="cloudwatch",
            resource="alarm",
            resource_name=f"{self.alarm_name_prefix}*",
            arn_format=cdk.ArnFormat.COLON_RESOURCE_NAME,
        )
        # Confused-deputy protection: CloudWatch acts only for this account's platform alarms.
        source = {
            "StringEquals": {"aws:SourceAccount": stack.account},
            "ArnLike": {"aws:SourceArn": self.alarm_arn_pattern},
        }
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
                principals=[iam.ServicePrincipal(CLOUDWATCH_SERVICE_PRINCIPAL)],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions=source,
            )
        )
        self.topic = sns.Topic(
            self,
            "Resource",
            display_name=f"{stack.stack_name} alarms",
            master_key=self.key,
            enforce_ssl=True,
        )
        # The stack's TopicPolicy replaces SNS's default policy: without this statement no alarm can publish.
        self.topic.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal(CLOUDWATCH_SERVICE_PRINCIPAL)],
                actions=["sns:Publish"],
                resources=[self.topic.topic_arn],
                conditions=source,
            )
        )
        for email in props.emails:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        for url in props.https_endpoints:
            self.topic.add_subscription(subscriptions.UrlSubscription(url, protocol=sns.SubscriptionProtocol.HTTPS))
        self.slack_channels = [
            chatbot.SlackChannelConfiguration(
                self,
                f"Slack{index}",
                slack_channel_configuration_name=slack_configuration_name(stack.stack_name, channel.channel_id),
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


def slack_configuration_name(stack_name: str, channel_id: str) -> str:
    """The AWS Chatbot configuration name of one channel: ``<stack>-alarms-<channel>``.

    Chatbot configuration names are unique per account across regions (the
    configuration's ARN has no region). The channel ID makes this name unique
    per account: AWS Chatbot refuses a second configuration of a channel in
    one account ("Slack channel with ID ... has already been configured for
    AWS account ...", aws-cloudformation/cloudformation-coverage-roadmap#1155),
    so two configurations of this account, in any regions, never share a
    channel. The region is deliberately not part of the name: the name is
    create-only, and renaming a deployed configuration would replace it, and
    CloudFormation creates the replacement, for the same channel, before it
    deletes the old one, which Chatbot refuses.

    The name fits ``ConfigurationName``'s limit of
    :data:`SLACK_CONFIGURATION_NAME_MAX_LENGTH` characters and its pattern
    ``^[A-Za-z0-9-_]+$``. The stack name gives way, never the channel ID: a
    stack name too long for the rest is cut and followed by 8 hex digits of its
    SHA-256, so two long stack names that share a beginning stay apart.

    Args:
        stack_name: CloudFormation stack name (letters, digits, hyphens, at most 128).
        channel_id: the Slack channel ID (2-32 capital letters and digits).

    Raises:
        ValueError: ``channel_id`` is not a Slack ID.
    """
    if not SLACK_ID_PATTERN.fullmatch(channel_id):
        raise ValueError(
            f"channel_id: got {channel_id!r}; expected a Slack channel ID (2-32 capital letters and digits)"
        )
    suffix = f"-alarms-{channel_id}"
    budget = SLACK_CONFIGURATION_NAME_MAX_LENGTH - len(suffix)
    if len(stack_name) > budget:
        digest = hashlib.sha256(stack_name.encode()).hexdigest()[:8]
        stack_name = f"{stack_name[: budget - len(digest) - 1]}-{digest}"
    return f"{stack_name}{suffix}"


def _validate(props: AlarmTopicProps) -> None:
    for index, email in enumerate(props.emails):
        if not isinstance(email, str) or not EMAIL_PATTERN.fullmatch(email):
            raise ValueError(f"AlarmTopicProps.emails[{index}]: got {email!r}; expected an e-mail address")
    for index, url in enumerate(props.https_endpoints):
        if not isinstance(url, str) or not HTTPS_URL_PATTERN.fullmatch(url):
            raise ValueError(f"AlarmTopicProps.https_endpoints[{index}]: got {url!r}; expected an https:// URL")
    channels = [(c.workspace_id, c.channel_id) for c in props.slack_channels]
    if len(set(channels)) != len(channels):
        raise ValueError(f"AlarmTopicProps.slack_channels: got {channels}; expected each channel once")
    prefix = props.alarm_name_prefix
    if prefix is not None and (
        not isinstance(prefix, str)
        or not prefix
        or len(prefix) > 200
        or cdk.Token.is_unresolved(prefix)
        or any(c in prefix for c in "*?:")
        or not prefix.isprintable()
    ):
        raise ValueError(
            f"AlarmTopicProps.alarm_name_prefix: got {prefix!r}; expected 1-200 printable characters without "
            "'*', '?' or ':' (a wildcard or an empty prefix would let every alarm of the account publish)"
        )
