"""AWS clients for the submitter, with botocore's retry modes for transient faults.

Throttling and 5xx answers are retried by botocore itself (``standard`` mode
by default: exponential backoff with jitter and a retry quota; ``adaptive``
adds client-side rate limiting). When they persist, botocore raises the last
``ClientError`` and the submitter lets it propagate, so Lambda reports a
function error and the caller's own retry applies. ``AWS_RETRY_MODE`` and
``AWS_MAX_ATTEMPTS`` override the defaults, as for any AWS SDK.

Client-side parameter validation (botocore's ``parameter_validation``, on by
default) is kept on: a misspelt or mistyped field in a request to AWS fails
before it leaves the function.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3
from botocore.config import Config

DEFAULT_RETRY_MODE = "standard"
DEFAULT_MAX_ATTEMPTS = 5
"""Total attempts per AWS call (first try + 4 retries), botocore ``total_max_attempts``."""

PLAN_ARNS_MAX_AGE_S = 60
"""Seconds the SSM list of training plan ARNs is cached in a warm function."""


def client_config(environ: Mapping[str, str] | None = None) -> Config:
    """botocore ``Config`` with the retry mode and attempts from ``environ`` (default: the process's)."""
    env = os.environ if environ is None else environ
    mode = env.get("AWS_RETRY_MODE", DEFAULT_RETRY_MODE) or DEFAULT_RETRY_MODE
    if mode not in ("standard", "adaptive", "legacy"):
        mode = DEFAULT_RETRY_MODE
    try:
        attempts = max(1, int(env.get("AWS_MAX_ATTEMPTS", DEFAULT_MAX_ATTEMPTS)))
    except ValueError:
        attempts = DEFAULT_MAX_ATTEMPTS
    return Config(
        retries={"mode": mode, "total_max_attempts": attempts},
        connect_timeout=5,
        read_timeout=30,
        parameter_validation=True,
    )


@dataclass
class Clients:
    """The boto3 clients the submitter uses (create once per warm function and reuse).

    Attributes:
        sagemaker: boto3 SageMaker client.
        ssm: boto3 SSM client.
    """

    sagemaker: Any
    ssm: Any
    _parameters: Any = field(default=None, repr=False)

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
        """
        config = client_config(environ)
        kwargs: dict[str, Any] = {}
        if environ is not None:
            if session is None:
                session = boto3.session.Session(
                    aws_access_key_id=environ.get("AWS_ACCESS_KEY_ID"),
                    aws_secret_access_key=environ.get("AWS_SECRET_ACCESS_KEY"),
                    aws_session_token=environ.get("AWS_SESSION_TOKEN"),
                    region_name=environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION"),
                )
            if environ.get("AWS_ENDPOINT_URL"):
                kwargs["endpoint_url"] = environ["AWS_ENDPOINT_URL"]
        session = session or boto3.session.Session()
        return cls(
            sagemaker=session.client("sagemaker", config=config, **kwargs),
            ssm=session.client("ssm", config=config, **kwargs),
        )

    @property
    def parameters(self) -> Any:
        """Powertools ``SSMProvider`` over :attr:`ssm` (its cache lives as long as these clients)."""
        if self._parameters is None:
            from aws_lambda_powertools.utilities.parameters import SSMProvider

            self._parameters = SSMProvider(boto3_client=self.ssm)
        return self._parameters


def error_code(exc: BaseException) -> str | None:
    """The AWS error code of a botocore ``ClientError`` (``None`` for anything else)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return response.get("Error", {}).get("Code")
    return None


def error_message(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Message", "")) or str(exc)
    return str(exc)
