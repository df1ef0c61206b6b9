"""The platform's configuration: every context key is read and validated here, once.

Context comes from ``cdk.json`` (``"context"``), ``cdk.context.json``, or
``cdk synth -c key=value`` (values given with ``-c`` arrive as strings: lists
may be JSON (``'["a","b"]'``) or comma-separated, numbers as digits).
Account and region come from the environment the CDK CLI sets
(``CDK_DEPLOY_ACCOUNT``/``CDK_DEFAULT_ACCOUNT``, ``CDK_DEPLOY_REGION``/
``CDK_DEFAULT_REGION``); without them the stack is environment-agnostic.

A bad value raises :class:`ConfigError`, whose message names the key, the
value received and what was expected; ``cdk synth`` fails with it.

Context keys (default in brackets):

====================== ============================================================
``stackName``          CloudFormation stack name [``TrainingPlatform``]
``trainingPlanArns``   SageMaker training-plan ARNs, written to an SSM parameter the
                       submitter reads at run time; each in the deployment's region
                       and account (without them at synth: all in one region and
                       account, which the template then asserts) [``[]``]
``defaultInstanceType`` instance type of requests that name none; must be allowed
                       [``platform_spec.catalogue.DEFAULT_INSTANCE_TYPE``]
``allowedInstanceTypes`` instance types requests may use; each must be in the
                       planner catalogue, accepted by ``CreateTrainingJob``
                       (botocore's ``TrainingInstanceType``) and have host CPUs
                       the trainer image is built for (``imageArchitectures``)
                       [every such catalogue instance type]
``imageArchitectures`` CPU architectures the trainer image is built for, as OCI
                       names them: ``amd64`` (x86-64: P5, P6) and ``arm64`` (the
                       GB200 hosts' NVIDIA Grace), ``amd64`` always among them;
                       one image per architecture, each job runs its instance's
                       [``["amd64"]``: x86-64 only]
``capacityFallback``   order tried for ``capacity=auto``, values of
                       ``platform_spec.capacity.CAPACITY_TYPES``
                       [``platform_spec.capacity.DEFAULT_CAPACITY_FALLBACK``]
``allowedInputPrefixes`` extra read-only ``s3://bucket/prefix`` inputs (the data
                       bucket is always readable) [``[]``]
``logRetentionDays``   retention of the submitter's logs, a CloudWatch Logs value
                       (1, 3, 5, 7, 14, 30, 60, 90, ... 3653) [``90``]
``removalPolicy``      ``retain`` keeps buckets, key, repository and logs when the
                       stack is deleted; ``destroy`` deletes and empties them
                       (test accounts only) [``retain``]
``projectTag``         value of the ``Project`` tag on every resource and job
                       [``blackwell-training-platform``]
``costCenter``         value of the ``CostCenter`` tag [``ml-platform``]
``invokerPrincipals``  IAM role/user/root ARNs allowed to invoke the submitter [``[]``]
``alarmEmails``        e-mail addresses subscribed to the alarm topic [``[]``]
``alarmHttpsEndpoints`` ``https://`` endpoints subscribed to the alarm topic (incident
                       tools, chat relays that confirm SNS subscriptions) [``[]``]
``alarmSlackChannels`` Slack channels AWS Chatbot posts alarms to, each
                       ``WORKSPACE_ID/CHANNEL_ID`` (the workspace authorised once in
                       the AWS Chatbot console) [``[]``]
``idleCapacityAlarmHours`` a training plan with idle instances that ends within
                       this many hours raises an alarm (1-720) [``24``]
``imageRetainCount``   trainer images the ECR lifecycle rule keeps [``20``]
``submitterReservedConcurrency`` submitter invocations that may run at once (Lambda
                       reserved concurrency, 1-900, taken from the account's
                       unreserved pool, which must keep 100), or ``"none"`` to
                       reserve nothing [``10``]
``readerPrincipals``   IAM role/user/root ARNs allowed to invoke the read-only job API
                       (describe, list, list_runs), not the submitter [``[]``]
``runContinuationScheduleMinutes`` how often the run continuation retries the runs
                       waiting for capacity and publishes the longest wait (1-1440) [``5``]
``runCapacityWaitAlarmMinutes`` a run waiting for capacity longer than this raises the
                       ``RunWaitingForCapacity`` alarm (from the schedule's minutes to
                       43200, 30 days) [``120``]
``fsxLustre``          an FSx for Lustre file system linked to the data bucket, which
                       requests may read as a channel; needs ``vpc``. An object, every
                       key optional (``{}``: all defaults), the rules FSx publishes
                       (:mod:`platform_constructs.fsx_lustre`): ``deploymentType``
                       ``PERSISTENT_2`` or ``PERSISTENT_1`` (scratch types take no
                       customer key) [``PERSISTENT_2``]; ``storageCapacityGiB`` 1200,
                       2400 or a multiple of 2400 [``1200``];
                       ``perUnitStorageThroughput`` MB/s/TiB, ``PERSISTENT_2`` 125,
                       250, 500, 1000, ``PERSISTENT_1`` 50, 100, 200 [``250``;
                       ``PERSISTENT_1``: ``200``]; ``dataRepositoryPrefix`` the data
                       bucket's key prefix linked, ending in ``/`` [``""``: the whole
                       bucket]. [``null``: no file system]
``vpc``                VPC mode (jobs and functions in private subnets, AWS reached
                       through endpoints): ``"create"`` or ``{"create": true, "cidr":
                       "10.0.0.0/16", "maxAzs": 3, "internetAccess": false}`` (a new
                       VPC; maxAzs above 2 needs the account and region), or an
                       existing one ``{"vpcId", "subnetIds", "availabilityZones",
                       "routeTableIds", "createEndpoints": true}`` (IDs only: synth
                       looks nothing up; ``routeTableIds`` with ``createEndpoints``)
                       [``null``: no VPC]
``permissionsBoundaryArn`` ``arn:aws:iam::<account or aws>:policy/<path/name>``, the
                       permissions boundary of every role the app creates (CDK's
                       helper roles too), of the deployment's account and region's
                       partition [``null``: none]
====================== ============================================================
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
import botocore.exceptions
import botocore.session
from aws_cdk import aws_logs as logs

from constructs import Node
from platform_constructs.fsx_lustre import FsxLustreOptions
from platform_constructs.network import (
    DEFAULT_CIDR,
    DEFAULT_MAX_AZS,
    CreatedVpc,
    ExistingVpc,
    efa_instances_per_subnet,
)
from platform_constructs.observability.construct import (
    DEFAULT_RUN_CAPACITY_WAIT_MINUTES,
    MAX_IDLE_CAPACITY_HOURS,
    MAX_RUN_CAPACITY_WAIT_MINUTES,
    SlackChannel,
)
from platform_constructs.observability.notifications import EMAIL_PATTERN, HTTPS_URL_PATTERN
from platform_constructs.submitter.construct import (
    DEFAULT_CONTINUATION_SCHEDULE_MINUTES,
    DEFAULT_RESERVED_CONCURRENCY,
    MAX_CONTINUATION_SCHEDULE_MINUTES,
    MAX_RESERVED_CONCURRENCY,
)
from platform_spec.capacity import CAPACITY_TYPES, DEFAULT_CAPACITY_FALLBACK
from platform_spec.catalogue import (
    DEFAULT_IMAGE_ARCHITECTURES,
    DEFAULT_INSTANCE_TYPE,
    TRAINER_IMAGE_ARCHITECTURES,
    image_architectures_problem,
)
from platform_spec.errors import FieldError
from platform_spec.training_plans import TRAINING_PLAN_ARN_FORMAT, foreign_reason, parse_training_plan_arn, shared_home

__all__ = ["CONTEXT_KEYS", "ConfigError", "PlatformConfig", "S3Location", "load_config", "parse_image_architectures"]

TAG_PROJECT = "Project"
TAG_COST_CENTER = "CostCenter"

RETENTION_DAYS: dict[int, logs.RetentionDays] = {
    1: logs.RetentionDays.ONE_DAY,
    3: logs.RetentionDays.THREE_DAYS,
    5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK,
    14: logs.RetentionDays.TWO_WEEKS,
    30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS,
    90: logs.RetentionDays.THREE_MONTHS,
    120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS,
    180: logs.RetentionDays.SIX_MONTHS,
    365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS,
    545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS,
    1096: logs.RetentionDays.THREE_YEARS,
    1827: logs.RetentionDays.FIVE_YEARS,
    2192: logs.RetentionDays.SIX_YEARS,
    2557: logs.RetentionDays.SEVEN_YEARS,
    2922: logs.RetentionDays.EIGHT_YEARS,
    3288: logs.RetentionDays.NINE_YEARS,
    3653: logs.RetentionDays.TEN_YEARS,
}
"""CloudWatch Logs retention periods (days) -> CDK enum (the service accepts only these)."""

REMOVAL_POLICIES: dict[str, cdk.RemovalPolicy] = {
    "retain": cdk.RemovalPolicy.RETAIN,
    "destroy": cdk.RemovalPolicy.DESTROY,
}


def _catalogue_instance_types() -> tuple[str, ...]:
    """The planner catalogue's instance types that ``CreateTrainingJob`` accepts (UltraServer types
    such as ``ml.u-p6e-gb200x72`` are not training-job types)."""
    from platform_constructs.submitter.runtime.sagemaker_rules import training_instance_types
    from platform_spec.catalogue import INSTANCE_TYPES

    accepted = set(training_instance_types())
    return tuple(t for t in INSTANCE_TYPES if t in accepted)


def _trainable_instance_types(architectures: Sequence[str]) -> tuple[str, ...]:
    """The default of ``allowedInstanceTypes``: :func:`_catalogue_instance_types` whose host CPUs run an image of
    ``architectures`` (the runtime's :func:`~platform_constructs.submitter.runtime.config.default_allowed_instance_types`,
    which the emulator uses too; the arm64 GB200 hosts only with ``arm64`` in ``imageArchitectures``)."""
    from platform_constructs.submitter.runtime.config import default_allowed_instance_types

    return default_allowed_instance_types(architectures)


CONTEXT_KEYS: dict[str, Any] = {
    "stackName": "TrainingPlatform",
    "trainingPlanArns": [],
    "defaultInstanceType": DEFAULT_INSTANCE_TYPE,
    "allowedInstanceTypes": None,  # None: every catalogue type CreateTrainingJob accepts and the image runs on
    "imageArchitectures": list(DEFAULT_IMAGE_ARCHITECTURES),
    "capacityFallback": list(DEFAULT_CAPACITY_FALLBACK),
    "allowedInputPrefixes": [],
    "logRetentionDays": 90,
    "removalPolicy": "retain",
    "projectTag": "blackwell-training-platform",
    "costCenter": "ml-platform",
    "invokerPrincipals": [],
    "alarmEmails": [],
    "alarmHttpsEndpoints": [],
    "alarmSlackChannels": [],
    "idleCapacityAlarmHours": 24,
    "imageRetainCount": 20,
    "submitterReservedConcurrency": DEFAULT_RESERVED_CONCURRENCY,
    "readerPrincipals": [],
    "runContinuationScheduleMinutes": DEFAULT_CONTINUATION_SCHEDULE_MINUTES,
    "runCapacityWaitAlarmMinutes": DEFAULT_RUN_CAPACITY_WAIT_MINUTES,
    "fsxLustre": None,  # None: no file system
    "vpc": None,  # None: no VPC (jobs without VpcConfig, functions outside any VPC)
    "permissionsBoundaryArn": None,
}
"""Every context key this app reads, with its default."""

FSX_LUSTRE_KEYS: dict[str, str] = {
    "deploymentType": "deployment_type",
    "storageCapacityGiB": "storage_capacity_gib",
    "perUnitStorageThroughput": "per_unit_storage_throughput",
    "dataRepositoryPrefix": "data_repository_prefix",
}
"""``fsxLustre``'s keys -> the :class:`~platform_constructs.fsx_lustre.FsxLustreOptions` attribute each sets."""


