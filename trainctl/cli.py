"""Entry point of the ``trainctl`` console script.

Subcommands are registered in :data:`COMMANDS` (name -> module): trainctl's own
modules under ``trainctl.commands``, and the modules other installed packages
declare in the entry-point group :data:`PLUGINS` (the development tools add
``local-aws`` so); see :mod:`trainctl.commands` for the module contract.

The registry loads lazily: :func:`main` imports every command module for its
one-line ``HELP`` (their top levels import light standard modules only), but
builds the arguments of the command it runs only (``add_arguments`` is where a
command imports the facts its flags offer, such as the catalogue's instance
types). Libraries (planner, rich, boto3, torch, the CDK) are imported by the
command's ``run``. ``tests/trainctl/test_startup_imports.py`` pins what each
command imports.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence

COMMANDS: dict[str, str] = {
    "plan": "trainctl.commands.plan",
    "prepare-data": "trainctl.commands.prepare_data",
    "train": "trainctl.commands.train",
    "submit": "trainctl.commands.submit",
    "runs": "trainctl.commands.runs",
    "dashboard": "trainctl.commands.dashboard",
    "sweep": "trainctl.commands.sweep",
    "report": "trainctl.commands.report",
    "synth-summary": "trainctl.commands.synth_summary",
}

PLUGINS = "trainctl.commands"
"""The entry-point group of commands from other packages (``[project.entry-points."trainctl.commands"]``:
``name = "package.module"``); a name trainctl uses stays trainctl's."""
COMMANDS.update({p.name: p.module for p in importlib.metadata.entry_points(group=PLUGINS) if p.name not in COMMANDS})

ALL = "*"
"""``build_parser(only=ALL)``: every command's arguments."""


def command_in(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first item that is not an option (the top-level parser has no option
    that takes a value), or ``None`` (``trainctl --help``, or no command)."""
    return next((item for item in argv if not item.startswith("-")), None)


def build_parser(only: str | None = ALL) -> argparse.ArgumentParser:
    """The ``trainctl`` parser.

    Args:
        only: the command whose arguments are built (:func:`command_in` of the command line); the others
            are registered with their one-line help only (what ``trainctl --help`` lists), without even
            ``-h``. ``None``: no command's arguments; :data:`ALL` (default): every command's.
    """
    parser = argparse.ArgumentParser(
        prog="trainctl",
        description="Plan, run, submit and report training jobs on the SageMaker training platform.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if not f"{module_name}.".startswith(f"{exc.name}."):
                raise  # something the module imports is missing: a broken install, not an absent command
            continue  # the module, or a package above it, is not installed: subcommand not part of this build
        if only in (ALL, name):
            p = sub.add_parser(name, help=module.HELP, description=module.HELP)
            module.add_arguments(p)
        else:  # never parsed in this process: listed by `trainctl --help` only
            p = sub.add_parser(name, help=module.HELP, add_help=False)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=command_in(argv))
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
