"""The function's configuration, read once from its environment.

The construct sets these variables (names in :mod:`.settings`); for local runs
``trainctl local-aws --env-file`` writes the same set. Reading is strict: a
missing or malformed variable raises :class:`.errors.ConfigurationError`
naming it, because a half-configured submitter must not start jobs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from platform_spec.capacity import CAPACITY_FALLBACK_EXPECTED, DEFAULT_CAPACITY_FALLBACK, capacity_fallback_problem
from platform_spec.catalogue import (
    DEFAULT_INSTANCE_TYPE,
    IMAGE_ARCHITECTURES_RULE,
    TRAINER_IMAGE_ARCHITECTURES,
    get_trainable_instance,
    image_architectures_problem,
)

from . import sagemaker_rules, settings
from .errors import ConfigurationError

DEFAULT_VOLUME_SIZE_GB = 500
"""EBS volume per instance in GB when ``TRAINING_VOLUME_SIZE_GB`` is unset (SageMaker
ignores it on instances whose local NVMe serves as the training volume)."""


@dataclass(frozen=True)
class VpcSubnet:
    """A private subnet jobs run in (VPC mode; an entry of :data:`.settings.ENV_VPC_SUBNETS`).

    Attributes:
        subnet_id: ``subnet-...`` (a member of ``VpcConfig.Subnets``).
        availability_zone: its zone, e.g. ``us-west-2a`` (a training plan's block names the zone its
            instances are in: a job on it runs in that zone's subnets).
    """

    subnet_id: str
    availability_zone: str


@dataclass(frozen=True)
class FsxLustre:
    """The platform's FSx for Lustre file system (:data:`.settings.ENV_FSX_LUSTRE`), which a request may name as
    a channel (``FileSystemDataSource``).

    Attributes:
        file_system_id: ``fs-`` + 8 or more hex digits (SageMaker's ``FileSystemId``).
        mount_name: the file system's mount name (FSx's ``LustreFileSystemMountName``): a channel's
            ``DirectoryPath`` starts with ``/<mount_name>/``.
        subnet_id: the subnet the file system lives in (one of the VPC subnets): its jobs run there.
        availability_zone: that subnet's zone (FSx for Lustre lives in one zone).
    """

    file_system_id: str
    mount_name: str
    subnet_id: str
    availability_zone: str

    @property
    def root(self) -> str:
        """``/<mount_name>``: the directory every channel of this file system is under."""
        return f"/{self.mount_name}"


@dataclass(frozen=True)
class SubmitterConfig:
    """Everything the submitter needs besides the request.

    Attributes:
        trainer_image_uris: the trainer image (ECR URI) of each CPU architecture the deployment built (OCI names,
            ``{"amd64": ..., "arm64": ...}``; ``TRAINER_IMAGE_URIS``): a job runs the one of its instance's host
            architecture (:meth:`trainer_image_for`).
        execution_role_arn: the SageMaker execution role jobs assume.
        data_bucket: bucket input channels must live under (``s3://<data_bucket>/``).
        checkpoint_bucket: bucket for ``CheckpointConfig`` (one prefix per job).
        output_bucket: bucket for ``OutputDataConfig`` (model artefacts).
        output_kms_key_arn: the KMS key ARN of ``OutputDataConfig.KmsKeyId`` (the platform's key; an ARN,
            so the execution role needs no ``kms:Encrypt``, per the API reference of ``OutputDataConfig``).
        training_plan_arns_parameter: SSM String parameter holding a JSON list of plan ARNs.
        default_instance_type: instance type used when a request names none.
        allowed_instance_types: instance types requests may name; empty = any the planner knows.
        capacity_fallback: order tried for ``capacity: auto``.
        allowed_input_prefixes: extra ``s3://`` prefixes input channels may use.
        platform_tags: tags added to every job (win over nothing: request tags may not reuse these keys).
        volume_size_gb: ``ResourceConfig.VolumeSizeInGB``.
        client_token_records: ``s3://bucket/prefix/`` of the client-token records
            (:mod:`.ledger`). Empty: not configured, and a request with a
            ``client_token`` raises ConfigurationError.
        region: the region the function runs in (``AWS_REGION``, set by Lambda); training
            plans of other regions are refused. Empty: unknown, and choosing a plan raises
            ConfigurationError.
        account_id: the deployment's account (``PLATFORM_ACCOUNT_ID``, set by the construct
            from ``Aws.ACCOUNT_ID``); training plans of other accounts are refused. Empty: as for
            ``region``.
        vpc_subnets: VPC mode's private subnets (``VPC_SUBNETS``), each job's ``VpcConfig.Subnets`` (a job on a
            training plan: those in its block's zone). Empty: no VPC mode, and jobs get no ``VpcConfig``.
        vpc_security_group_ids: every job's ``VpcConfig.SecurityGroupIds`` (``VPC_SECURITY_GROUP_IDS``); set
            exactly when ``vpc_subnets`` is.
        fsx_lustre: the platform's FSx for Lustre file system (``FSX_LUSTRE``; needs VPC mode). ``None``: none,
            and a request naming a file system is refused.
    """

    trainer_image_uris: Mapping[str, str]
    execution_role_arn: str
    data_bucket: str
    checkpoint_bucket: str
    output_bucket: str
    output_kms_key_arn: str
    training_plan_arns_parameter: str
    default_instance_type: str = DEFAULT_INSTANCE_TYPE
    allowed_instance_types: tuple[str, ...] = ()
    capacity_fallback: tuple[str, ...] = DEFAULT_CAPACITY_FALLBACK
    allowed_input_prefixes: tuple[str, ...] = ()
    platform_tags: Mapping[str, str] = field(default_factory=dict)
    volume_size_gb: int = DEFAULT_VOLUME_SIZE_GB
    client_token_records: str = ""
    region: str = ""
    account_id: str = ""
    vpc_subnets: tuple[VpcSubnet, ...] = ()
    vpc_security_group_ids: tuple[str, ...] = ()
    fsx_lustre: FsxLustre | None = None

    @property
    def image_architectures(self) -> tuple[str, ...]:
        """The CPU architectures the deployment's trainer image is built for (the keys of ``trainer_image_uris``)."""
        return tuple(self.trainer_image_uris)

    def trainer_image_for(self, instance_type: str) -> str:
        """The trainer image a job on ``instance_type`` runs: the one of its host CPUs' architecture
        (:attr:`platform_spec.catalogue.InstanceSpec.cpu_architecture`: ``amd64`` for P5 and P6, ``arm64`` for the
        GB200 hosts).

        Raises:
            platform_spec.catalogue.UnknownInstanceTypeError: not a catalogue instance type.
            platform_spec.catalogue.UnsupportedHostArchitectureError: (a ``FieldError`` on ``instance_type``) no
                image of its architecture was built; names the type, its architecture, the architectures built
                and the catalogue types they run on.
        """
        instance = get_trainable_instance(instance_type, architectures=self.image_architectures)
        return self.trainer_image_uris[instance.cpu_architecture]

    @property
    def vpc_mode(self) -> bool:
        """Whether jobs run in the platform's VPC (``VpcConfig``)."""
        return bool(self.vpc_subnets)

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> SubmitterConfig:
        """Read the configuration from environment variables.

        Raises:
            ConfigurationError: a required variable is missing or one is malformed.
        """

        def required(name: str) -> str:
            value = environ.get(name, "").strip()
            if not value:
                raise ConfigurationError(f"environment variable {name} is required and not set")
            return value

        def csv(name: str) -> tuple[str, ...]:
            return tuple(p.strip() for p in environ.get(name, "").split(",") if p.strip())

        fallback = csv(settings.ENV_CAPACITY_FALLBACK) or DEFAULT_CAPACITY_FALLBACK
        problem = capacity_fallback_problem(fallback)
        if problem is not None:
            raise ConfigurationError(
                f"{settings.ENV_CAPACITY_FALLBACK}={environ.get(settings.ENV_CAPACITY_FALLBACK)!r}: expected "
                f"{CAPACITY_FALLBACK_EXPECTED}, comma-separated ({problem})"
            )

        raw_tags = environ.get(settings.ENV_PLATFORM_TAGS, "").strip() or "{}"
        try:
            tags = json.loads(raw_tags)
        except json.JSONDecodeError as exc:
            raise ConfigurationError(f"{settings.ENV_PLATFORM_TAGS} is not JSON: {exc}") from None
        if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
            raise ConfigurationError(f"{settings.ENV_PLATFORM_TAGS}: expected a JSON object of string values")

        raw_volume = environ.get(settings.ENV_VOLUME_SIZE_GB, "").strip()
        try:
            volume = int(raw_volume) if raw_volume else DEFAULT_VOLUME_SIZE_GB
        except ValueError:
            volume = -1
        if volume < 1:
            raise ConfigurationError(f"{settings.ENV_VOLUME_SIZE_GB}={raw_volume!r}: expected a positive integer (GB)")

        account_id = required(settings.ENV_ACCOUNT_ID)
        if not re.fullmatch(r"[0-9]{12}", account_id):
            raise ConfigurationError(f"{settings.ENV_ACCOUNT_ID}={account_id!r}: expected a 12-digit AWS account ID")

        records = required(settings.ENV_CLIENT_TOKEN_RECORDS)
        if not re.fullmatch(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]/(\S+/)?", records):
            raise ConfigurationError(
                f"{settings.ENV_CLIENT_TOKEN_RECORDS}={records!r}: expected s3://<bucket>/<prefix>/"
            )

        key_arn = required(settings.ENV_OUTPUT_KMS_KEY_ARN)
        if not re.fullmatch(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:[0-9]{12}:key/[A-Za-z0-9-]+", key_arn):
            raise ConfigurationError(
                f"{settings.ENV_OUTPUT_KMS_KEY_ARN}={key_arn!r}: expected a KMS key ARN, "
                "arn:aws:kms:<region>:<account>:key/<key id>"
            )

        region = required(settings.ENV_REGION)
        subnets, groups = _vpc(environ, csv(settings.ENV_VPC_SECURITY_GROUP_IDS), region)
        fsx = _fsx_lustre(environ, subnets)

        prefixes = csv(settings.ENV_ALLOWED_INPUT_PREFIXES)
        bad = [p for p in prefixes if not p.startswith("s3://") or len(p) <= len("s3://")]
        if bad:
            raise ConfigurationError(f"{settings.ENV_ALLOWED_INPUT_PREFIXES}: expected s3:// prefixes, got {bad}")

        return cls(
            trainer_image_uris=_trainer_images(environ),
            execution_role_arn=required(settings.ENV_EXECUTION_ROLE_ARN),
            data_bucket=required(settings.ENV_DATA_BUCKET),
            checkpoint_bucket=required(settings.ENV_CHECKPOINT_BUCKET),
            output_bucket=required(settings.ENV_OUTPUT_BUCKET),
            output_kms_key_arn=key_arn,
            training_plan_arns_parameter=required(settings.ENV_TRAINING_PLAN_ARNS_PARAMETER),
            default_instance_type=environ.get(settings.ENV_DEFAULT_INSTANCE_TYPE, "").strip() or DEFAULT_INSTANCE_TYPE,
            allowed_instance_types=csv(settings.ENV_ALLOWED_INSTANCE_TYPES),
            capacity_fallback=fallback,
            allowed_input_prefixes=prefixes,
            platform_tags=dict(tags),
            volume_size_gb=volume,
            client_token_records=records,
            region=region,
            account_id=account_id,
            vpc_subnets=subnets,
            vpc_security_group_ids=groups,
            fsx_lustre=fsx,
        )

    def input_prefixes(self) -> tuple[str, ...]:
        """``s3://`` prefixes input channels may use: the data bucket, then the configured extras."""
        return (f"s3://{self.data_bucket}/", *self.allowed_input_prefixes)


def _trainer_images(environ: Mapping[str, str]) -> dict[str, str]:
    """``TRAINER_IMAGE_URIS``: a JSON object of architectures of
    :data:`platform_spec.catalogue.TRAINER_IMAGE_ARCHITECTURES` to an image URI SageMaker accepts
    (``AlgorithmSpecification.TrainingImage``, botocore's model); its keys, the architectures the deployment built,
    follow the stack's rule (:func:`platform_spec.catalogue.image_architectures_problem`: ``amd64`` always among them),
    so an arm64-only object, which no stack writes, is refused here rather than every amd64 request later."""
    name = settings.ENV_TRAINER_IMAGE_URIS
    raw = _json(environ, name)
    if raw is None:
        raise ConfigurationError(f"environment variable {name} is required and not set")
    architectures = ", ".join(f'"{a}"' for a in TRAINER_IMAGE_ARCHITECTURES)
    rule = sagemaker_rules.string_rule("AlgorithmSpecification.TrainingImage")
    if (
        not isinstance(raw, dict)
        or not raw
        or not all(a in TRAINER_IMAGE_ARCHITECTURES and isinstance(u, str) and u.strip() for a, u in raw.items())
    ):
        raise ConfigurationError(
            f"{name}: got {raw!r}; expected a JSON object of image URIs keyed by CPU architecture ({architectures})"
        )
    if image_architectures_problem(list(raw)) is not None:
        raise ConfigurationError(
            f"{name}: got the architectures {', '.join(raw)}; expected a JSON object of image URIs keyed by CPU "
            f"architecture ({architectures}), {IMAGE_ARCHITECTURES_RULE}: the stack builds amd64 always "
            "(imageArchitectures)"
        )
    return {a: _check(name, f"{a} image", raw[a], rule) for a in TRAINER_IMAGE_ARCHITECTURES if a in raw}


def _json(environ: Mapping[str, str], name: str) -> object:
    """The JSON value of variable ``name``, or ``None`` when it is unset or blank."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigurationError(f"{name} is not JSON: {exc}") from None


def _object(name: str, value: object, keys: tuple[str, ...], what: str) -> dict[str, str]:
    """``value`` as an object with exactly the string members ``keys``, else a ConfigurationError naming ``name``."""
    expected = "{" + ", ".join(f'"{k}": "..."' for k in keys) + "}"
    if not isinstance(value, dict) or set(value) != set(keys) or not all(isinstance(value[k], str) for k in keys):
        raise ConfigurationError(f"{name}: {what} {value!r}: expected an object {expected} of strings")
    return {k: str(value[k]) for k in keys}


def _check(name: str, what: str, value: str, rule: sagemaker_rules.StringRule) -> str:
    if not rule.accepts(value):
        raise ConfigurationError(f"{name}: {what} {value!r}: expected {rule.expected()}")
    return value


def _vpc(
    environ: Mapping[str, str], groups: tuple[str, ...], region: str
) -> tuple[tuple[VpcSubnet, ...], tuple[str, ...]]:
    """``VPC_SUBNETS`` and ``VPC_SECURITY_GROUP_IDS``: both or neither, each within ``VpcConfig``'s limits
    (botocore's model: its ``Subnets`` and ``SecurityGroupIds`` counts and ID patterns; the zone as
    ``DescribeTrainingPlan`` reports one, its ``AvailabilityZone``, of the function's ``region``), each once."""
    name, group_name = settings.ENV_VPC_SUBNETS, settings.ENV_VPC_SECURITY_GROUP_IDS
    raw = _json(environ, name)
    if raw is None:
        if groups:
            raise ConfigurationError(f"{group_name} is set without {name}: VPC mode needs both")
        return (), ()
    most = sagemaker_rules.bounds("VpcConfig.Subnets")[1]
    if not isinstance(raw, list) or not raw or (most is not None and len(raw) > most):
        raise ConfigurationError(
            f"{name}: expected a JSON list of 1-{most} subnets (SageMaker's VpcConfig.Subnets), got {raw!r}"
        )
    subnet_rule = sagemaker_rules.string_rule("VpcConfig.Subnets.member")
    zone_rule = sagemaker_rules.named_string_rule("AvailabilityZone")
    subnets: list[VpcSubnet] = []
    for entry in raw:
        fields = _object(name, entry, ("subnet_id", "availability_zone"), "subnet")
        subnet = VpcSubnet(
            _check(name, "subnet_id", fields["subnet_id"], subnet_rule),
            _check(name, "availability_zone", fields["availability_zone"], zone_rule),
        )
        if any(s.subnet_id == subnet.subnet_id for s in subnets):
            raise ConfigurationError(f"{name}: subnet {subnet.subnet_id!r} is listed twice")
        if subnet.availability_zone[:-1] != region and not subnet.availability_zone.startswith(region + "-"):
            raise ConfigurationError(  # a Local Zone (us-west-2-lax-1a) is its region's too
                f"{name}: availability_zone {subnet.availability_zone!r}: expected a zone of {region} "
                f"({settings.ENV_REGION}), e.g. {region}a"
            )
        subnets.append(subnet)
    most = sagemaker_rules.bounds("VpcConfig.SecurityGroupIds")[1]
    if not groups or (most is not None and len(groups) > most):
        raise ConfigurationError(
            f"{group_name}={environ.get(group_name, '')!r}: expected 1-{most} security group IDs, comma-separated "
            f"(SageMaker's VpcConfig.SecurityGroupIds), with {name}"
        )
    group_rule = sagemaker_rules.string_rule("VpcConfig.SecurityGroupIds.member")
    twice = next((g for index, g in enumerate(groups) if g in groups[:index]), None)
    if twice is not None:
        raise ConfigurationError(f"{group_name}: security group {twice!r} is listed twice")
    return tuple(subnets), tuple(_check(group_name, "security group", g, group_rule) for g in groups)


def _fsx_lustre(environ: Mapping[str, str], subnets: tuple[VpcSubnet, ...]) -> FsxLustre | None:
    """``FSX_LUSTRE``: the file system's ID (SageMaker's ``FileSystemId``), mount name (FSx's
    ``LustreFileSystemMountName``), and its subnet, one of ``subnets`` in the zone given."""
    name = settings.ENV_FSX_LUSTRE
    raw = _json(environ, name)
    if raw is None:
        return None
    fields = _object(name, raw, ("file_system_id", "mount_name", "subnet_id", "availability_zone"), "file system")
    fsx = FsxLustre(
        _check(name, "file_system_id", fields["file_system_id"], sagemaker_rules.named_string_rule("FileSystemId")),
        _check(
            name,
            "mount_name",
            fields["mount_name"],
            sagemaker_rules.named_string_rule("LustreFileSystemMountName", "fsx"),
        ),
        fields["subnet_id"],
        fields["availability_zone"],
    )
    if not subnets:
        raise ConfigurationError(
            f"{name} is set without {settings.ENV_VPC_SUBNETS}: FSx for Lustre is reached in the VPC only"
        )
    home = next((s for s in subnets if s.subnet_id == fsx.subnet_id), None)
    if home is None:
        listed = ", ".join(s.subnet_id for s in subnets)
        raise ConfigurationError(
            f"{name}: subnet_id {fsx.subnet_id!r}: expected one of {settings.ENV_VPC_SUBNETS} ({listed})"
        )
    if home.availability_zone != fsx.availability_zone:
        raise ConfigurationError(
            f"{name}: availability_zone {fsx.availability_zone!r}: expected {home.availability_zone!r}, the zone "
            f"{settings.ENV_VPC_SUBNETS} gives subnet {fsx.subnet_id}"
        )
    return fsx


def default_allowed_instance_types(architectures: Sequence[str]) -> tuple[str, ...]:
    """The instance types a deployment whose trainer image is built for ``architectures`` allows when it names
    none (``allowedInstanceTypes``' default).

    The catalogue's rule (:func:`platform_spec.catalogue.deployable_instance_types`: the types whose
    host CPUs run an image of ``architectures``, in catalogue order) applied to what ``CreateTrainingJob``
    accepts (botocore's ``TrainingInstanceType``: not the GB200 UltraServer types). The stack's
    configuration, the request's allowed types (:func:`.request.allowed_instance_types`) and the
    emulator (``trainctl local-aws``) all take it from here; it reads botocore's model, so it is not
    evaluated at import.
    """
    from platform_spec.catalogue import deployable_instance_types

    from .sagemaker_rules import training_instance_types

    return deployable_instance_types(frozenset(training_instance_types()), architectures)
