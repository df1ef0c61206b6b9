"""Event targets the emulator tests give ``trainctl local-aws`` (``--event-target module:function``).

They run in the emulator's process, called like Lambda functions; what they return is recorded with
the delivery (``GET /_local-aws/events``), which is how the tests read what they saw.
"""

from __future__ import annotations

import threading
from typing import Any

_seen: set[str] = set()
_lock = threading.Lock()


def record(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """What a Lambda target sees: the event's job, statuses and tags, and the context's fields."""
    detail = event["detail"]
    return {
        "job": detail["TrainingJobName"],
        "status": detail["TrainingJobStatus"],
        "secondary_status": detail["SecondaryStatus"],
        "tags": detail.get("Tags"),
        "source": event["source"],
        "detail_type": event["detail-type"],
        "request_id": context.aws_request_id,
        "function_name": context.function_name,
        "remaining_ms": context.get_remaining_time_in_millis(),
    }


def flaky(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Fails the first attempt of every event (as a throttled or crashing function would), then succeeds."""
    with _lock:
        first = event["id"] not in _seen
        _seen.add(event["id"])
    if first:
        raise RuntimeError(f"first attempt of {event['id']} fails on purpose")
    return {"event_id": event["id"], "request_id": context.aws_request_id}
