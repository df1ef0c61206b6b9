"""``trainctl local-aws``: run the AWS emulator (moto + training plans) in the foreground.

See :mod:`trainctl.local_aws` for what it emulates and its admin endpoints. It needs
moto, the project's extra ``local``: without it the command prints one line naming
``pip install .[local]`` and exits 2 (:func:`trainctl.local_aws.run_emulator`).
"""

from __future__ import annotations

import argparse

HELP = (
    "Run an AWS emulator (moto + SageMaker training plans) on 127.0.0.1 for `trainctl submit --local`, tests and demos."
)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a TCP port 0-65535")
    return port


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from trainctl.local_aws import DEFAULT_REGION

    parser.add_argument("--port", type=_port, default=5000, help="TCP port (0: any free port; default 5000)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument(
        "--plans",
        metavar="FILE",
        help="JSON list of training plans shaped like DescribeTrainingPlan's response "
        "(plus InstanceType; times may be ISO 8601 or now+14d), e.g. examples/plans.json",
    )
    parser.add_argument(
        "--env-file",
        metavar="FILE",
        help="write `export` lines for `trainctl submit --local` here once listening (its folder is created)",
    )
    parser.add_argument(
        "--region", default=DEFAULT_REGION, help=f"region the emulator answers for (default {DEFAULT_REGION})"
    )
    parser.add_argument("--quiet", action="store_true", help="do not log every request")


def run(args: argparse.Namespace) -> int:
    from trainctl.local_aws import run_emulator

    return run_emulator(
        host=args.host,
        port=args.port,
        plans_file=args.plans,
        region=args.region,
        env_file=args.env_file,
        quiet=args.quiet,
    )
