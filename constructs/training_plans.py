"""The SageMaker training plans the submitter may use, as an SSM String parameter.

The parameter holds a JSON list of training-plan ARNs. The submitter reads it
at run time, so operators can point the platform at new plans with
``aws ssm put-parameter --overwrite`` without redeploying; the next
``cdk deploy`` resets it to the ``trainingPlanArns`` context value.

A plan is usable only in its own region and account (see
:mod:`platform_spec.training_plans`, the one home of the ARN format). When the
stack knows its region and account at synth time, plans from elsewhere fail
the synth. When it does not (an environment-agnostic stack), the plans must
share one region and one account, and the template carries a CloudFormation
rule (``Rules`` section, evaluated before any resource is created:
https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/rules-section-structure.html)
asserting that ``AWS::Region`` / ``AWS::AccountId`` are theirs, so deploying
into another region or account fails before anything is created.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_ssm as ssm

from constructs import Construct
from platform_spec.training_plans import (
    foreign_reason,
    parse_training_plan_arn,
    shared_home,
)

__all__ = ["TrainingPlans", "TrainingPlansProps"]

_STANDARD_TIER_LIMIT = 4096  # bytes: SSM Standard-tier parameter value limit
_LISTED_IN_RULE = 3  # ARNs named in a rule's AssertDescription


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
            raise ValueError(
                f"TrainingPlansProps.plan_arns: {duplicates} listed more than once; expected each plan once"
            )
        value = json.dumps(arns)
        if len(value.encode()) > _STANDARD_TIER_LIMIT:
            raise ValueError(
                f"TrainingPlansProps.plan_arns: {len(arns)} ARNs encode to {len(value.encode())} bytes; "
                f"expected at most {_STANDARD_TIER_LIMIT} (the SSM Standard-tier limit)"
            )
        self.plan_arns: tuple[str, ...] = tuple(arns)
        self.deployment_rule: cdk.CfnRule | None = self._check_deployment_environment(arns)
        self.parameter = ssm.StringParameter(
            self,
            "Resource",
            parameter_name=props.parameter_name,
            string_value=value,
            description=props.description,
            tier=ssm.ParameterTier.STANDARD,
        )

    def _check_deployment_environment(self, arns: Sequence[str]) -> cdk.CfnRule | None:
        """Refuse plans from another region/account; assert the rest in the template when unknown.

        Returns:
            The ``DeploymentEnvironment`` rule (child of this construct), or ``None``
            when the stack's region and account are known (checked here) or there are no plans.

        Raises:
            ValueError: a plan is outside the stack's known region or account, or, where the
                stack does not know them, the plans do not share one region / one account.
        """
        stack = cdk.Stack.of(self)
        region = None if cdk.Token.is_unresolved(stack.region) else stack.region
        account = None if cdk.Token.is_unresolved(stack.account) else stack.account
        for index, arn in enumerate(arns):
            reason = foreign_reason(arn, region=region, account=account)
            if reason is not None:
                raise ValueError(
                    f"TrainingPlansProps.plan_arns[{index}]: {reason}; expected a plan of stack {stack.stack_name}"
                )
        if not arns or (region is not None and account is not None):
            return None
        shared, differing = shared_home(arns)
        problems = [
            differing[part]
            for part, known in (("region", region), ("account", account))
            if known is None and part in differing
        ]
        if problems:
            raise ValueError(
                f"TrainingPlansProps.plan_arns: {'; '.join(problems)}; expected plans of one region and one "
                f"account (stack {stack.stack_name} deploys into one, and its environment is not known at synth time)"
            )
        listed = ", ".join(arns[:_LISTED_IN_RULE]) + (
            f" and {len(arns) - _LISTED_IN_RULE} more" if len(arns) > _LISTED_IN_RULE else ""
        )
        assertions = []
        plan_region, plan_account = shared.get("region"), shared.get("account")
        if region is None:
            assertions.append(
                cdk.CfnRuleAssertion(
                    assert_=cdk.Fn.condition_equals(cdk.Aws.REGION, plan_region),
                    assert_description=f"The training plans ({listed}) are in region {plan_region}: deploy this stack "
                    f"to {plan_region}, or configure plans of the target region.",
                )
            )
        if account is None:
            assertions.append(
                cdk.CfnRuleAssertion(
                    assert_=cdk.Fn.condition_equals(cdk.Aws.ACCOUNT_ID, plan_account),
                    assert_description=f"The training plans ({listed}) belong to account {plan_account}: deploy this "
                    f"stack to {plan_account}, or configure plans of the target account.",
                )
            )
        return cdk.CfnRule(self, "DeploymentEnvironment", assertions=assertions)

    @property
    def parameter_name(self) -> str:
        return self.parameter.parameter_name

    def grant_read(self, grantee: iam.IGrantable) -> iam.Grant:
        """Read the parameter (``ssm:GetParameter`` and friends on this parameter only)."""
        return self.parameter.grant_read(grantee)
