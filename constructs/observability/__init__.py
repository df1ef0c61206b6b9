"""Platform observability: the CloudWatch dashboard (alarms arrive with the observability issue).

Widgets are built from the constructs' ``metric_*`` methods, never from
hand-typed metric names.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import aws_cdk as cdk
from aws_cdk import aws_cloudwatch as cloudwatch
from constructs import Construct

from ..buckets import TrainingBuckets
from ..submitter import JobSubmitter
from ..submitter.runtime import settings
from ..training_plans import TrainingPlans

__all__ = ["PlatformObservability", "PlatformObservabilityProps"]


@dataclass(frozen=True, kw_only=True)
class PlatformObservabilityProps:
    """Properties of :class:`PlatformObservability`.

    Attributes:
        submitter: the job submitter whose metrics the dashboard shows.
        buckets: the platform buckets. Default: no bucket widgets.
        training_plans: the training-plan parameter. Default: no plan widgets.
        alarm_emails: addresses notified by the platform's alarms (the observability
            issue adds the alarms and their topic). Default: nobody is notified.
        dashboard_name: dashboard name. Default: ``<stack name>-<region>``.
        period: aggregation period of the widgets. Default: 5 minutes.
    """

    submitter: JobSubmitter
    buckets: TrainingBuckets | None = None
    training_plans: TrainingPlans | None = None
    alarm_emails: Sequence[str] = ()
    dashboard_name: str | None = None
    period: cdk.Duration = cdk.Duration.minutes(5)


class PlatformObservability(Construct):
    """The platform dashboard (primary child ``Resource``).

    Rows: the submitter's Lambda health (invocations, errors, throttles,
    duration p50/p99), then its EMF metrics (submissions by capacity type,
    refusals by error code).
    """

    def __init__(self, scope: Construct, id: str, props: PlatformObservabilityProps) -> None:
        super().__init__(scope, id)
        self.props = props
        stack = cdk.Stack.of(self)
        # Dashboard names are unique per account across regions: include the region.
        name = props.dashboard_name or f"{stack.stack_name}-{stack.region}"
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Resource",
            dashboard_name=name,
            default_interval=cdk.Duration.days(1),
        )
        submitter, period = props.submitter, props.period
        self.dashboard.add_widgets(
            cloudwatch.TextWidget(markdown="# Job submitter", width=24, height=1),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Invocations, errors, throttles",
                left=[
                    submitter.metric_invocations(period=period),
                    submitter.metric_errors(period=period),
                    submitter.metric_throttles(period=period),
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Duration (ms)",
                left=[
                    submitter.metric_duration(period=period, statistic="p50", label="p50"),
                    submitter.metric_duration(period=period, statistic="p99", label="p99"),
                ],
                width=12,
            ),
        )
        self.dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Submissions by capacity type",
                left=[submitter.metric_submissions(c, period=period, label=c) for c in settings.CAPACITY_TYPES],
                stacked=True,
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="Refusals by error code",
                left=[submitter.metric_refusals(e, period=period, label=e) for e in settings.ERROR_CODES],
                stacked=True,
                width=12,
            ),
        )

    @property
    def dashboard_name(self) -> str:
        return self.dashboard.dashboard_name
