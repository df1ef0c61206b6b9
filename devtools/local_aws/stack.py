"""What the emulator stands in for and how others reach it: the stack's resources, the account and
region, the submitter function's environment, the env file, and whether moto is installed.

Standard library and ``platform_spec`` only (``trainctl local-aws --help`` and :class:`LocalAws`
import it without moto).
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from platform_spec.capacity import DEFAULT_CAPACITY_FALLBACK
from platform_spec.catalogue import DEFAULT_IMAGE_ARCHITECTURES, DEFAULT_INSTANCE_TYPE
from platform_spec.files import atomic_write_text

DEFAULT_REGION = "us-east-1"
ACCOUNT_ID = "123456789012"
"""moto's default account (dummy credentials map to it)."""
DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
"""The credentials tests and demos seed data with: the account's administrator (a person with AdministratorAccess;
:mod:`devtools.local_aws.principals`). moto maps them to :data:`ACCOUNT_ID`."""
ADMIN_PREFIX = "/_local-aws"
READY_MARKER = "LOCAL_AWS_READY "
"""The emulator's first line on stdout once it listens, followed by its JSON description."""


@dataclass(frozen=True)
class StackResources:
    """Names of what the emulator creates in place of the deployed stack, and the tags its jobs get."""

    data_bucket: str = "training-platform-data-local"
    checkpoint_bucket: str = "training-platform-checkpoints-local"
    output_bucket: str = "training-platform-output-local"
    plan_arns_parameter: str = "/training-platform/local/training-plan-arns"
    execution_role_name: str = "training-platform-sagemaker-execution"
    trainer_repository: str = "training-platform/trainer"
    job_events_table: str = "training-platform-job-events-idempotency"
    """The job-outcomes function's idempotency table (its ``IDEMPOTENCY_TABLE``; tests create it)."""
    encryption_key_id: str = "0ca1a7f0-0000-4000-8000-000000000001"
    """The platform key's id (moto draws key ids at random; the emulator gives its key this fixed one, as it
    names its buckets, so the function's environment is known before the emulator starts)."""
    image_architectures: tuple[str, ...] = DEFAULT_IMAGE_ARCHITECTURES
    """The CPU architectures the emulated deployment built the trainer image for (the stack's
    ``imageArchitectures``; the emulator takes its CDK context's)."""
    platform_tags: Mapping[str, str] = field(
        default_factory=lambda: {"platform": "training-platform", "environment": "local"}
    )

    def execution_role_arn(self) -> str:
        return f"arn:aws:iam::{ACCOUNT_ID}:role/{self.execution_role_name}"

    def encryption_key_arn(self, region: str) -> str:
        """ARN of the key of the data, checkpoint and output buckets (the stack's ``Buckets/Key``)."""
        return f"arn:aws:kms:{region}:{ACCOUNT_ID}:key/{self.encryption_key_id}"

    def trainer_image_uris(self, region: str) -> dict[str, str]:
        """The image of each of :attr:`image_architectures`: ``...:local`` (amd64), ``...:local-arm64``."""
        registry = f"{ACCOUNT_ID}.dkr.ecr.{region}.amazonaws.com/{self.trainer_repository}"
        return {a: f"{registry}:local" + ("" if a == "amd64" else f"-{a}") for a in self.image_architectures}


