"""``trainctl synth-summary``: synthesize the CDK app, run cdk-nag and cfn-lint, summarize.

Synthesizes the app in-process into ``--out`` (or reads an existing cloud
assembly with ``--no-synth``) with the default environment ``cdk synth`` would
give it (:func:`trainctl.cdk_context.synth_environment`: the region from
``AWS_REGION``, ``AWS_DEFAULT_REGION``, the profile, else us-east-1), so it
refuses what ``npx cdk synth`` refuses; then reports, per stack: resources by type,
outputs (intrinsics written ``<LogicalId>``, ``<LogicalId.Attr>`` by
:func:`platform_constructs.intrinsics.render`, anything else as compact JSON); for the app: cdk-nag ``AwsSolutions`` findings (from CDK's
``validation-report.json``; acknowledged ones from the construct metadata,
with their reasons) and cfn-lint results for every template.

Exit status: 0 when there is no unacknowledged cdk-nag finding and no
cfn-lint error; 1 otherwise; 2 when the configuration is invalid. The work is
:mod:`trainctl.synth_summary`.
"""

from __future__ import annotations

import argparse

from trainctl.cdk_context import add_context_argument

HELP = "Synthesize the CDK app, run cdk-nag (AwsSolutions) and cfn-lint, and summarize what would be deployed."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="cdk.out", help="cloud assembly directory (default: cdk.out)")
    parser.add_argument(
        "--no-synth",
        dest="synthesize",
        action="store_false",
        help="read the cloud assembly already in --out (e.g. from `npx cdk synth`) instead of synthesizing",
    )
    add_context_argument(parser, "removalPolicy=destroy")


def run(args: argparse.Namespace) -> int:
    from trainctl.synth_summary import summarize_and_print

    return summarize_and_print(args.out, synthesize=args.synthesize, context=dict(args.context))
