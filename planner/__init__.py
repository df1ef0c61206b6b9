"""Training planner: will a configuration fit, how fast will it run, what will
it cost, and what should change -- before any GPU hour is spent.

Pure Python (no torch): it imports :mod:`platform_spec` and the model families'
pure modules, never the trainer; the submitter Lambda imports it for its
preflight check.

Public API::

    from planner import PlanInput, estimate, auto_tune

    plan = estimate(PlanInput(model="gpt-8b", num_layers=None, precision="fp8", seq_length=8192,
                              batch_size=4, activation_checkpointing="off",
                              instance_type="ml.p6-b200.48xlarge"))
    plan.status                      # "fits", "at-risk" or "out-of-memory" (MEMORY_STATUSES)
    plan.fits, plan.memory_gb.total, plan.tokens_per_second, plan.mfu, plan.recommendations
    plan.to_dict()                   # JSON-able, documented in Plan.to_dict
    auto_tune(plan_input)            # (fitting PlanInput, [change descriptions]) or None

Modules: :mod:`planner.inputs`, :mod:`planner.memory`, :mod:`planner.throughput`,
:mod:`planner.plan` (a plan), :mod:`planner.recommend` (the guide's rules, :func:`estimate`, :func:`auto_tune`),
each importing only those before it. The hardware is
:mod:`platform_spec.catalogue`'s, the precisions :mod:`platform_spec.precisions`',
the model shapes and FLOPs per token the model family's (``model_families/``).
Errors are :class:`platform_spec.errors.FieldError` s: :class:`PlanInputError`
and the catalogue's refusals (each a ``ValueError`` with ``field``, ``value``,
``expected``).
"""

from planner.errors import PlanInputError
from planner.inputs import PlanInput
from planner.memory import AT_RISK_FRACTION, MEMORY_STATUSES
from planner.plan import Plan, Recommendation
from planner.recommend import auto_tune, estimate

__all__ = [
    "AT_RISK_FRACTION",
    "MEMORY_STATUSES",
    "Plan",
    "PlanInput",
    "PlanInputError",
    "Recommendation",
    "auto_tune",
    "estimate",
]
