"""The function's configuration, read once from its environment.

The construct sets these variables (names in :mod:`.settings`); for local runs
``trainctl local-aws --env-file`` writes the same set. Reading is strict: a
missing or malformed variable raises :class:`.errors.ConfigurationError`
naming it, because a half-configured submitter must not start jobs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from platform_spec.capacity import CAPACITY_FALLBACK_EXPECTED, DEFAULT_CAPACITY_FALLBACK, capacity_fallback_problem
from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE

from . import settings
from .errors import ConfigurationError

DEFAULT_VOLUME_SIZE_GB = 500
"""EBS volume per instance in GB when ``TRAINING_VOLUME_SIZE_GB`` is unset (SageMaker
ignores it on instances whose local NVMe serves as the training volume)."""


@dataclass(frozen=True)
class SubmitterConfig:
    """Everything the submitter needs besides the request.

    Attributes:
        trainer_image_uri: the trainer image (ECR URI) every job runs.
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
    """

    trainer_image_uri: str
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

        prefixes = csv(settings.ENV_ALLOWED_INPUT_PREFIXES)
        bad = [p for p in prefixes if not p.startswith("s3://") or len(p) <= len("s3://")]
        if bad:
            raise ConfigurationError(f"{settings.ENV_ALLOWED_INPUT_PREFIXES}: expected s3:// prefixes, got {bad}")

        return cls(
            trainer_image_uri=required(settings.ENV_TRAINER_IMAGE_URI),
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
            region=required(settings.ENV_REGION),
            account_id=account_id,
        )

    def input_prefixes(self) -> tuple[str, ...]:
        """``s3://`` prefixes input channels may use: the data bucket, then the configured extras."""
        return (f"s3://{self.data_bucket}/", *self.allowed_input_prefixes)


def default_allowed_instance_types() -> tuple[str, ...]:
    """The instance types a deployment allows when it names none (``allowedInstanceTypes``' default).

    The catalogue's rule (:func:`platform_spec.catalogue.deployable_instance_types`: the types whose
    host CPUs the trainer image runs on, in catalogue order) applied to what ``CreateTrainingJob``
    accepts (botocore's ``TrainingInstanceType``: not the GB200 UltraServer types). The stack's
    configuration, the request's allowed types (:func:`.request.allowed_instance_types`) and the
    emulator (``trainctl local-aws``) all take it from here; it reads botocore's model, so it is not
    evaluated at import.
    """
    from platform_spec.catalogue import deployable_instance_types

    from .sagemaker_rules import training_instance_types

    return deployable_instance_types(frozenset(training_instance_types()))
