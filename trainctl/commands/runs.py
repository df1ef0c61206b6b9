"""``trainctl runs [RUN_ID]``: runs (one training continued across capacity blocks) through the job API.

Without ``RUN_ID``: one row per run. With it: the run's segments (job, status, capacity and plan, steps
and tokens, the idle gap before each, the decision that ended it) and what stopped the run; ``--stop``
stops it; ``--continue`` continues a run that ended ``budget-*``, ``stopped`` or ``no-progress`` from its
newest complete checkpoint, with the budget flags given (the job API's ``continue_run``). Sent to the deployed submitter function (``--function NAME``; a reader function, granted
``grant_read``, answers everything but ``--stop``) or, with ``--local``, to its handler in this process
against the emulator (:mod:`trainctl.runs`). Exit status: 0 answered, 1 refused (printed), 2 no answer.
"""

from __future__ import annotations

import argparse

HELP = "Show runs (trainings continued across capacity blocks), one run's segments, or stop or continue a run."


def _max_results(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text!r}: expected an integer from 1 to 100")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID", nargs="?", help="the run to show (default: list the runs)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--function", metavar="NAME", help="the deployed submitter (or reader) function NAME or ARN")
    where.add_argument(
        "--local",
        action="store_true",
        help="run the handler in-process against AWS_ENDPOINT_URL (source the env file of `trainctl local-aws`)",
    )
    parser.add_argument(
        "--stop", action="store_true", help="stop RUN_ID: its running segment stops, no next one starts"
    )
    resume = parser.add_argument_group(
        "continue an ended run",
        "each budget flag replaces the run's (its totals: segments and instance-hours so far count)",
    )
    resume.add_argument(
        "--continue",
        dest="resume",
        action="store_true",
        help="continue RUN_ID (ended budget-*, stopped or no-progress) from its newest complete checkpoint",
    )
    resume.add_argument("--max-segments", type=int, metavar="N", help="the run's most segments, all of them (1-999)")
    resume.add_argument("--deadline", metavar="TIME", help="no segment runs past TIME (ISO 8601 with a time zone)")
    resume.add_argument("--max-instance-hours", type=float, metavar="H", help="the run's instance-hours, all of them")
    resume.add_argument("--min-segment-minutes", type=float, metavar="M", help="a segment's least training time")
    resume.add_argument(
        "--client-token", metavar="TOKEN", help="idempotency key of the continuation (default: generated, printed)"
    )
    parser.add_argument("--json", action="store_true", help="print the job API's answer as JSON")
    parser.add_argument("--max-results", type=_max_results, metavar="N", help="runs per page when listing (1-100)")
    parser.add_argument("--next-token", metavar="TOKEN", help="the next page of a listing (printed under the table)")
    parser.add_argument("--region", help="AWS region for --function (default: the function ARN's, else AWS_REGION)")


def run(args: argparse.Namespace) -> int:
    from trainctl.runs import show_runs

    return show_runs(
        args.run_id,
        local=args.local,
        function=args.function,
        region=args.region,
        stop=args.stop,
        as_json=args.json,
        max_results=args.max_results,
        next_token=args.next_token,
        resume=args.resume,
        budget={
            "max_segments": args.max_segments,
            "deadline": args.deadline,
            "max_instance_hours": args.max_instance_hours,
            "min_segment_minutes": args.min_segment_minutes,
        },
        client_token=args.client_token,
    )
