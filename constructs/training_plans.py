"""The SageMaker training plans the submitter may use, as an SSM String parameter.

The parameter holds a JSON list of training-plan ARNs. The submitter reads it
at run time, so operators can point the platform at new plans with
``aws ssm put-parameter --overwrite`` without redeploying; the next
``cdk deploy`` resets it to the ``trainingPlanArns`` context value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm
from constructs import Construct

__all__ = [
    "TRAINING_PLAN_ARN_FORMAT",
    "TRAINING_PLAN_ARN_PATTERN",
    "TrainingPlans",
    "TrainingPlansProps",
    "parse_training_plan_arn",
]

TRAINING_PLAN_ARN_FORMAT = "arn:aws[-partition]:sagemaker:<region>:<12-digit account>:training-plan/<name>"
"""Human form of the ARN format, used in error messages."""

TRAINING_PLAN_ARN_PATTERN = re.compile(
    r"^arn:(?P<partition>aws(?:-[a-z]+)*):sagemaker:(?P<region>[a-z]{2}(?:-[a-z]+)+-\d+):"
    r"(?P<account>\d{12}):training-plan/(?P<name>[a-zA-Z0-9](?:-*[a-zA-Z0-9]){0,63})$"
)
"""A SageMaker training-plan ARN (plan names: up to 64 alphanumerics and hyphens,
as ``CreateTrainingPlan``'s ``TrainingPlanName`` pattern allows)."""

_STANDARD_TIER_LIMIT = 4096  # bytes: SSM Standard-tier parameter value limit


def parse_training_plan_arn(arn: str) -> dict[str, str]:
    """Split a training-plan ARN into ``partition``, ``region``, ``account``, ``name``.

    Raises:
        ValueError: ``arn`` is not a training-plan ARN (the message gives the format).
    """
    match = TRAINING_PLAN_ARN_PATTERN.match(arn) if isinstance(arn, str) else None
    if match is None:
        raise ValueError(f"got {arn!r}; expected a SageMaker training-plan ARN {TRAINING_PLAN_ARN_FORMAT}")
    return match.groupdict()


@dataclass(frozen=True, kw_only=True)
class TrainingPlansProps:
    """Properties of :class:`TrainingPlans`.

    Attributes:
        plan_arns: training-plan ARNs, in order of preference. Default: none
            (the parameter holds ``[]`` and jobs use spot or on-demand capacity).
        parameter_name: SSM parameter name. Default: CloudFormation generates one.
        description: parameter description. Default: says what the value is.
    """

    plan_arns: Sequence[str] = ()
    parameter_name: str | None = None
    description: str = "JSON list of SageMaker training-plan ARNs the job submitter may use (read at run time)"


class TrainingPlans(Construct):
    """SSM String parameter (primary child ``Resource``) holding the plan ARNs as a JSON list."""

    def __init__(self, scope: Construct, id: str, props: TrainingPlansProps | None = None) -> None:
        super().__init__(scope, id)
        props = props or TrainingPlansProps()
        arns = list(props.plan_arns)
        for index, arn in enumerate(arns):
            try:
                parse_training_plan_arn(arn)
            except ValueError as exc:
                raise ValueError(f"TrainingPlansProps.plan_arns[{index}]: {exc}") from None
        duplicates = sorted({arn for arn in arns if arns.count(arn) > 1})
        if duplicates:
            raise ValueError(f"TrainingPlansProps.plan_arns: {duplicates} listed more than once; expected each plan once")
        value = json.dumps(arns)
        if len(value.encode()) > _STANDARD_TIER_LIMIT:
            raise ValueError(
                f"TrainingPlansProps.plan_arns: {len(arns)} ARNs encode to {len(value.encode())} bytes; "
                f"expected at most {_STANDARD_TIER_LIMIT} (the SSM Standard-tier limit)"
            )
        self.plan_arns: tuple[str, ...] = tuple(arns)
        self.parameter = ssm.StringParameter(
            self,
            "Resource",
            parameter_name=props.parameter_name,
            string_value=value,
            description=props.description,
            tier=ssm.ParameterTier.STANDARD,
        )

    @property
    def parameter_name(self) -> str:
        return self.parameter.parameter_name

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the parameter (``ssm:GetParameter`` and friends on this parameter only)."""
        return self.parameter.grant_read(grantee)
