"""One module per ``trainctl`` subcommand.

Each module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status). Module top levels import only the
standard library and light modules, so ``trainctl --help`` stays fast; heavy
imports (torch, boto3, aws_cdk) happen inside ``run``.
"""
