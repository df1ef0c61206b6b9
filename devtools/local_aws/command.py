"""``trainctl local-aws``: run the AWS emulator (moto + training plans) in the foreground.

See :mod:`devtools.local_aws` for what it emulates and its admin endpoints. It needs
moto, the project's extra ``local``: without it the command prints one line naming
``pip install .[local]`` and exits 2 (:func:`devtools.local_aws.server.run_emulator`).

A command of ``trainctl`` through the entry-point group ``trainctl.commands`` (pyproject.toml), with the
contract of :mod:`trainctl.commands`: trainctl itself knows nothing of the development tools.
"""

from __future__ import annotations

import argparse
import json

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


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive integer")
    return value


def _context(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(
            f'{text!r}: not JSON ({exc.msg}); expected an object, e.g. \'{{"vpc": "create"}}\''
        ) from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(
            f'{text!r}: expected a JSON object of CDK context keys, e.g. \'{{"vpc": "create"}}\''
        )
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from devtools.local_aws.stack import DEFAULT_REGION

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
    parser.add_argument(
        "--run-jobs",
        action="store_true",
        help="execute the training jobs it accepts on this machine's CPU through the trainer's entry point "
        "(small models only; one node); without it a job stays as created",
    )
    parser.add_argument(
        "--event-target",
        metavar="MODULE:FUNCTION",
        action="append",
        default=[],
        help="call FUNCTION(event, context) like a Lambda function with every training-job state-change event "
        "(repeatable; e.g. platform_constructs.submitter.runtime.continuation:lambda_handler)",
    )
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help="where executed jobs' /opt/ml folders go (default: a temporary folder removed on exit)",
    )
    parser.add_argument(
        "--job-processes",
        type=_positive,
        default=None,
        metavar="N",
        help="CPU processes per executed job (TRAINER_NPROC_PER_NODE; default 1)",
    )
    parser.add_argument(
        "--template",
        metavar="FILE",
        help="CloudFormation template whose IAM policies authorize every request (default: the platform's own, "
        "synthesized once and cached under .cache/local-aws/)",
    )
    parser.add_argument(
        "--context",
        type=_context,
        metavar="JSON",
        help='CDK context over cdk.json\'s to synthesize the platform with, e.g. \'{"vpc": "create"}\' '
        "(VPC mode: the VPC, subnets, security groups and FSx file system are made in the emulator and their IDs "
        "written to the env file)",
    )
    parser.add_argument(
        "--fsx-root",
        metavar="DIR",
        help="folder that plays the FSx for Lustre file system's root: a job's FileSystemDataSource "
        "/<mount name>/<path> reads DIR/<path> (a read-only copy)",
    )


def run(args: argparse.Namespace) -> int:
    from devtools.local_aws.server import run_emulator

    return run_emulator(
        host=args.host,
        port=args.port,
        plans_file=args.plans,
        region=args.region,
        env_file=args.env_file,
        quiet=args.quiet,
        run_jobs=args.run_jobs,
        event_targets=args.event_target,
        state_dir=args.state_dir,
        job_processes=args.job_processes,
        template=args.template,
        context=args.context,
        fsx_root=args.fsx_root,
    )