class ConfigError(FieldError):
    """A bad context value: names the key, the value received and what was expected (a
    :class:`platform_spec.errors.FieldError` whose ``field`` is the key).

    Attributes:
        key: the context key (also ``field``), e.g. ``"trainingPlanArns[2]"``.
        value, expected: as for every :class:`FieldError`.

    Message: ``"context key '<key>': got <value!r>; expected <expected>"``.
    """

    def __init__(self, key: str, value: Any, expected: str) -> None:
        self.key = key
        super().__init__(key, value, expected)

    def format_message(self) -> str:
        return f"context key {self.field!r}: {self.reason}"


@dataclass(frozen=True)
class S3Location:
    """An ``s3://bucket/prefix`` location (``prefix`` may be empty)."""

    bucket: str
    prefix: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


@dataclass(frozen=True, kw_only=True)
class PlatformConfig:
    """The validated configuration (see the module docstring for each key)."""

    stack_name: str
    account: str | None
    region: str | None
    training_plan_arns: tuple[str, ...]
    default_instance_type: str
    allowed_instance_types: tuple[str, ...]
    image_architectures: tuple[str, ...]
    capacity_fallback: tuple[str, ...]
    allowed_input_prefixes: tuple[S3Location, ...]
    log_retention_days: int
    removal_policy: str
    project_tag: str
    cost_center: str
    invoker_principals: tuple[str, ...]
    alarm_emails: tuple[str, ...]
    alarm_https_endpoints: tuple[str, ...]
    alarm_slack_channels: tuple[SlackChannel, ...]
    idle_capacity_alarm_hours: int
    image_retain_count: int
    submitter_reserved_concurrency: int | None
    reader_principals: tuple[str, ...]
    run_continuation_schedule_minutes: int
    run_capacity_wait_alarm_minutes: int
    fsx_lustre: FsxLustreOptions | None
    vpc: CreatedVpc | ExistingVpc | None = None
    permissions_boundary_arn: str | None = None

    @property
    def env(self) -> cdk.Environment | None:
        """The stack environment, or ``None`` (environment-agnostic) when neither is known."""
        if self.account is None and self.region is None:
            return None
        return cdk.Environment(account=self.account, region=self.region)

    @property
    def cdk_removal_policy(self) -> cdk.RemovalPolicy:
        return REMOVAL_POLICIES[self.removal_policy]

    @property
    def log_retention(self) -> logs.RetentionDays:
        return RETENTION_DAYS[self.log_retention_days]

    @property
    def tags(self) -> dict[str, str]:
        """Tags applied to every resource (and added to every training job)."""
        return {TAG_PROJECT: self.project_tag, TAG_COST_CENTER: self.cost_center}


