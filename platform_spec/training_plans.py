"""SageMaker training-plan ARNs: their format, and whether one belongs to a deployment.

Pure Python (standard library only), the one home of these facts: the
submitter's runtime judges configured and requested plans with it, the
plan-metrics function reads the SSM parameter with it, and the CDK side
(:mod:`platform_constructs.training_plans`, ``stacks.config``) validates
``trainingPlanArns`` with it at synth time.

A training plan lives in one region of one account: "Training plans cannot be
shared across AWS accounts or within your AWS Organization"
(https://docs.aws.amazon.com/sagemaker/latest/dg/choose-best-training-plan-using-api-cli-sdk.html),
and a regional SageMaker endpoint serves only its own region's plans. A plan
ARN is therefore usable only where its region and account are the deployment's;
:func:`foreign_reason` says why one is not. A plan is never identified by its
name alone: two accounts may each own a plan called ``b200-week``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from platform_spec.errors import FieldError

__all__ = [
    "TRAINING_PLAN_ARN_FORMAT",
    "TRAINING_PLAN_ARN_PATTERN",
    "PlanArn",
    "TrainingPlanArnError",
    "foreign_reason",
    "parse_training_plan_arn",
    "shared_home",
]

TRAINING_PLAN_ARN_FORMAT = "arn:aws[-partition]:sagemaker:<region>:<12-digit account>:training-plan/<name>"
"""Human form of the ARN format, used in error messages."""

TRAINING_PLAN_ARN_PATTERN = re.compile(
    r"^arn:(aws(?:-[a-z]+)*):sagemaker:([a-z]{2}(?:-[a-z]+)+-[0-9]+):([0-9]{12}):training-plan/"
    r"([a-zA-Z0-9](?:-*[a-zA-Z0-9]){0,63})$"
)
"""A training-plan ARN. Groups: partition, region, account, name. Plan names are
up to 64 alphanumerics and hyphens (``CreateTrainingPlan``'s ``TrainingPlanName``
pattern in botocore's SageMaker model). No named groups, so the pattern is also a
valid JSON Schema (ECMA-262) ``pattern``."""


class TrainingPlanArnError(FieldError):
    """Not a training-plan ARN (a :class:`FieldError`, so a ``ValueError``).

    Its message leaves the field out, ``"got <value!r>; expected a SageMaker training-plan ARN <format>"``:
    an ARN arrives in a list or a props attribute that the caller names (``trainingPlanArns[2]``,
    ``TrainingPlansProps.plan_arns[1]``); :attr:`field` is the name the caller passed (default
    ``training_plan_arn``, the request field).
    """

    def __init__(self, value: object, *, field: str = "training_plan_arn") -> None:
        super().__init__(field, value, f"a SageMaker training-plan ARN {TRAINING_PLAN_ARN_FORMAT}")

    def format_message(self) -> str:
        return self.reason


@dataclass(frozen=True)
class PlanArn:
    """A parsed training-plan ARN."""

    arn: str
    partition: str
    region: str
    account: str
    name: str

    @classmethod
    def parse(cls, arn: object, *, field: str = "training_plan_arn") -> PlanArn:
        """Parse ``arn``.

        Raises:
            TrainingPlanArnError: (a ``ValueError``) not a training-plan ARN; the message gives the value
                and the format, ``field`` names where it came from.
        """
        match = TRAINING_PLAN_ARN_PATTERN.fullmatch(arn) if isinstance(arn, str) else None
        if match is None:
            raise TrainingPlanArnError(arn, field=field)
        partition, region, account, name = match.groups()
        return cls(arn=str(arn), partition=partition, region=region, account=account, name=name)


def parse_training_plan_arn(arn: object) -> dict[str, str]:
    """Split a training-plan ARN into ``partition``, ``region``, ``account``, ``name``.

    Raises:
        TrainingPlanArnError: ``arn`` is not a training-plan ARN (the message gives the format).
    """
    parsed = PlanArn.parse(arn)
    return {"partition": parsed.partition, "region": parsed.region, "account": parsed.account, "name": parsed.name}


def foreign_reason(arn: str, *, region: str | None, account: str | None) -> str | None:
    """Why the plan ``arn`` cannot be used by a deployment in ``region`` / ``account``, or ``None``.

    ``None`` for either side means "not known here" and is not compared.
    The reason names the ARN, where it is and where the deployment is.

    Raises:
        TrainingPlanArnError: ``arn`` is not a training-plan ARN.
    """
    plan = PlanArn.parse(arn)
    wrong = []
    if region is not None and plan.region != region:
        wrong.append(f"region {plan.region} (not {region})")
    if account is not None and plan.account != account:
        wrong.append(f"account {plan.account} (not {account})")
    if not wrong:
        return None
    return f"plan {arn} is in {' and '.join(wrong)}; a training plan is usable only in its own region and account"


def shared_home(arns: Iterable[str]) -> tuple[dict[str, str], dict[str, str]]:
    """The region and the account that all ``arns`` share.

    Returns:
        ``(shared, differing)``: ``shared`` maps ``"region"`` / ``"account"`` to
        the one value every ARN has (absent when ``arns`` is empty or the values
        differ); ``differing`` maps each part whose values differ to a phrase
        naming the values and the ARNs that hold them.

    Raises:
        TrainingPlanArnError: an entry is not a training-plan ARN.
    """
    plans = [PlanArn.parse(arn) for arn in arns]
    shared: dict[str, str] = {}
    differing: dict[str, str] = {}
    for part in ("region", "account"):
        values: dict[str, list[str]] = {}
        for plan in plans:
            values.setdefault(getattr(plan, part), []).append(plan.arn)
        if len(values) == 1:
            (shared[part],) = values
        elif values:
            differing[part] = f"plans in {len(values)} {part}s: " + "; ".join(
                f"{value} ({', '.join(holders)})" for value, holders in sorted(values.items())
            )
    return shared, differing
