"""AWS clients for the submitter: botocore's retries, bounded by the invocation's deadline.

The retry configuration and the deadline are the platform's one mechanism,
:mod:`platform_constructs.lambda_runtime.deadline` (read it for what the hooks
do): every client made here carries its hooks, and :class:`Deadline` raises
the submitter's :class:`~.errors.DeadlineExceeded`, whose message says what a
retry with the same ``client_token`` does. Persistent throttling and 5xx
answers raise botocore's last ``ClientError``, which the submitter lets
propagate, so Lambda reports a function error and the caller's own retry
applies. The construct's default timeout is 60 s (:data:`.settings.FUNCTION_TIMEOUT_S`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ...lambda_runtime import deadline as lambda_deadline
from ...lambda_runtime.deadline import client_config, install_deadline_hooks
from ...lambda_runtime.deadline import error_code as error_code  # the runtime's modules take it from here
from .errors import DeadlineExceeded
from .sagemaker_rules import shared_loader

if TYPE_CHECKING:  # boto3-stubs, for the type checker only: the Lambda package does not carry them
    import boto3
    from aws_lambda_powertools.utilities.parameters import SSMProvider
    from mypy_boto3_cloudwatch import CloudWatchClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sagemaker import SageMakerClient
    from mypy_boto3_ssm import SSMClient

PLAN_ARNS_MAX_AGE_S = 60
"""Seconds the SSM list of training plan ARNs is cached in a warm function."""


class Deadline(lambda_deadline.Deadline):
    """The submitter's invocation deadline (:class:`platform_constructs.lambda_runtime.deadline.Deadline`): too
    little time left raises the submitter's :class:`~.errors.DeadlineExceeded`."""

    error_type = DeadlineExceeded


# --- clients ----------------------------------------------------------------------------------


def client_kwargs(environ: Mapping[str, str] | None) -> dict[str, Any]:
    """The keyword arguments of ``create_client`` that ``environ`` decides (region, credentials and
    ``AWS_ENDPOINT_URL``, read from it rather than from the process, so several emulators can be used side
    by side); ``{}`` for ``None`` (botocore's own resolution: the function's environment and role)."""
    kwargs: dict[str, Any] = {}
    if environ is not None:
        kwargs["region_name"] = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None
        kwargs["aws_access_key_id"] = environ.get("AWS_ACCESS_KEY_ID") or None
        kwargs["aws_secret_access_key"] = environ.get("AWS_SECRET_ACCESS_KEY") or None
        kwargs["aws_session_token"] = environ.get("AWS_SESSION_TOKEN") or None
        if environ.get("AWS_ENDPOINT_URL"):
            kwargs["endpoint_url"] = environ["AWS_ENDPOINT_URL"]
    return kwargs


@dataclass
class Clients:
    """The AWS clients the submitter uses (create once per warm function and reuse).

    Attributes:
        sagemaker: SageMaker client.
        ssm: SSM client.
        s3: S3 client (the ledger, :mod:`.ledger`).
        cloudwatch: CloudWatch client (the run continuation's stall watch reads the jobs' ``train:step``:
            :mod:`.stall`).
    """

    sagemaker: SageMakerClient
    ssm: SSMClient
    s3: S3Client
    cloudwatch: CloudWatchClient
    _parameters: SSMProvider | None = field(default=None, repr=False)

    @classmethod
    def create(
        cls,
        *,
        environ: Mapping[str, str] | None = None,
        session: boto3.session.Session | None = None,
    ) -> Clients:
        """Clients for the region and endpoint of ``environ`` (default: the process environment).

        With an explicit ``environ`` (``trainctl submit --local``, tests) the
        region, credentials and ``AWS_ENDPOINT_URL`` are taken from it rather
        than from the process, so several emulators can be used side by side.
        Without ``session`` (a boto3 ``Session``) the clients share one
        botocore data loader with :mod:`.sagemaker_rules`, so the SageMaker
        model is parsed once per process. Every client gets the deadline hooks.
        """
        config = client_config(environ)
        kwargs = client_kwargs(environ)
        if session is not None:
            clients = cls(
                sagemaker=session.client("sagemaker", config=config, **kwargs),
                ssm=session.client("ssm", config=config, **kwargs),
                s3=session.client("s3", config=config, **kwargs),
                cloudwatch=session.client("cloudwatch", config=config, **kwargs),
            )
        else:
            import botocore.session

            core = botocore.session.Session()
            core.register_component("data_loader", shared_loader())
            # botocore builds each service's client from its model at run time (a BaseClient to the type
            # checker); what it builds is the service's client, whose type boto3-stubs declare
            clients = cls(
                sagemaker=cast("SageMakerClient", core.create_client("sagemaker", config=config, **kwargs)),
                ssm=cast("SSMClient", core.create_client("ssm", config=config, **kwargs)),
                s3=cast("S3Client", core.create_client("s3", config=config, **kwargs)),
                cloudwatch=cast("CloudWatchClient", core.create_client("cloudwatch", config=config, **kwargs)),
            )
        for client in (clients.sagemaker, clients.ssm, clients.s3, clients.cloudwatch):
            install_deadline_hooks(client)
        return clients

    @property
    def parameters(self) -> SSMProvider:
        """Powertools ``SSMProvider`` over :attr:`ssm` (its cache lives as long as these clients)."""
        if self._parameters is None:
            from aws_lambda_powertools.utilities.parameters import SSMProvider

            self._parameters = SSMProvider(boto3_client=self.ssm)
        return self._parameters


NOT_FOUND_CODES = ("ValidationException", "ResourceNotFound")
"""Error codes of SageMaker's ``Describe*`` calls for a name no resource has: ``DescribeTrainingJob`` answers
``ValidationException``, ``DescribeTrainingPlan`` ``ResourceNotFound``."""


def error_message(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Message", "")) or str(exc)
    return str(exc)
