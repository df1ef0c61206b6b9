"""``trainctl sweep``: run the guide's tuning grid as training jobs (or local runs).

Examples::

    # SageMaker jobs through the submitter, in process against AWS_ENDPOINT_URL
    # (source the env file of `trainctl local-aws --env-file FILE` for the emulator)
    trainctl sweep --name b200-grid --grid precision=bf16,fp8,mxfp8 --grid batch_size=1,4,16 \\
        --grid activation_checkpointing=off,full --base request.json
    # the same through the deployed submitter function
    trainctl sweep --name b200-grid ... --function training-platform-submitter
    # locally, on any machine: gpt-tiny on CPython's docs, 2 CPU processes per run
    trainctl sweep --name cpu --local --grid precision=fp32,bf16 --grid batch_size=2,4 --set max_steps=40
    trainctl report cpu --out reports/cpu

Running the same command again resumes: completed configurations and created
jobs are kept (jobs are found by their deterministic names), the rest runs.
``--name NAME`` alone resumes a sweep as it was defined (its grid and base are fixed by its first run:
``--set`` or ``--base`` without ``--grid`` is refused).

Without ``--local`` or ``--function`` the submitter runs in this process and
creates jobs with the environment's credentials, so it runs only against the
endpoint in ``AWS_ENDPOINT_URL`` (the emulator's); real AWS is reached only
through the deployed function (``--function``).

Exit status: 0 every configuration that was not skipped completed (AWS with
``--no-wait``: submitted; ``--dry-run``: validated); 1 some failed, were
refused, could not be submitted or stopped, or every configuration was skipped
(nothing to run); 2 bad input, or no submitter to use (in process without
``AWS_ENDPOINT_URL``; ``--function`` without a region or credentials); 3 jobs
still running at ``--timeout``.

This module parses the arguments; :mod:`trainctl.sweeps` runs the sweep
(:func:`trainctl.sweeps.summary.sweep_and_summarise`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "Run a grid of training configurations (precision x batch size x ...) as jobs or local runs; prune with the planner."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name", required=True, help="sweep name (1-40 letters, digits, . _ -); its state is <dir>/<name>/"
    )
    parser.add_argument(
        "--grid",
        action="append",
        default=None,
        metavar="KEY=V1,V2",
        help="a hyperparameter and its values (repeat for more axes), e.g. precision=bf16,fp8,mxfp8",
    )
    parser.add_argument(
        "--base",
        metavar="REQUEST.json",
        help="base: a submit request (its hyperparameters, instance type, inputs, ...); for --local, a request "
        "or a hyperparameters object (default: the guide's request; --local: gpt-tiny on CPython's docs)",
    )
    parser.add_argument(
        "--set", action="append", default=None, metavar="KEY=VALUE", help="override a base hyperparameter (repeatable)"
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--local", action="store_true", help="run each configuration with the local trainer instead of SageMaker"
    )
    where.add_argument(
        "--function",
        metavar="NAME",
        help="submit through the deployed submitter function NAME or ARN (default: in process, against AWS_ENDPOINT_URL only)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="expand, prune and (AWS) validate each configuration; run nothing"
    )
    parser.add_argument("--dir", type=Path, default=None, help="folder of sweep states (default .sweeps)")
    local = parser.add_argument_group("local runs")
    local.add_argument("--nproc", type=int, default=2, help="CPU processes per run when there is no GPU (default 2)")
    local.add_argument("--data", type=Path, help="token shards (trainctl prepare-data) instead of CPython's docs")
    jobs = parser.add_argument_group("training jobs")
    jobs.add_argument(
        "--region", help="AWS region (default: the function ARN's, else AWS_REGION, else AWS_DEFAULT_REGION)"
    )
    jobs.add_argument("--no-wait", action="store_true", help="return after submitting")
    jobs.add_argument("--timeout", type=float, default=3600.0, help="seconds to wait for the jobs (default 3600)")
    jobs.add_argument(
        "--poll-interval", type=float, default=30.0, help="seconds between DescribeTrainingJob polls (default 30)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")


def run(args: argparse.Namespace) -> int:
    from trainctl.sweeps.summary import sweep_and_summarise

    return sweep_and_summarise(
        args.name,
        args.grid,
        base=args.base,
        set_values=args.set,
        local=args.local,
        function=args.function,
        dry_run=args.dry_run,
        sweeps_dir=args.dir,
        nproc=args.nproc,
        data_dir=args.data,
        region=args.region,
        wait=not args.no_wait,
        timeout=args.timeout,
        poll_interval=args.poll_interval,
        progress=False if args.no_progress else None,
    )
