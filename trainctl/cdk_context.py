"""What the commands that synthesize the CDK app in-process share with ``cdk synth``.

* the ``-c/--context KEY=VALUE`` flag: values stay strings, exactly as
  ``cdk synth -c`` passes them; ``stacks.config`` parses and validates them
  (lists as JSON or comma-separated);
* the default environment (:func:`synth_environment`): the CDK CLI runs the app
  with ``CDK_DEFAULT_REGION`` (and, when it can tell, ``CDK_DEFAULT_ACCOUNT``)
  set, so ``stacks.config`` checks training-plan ARNs against that region. An
  in-process synth sets the region the same way, so ``trainctl synth-summary``
  and ``trainctl dashboard`` refuse what ``npx cdk synth`` refuses.

How the CDK CLI (aws-cdk 2.1148, ``@aws-cdk/toolkit-lib``:
``prepareDefaultEnvironment`` and ``AwsCliCompatible.region``) picks them:

* region: ``AWS_REGION``, ``AMAZON_REGION``, ``AWS_DEFAULT_REGION``,
  ``AMAZON_DEFAULT_REGION``; else the ``region`` of the profile
  (``AWS_PROFILE``, ``AWS_DEFAULT_PROFILE``, else ``default``) in the shared
  credentials file, then in the config file, then the ``default`` profile's in
  the same order; else the EC2 instance metadata service; else ``us-east-1``.
  It always sets ``CDK_DEFAULT_REGION``, replacing a value already in the
  environment;
* account: ``sts:GetCallerIdentity`` with the default credentials; a
  ``CDK_DEFAULT_ACCOUNT`` already in the environment is kept when that fails.

Here, without network: the region as above but for the instance metadata
service (an EC2 host's region is taken only from the variables or files), and
the account only when the environment already names it (``CDK_DEFAULT_ACCOUNT``
or ``CDK_DEPLOY_ACCOUNT``); STS is never called. When the account is unknown
the template asserts the plans' account (``stacks.config``), as a synth by the
CLI without credentials does.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

__all__ = [
    "CDK_CLI_FALLBACK_REGION",
    "REGION_VARIABLES",
    "CdkEnvironmentError",
    "add_context_argument",
    "cli_default_region",
    "context_item",
    "synth_environment",
]

REGION_VARIABLES = ("AWS_REGION", "AMAZON_REGION", "AWS_DEFAULT_REGION", "AMAZON_DEFAULT_REGION")
"""Environment variables the CDK CLI reads the region from, in its order."""

CDK_CLI_FALLBACK_REGION = "us-east-1"
"""The CDK CLI's region when no variable, profile or instance metadata names one."""


class CdkEnvironmentError(ValueError):
    """The shared AWS config or credentials file cannot be parsed; the message names the file."""


def context_item(text: str) -> tuple[str, str]:
    """argparse type: ``"KEY=VALUE"`` -> ``(KEY, VALUE)``.

    Raises:
        argparse.ArgumentTypeError: no ``=`` or an empty key.
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE, e.g. removalPolicy=destroy")
    return key.strip(), value


def add_context_argument(parser: argparse.ArgumentParser, example: str) -> None:
    """Add the repeatable ``-c/--context KEY=VALUE`` flag (parsed into ``args.context``: a list of pairs)."""
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        type=context_item,
        default=[],
        metavar="KEY=VALUE",
        help=f"context value overriding cdk.json (repeatable), e.g. -c {example}",
    )


def cli_default_region(environ: Mapping[str, str] | None = None) -> str:
    """The region the CDK CLI would set as ``CDK_DEFAULT_REGION`` for ``environ`` (module docstring).

    Args:
        environ: environment variables. Default: ``os.environ``.

    Raises:
        CdkEnvironmentError: the shared credentials or config file is not a valid INI file.
    """
    env = os.environ if environ is None else environ
    for name in REGION_VARIABLES:
        if env.get(name):
            return env[name]
    profile = env.get("AWS_PROFILE") or env.get("AWS_DEFAULT_PROFILE") or "default"
    credentials, config = _profiles(env)
    for name in dict.fromkeys((profile, "default")):
        for profiles in (credentials, config):
            region = (profiles.get(name) or {}).get("region")
            if region:
                return str(region)
    return CDK_CLI_FALLBACK_REGION


def synth_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` as the CDK CLI hands it to the app: ``CDK_DEFAULT_REGION`` set to :func:`cli_default_region`.

    ``CDK_DEFAULT_ACCOUNT`` (and ``CDK_DEPLOY_*``) are passed through as they are: the CLI learns the
    account from STS, which an offline synth does not call.

    Raises:
        CdkEnvironmentError: see :func:`cli_default_region`.
    """
    env = dict(os.environ if environ is None else environ)
    env["CDK_DEFAULT_REGION"] = cli_default_region(env)
    return env


def _profiles(env: Mapping[str, str]) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """``(credentials file profiles, config file profiles)``, read with botocore's INI loader (no network)."""
    import botocore.configloader
    import botocore.exceptions

    def path(variable: str, default: str) -> str:
        return os.path.expanduser(env.get(variable) or default)

    credentials_path = path("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials")
    config_path = path("AWS_CONFIG_FILE", "~/.aws/config")
    try:
        credentials = (
            botocore.configloader.raw_config_parse(credentials_path) if os.path.isfile(credentials_path) else {}
        )
        config = botocore.configloader.load_config(config_path)["profiles"] if os.path.isfile(config_path) else {}
    except botocore.exceptions.BotoCoreError as exc:  # ConfigParseError: not an INI file
        raise CdkEnvironmentError(f"cannot read the AWS region from the shared config files: {exc}") from None
    return credentials, config