# -- readers -------------------------------------------------------------------
#
# Every pattern is matched whole (``fullmatch``: no trailing newline slips through ``$``) and spells
# its classes in ASCII (``[0-9]``, not ``\d``, which also matches other scripts' digits). Tag values
# follow SageMaker's own TagValue rule (botocore's model, ``sagemaker_rules``): they are on every job.

_ACCOUNT = re.compile(r"[0-9]{12}")
_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]+")
_STACK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]{0,127}")
_PRINCIPAL_ARN = re.compile(
    r"arn:aws(-[a-z]+)*:iam::[0-9]{12}:(root|role/[A-Za-z0-9_+=,.@/-]+|user/[A-Za-z0-9_+=,.@/-]+)"
)
_S3_URI = re.compile(
    r"s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(?P<prefix>[^\x00-\x1f\x7f-\x9f\u2028\u2029*?]*))?"
)
"""An ``s3://bucket/prefix`` input location; the prefix holds no control character or line
separator and no IAM wildcard (``*``, ``?``): it becomes the execution role's resource ARN."""
_INTEGER = re.compile(r" *[0-9]+ *")


def _as_list(key: str, raw: Any) -> list[Any]:
    if isinstance(raw, str):
        text = raw.strip(" ")
        if text.startswith("["):
            try:
                raw = json.loads(text)
            except json.JSONDecodeError:
                raise ConfigError(key, raw, "a JSON list or a comma-separated string") from None
        else:  # spaces around the commas go; anything else (a newline) stays and is refused
            raw = [part.strip(" ") for part in text.split(",") if part.strip(" ")]
    if not isinstance(raw, list):
        raise ConfigError(key, raw, "a list")
    return raw


