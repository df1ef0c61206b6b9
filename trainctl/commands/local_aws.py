"""``trainctl local-aws``: run the AWS emulator (moto + training plans) in the foreground.

See :mod:`trainctl.local_aws` for what it emulates and its admin endpoints. It needs
moto, the project's extra ``local``: without it the command prints one line naming
``pip install .[local]`` and exits 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

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
    parser.add_argument("--region", default="us-east-1", help="region the emulator answers for (default us-east-1)")
    parser.add_argument("--quiet", action="store_true", help="do not log every request")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from trainctl.local_aws import EmulatorUnavailable, ListenError, load_plans, require_moto, serve

    try:
        require_moto()  # first: nothing else matters without it
    except EmulatorUnavailable as exc:
        print(f"trainctl local-aws: {exc}", file=sys.stderr)
        return 2
    try:
        plans = load_plans(args.plans)
    except (OSError, ValueError) as exc:
        print(f"trainctl local-aws: --plans {args.plans}: {exc}", file=sys.stderr)
        return 2
    if args.env_file:
        # before listening: a bad path fails now, not after the emulator has started
        env_file = Path(args.env_file)
        try:
            if env_file.is_dir():
                raise IsADirectoryError(f"{env_file} is a folder; expected a file path")
            env_file.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            print(f"trainctl local-aws: --env-file {args.env_file}: {exc}", file=sys.stderr)
            return 2
    try:
        return serve(
            host=args.host, port=args.port, plans=plans, region=args.region, env_file=args.env_file, quiet=args.quiet
        )
    except EmulatorUnavailable as exc:  # moto found but not importable (a dependency of its server missing)
        print(f"trainctl local-aws: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # a plan that does not fit DescribeTrainingPlan's shape
        print(f"trainctl local-aws: {exc}", file=sys.stderr)
        return 2
    except ListenError as exc:  # port in use, not an address of this machine
        print(f"trainctl local-aws: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the env file (the only other file it writes)
        print(f"trainctl local-aws: --env-file {args.env_file}: cannot write it: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point without the rest of the CLI (used by :class:`trainctl.local_aws.LocalAws`)."""
    parser = argparse.ArgumentParser(prog="trainctl local-aws", description=HELP)
    add_arguments(parser)
    return run(parser.parse_args(argv))
