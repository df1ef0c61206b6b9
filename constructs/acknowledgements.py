"""cdk-nag 3 acknowledgements, written next to the code that causes each finding.

cdk-nag 3 reports through CDK's validation framework and is silenced per
finding with ``Validations.of(scope).acknowledge(Acknowledgment(id, reason))``.
Granular rules (``AwsSolutions-IAM4``/``IAM5``) name each finding
``RuleId[Action::<action>]``, ``RuleId[Resource::<resource>]`` or
``RuleId[Policy::<arn>]``, where a resource is rendered with intrinsics as
``<LogicalId.Attr>``, ``<LogicalId>`` or ``<AWS::Region>`` (rendered by
:func:`platform_constructs.intrinsics.render`, the one renderer, in cdk-nag's
notation). The helpers here build those IDs from the CDK objects themselves,
so an acknowledgement never hard-codes a logical ID, and always carries a reason.
"""

from __future__ import annotations

import aws_cdk as cdk

from constructs import IConstruct

from .intrinsics import ANGLE, BASIC_FUNCTIONS, render

__all__ = ["IAM4", "IAM5", "acknowledge", "action", "managed_policy", "resource"]

IAM4 = "AwsSolutions-IAM4"
"""AWS managed policy attached."""
IAM5 = "AwsSolutions-IAM5"
"""Wildcard in an IAM action or resource."""


def acknowledge(scope: IConstruct, rule_id: str, reason: str, *, finding: str | None = None) -> None:
    """Acknowledge ``rule_id`` (optionally one granular ``finding``) on ``scope`` and its children.

    Raises:
        ValueError: ``reason`` is empty (every acknowledgement must say why).
    """
    if not reason.strip():
        raise ValueError(f"acknowledge({rule_id!r}): got an empty reason; expected why the finding is acceptable")
    rule = f"{rule_id}[{finding}]" if finding else rule_id
    cdk.Validations.of(scope).acknowledge(cdk.Acknowledgment(id=rule, reason=reason))


def action(name: str) -> str:
    """Granular finding for a wildcard action, e.g. ``Action::s3:GetObject*``."""
    return f"Action::{name}"


def managed_policy(scope: IConstruct, policy_arn: str) -> str:
    """Granular finding for an AWS managed policy ARN (as ``ManagedPolicy.managed_policy_arn``).

    Raises:
        ValueError: the ARN resolves to an intrinsic cdk-nag does not flatten itself.
    """
    return f"Policy::{_flatten(scope, policy_arn)}"


def resource(scope: IConstruct, value: str) -> str:
    """Granular finding for a resource (a string that may hold tokens), e.g. ``Resource::<Bucket.Arn>/*``.

    Raises:
        ValueError: ``value`` resolves to an intrinsic cdk-nag does not flatten itself.
    """
    return f"Resource::{_flatten(scope, value)}"


def _flatten(scope: IConstruct, value: str) -> str:
    """``value`` resolved in ``scope``'s stack and written as cdk-nag 3 writes it (``flattenCfnReference``)."""
    return render(cdk.Stack.of(scope).resolve(value), notation=ANGLE, functions=BASIC_FUNCTIONS)