def _list_of(key: str, raw: Any, check: Callable[[str], bool], expected: str) -> tuple[str, ...]:
    items = _as_list(key, raw)
    for index, item in enumerate(items):
        if not isinstance(item, str) or not check(item):
            raise ConfigError(f"{key}[{index}]", item, expected)
    if len(set(items)) != len(items):
        duplicates = sorted({item for item in items if items.count(item) > 1})
        raise ConfigError(key, duplicates, "each value once (these are listed more than once)")
    return tuple(items)


def _json_object(key: str, raw: Any, expected: str) -> Any:
    """``raw`` parsed when it is a JSON object's text (``-c key='{...}'``, nothing after it, not even a newline),
    else ``raw`` as it is.

    Raises:
        ConfigError: text that starts as an object but is not one JSON object.
    """
    if not (isinstance(raw, str) and raw.strip(" ").startswith("{")):
        return raw
    text = raw.strip(" ")
    try:
        parsed, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        raise ConfigError(key, raw, expected) from None
    if end != len(text):
        raise ConfigError(key, raw, expected)
    return parsed


def _int(key: str, raw: Any) -> int:
    if isinstance(raw, bool):
        raise ConfigError(key, raw, "an integer")
    if isinstance(raw, int):
        return raw
    if isinstance(raw, str) and _INTEGER.fullmatch(raw):
        return int(raw)
    raise ConfigError(key, raw, "an integer")


def _string(key: str, raw: Any, pattern: re.Pattern[str], expected: str) -> str:
    if not isinstance(raw, str) or not pattern.fullmatch(raw):
        raise ConfigError(key, raw, expected)
    return raw


def _tag_value(key: str, raw: Any) -> str:
    """A tag value SageMaker accepts (``Tags.member.Value`` in botocore's model, also the rule of the other
    services' tags), not empty."""
    from platform_constructs.submitter.runtime.sagemaker_rules import string_rule

    rule = string_rule("Tags.member.Value")
    if not isinstance(raw, str) or not raw or not rule.accepts(raw):
        raise ConfigError(
            key,
            raw,
            f"1-{rule.max_length} characters: letters, digits, spaces and _ . : / = + - @ (SageMaker's {rule.name})",
        )
    return raw


