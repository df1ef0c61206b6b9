"""``trainctl report NAME --out DIR``: a sweep's throughput, memory and convergence report.

Writes ``report.md`` (one row per configuration, skipped and failed ones
included, with the planner's prediction next to the measurement),
``throughput_memory.png`` (tokens/s bars and peak memory line per
configuration), ``loss_curves.png`` (loss per precision, divergence from the
baseline format stated) and ``report.json``; prints the table. For sweeps of
training jobs the metrics come from ``DescribeTrainingJob`` and CloudWatch Logs
of the environment's AWS endpoint (``AWS_ENDPOINT_URL`` honoured). See
:mod:`trainctl.reports`, which this module calls.
"""

from __future__ import annotations

import argparse
from pathlib import Path

HELP = "Write a sweep's report: Markdown table, tokens/s + peak memory chart, loss curves per precision."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="sweep name (under --dir) or a sweep folder")
    parser.add_argument(
        "--out", required=True, type=Path, help="folder for report.md, the PNGs and report.json (created)"
    )
    parser.add_argument("--dir", type=Path, default=None, help="folder of sweep states (default .sweeps)")
    parser.add_argument("--region", help="AWS region for training-job sweeps (default: the environment's)")


def run(args: argparse.Namespace) -> int:
    from trainctl.reports.writer import write_and_print

    return write_and_print(args.name, args.out, sweeps_dir=args.dir, region=args.region)
