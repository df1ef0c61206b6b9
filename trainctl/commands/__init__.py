"""One module per ``trainctl`` subcommand: argument parsing plus one call into a library module.

Each module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status). ``run`` imports one function from a
library module of ``trainctl`` (``trainctl.sweeps``, ``trainctl.reports``,
``trainctl.plans``, ...) and returns its answer: what a command does lives in
the library, where the demo and the tests call it too. Libraries never import
commands (import-linter, ``tests/test_layers.py``); :mod:`trainctl.cli`
registers the commands by name, and those other packages declare in the
entry-point group ``trainctl.commands`` (same contract). Module top levels
import only the standard library and light modules, so ``trainctl --help``
stays fast; heavy imports (torch, boto3, aws_cdk) happen inside the libraries'
functions.
"""