def function_environment(
    region: str, resources: StackResources, network: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """The submitter function's environment in the emulator.

    What the deployed function gets, from the same function the construct calls
    (:func:`platform_constructs.submitter.runtime.settings.function_environment`), with the
    emulator's resources, its account, and the stack's defaults: the default instance type
    (:data:`platform_spec.catalogue.DEFAULT_INSTANCE_TYPE`), the allowed instance types
    (:func:`platform_constructs.submitter.runtime.config.default_allowed_instance_types`) and the
    capacity order (:data:`platform_spec.capacity.DEFAULT_CAPACITY_FALLBACK`). ``network``: VPC mode's
    ``vpc_subnets``, ``vpc_security_group_ids`` and ``fsx_lustre`` with the emulator's IDs
    (:func:`devtools.local_aws.network.environment_of`; default none: not in VPC mode).
    """
    from platform_constructs.submitter.runtime import config, settings

    return settings.function_environment(
        trainer_image_uris=resources.trainer_image_uris(region),
        execution_role_arn=resources.execution_role_arn(),
        data_bucket=resources.data_bucket,
        checkpoint_bucket=resources.checkpoint_bucket,
        output_bucket=resources.output_bucket,
        output_kms_key_arn=resources.encryption_key_arn(region),
        plan_arns_parameter=resources.plan_arns_parameter,
        account_id=ACCOUNT_ID,
        default_instance_type=DEFAULT_INSTANCE_TYPE,
        allowed_instance_types=config.default_allowed_instance_types(resources.image_architectures),
        capacity_fallback=DEFAULT_CAPACITY_FALLBACK,
        platform_tags=resources.platform_tags,
        **(network or {}),
    )


def submitter_environment(
    endpoint: str,
    region: str,
    resources: StackResources,
    access_key: str = DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
    network: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """Environment for the submitter (and any boto3 code) against the emulator.

    ``AWS_ENDPOINT_URL``, the region (``AWS_REGION``, which Lambda sets, and
    ``AWS_DEFAULT_REGION``), the credentials of ``access_key`` (the emulator gives the submitter function's role's),
    then :func:`function_environment` (with ``network`` in VPC mode).
    """
    return {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        "AWS_ACCESS_KEY_ID": access_key,
        "AWS_SECRET_ACCESS_KEY": DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        **function_environment(region, resources, network),
    }


_FILE_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def env_file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be the env file: it exists and is not a regular file (a symbolic link is not
    followed: writing would replace the link, not its target), or it is empty, or it cannot be looked at. ``None``: a regular file or nothing."""
    if not os.fspath(path):
        return "an empty path; expected a file path"
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:  # a file where a folder should be, a name too long, no permission
        return f"{path}: {exc.strerror}; expected a file path"
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _FILE_KINDS if test(mode)), "not a regular file")
    return f"{path} is {kind}; expected a file path"


def write_env_file(path: str | os.PathLike[str], env: Mapping[str, str]) -> None:
    """Write ``export NAME=value`` lines (shell-quoted) for ``source``.

    Creates the parent folder; the file is replaced whole (written beside it, then renamed), so a
    reader never sources half of it.

    Raises:
        OSError: the folder or the file cannot be written, or ``path`` exists and is not a regular
            file (:func:`env_file_problem`; nothing is written then).
    """
    problem = env_file_problem(path)
    if problem:
        raise OSError(problem)
    lines = ["# trainctl local-aws: environment for `trainctl submit --local` (an emulator, not AWS)"]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(target, "\n".join(lines) + "\n")


def emulator_client(
    service: str,
    endpoint: str,
    region: str,
    *,
    session: Any = None,
    access_key: str = DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
    **config: Any,
) -> Any:
    """A boto3 client of the emulator at ``endpoint`` (from ``session``, default boto3's; botocore ``Config`` keyword
    arguments allowed) signing as ``access_key``: by default the dummy credentials, the account's administrator
    (:mod:`devtools.local_aws.principals`)."""
    import boto3
    from botocore.config import Config

    return (session or boto3).client(
        service,
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=access_key,
        aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        config=Config(**config) if config else None,
    )


def json_default(value: Any) -> Any:
    """``json.dumps``' ``default`` for the emulator's answers: timestamps as ISO 8601, the rest as text."""
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


MOTO_MISSING = (
    "the AWS emulator needs moto, which is not installed: it is a development tool, "
    "installed with the project's extra `local` (pip install .[local]; make test and make demo do it)"
)


class EmulatorUnavailable(ImportError):
    """moto (the project's optional extra ``local``) cannot be imported, so the emulator cannot run.

    An ``ImportError`` (a missing optional dependency) whose message is one line naming
    ``pip install .[local]``.
    """


def require_moto() -> None:
    """Check that moto can be found, without importing it (that takes half a second).

    Raises:
        EmulatorUnavailable: moto is not installed (the extra ``local`` is missing).
    """
    try:
        found = importlib.util.find_spec("moto") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise EmulatorUnavailable(MOTO_MISSING)