def load_config(node: Node, environ: Mapping[str, str] | None = None) -> PlatformConfig:
    """Read and validate every context key (see the module docstring).

    Args:
        node: the app's construct node (``app.node``), whose context is read.
        environ: environment variables for account and region. Default: ``os.environ``.

    Raises:
        ConfigError: a value is malformed, or a key looks like a misspelling of one of ours.
    """
    environ = os.environ if environ is None else environ
    context = node.get_all_context()
    _reject_misspellings(context)

    def get(key: str) -> Any:
        value = node.try_get_context(key)
        return CONTEXT_KEYS[key] if value is None else value

    stack_name = _string(
        "stackName",
        get("stackName"),
        _STACK_NAME,
        "a CloudFormation stack name (letters, digits, hyphens; starts with a letter)",
    )

    account_variable = "CDK_DEPLOY_ACCOUNT" if environ.get("CDK_DEPLOY_ACCOUNT") else "CDK_DEFAULT_ACCOUNT"
    account = environ.get(account_variable) or None
    if account is not None and not _ACCOUNT.fullmatch(account):
        raise ConfigError(account_variable, account, "a 12-digit AWS account ID")
    region_variable = "CDK_DEPLOY_REGION" if environ.get("CDK_DEPLOY_REGION") else "CDK_DEFAULT_REGION"
    region = environ.get(region_variable) or None
    if region is not None and not _REGION.fullmatch(region):
        raise ConfigError(region_variable, region, "an AWS region name such as us-east-1")

    plan_arns = _list_of(
        "trainingPlanArns",
        get("trainingPlanArns"),
        lambda arn: _is_plan_arn(arn),
        f"a SageMaker training-plan ARN {TRAINING_PLAN_ARN_FORMAT}",
    )
    _check_plan_homes(plan_arns, region=region, account=account)

    image_architectures = parse_image_architectures(get("imageArchitectures"))
    catalogue = _catalogue_instance_types()
    trainable = _trainable_instance_types(image_architectures)
    raw_allowed = get("allowedInstanceTypes")
    allowed = (
        trainable
        if raw_allowed is None
        else _list_of(
            "allowedInstanceTypes",
            raw_allowed,
            lambda t: t in catalogue,
            f"an instance type from the planner catalogue that CreateTrainingJob accepts "
            f"(SageMaker's TrainingInstanceType): {', '.join(trainable)}",
        )
    )
    from platform_spec.catalogue import host_architecture_problem

    for index, instance_type in enumerate(allowed):
        problem = host_architecture_problem(instance_type, image_architectures)
        if problem is not None:
            raise ConfigError(
                f"allowedInstanceTypes[{index}]",
                instance_type,
                f"an instance type the trainer image runs on ({problem}; add its architecture to "
                f"imageArchitectures): one of {', '.join(trainable)}",
            )
    if not allowed:
        raise ConfigError("allowedInstanceTypes", list(allowed), "at least one instance type")
    default_instance_type = get("defaultInstanceType")
    if default_instance_type not in allowed:
        raise ConfigError(
            "defaultInstanceType", default_instance_type, f"one of allowedInstanceTypes ({', '.join(allowed)})"
        )

    capacity_fallback = _list_of(
        "capacityFallback",
        get("capacityFallback"),
        lambda c: c in CAPACITY_TYPES,
        f"one of {', '.join(CAPACITY_TYPES)}",
    )
    if not capacity_fallback:
        raise ConfigError("capacityFallback", [], f"at least one of {', '.join(CAPACITY_TYPES)}")

    prefixes = _list_of(
        "allowedInputPrefixes",
        get("allowedInputPrefixes"),
        lambda uri: bool(_S3_URI.fullmatch(uri)),
        "an s3://bucket/prefix URI without wildcards ('*', '?') or control characters",
    )
    input_prefixes = tuple(
        S3Location(bucket=m["bucket"], prefix=m["prefix"] or "") for m in (_S3_URI.fullmatch(uri) for uri in prefixes)
    )

    retention = _int("logRetentionDays", get("logRetentionDays"))
    if retention not in RETENTION_DAYS:
        raise ConfigError(
            "logRetentionDays",
            retention,
            f"a CloudWatch Logs retention period in days: {', '.join(map(str, RETENTION_DAYS))}",
        )

    removal = get("removalPolicy")
    if not isinstance(removal, str) or removal.lower() not in REMOVAL_POLICIES:
        raise ConfigError("removalPolicy", removal, "'retain' (keep data, the default) or 'destroy' (test accounts)")

    project_tag = _tag_value("projectTag", get("projectTag"))
    cost_center = _tag_value("costCenter", get("costCenter"))

    invokers = _list_of(
        "invokerPrincipals",
        get("invokerPrincipals"),
        lambda arn: bool(_PRINCIPAL_ARN.fullmatch(arn)),
        "an IAM principal ARN: arn:aws:iam::<account>:role/<name>, :user/<name> or :root",
    )
    emails = _list_of(
        "alarmEmails", get("alarmEmails"), lambda e: bool(EMAIL_PATTERN.fullmatch(e)), "an e-mail address"
    )
    https_endpoints = _list_of(
        "alarmHttpsEndpoints",
        get("alarmHttpsEndpoints"),
        lambda u: bool(HTTPS_URL_PATTERN.fullmatch(u)),
        "an https:// URL",
    )
    slack_channels = tuple(
        SlackChannel.parse(text)
        for text in _list_of(
            "alarmSlackChannels",
            get("alarmSlackChannels"),
            lambda text: _is_slack_channel(text),
            "WORKSPACE_ID/CHANNEL_ID (Slack IDs, e.g. T0123ABCD/C0456EFGH)",
        )
    )
    idle_hours = _int("idleCapacityAlarmHours", get("idleCapacityAlarmHours"))
    if not 1 <= idle_hours <= MAX_IDLE_CAPACITY_HOURS:
        raise ConfigError(
            "idleCapacityAlarmHours", idle_hours, f"an integer from 1 to {MAX_IDLE_CAPACITY_HOURS} (hours)"
        )

    retain_count = _int("imageRetainCount", get("imageRetainCount"))
    if not 1 <= retain_count <= 10_000:
        raise ConfigError("imageRetainCount", retain_count, "an integer from 1 to 10000")

    reserved = _reserved_concurrency(get("submitterReservedConcurrency"))

    readers = _list_of(
        "readerPrincipals",
        get("readerPrincipals"),
        lambda arn: bool(_PRINCIPAL_ARN.fullmatch(arn)),
        "an IAM principal ARN: arn:aws:iam::<account>:role/<name>, :user/<name> or :root",
    )
    schedule_minutes = _int("runContinuationScheduleMinutes", get("runContinuationScheduleMinutes"))
    if not 1 <= schedule_minutes <= MAX_CONTINUATION_SCHEDULE_MINUTES:
        raise ConfigError(
            "runContinuationScheduleMinutes",
            schedule_minutes,
            f"an integer from 1 to {MAX_CONTINUATION_SCHEDULE_MINUTES} (minutes between the continuation's runs)",
        )
    wait_minutes = _int("runCapacityWaitAlarmMinutes", get("runCapacityWaitAlarmMinutes"))
    if not schedule_minutes <= wait_minutes <= MAX_RUN_CAPACITY_WAIT_MINUTES:
        raise ConfigError(
            "runCapacityWaitAlarmMinutes",
            wait_minutes,
            f"an integer from runContinuationScheduleMinutes ({schedule_minutes}: the wait is measured on each "
            f"scheduled run) to {MAX_RUN_CAPACITY_WAIT_MINUTES} (minutes)",
        )

    vpc = _vpc(get("vpc"), region=region, account=account)
    boundary = _boundary(get("permissionsBoundaryArn"), region=region, account=account)
    fsx_lustre = _fsx_lustre(get("fsxLustre"))
    _check_fsx_needs_vpc(fsx_lustre, vpc)

    return PlatformConfig(
        vpc=vpc,
        permissions_boundary_arn=boundary,
        stack_name=stack_name,
        account=account,
        region=region,
        training_plan_arns=plan_arns,
        default_instance_type=default_instance_type,
        allowed_instance_types=tuple(allowed),
        image_architectures=image_architectures,
        capacity_fallback=capacity_fallback,
        allowed_input_prefixes=input_prefixes,
        log_retention_days=retention,
        removal_policy=removal.lower(),
        project_tag=project_tag,
        cost_center=cost_center,
        invoker_principals=invokers,
        alarm_emails=emails,
        alarm_https_endpoints=https_endpoints,
        alarm_slack_channels=slack_channels,
        idle_capacity_alarm_hours=idle_hours,
        image_retain_count=retain_count,
        submitter_reserved_concurrency=reserved,
        reader_principals=readers,
        run_continuation_schedule_minutes=schedule_minutes,
        run_capacity_wait_alarm_minutes=wait_minutes,
        fsx_lustre=fsx_lustre,
    )


