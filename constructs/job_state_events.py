"""SageMaker's training-job state-change events as one EventBridge pattern.

Two rules match the same events: the submitter's run continuation
(:class:`~platform_constructs.submitter.construct.JobSubmitter`) and the
job-outcomes function (:class:`~platform_constructs.observability.functions.JobStateHandler`).
Both import the pattern from here, below them, so neither construct imports the
other for it. The event's source and detail type and the terminal statuses are
:mod:`platform_spec.runs`'.
"""

from __future__ import annotations

from aws_cdk import aws_events as events

from platform_spec.runs import JOB_STATE_CHANGE_DETAIL_TYPE, JOB_STATE_CHANGE_SOURCE, TERMINAL_JOB_STATUSES

__all__ = ["job_state_event_pattern"]


def job_state_event_pattern() -> events.EventPattern:
    """SageMaker training jobs reaching ``Completed``, ``Failed`` or ``Stopped``."""
    return events.EventPattern(
        source=[JOB_STATE_CHANGE_SOURCE],
        detail_type=[JOB_STATE_CHANGE_DETAIL_TYPE],
        detail={"TrainingJobStatus": list(TERMINAL_JOB_STATUSES)},
    )
