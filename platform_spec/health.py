"""How a run that does not end is told from a healthy one: the failure reports the trainer writes and the
platform reads, and the limits both sides hold a run to.

The trainer stops itself on three kinds of trouble and says which, heading its one-line failure report
(``<base>/output/failure``, which SageMaker carries as ``FailureReason: "AlgorithmError: <report>"``) with one
of the phrases below; the run continuation (:func:`platform_spec.runs.decide`) reads that phrase, never the
rest of the line, to judge the segment:

* :data:`HANG_REASON`: the trainer's watchdog saw no completed step within its limit (a wedged collective,
  a stuck rank). The state on disk is the last checkpoint, which is sound: the run continues on a new
  segment (new instances), bounded by ``no-progress``.
* :data:`NON_FINITE_REASON`: the loss or gradient norm was not finite for too many steps in a row. No
  checkpoint holds a non-finite update, but the same data and state would diverge again: the run fails.
* :data:`PREFLIGHT_REASON`: the start-up check of the network path failed (an EFA instance whose NCCL
  does not use EFA). The image or the instance is wrong, not the weather: the run fails, naming it.

The platform also watches from outside (a trainer stopped whole, a node frozen): a job whose newest step is
older than its request's ``stall_minutes`` is stopped with ``StopTrainingJob`` (it checkpoints on SIGTERM)
and the run continues (:data:`STALL_STOP_REASON` in the run's decision).

Pure Python, standard library only.
"""

from __future__ import annotations

__all__ = [
    "HANG_REASON",
    "NON_FINITE_REASON",
    "PREFLIGHT_REASON",
    "STALL_STOP_REASON",
    "TRAINER_FAILURE_KINDS",
    "trainer_failure_kind",
]

HANG_REASON = "no training step completed within the watchdog's limit"
"""Heads the trainer's report when its watchdog fires: ``"<HANG_REASON>: <what it waited for, from which
step, how long, where the stacks are>"``."""

NON_FINITE_REASON = "the loss or gradient norm was not finite for too many steps in a row"
"""Heads the trainer's report when it stops on non-finite values: ``"<NON_FINITE_REASON>: <steps, values>"``."""

PREFLIGHT_REASON = "the pre-flight check of the network failed"
"""Heads the trainer's report when its start-up check of the network path fails."""

STALL_STOP_REASON = "no training step for longer than the run's stall_minutes"
"""Heads the reason of a run decision on a segment that the platform stopped because its newest step was
older than the request's ``stall_minutes``."""

TRAINER_FAILURE_KINDS: dict[str, str] = {
    "hang": HANG_REASON,
    "non-finite": NON_FINITE_REASON,
    "preflight": PREFLIGHT_REASON,
}
"""The platform's name of each kind of failure the trainer declares -> the phrase heading its report."""


def trainer_failure_kind(report: str) -> str | None:
    """The kind (a key of :data:`TRAINER_FAILURE_KINDS`) of the trainer's failure report ``report`` (the text of
    ``output/failure``; a ``FailureReason`` without SageMaker's ``AlgorithmError:`` head), else ``None``."""
    for name, phrase in TRAINER_FAILURE_KINDS.items():
        if report.startswith(phrase):
            return name
    return None