def parse_image_architectures(raw: Any) -> tuple[str, ...]:
    """``imageArchitectures`` (``None``: its default): OCI architecture names of :data:`platform_spec.catalogue.TRAINER_IMAGE_ARCHITECTURES`,
    each once, ``amd64`` among them (:func:`platform_spec.catalogue.image_architectures_problem`)."""
    key = "imageArchitectures"
    raw = CONTEXT_KEYS[key] if raw is None else raw
    expected = image_architectures_problem(())  # the rule's wording: () always fails it
    items = _list_of(key, raw, lambda a: a in TRAINER_IMAGE_ARCHITECTURES, str(expected))
    problem = image_architectures_problem(items)
    if problem is not None:
        raise ConfigError(key, list(items), problem)
    return items


def _fsx_lustre(raw: Any) -> FsxLustreOptions | None:
    """``fsxLustre``: ``None`` (no file system) or the options, each key checked by
    :class:`~platform_constructs.fsx_lustre.FsxLustreOptions` (FSx's published rules)."""
    key = "fsxLustre"
    expected = f"null or an object of the keys {', '.join(FSX_LUSTRE_KEYS)}, each optional ({{}}: every default)"
    if raw is None:
        return None
    raw = _json_object(key, raw, expected)
    if not isinstance(raw, dict):
        raise ConfigError(key, raw, expected)
    for name in raw:
        if name not in FSX_LUSTRE_KEYS:
            close = difflib.get_close_matches(name, FSX_LUSTRE_KEYS, n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{key}.{name}", raw[name], f"one of the keys {', '.join(FSX_LUSTRE_KEYS)}{hint}")
    values: dict[str, Any] = {}
    for name, attribute in FSX_LUSTRE_KEYS.items():
        value = raw.get(name)
        if value is None:
            continue
        values[attribute] = (
            value if attribute in ("deployment_type", "data_repository_prefix") else _int(f"{key}.{name}", value)
        )
    try:
        return FsxLustreOptions(**values)
    except FieldError as error:
        name = next(n for n, attribute in FSX_LUSTRE_KEYS.items() if attribute == error.field)
        detail = f" ({error.detail})" if error.detail else ""
        raise ConfigError(f"{key}.{name}", error.value, f"{error.expected}{detail}") from None


def _check_fsx_needs_vpc(fsx_lustre: FsxLustreOptions | None, vpc: CreatedVpc | ExistingVpc | None) -> None:
    """``fsxLustre`` needs ``vpc``: the file system lives in one of the VPC's private subnets and jobs reach it
    there.

    Raises:
        ConfigError: ``fsxLustre`` is set and ``vpc`` is not.
    """
    if fsx_lustre is not None and vpc is None:
        raise ConfigError(
            "fsxLustre",
            {name: getattr(fsx_lustre, attribute) for name, attribute in FSX_LUSTRE_KEYS.items()},
            "a 'vpc' setting as well (\"create\" or an existing VPC): the file system lives in one of its private "
            "subnets, and jobs reach it there; or null for no file system",
        )


_VPC_ID = re.compile(r"vpc-[0-9a-f]{8,17}")
_SUBNET_ID = re.compile(r"subnet-[0-9a-f]{8,17}")
_ROUTE_TABLE_ID = re.compile(r"rtb-[0-9a-f]{8,17}")
_ZONE = re.compile(r"[a-z]{2}(-[a-z]+)+-[0-9]+[a-z]")
_BOUNDARY_ARN = re.compile(
    r"arn:(?P<partition>aws(?:-[a-z]+)*):iam::(?P<account>[0-9]{12}|aws):policy/(?:[\x21-\x7e]+/)?[A-Za-z0-9_+=,.@-]{1,128}"
)
CREATE_KEYS = ("create", "cidr", "maxAzs", "internetAccess")
EXISTING_KEYS = ("vpcId", "subnetIds", "availabilityZones", "routeTableIds", "createEndpoints")
MIN_CIDR_PREFIX, MAX_CIDR_PREFIX = 16, 24
MAX_AZS = 6
"""The most availability zones of a region (us-east-1 has six)."""
ENV_AGNOSTIC_AZS = 2
"""Zones an environment-agnostic stack can use: CDK knows only ``Fn::GetAZs``' first two without the account."""


def _vpc(raw: Any, *, region: str | None, account: str | None) -> CreatedVpc | ExistingVpc | None:
    """``vpc``: ``null``, ``"create"``, a created VPC's options or an existing VPC's IDs (module docstring)."""
    if raw is None:
        return None
    raw = _json_object("vpc", raw, 'a JSON object, or "create"')
    if raw == "create":
        raw = {"create": True}
    expected = (
        '"create", {"create": true, "cidr", "maxAzs", "internetAccess"} or an existing VPC '
        '{"vpcId", "subnetIds", "availabilityZones", "routeTableIds", "createEndpoints"}'
    )
    if not isinstance(raw, dict) or not raw:
        raise ConfigError("vpc", raw, expected)
    keys = CREATE_KEYS if "create" in raw else EXISTING_KEYS
    unknown = sorted(set(raw) - set(keys))
    if unknown:
        raise ConfigError(f"vpc.{unknown[0]}", raw[unknown[0]], f"one of the keys {', '.join(keys)}")
    if "create" in raw:
        return _created_vpc(raw, region=region, account=account)
    return _existing_vpc(raw, region=region)


def _bool(key: str, raw: Any) -> bool:
    if not isinstance(raw, bool):
        raise ConfigError(key, raw, "true or false")
    return raw


def _created_vpc(raw: Mapping[str, Any], *, region: str | None, account: str | None) -> CreatedVpc:
    if raw["create"] is not True:
        raise ConfigError("vpc.create", raw["create"], "true (leave vpc out, or null, for no VPC)")
    cidr_text = raw.get("cidr", DEFAULT_CIDR)
    expected = f"an IPv4 CIDR block from /{MIN_CIDR_PREFIX} to /{MAX_CIDR_PREFIX}, e.g. {DEFAULT_CIDR}"
    try:
        cidr = ipaddress.IPv4Network(cidr_text) if isinstance(cidr_text, str) else None
    except ValueError:
        cidr = None
    if cidr is None or not MIN_CIDR_PREFIX <= cidr.prefixlen <= MAX_CIDR_PREFIX:
        raise ConfigError("vpc.cidr", cidr_text, expected)
    max_azs = _int("vpc.maxAzs", raw.get("maxAzs", DEFAULT_MAX_AZS))
    if not 1 <= max_azs <= MAX_AZS:
        raise ConfigError("vpc.maxAzs", max_azs, f"an integer from 1 to {MAX_AZS} (availability zones)")
    if max_azs > ENV_AGNOSTIC_AZS and (region is None or account is None):
        default = f"({DEFAULT_MAX_AZS} is maxAzs' default) " if "maxAzs" not in raw else ""
        raise ConfigError(
            "vpc.maxAzs",
            max_azs,
            f"{default}at most {ENV_AGNOSTIC_AZS} without CDK_DEFAULT_ACCOUNT and CDK_DEFAULT_REGION (an "
            f"environment-agnostic stack knows only two availability zones): set both, or -c vpc='"
            f'{{"create": true, "maxAzs": {ENV_AGNOSTIC_AZS}}}\'',
        )
    internet = _bool("vpc.internetAccess", raw.get("internetAccess", False))
    # ec2.Vpc splits the block evenly among the zones' private subnets; public ones (/28 each) come first, which
    # costs the private ones at most one bit
    private_prefix = cidr.prefixlen + (max_azs - 1).bit_length() + (1 if internet else 0)
    if private_prefix > 28 or efa_instances_per_subnet(f"{cidr.network_address}/{private_prefix}") < 1:
        raise ConfigError(
            "vpc.cidr",
            cidr_text,
            f"a block whose {max_azs} private subnets (each at least a /{private_prefix}) hold an EFA training instance "
            "(5 addresses, beside AWS's 5 and the endpoints'): a larger block or fewer maxAzs",
        )
    return CreatedVpc(cidr=str(cidr), max_azs=max_azs, internet_access=internet)


def _existing_vpc(raw: Mapping[str, Any], *, region: str | None) -> ExistingVpc:
    missing = [key for key in ("vpcId", "subnetIds", "availabilityZones") if key not in raw]
    if missing:
        raise ConfigError(
            f"vpc.{missing[0]}", None, f"the existing VPC's {missing[0]} (with vpcId, subnetIds, availabilityZones)"
        )
    vpc_id = _string("vpc.vpcId", raw["vpcId"], _VPC_ID, "a VPC ID, vpc- and 8 to 17 hex digits")
    subnets = _list_of(
        "vpc.subnetIds",
        raw["subnetIds"],
        lambda s: bool(_SUBNET_ID.fullmatch(s)),
        "a subnet ID, subnet- and 8 to 17 hex digits",
    )
    if not subnets:
        raise ConfigError("vpc.subnetIds", [], "at least one private subnet ID")
    zones = _as_list("vpc.availabilityZones", raw["availabilityZones"])
    in_region = (
        f"an availability zone of {region}, e.g. {region}a" if region else "an availability zone name, e.g. us-west-2a"
    )
    for index, zone in enumerate(zones):
        if not isinstance(zone, str) or not _ZONE.fullmatch(zone) or (region and zone[:-1] != region):
            raise ConfigError(f"vpc.availabilityZones[{index}]", zone, in_region)
        if zone[:-1] != zones[0][:-1]:  # synth knows no region: a VPC's zones are still in one
            raise ConfigError(
                f"vpc.availabilityZones[{index}]", zone, f"a zone of {zones[0][:-1]} (as availabilityZones[0])"
            )
    if len(zones) != len(subnets):
        raise ConfigError(
            "vpc.availabilityZones", zones, f"the zone of each of the {len(subnets)} subnetIds, in their order"
        )
    create_endpoints = _bool("vpc.createEndpoints", raw.get("createEndpoints", True))
    route_tables: tuple[str, ...] = ()
    if create_endpoints or "routeTableIds" in raw:
        route_tables = tuple(_as_list("vpc.routeTableIds", raw.get("routeTableIds", [])))
        for index, table in enumerate(route_tables):
            if not isinstance(table, str) or not _ROUTE_TABLE_ID.fullmatch(table):
                raise ConfigError(f"vpc.routeTableIds[{index}]", table, "a route table ID, rtb- and 8 to 17 hex digits")
        if len(route_tables) != len(subnets):
            raise ConfigError(
                "vpc.routeTableIds",
                list(route_tables),
                f"the route table of each of the {len(subnets)} subnetIds, in their order (the S3 and DynamoDB "
                "gateway endpoints route there), or createEndpoints false",
            )
    return ExistingVpc(
        vpc_id=vpc_id,
        subnet_ids=subnets,
        availability_zones=tuple(zones),
        route_table_ids=route_tables,
        create_endpoints=create_endpoints,
    )


def _boundary(raw: Any, *, region: str | None, account: str | None) -> str | None:
    """``permissionsBoundaryArn``: a managed policy of the deployment's account (or AWS's), in the partition of its
    region (IAM is per partition: a role cannot name a policy of another); botocore's endpoint data is the
    partitions' source."""
    if raw is None:
        return None
    expected = "an IAM managed policy ARN, arn:aws:iam::<account or aws>:policy/<path/name>"
    match = _BOUNDARY_ARN.fullmatch(raw) if isinstance(raw, str) else None
    if match is None:
        raise ConfigError("permissionsBoundaryArn", raw, expected)
    session = botocore.session.get_session()
    partitions = session.get_available_partitions()
    if match["partition"] not in partitions:
        raise ConfigError("permissionsBoundaryArn", raw, f"{expected}, of a partition of {', '.join(partitions)}")
    try:
        home = session.get_partition_for_region(region) if region else None
    except botocore.exceptions.UnknownRegionError:
        home = None  # a region botocore does not know yet: its partition is unknown here
    if home is not None and match["partition"] != home:
        raise ConfigError("permissionsBoundaryArn", raw, f"a policy ARN of partition {home} ({region}'s)")
    if account is not None and match["account"] not in (account, "aws"):
        raise ConfigError(
            "permissionsBoundaryArn", raw, f"a policy of the deployment's account {account} (or an AWS managed one)"
        )
    return raw


def _reserved_concurrency(raw: Any) -> int | None:
    key = "submitterReservedConcurrency"
    if isinstance(raw, str) and raw.strip(" ").lower() == "none":
        return None
    expected = (
        f"an integer from 1 to {MAX_RESERVED_CONCURRENCY} (Lambda keeps 100 of the account's concurrency "
        'unreserved; 0 would throttle every submission), or "none" to reserve nothing'
    )
    try:
        value = _int(key, raw)
    except ConfigError:
        raise ConfigError(key, raw, expected) from None
    if not 1 <= value <= MAX_RESERVED_CONCURRENCY:
        raise ConfigError(key, value, expected)
    return value


def _check_plan_homes(plan_arns: Sequence[str], *, region: str | None, account: str | None) -> None:
    """Every plan in the deployment's region and account; where those are unknown, plans of one region and account.

    A training plan is usable only in its own region and account
    (:mod:`platform_spec.training_plans`). An
    environment-agnostic stack deploys into one region and account that synth
    does not know: its template then asserts the plans' region and account
    (:class:`platform_constructs.training_plans.TrainingPlans`), which needs
    them to be one of each.
    """
    for index, arn in enumerate(plan_arns):
        reason = foreign_reason(arn, region=region, account=account)
        if reason is not None:
            where = " and ".join(
                f"{part} {value}" for part, value in (("region", region), ("account", account)) if value
            )
            raise ConfigError(f"trainingPlanArns[{index}]", arn, f"a plan in the deployment {where} ({reason})")
    _, differing = shared_home(plan_arns)
    unknown = [
        part for part, value in (("region", region), ("account", account)) if value is None and part in differing
    ]
    if unknown:
        raise ConfigError(
            "trainingPlanArns",
            list(plan_arns),
            "plans of one region and one account: the stack deploys into one, and without "
            + " and ".join(f"CDK_DEFAULT_{part.upper()}" for part in unknown)
            + " its template asserts the plans' own; got "
            + "; ".join(differing[part] for part in unknown),
        )


def _is_plan_arn(arn: str) -> bool:
    try:
        parse_training_plan_arn(arn)
    except ValueError:
        return False
    return True


def _is_slack_channel(text: str) -> bool:
    try:
        SlackChannel.parse(text)
    except ValueError:
        return False
    return True


def _reject_misspellings(context: Mapping[str, Any]) -> None:
    """Fail on a context key that is not ours but is close to one of ours (e.g. ``trainingPlanArn``)."""
    ours = {key.lower(): key for key in CONTEXT_KEYS}
    for key in context:
        if key in CONTEXT_KEYS or key.startswith(("@", "aws:", "cdk")) or ":" in key:
            continue
        close = difflib.get_close_matches(key.lower(), ours, n=1, cutoff=0.8)
        if close:
            raise ConfigError(key, context[key], f"a known context key; did you mean {ours[close[0]]!r}?")
