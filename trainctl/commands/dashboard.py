"""``trainctl dashboard --out FILE``: the platform dashboard as JSON, a PNG of its layout, and the alarms.

Synthesizes the CDK app in-process (``cdk.json`` context plus ``-c`` overrides;
cdk-nag and asset bundling off: ``trainctl synth-summary`` runs the checks) with
the default environment ``cdk synth`` would give it
(:func:`trainctl.cdk_context.synth_environment`: the region from ``AWS_REGION``,
``AWS_DEFAULT_REGION``, the profile, else us-east-1), so it refuses what
``npx cdk synth`` refuses, then

* writes the dashboard body to ``FILE`` as plain JSON: CloudFormation
  intrinsics inside it are rendered readably, ``${LogicalId}`` for a ``Ref``,
  ``${LogicalId.Attr}`` for a ``Fn::GetAtt``, ``${AWS::Region}`` for a
  pseudo parameter, and an alarm's ARN as
  ``arn:aws:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:<AlarmName>``;
* renders ``FILE`` with suffix ``.png``: every widget as a labelled box at its
  grid position (24 columns), coloured by type, so the layout can be reviewed
  without an AWS account;
* lists the alarms: name, metric or expression, threshold, actions.

Exit status: 0; 2 when the configuration is invalid. The work is
:mod:`trainctl.dashboard` (Python API for demos:
:func:`trainctl.dashboard.export.export_dashboard`).
"""

from __future__ import annotations

import argparse

from trainctl.cdk_context import add_context_argument

HELP = "Write the platform dashboard body as JSON, render a PNG preview of its layout, and list the alarms."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="dashboard JSON file; the layout PNG is written beside it (FILE with .png)",
    )
    add_context_argument(parser, "'trainingPlanArns=[\"arn:...\"]'")
    parser.add_argument("--json-alarms", action="store_true", help="print the alarms as JSON instead of a table")


def run(args: argparse.Namespace) -> int:
    from trainctl.dashboard.export import export_and_print

    return export_and_print(args.out, context=dict(args.context), json_alarms=args.json_alarms)
