"""Entry point of the ``trainctl`` console script.

Subcommands are registered in :data:`COMMANDS` (name -> module under
``trainctl.commands``); see :mod:`trainctl.commands` for the module contract.

Start-up is part of the interface: people run ``trainctl --help`` and
``trainctl plan`` many times a day. :func:`main` imports every command module
for its one-line ``HELP`` (their top levels import light standard modules only),
but builds the parser of the command it runs only (``add_arguments`` is
where a command imports the facts its flags offer, such as the catalogue's
instance types); the others are listed, not built, and not even registered
when the command line starts with the command (``trainctl plan ...``: only
that command's parser is reached, :func:`alone_in`). Libraries (planner, rich,
boto3, torch, the CDK) are imported by the command's ``run``, and argparse's
formatter gets its width without importing shutil (:func:`help_width`).
``benchmarks/startup.py`` measures it against ``python -c pass``;
``tests/trainctl/test_startup_imports.py`` pins what each command imports.
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
    "runs": "trainctl.commands.runs",
    "local-aws": "trainctl.commands.local_aws",
    "dashboard": "trainctl.commands.dashboard",
    "sweep": "trainctl.commands.sweep",
    "report": "trainctl.commands.report",
    "synth-summary": "trainctl.commands.synth_summary",
}

ALL = "*"
"""``build_parser(only=ALL)``: every command's arguments."""


def command_in(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names: its first item that is not an option (the top-level parser has no option
    that takes a value), or ``None`` (``trainctl --help``, or no command)."""
    return next((item for item in argv if not item.startswith("-")), None)


def alone_in(argv: Sequence[str]) -> bool:
    """Whether ``argv`` starts with a known command (``trainctl plan ...``): the only parser it reaches is that
    command's (:func:`build_parser`'s ``others=False``). ``trainctl -h plan`` lists every command, and an
    unknown one is refused with the list, so neither is alone."""
    return bool(argv) and argv[0] in COMMANDS


def help_width() -> int:
    """Columns for help text: what ``shutil.get_terminal_size().columns`` answers (``$COLUMNS``, else the
    terminal's width, else 80), without importing :mod:`shutil`, which argparse's formatter does for it and
    which brings bz2, lzma and zlib (about 3 ms of ``trainctl --help``'s start-up)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 80
    return columns


def help_formatter(prog: str) -> argparse.HelpFormatter:
    """argparse's formatter, as wide as argparse makes it (:func:`help_width` less 2)."""
    return argparse.HelpFormatter(prog, width=help_width() - 2)


def build_parser(only: str | None = ALL, *, others: bool = True) -> argparse.ArgumentParser:
    """The ``trainctl`` parser.

    Args:
        only: the command whose arguments are built (:func:`command_in` of the command line); the others
            are registered with their one-line help only (what ``trainctl --help`` lists), without even
            ``-h``. ``None``: no command's arguments; :data:`ALL` (default): every command's.
        others: ``False``: the commands other than ``only`` are not registered (nor their modules imported).
            For a command line that starts with the command (:func:`alone_in`): the top-level parser then only
            hands the rest to that command's parser, and its own usage and errors name ``COMMAND``, never the
            list, so the answer is the same (about 5 ms less: argparse builds a parser per command).
    """
    parser = argparse.ArgumentParser(
        prog="trainctl",
        description="Plan, run, submit and report training jobs on the SageMaker training platform.",
        formatter_class=help_formatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module_name in COMMANDS.items():
        if not others and name != only:
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue  # subcommand not part of this build
        if only in (ALL, name):
            p = sub.add_parser(name, help=module.HELP, description=module.HELP, formatter_class=help_formatter)
            module.add_arguments(p)
        else:  # never parsed in this process: listed by `trainctl --help` only (argparse's parsers cost ~0.5 ms each)
            p = sub.add_parser(name, help=module.HELP, add_help=False)
        p.set_defaults(_run=module.run)
    if not others and only not in sub.choices:  # not part of this build: refused with the list of those that are
        return build_parser(only)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(only=command_in(argv), others=not alone_in(argv))
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
