"""Entry point of the ``trainctl`` console script.

Subcommands are registered in :data:`COMMANDS` (name -> module under
``trainctl.commands``); see :mod:`trainctl.commands` for the module contract.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

COMMANDS: dict[str, str] = {
    "plan": "trainctl.commands.plan",
    "prepare-data": "trainctl.commands.prepare_data",
    "train": "trainctl.commands.train",
    "submit": "trainctl.commands.submit",
    "local-aws": "trainctl.commands.local_aws",
    "dashboard": "trainctl.commands.dashboard",
    "sweep": "trainctl.commands.sweep",
    "report": "trainctl.commands.report",
    "synth-summary": "trainctl.commands.synth_summary",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainctl",
        description="Plan, run, submit and report training jobs on the SageMaker training platform.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # subcommand not part of this build
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # the reader went away (`trainctl plan --json | head`): not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
