"""Shared CDK fixtures: each app variant is synthesized once per test session (with cdk-nag on).

Every test module in this folder is marked ``xdist_group("cdk")`` so that all
of them run on one worker and share these session fixtures.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]

ACCOUNT = "123456789012"
REGION = "us-west-2"
PLAN_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/p6-b200-reserved"
INVOKER_ARN = f"arn:aws:iam::{ACCOUNT}:role/JobScheduler"
READER_ARN = f"arn:aws:iam::{ACCOUNT}:role/Dashboards"

VARIANT_CONTEXT = {
    "removalPolicy": "destroy",
    "trainingPlanArns": [PLAN_ARN],
    "invokerPrincipals": [INVOKER_ARN],
    "allowedInputPrefixes": ["s3://shared-datasets/tokenized/"],
    "allowedInstanceTypes": ["ml.p5.48xlarge", "ml.p6-b200.48xlarge"],
    "imageArchitectures": ["amd64", "arm64"],
    "logRetentionDays": 30,
    "imageRetainCount": 7,
    "projectTag": "llm-pretraining",
    "costCenter": "cc-1234",
    "submitterReservedConcurrency": 25,
    "readerPrincipals": [READER_ARN],
    "runContinuationScheduleMinutes": 10,
    "runCapacityWaitAlarmMinutes": 45,
}
"""A deployment to a test account: everything non-default at once."""


@dataclass
class Synth:
    """One synthesized app: the stack object, its template and the cloud assembly folder."""

    stack: Any
    template_json: dict[str, Any]
    outdir: Path
    context: dict[str, Any]

    @property
    def template(self):
        from aws_cdk.assertions import Template

        return Template.from_json(self.template_json)

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.template_json["Resources"]

    def of_type(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.resources.items() if v["Type"] == resource_type}

    def logical_id(self, construct) -> str:
        from aws_cdk import Stack

        return Stack.of(construct).resolve(construct.node.default_child.logical_id)


def _synthesize(outdir: Path, context: dict[str, Any] | None, environ: dict[str, str]) -> Synth:
    from stacks.platform_app import create_app

    app, stack = create_app(context=context, outdir=outdir, environ=environ, stack_traces=False)
    app.synth()  # cdk-nag is registered: raises on any unacknowledged finding
    template_json = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
    return Synth(stack=stack, template_json=template_json, outdir=outdir, context=dict(context or {}))


@pytest.fixture(scope="session")
def default_synth(tmp_path_factory) -> Synth:
    """cdk.json defaults, environment-agnostic (no account/region)."""
    return _synthesize(tmp_path_factory.mktemp("cdk-default"), None, environ={})


@pytest.fixture(scope="session")
def variant_synth(tmp_path_factory) -> Synth:
    """Test-account deployment: :data:`VARIANT_CONTEXT`, concrete account and region."""
    environ = {"CDK_DEFAULT_ACCOUNT": ACCOUNT, "CDK_DEFAULT_REGION": REGION}
    return _synthesize(tmp_path_factory.mktemp("cdk-variant"), VARIANT_CONTEXT, environ=environ)


BOUNDARY_ARN = f"arn:aws:iam::{ACCOUNT}:policy/boundaries/TrainingPlatform"
EXISTING_VPC = {
    "vpcId": "vpc-0a1b2c3d4e5f60718",
    "subnetIds": ["subnet-0a1b2c3d4e5f60001", "subnet-0a1b2c3d4e5f60002"],
    "availabilityZones": [f"{REGION}a", f"{REGION}c"],
    "routeTableIds": ["rtb-0a1b2c3d4e5f60001", "rtb-0a1b2c3d4e5f60002"],
}


@pytest.fixture(scope="session")
def vpc_created_synth(tmp_path_factory) -> Synth:
    """VPC mode, a created VPC (three zones), with a permissions boundary: the test-account deployment otherwise."""
    environ = {"CDK_DEFAULT_ACCOUNT": ACCOUNT, "CDK_DEFAULT_REGION": REGION}
    context = {**VARIANT_CONTEXT, "vpc": "create", "permissionsBoundaryArn": BOUNDARY_ARN}
    return _synthesize(tmp_path_factory.mktemp("cdk-vpc-created"), context, environ=environ)


@pytest.fixture(scope="session")
def vpc_imported_synth(tmp_path_factory) -> Synth:
    """VPC mode in an existing VPC (IDs only) with the FSx for Lustre file system, an AWS-managed policy as the
    boundary, environment-agnostic."""
    context = {
        "vpc": EXISTING_VPC,
        "fsxLustre": {"dataRepositoryPrefix": "datasets/"},
        "permissionsBoundaryArn": "arn:aws:iam::aws:policy/PowerUserAccess",
    }
    return _synthesize(tmp_path_factory.mktemp("cdk-vpc-imported"), context, environ={})
