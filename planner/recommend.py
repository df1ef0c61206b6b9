"""The guide's tuning rules, applied to a plan: :func:`estimate` (a plan with its recommendations) and
:func:`auto_tune` (the nearest configuration that fits).

Rules (from the published guide; digest: ``shared/docs/seed-digest.md``):

1. **Fit first.** Out of memory (or at risk of it): recompute more blocks
   (selective checkpointing of every Nth block, then every block; at ~14B
   parameters and above checkpointing is a prerequisite), lower the
   micro-batch (keeping the tokens per optimizer step with gradient
   accumulation), accumulate sharded gradients (``gradient_sync``
   ``every_micro_batch``), reshard after forward, shard over every GPU; if
   even that fails, more instances. The sequence length is never cut (for
   long-context work it comes first).
2. **Throughput goal: batch size first.** The largest micro-batch that fits,
   stopping where a doubling gains less than :data:`MIN_GAIN` -- batch size
   matters more than the number format below ~14B.
3. **Whether checkpointing pays.** Its 10-30% recompute against the batch it
   frees: compare the best fitting batch of each mode -- off, selective
   (every Nth block, N in :data:`SELECTIVE_INTERVALS`) and full -- and
   recommend the fastest.
4. **Communication-bound: shard less first.** HSDP (shard within an instance)
   instead of sharding across instances; keep parameters gathered between
   forward and backward (``reshard_after_forward=false``) when memory allows;
   with gradient accumulation, reduce-scatter once per step
   (``gradient_sync=last_micro_batch``) when the unsharded gradients fit
   with the at-risk margin to spare and it saves time.
5. **Precision by size and hardware.** Below ~14B start with fp8 (lowest
   quantization overhead); at ~14B and above fp8 is the balanced default,
   mxfp8 when convergence stability matters, nvfp4 only on Blackwell and with
   a validated recipe (Megatron Core); validate loss curves across formats.
   Low precision is a throughput optimization, not a memory saving, unless
   weights are stored quantized.
6. **Checkpoints** (:mod:`planner.checkpoint`; not the guide's). Save interval
   checkpoints synchronously when an asynchronous save's staging does not fit
   the host's memory; warn when the synchronous save at a stop (SIGTERM) would
   outlast SageMaker's 120 s.

Nothing the trainer refuses is recommended: storing weights quantized
(``quantized_model_init``) is suggested only for a precision the trainer stores
quantized (:func:`platform_spec.hyperparameters.quantized_model_init_refusal` is
None: fp8 and mxfp8; TransformerEngine marks nvfp4 unsupported under FSDP2), and
every candidate goes through :func:`planner.inputs.resolve`, which applies the
trainer's own rules.

Which formats quantize, which are block-scaled and which GPU runs which are the
precision registry's (:mod:`platform_spec.precisions`), and so is every format the
advice names: the guide's starting format (:data:`GUIDE_DEFAULT_LOW_PRECISION`, fp8,
this module's one choice), the block-scaled formats at its peak (mxfp8: finer
scaling, the stability choice), the formats of fewer bytes per element than it
(nvfp4: a validated recipe first) and the high precision a format keeps outside
its quantized GEMMs (bf16), which its loss curve is validated against.

Each recommendation carries the plan after its change.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

from planner.inputs import PlanInput
from planner.memory import AT_RISK_FRACTION, OUT_OF_MEMORY
from planner.plan import Evaluator, Plan, Recommendation, evaluate
from platform_spec.catalogue import supports_precision
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import QUANTIZED_PRECISIONS, quantized_model_init_refusal
from platform_spec.models import format_count
from platform_spec.precisions import get_precision
from platform_spec.training_modes import DEFAULT_GRADIENT_SYNC
from platform_spec.training_modes import activation_checkpointing as parse_activation_checkpointing

LARGE_MODEL_PARAMS = 14e9
"""The guide's threshold (~14B parameters) for checkpointing and precision advice."""
MIN_GAIN = 0.05
"""Smallest relative tokens/s gain worth a recommendation (5%)."""
COMM_BOUND_FRACTION = 0.15
"""Exposed communication share of the step above which a plan counts as communication-bound."""
MAX_BATCH = 4096
GUIDE_DEFAULT_LOW_PRECISION = "fp8"
"""The low-precision format the guide starts with (lowest quantization overhead; the balanced default at ~14B+)."""
SELECTIVE_INTERVALS: tuple[int, ...] = (8, 4, 3, 2)
"""The ``selective:N`` modes the recommendations weigh between ``off`` and ``full``: every 8th, 4th, 3rd and
2nd block (1/8 to 1/2 of the blocks recompute; torchtitan's block-level selective checkpointing takes any N)."""

Evaluate = Callable[[PlanInput], Plan]
"""How the rules get the plan of a configuration: :func:`planner.plan.evaluate`, or an
:class:`planner.plan.Evaluator` (the same plans, each worked out once), whose ``fits`` answers whether a
configuration fits from the memory model alone."""


def _params(plan: Plan) -> int:
    m = plan.resolved.model
    return m.block_params if plan.input.blocks_only else m.num_params


def _try(evaluate: Evaluate, inp: PlanInput) -> Plan | None:
    try:
        return evaluate(inp)
    except FieldError:  # PlanInputError and the catalogue's refusals
        return None


def _fits(evaluate: Evaluate, inp: PlanInput) -> bool:
    """``evaluate(inp).fits``, without the speed model where ``evaluate`` offers ``fits``.

    Raises:
        FieldError: as ``evaluate``.
    """
    fits: Callable[[PlanInput], bool] | None = getattr(evaluate, "fits", None)
    return fits(inp) if fits is not None else evaluate(inp).fits


def _try_fitting(evaluate: Evaluate, inp: PlanInput) -> Plan | None:
    """The plan of ``inp`` when it fits; ``None`` when it does not or is refused (:func:`_try`)."""
    try:
        return evaluate(inp) if _fits(evaluate, inp) else None
    except FieldError:  # PlanInputError and the catalogue's refusals
        return None


def largest_fitting_batch(inp: PlanInput, evaluate: Evaluate) -> int | None:
    """The largest ``batch_size`` (1..4096) that fits with everything else of ``inp`` unchanged; ``None`` if 1 does not."""
    if not _fits(evaluate, inp.replace(batch_size=1)):
        return None
    lo, hi = 1, MAX_BATCH
    if _fits(evaluate, inp.replace(batch_size=hi)):
        return hi
    while hi - lo > 1:  # memory grows with the batch: bisect
        mid = (lo + hi) // 2
        if _fits(evaluate, inp.replace(batch_size=mid)):
            lo = mid
        else:
            hi = mid
    return lo


def best_batch(inp: PlanInput, evaluate: Evaluate, *, start: int = 1, keep_tokens: bool = False) -> Plan | None:
    """Among powers of two from ``start`` up to the largest that fits, the smallest
    within :data:`MIN_GAIN` of the fastest (bigger batches past that change the
    optimization more than they speed it up); ``None`` if nothing fits.

    ``keep_tokens``: lower ``gradient_accumulation_steps`` as the batch grows so the
    tokens per optimizer step stay (as far as they divide)."""
    tokens_per_step = _sequences_per_step(inp)

    def at(b: int) -> PlanInput:
        if keep_tokens:
            return inp.replace(batch_size=b, gradient_accumulation_steps=max(1, tokens_per_step // b))
        return inp.replace(batch_size=b)

    limit = largest_fitting_batch(inp, evaluate)
    if limit is None:
        return None
    sizes = []
    b = 1
    while b <= limit:
        if b >= start:
            sizes.append(b)
        b *= 2
    if not sizes:
        sizes = [limit]
    plans = [p for p in (evaluate(at(s)) for s in sizes) if p.fits]
    if not plans:
        return None
    fastest = max(p.tokens_per_second for p in plans)
    for p in plans:
        if p.tokens_per_second >= fastest * (1 - MIN_GAIN):
            return p
    return plans[-1]  # pragma: no cover


def checkpointing_modes(num_layers: int) -> list[str]:
    """The activation-checkpointing modes worth comparing for a model of ``num_layers`` blocks, from the one
    recomputing least to the one recomputing most: ``off``, ``selective:N`` (:data:`SELECTIVE_INTERVALS`, those
    that recompute a distinct number of blocks, at least one and fewer than all) and ``full``."""
    modes, counts = ["off"], {0}
    for interval in SELECTIVE_INTERVALS:
        mode = parse_activation_checkpointing(f"selective:{interval}")
        count = mode.checkpointed_count(num_layers)
        if count not in counts and 0 < count < num_layers:
            modes.append(mode.name)
            counts.add(count)
    modes.append("full")
    return modes


def _recomputed(mode: str, num_layers: int) -> int:
    return parse_activation_checkpointing(mode).checkpointed_count(num_layers)


def describe_changes(before: PlanInput, after: PlanInput) -> list[str]:
    """One human sentence per changed field, e.g. ``"batch_size: 16 -> 4"`` with the reason."""
    why = {
        "activation_checkpointing": "recompute blocks in backward instead of keeping their activations",
        "gradient_sync": "when gradients are reduce-scattered under accumulation",
        "batch_size": "smaller micro-batch",
        "gradient_accumulation_steps": "keeps the tokens per optimizer step",
        "quantized_model_init": "store block weights quantized (TransformerEngine's FusedAdam keeps fp32 master weights)",
        "reshard_after_forward": "free gathered parameters after forward",
        "sharding_strategy": "shard parameters and optimizer state over every GPU",
        "instance_count": "more GPUs to shard over",
        "precision": "number format",
        "checkpoint_save": "how interval checkpoints are saved",
        "loss": "how the cross-entropy is computed",
        "attention": "the attention kernel",
    }
    out = []
    for name in before.__dataclass_fields__:
        old, new = getattr(before, name), getattr(after, name)
        if old != new:
            out.append(f"{name}: {_fmt(old)} -> {_fmt(new)} ({why.get(name, 'changed')})")
    return out


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _changes(before: PlanInput, after: PlanInput) -> dict[str, Any]:
    return {n: getattr(after, n) for n in before.__dataclass_fields__ if getattr(before, n) != getattr(after, n)}


def fitting_candidates(plan: Plan, evaluate: Evaluate) -> list[Plan]:
    """Fitting configurations reachable without changing model, sequence, precision or instances,
    fastest first (within 2% of the fastest: fewer changed fields first). Lowering the batch raises
    ``gradient_accumulation_steps`` to keep the tokens per optimizer step; only if nothing fits
    that way are fewer tokens per step accepted. Used by :func:`auto_tune`."""
    inp = plan.input
    per_step = _sequences_per_step(inp)
    # micro-batches that keep the sequences per optimizer step exactly: the divisors of it, up to the batch
    # (batch 7 -> 3 with 3 micro-batches would train 9 per step: another run, not the same one in less memory)
    keeping = [(b, per_step // b) for b in range(inp.batch_size, 0, -1) if per_step % b == 0]
    halving = [(inp.batch_size, inp.gradient_accumulation_steps)]
    while halving[-1][0] > 1:
        halving.append((halving[-1][0] // 2, inp.gradient_accumulation_steps))
    axes = _fitting_axes(plan)
    layouts = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())]
    # first keep the tokens per optimizer step (accumulate more micro-batches); if nothing fits that
    # way -- the sharded gradients of accumulation still take memory -- accept fewer tokens per step
    for batches in (keeping, halving):
        found = [f for f in (_largest_fitting(evaluate, inp, layout, batches) for layout in layouts) if f is not None]
        if found:
            break
    else:
        return []
    # fastest first, but within 2% of the fastest prefer fewer changed fields
    fastest = max(t[0] for t in found)
    found.sort(key=lambda t: (t[0] < fastest * 0.98, t[1], -t[0]))
    return [p for _, _, p in found]


def _fitting_axes(plan: Plan) -> dict[str, list[Any]]:
    """The values :func:`fitting_candidates` weighs per field, the plan's own first: its checkpointing mode and
    every mode recomputing more blocks (never ``off`` at ~14B+: the guide's prerequisite), then the setting
    that saves memory of gradient sync, quantized weights (where the trainer stores them), resharding and
    sharding (full, over more than one instance)."""
    inp = plan.input
    layers = plan.resolved.model.num_layers
    current = _recomputed(inp.activation_checkpointing, layers)
    ckpts = [inp.activation_checkpointing] + [
        m for m in checkpointing_modes(layers) if _recomputed(m, layers) > current
    ]
    if _large(plan):
        ckpts = [m for m in ckpts if m != "off"]

    def also(value: Any, saving: Any, when: bool) -> list[Any]:
        return [value, saving] if when else [value]

    return {
        "activation_checkpointing": ckpts,
        "gradient_sync": also(inp.gradient_sync, DEFAULT_GRADIENT_SYNC, inp.gradient_sync != DEFAULT_GRADIENT_SYNC),
        "quantized_model_init": also(
            inp.quantized_model_init, True, _quantized_init_available(inp) and not inp.quantized_model_init
        ),
        "reshard_after_forward": also(inp.reshard_after_forward, True, not inp.reshard_after_forward),
        "sharding_strategy": also(
            inp.sharding_strategy, "full", inp.sharding_strategy == "hybrid" and inp.instance_count > 1
        ),
    }


def _largest_fitting(
    evaluate: Evaluate, inp: PlanInput, layout: dict[str, Any], batches: list[tuple[int, int]]
) -> tuple[float, int, Plan] | None:
    """The first ``(batch_size, gradient_accumulation_steps)`` of ``batches`` (largest batch first) that fits
    with ``layout``'s fields: ``(tokens/s, number of changed fields, plan)``; ``None`` when none fits."""
    for batch, steps in batches:
        candidate = inp.replace(**layout, batch_size=batch, gradient_accumulation_steps=steps)
        p = _try_fitting(evaluate, candidate)
        if p is not None:
            return p.tokens_per_second, len(_changes(inp, candidate)), p
    return None


def _quantized_init_available(inp: PlanInput) -> bool:
    """Whether ``quantized_model_init=true`` is a change the trainer accepts for ``inp``
    (:func:`platform_spec.hyperparameters.quantized_model_init_refusal` is None for its precision)."""
    return quantized_model_init_refusal(inp.precision) is None


def _rec(title: str, reason: str, before: PlanInput, after: Plan | None, kind: str) -> Recommendation:
    changes = {} if after is None else _changes(before, after.input)
    return Recommendation(title=title, reason=reason, changes=changes, after=after, kind=kind)


def _pct(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:+.0f}%" if old > 0 else "n/a"


def _assignments(changes: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt(v)}" for k, v in changes.items())


def _sequences_per_step(inp: PlanInput) -> int:
    return inp.batch_size * inp.gradient_accumulation_steps


def _large(plan: Plan) -> bool:
    """At ~14B parameters and above (:data:`LARGE_MODEL_PARAMS`)."""
    return _params(plan) >= LARGE_MODEL_PARAMS


def _size(plan: Plan) -> str:
    return f"{format_count(_params(plan))} parameters"


def recommend(plan: Plan, evaluate: Evaluate) -> list[Recommendation]:
    """The guide's rules applied to ``plan`` (module docstring), most important first: for a plan that does not
    fit, the change that makes it fit (rule 1); otherwise each rule's change where it pays, then the precision
    advice."""
    if not plan.fits:
        # the fitting configuration's own advice (its "Then:" chain) already says what of the checkpoint rule holds
        # for the configuration that would run; the requested one's is added only where that says nothing alike
        fit = _fit_recs(plan, evaluate)
        said = {rec.title.removeprefix("Then: ") for rec in fit}
        return fit + [rec for rec in _checkpoint_recs(plan, evaluate) if rec.title not in said]
    inp = plan.input
    batched = best_batch(inp, evaluate, start=inp.batch_size, keep_tokens=inp.gradient_accumulation_steps > 1)
    recs = [
        _batch_rec(plan, batched),
        _checkpointing_rec(plan, batched or plan, evaluate),
        _sharding_rec(plan, evaluate),
        _gradient_sync_rec(plan, evaluate),
        _quantized_weights_rec(plan, evaluate),
        _low_precision_rec(plan, evaluate),
        _precision_advice(plan),
    ]
    return [rec for rec in recs if rec is not None] + _checkpoint_recs(plan, evaluate)


def _fit_recs(plan: Plan, evaluate: Evaluate) -> list[Recommendation]:
    """Rule 1: the fastest fitting configuration (and the fastest without quantized weights, where it stores
    them), then the advice for it, as changes from the request; more instances when nothing fits on these."""
    inp, mem = plan.input, plan.memory_gb
    need = f"needs {mem.required:.1f} GB per GPU of {mem.usable:.1f} GB usable"
    if plan.status != OUT_OF_MEMORY:
        need = f"at risk: {need}, within the model's {AT_RISK_FRACTION:.0%} error of the limit"
    candidates = fitting_candidates(plan, evaluate)
    if not candidates:
        return [_more_instances_rec(plan, evaluate, need)]
    best = candidates[0]
    recs = [
        _rec(
            "Make it fit: " + _assignments(_changes(inp, best.input)),
            f"{need}; "
            + ("at ~14B+ parameters activation checkpointing is a prerequisite; " if _large(plan) else "")
            + "the fastest fitting configuration that keeps the model, sequence length, precision and "
            "instance count"
            + (
                " (fewer tokens per optimizer step: even the sharded gradients of accumulation and "
                "one sequence per micro-batch do not fit otherwise)"
                if _sequences_per_step(best.input) < _sequences_per_step(inp)
                else ""
            ),
            inp,
            best,
            "fit",
        )
    ]
    plain = next((c for c in candidates if not c.input.quantized_model_init), None)
    if best.input.quantized_model_init and not inp.quantized_model_init and plain is not None:
        recs.append(
            _rec(
                "Or, without quantized weights: " + _assignments(_changes(inp, plain.input)),
                "quantized_model_init trains with TransformerEngine's FusedAdam and fp32 master weights; this is "
                f"the fastest fit with high-precision weights ({_pct(plain.tokens_per_second, best.tokens_per_second)} tokens/s)",
                inp,
                plain,
                "fit",
            )
        )
    for follow in recommend(best, evaluate):
        if follow.after is not None:
            follow = _rec("Then: " + follow.title, follow.reason, inp, follow.after, follow.kind)
        recs.append(follow)
    return recs


def _more_instances_rec(plan: Plan, evaluate: Evaluate, need: str) -> Recommendation:
    """The fewest instances (full sharding divides parameters and optimizer state) on which the plan fits with
    every memory saving; "Nothing fits" when even 256 do not hold it."""
    inp = plan.input
    base = inp.replace(
        activation_checkpointing="full",
        batch_size=1,
        sharding_strategy="full",
        reshard_after_forward=True,
        gradient_sync=DEFAULT_GRADIENT_SYNC,
    )
    for count in (c for c in (2, 4, 8, 16, 32, 64, 128, 256) if c > inp.instance_count):
        p = _try_fitting(evaluate, base.replace(instance_count=count))
        if p is not None:
            # the title names every change the figures include (checkpointing, batch ...), not the count only
            also = {k: v for k, v in _changes(inp, p.input).items() if k != "instance_count"}
            return _rec(
                f"Use {count} instances" + "".join(f", {k}={_fmt(v)}" for k, v in also.items()),
                f"does not fit on {inp.instance_count} x {inp.instance_type} even with activation "
                f"checkpointing and batch 1 ({need}); "
                "sharding over more GPUs divides parameters, gradients and optimizer state",
                inp,
                p,
                "fit",
            )
    return _rec(
        "Nothing fits on this hardware", f"{need}; choose a smaller model or a GPU with more memory", inp, None, "fit"
    )


def _batch_rec(plan: Plan, batched: Plan | None) -> Recommendation | None:
    """Rule 2: the batch first: ``batched`` (:func:`best_batch` from the plan's batch up) where it pays."""
    inp = plan.input
    if batched is None or batched.input.batch_size == inp.batch_size:
        return None
    gain = batched.tokens_per_second / plan.tokens_per_second - 1
    if not gain >= MIN_GAIN:
        return None
    return _rec(
        f"Raise batch_size to {batched.input.batch_size}",
        f"throughput goal: tune the batch first; {_pct(batched.tokens_per_second, plan.tokens_per_second)} "
        f"tokens/s, {batched.memory_gb.total:.1f} GB per GPU "
        + (
            "(fewer accumulation steps keep the tokens per optimizer step)"
            if _sequences_per_step(batched.input) == _sequences_per_step(inp)
            else "(more tokens per optimizer step: revisit the learning rate)"
        ),
        inp,
        batched,
        "throughput",
    )


def _checkpointing_rec(plan: Plan, mine: Plan, evaluate: Evaluate) -> Recommendation | None:
    """Rule 3: whether checkpointing pays: the fastest best fitting batch of the other modes against ``mine``
    (the plan's mode at its best batch); at ~14B+ without checkpointing and little headroom, advice to use it."""
    inp = plan.input
    others = [
        best_batch(inp.replace(activation_checkpointing=mode), evaluate)
        for mode in checkpointing_modes(plan.resolved.model.num_layers)
        # the guide: checkpointing is a prerequisite at ~14B+
        if mode != inp.activation_checkpointing and not (_large(plan) and mode == "off")
    ]
    alt = max((p for p in others if p is not None), key=lambda p: p.tokens_per_second, default=None)
    if alt is not None and alt.tokens_per_second > mine.tokens_per_second * (1 + MIN_GAIN):
        return _rec(*_checkpointing_words(plan, mine, alt), inp, alt, "checkpointing")
    if not (
        _large(plan)
        and inp.activation_checkpointing == "off"
        and plan.memory_gb.headroom / plan.memory_gb.usable < 0.15
    ):
        return None
    return _rec(
        "Consider activation checkpointing",
        f"{_size(plan)}: at ~14B+ most configurations run out of memory without it; this one leaves "
        f"{plan.memory_gb.headroom:.1f} GB headroom",
        inp,
        _try(evaluate, inp.replace(activation_checkpointing="full")),
        "checkpointing",
    )


def _checkpointing_words(plan: Plan, mine: Plan, alt: Plan) -> tuple[str, str]:
    """The title and reason of moving from ``mine`` to ``alt``, another checkpointing mode at its best batch."""
    inp, layers = plan.input, plan.resolved.model.num_layers
    mode = alt.input.activation_checkpointing
    recomputing = _recomputed(mode, layers)
    faster = _pct(alt.tokens_per_second, mine.tokens_per_second)
    if recomputing > _recomputed(inp.activation_checkpointing, layers):
        what = "Turn on activation checkpointing" if mode == "full" else f"Checkpoint every {mode[10:]}th block"
        if inp.activation_checkpointing != "off":
            what = f"Recompute more blocks ({mode})"
        return f"{what} and raise batch_size to {alt.input.batch_size}", (
            f"{mode} recomputes {recomputing} of {layers} blocks: it costs "
            f"{alt.throughput.recompute_overhead_pct:.0f}% of the step but frees memory for batch "
            f"{alt.input.batch_size}: {faster} tokens/s over the best batch with {inp.activation_checkpointing} "
            f"({mine.input.batch_size})"
        )
    if mode == "off":
        return f"Turn off activation checkpointing (batch_size {alt.input.batch_size})", (
            f"below ~14B parameters checkpointing is usually unnecessary; without its recompute batch "
            f"{alt.input.batch_size} runs {faster} tokens/s faster than the best batch with it "
            f"({mine.input.batch_size})"
        )
    return f"Recompute fewer blocks ({mode}, batch_size {alt.input.batch_size})", (
        f"{mode} recomputes {recomputing} of {layers} blocks and still fits batch {alt.input.batch_size}: "
        f"{faster} tokens/s over the best batch with {inp.activation_checkpointing} ({mine.input.batch_size})"
    )


def _sharding_rec(plan: Plan, evaluate: Evaluate) -> Recommendation | None:
    """Rule 4, communication-bound: shard less (HSDP over several instances, no resharding after forward)."""
    inp, t = plan.input, plan.throughput
    if not t.comm_fraction > COMM_BOUND_FRACTION:
        return None
    options = []
    if inp.sharding_strategy == "full" and inp.instance_count > 1:
        options.append(inp.replace(sharding_strategy="hybrid"))
    if inp.reshard_after_forward:
        options.append(inp.replace(reshard_after_forward=False))
    fitting = [p for p in (_try(evaluate, o) for o in options) if p is not None and p.fits]
    best = max(fitting, key=lambda p: p.tokens_per_second, default=None)
    if best is None or not best.tokens_per_second > plan.tokens_per_second * (1 + MIN_GAIN):
        return None
    return _rec(
        f"Shard less: {_assignments(_changes(inp, best.input))}",
        f"communication-bound: {t.comm_fraction * 100:.0f}% of the step is exposed FSDP communication ({t.comm.link}); "
        f"simplify sharding first: {_pct(best.tokens_per_second, plan.tokens_per_second)} tokens/s",
        inp,
        best,
        "communication",
    )


def _gradient_sync_rec(plan: Plan, evaluate: Evaluate) -> Recommendation | None:
    """Rule 4, accumulating: reduce-scatter once per step when the unsharded gradients fit with the margin to
    spare and it pays."""
    inp, t = plan.input, plan.throughput
    if inp.gradient_accumulation_steps <= 1 or inp.gradient_sync == "last_micro_batch":
        return None
    once = _try(evaluate, inp.replace(gradient_sync="last_micro_batch"))
    if once is None or not once.fits or not once.tokens_per_second > plan.tokens_per_second * (1 + MIN_GAIN):
        return None
    return _rec(
        "Reduce-scatter gradients once per step (gradient_sync=last_micro_batch)",
        f"{t.gradient_reductions} reduce-scatters per step of {t.micro_batches} micro-batches become 1 "
        f"({t.comm.link}): {_pct(once.tokens_per_second, plan.tokens_per_second)} tokens/s; the unsharded "
        f"fp32 gradients kept between micro-batches raise the requirement {plan.memory_gb.required:.1f} "
        f"-> {once.memory_gb.required:.1f} GB per GPU, which still fits with the at-risk margin to spare",
        inp,
        once,
        "communication",
    )


def _quantized_weights_rec(plan: Plan, evaluate: Evaluate) -> Recommendation | None:
    """Quantized weights when memory is the constraint and storing them lowers it (only where the trainer can
    store them). Under FSDP2 with the trainer image's TransformerEngine it usually does not: TE keeps no quantized
    weight copies there (:data:`planner.memory.TE_FSDP2_DROPS_WEIGHT_WORKSPACE`), while FusedAdam keeps an fp32
    master of every parameter beside the stored quantized weights, so the suggestion is made only where the
    evaluated plan is smaller (e.g. TE's FSDP1 example, ``blocks_only``, whose copies are kept)."""
    inp = plan.input
    if not _quantized_init_available(inp) or inp.quantized_model_init:
        return None
    q = _try(evaluate, inp.replace(quantized_model_init=True))
    if (
        q is None
        or not plan.memory_gb.headroom / plan.memory_gb.usable < 0.25
        or not q.memory_gb.total < plan.memory_gb.total
    ):
        return None
    return _rec(
        "Store weights quantized (quantized_model_init)",
        f"low precision uses more memory than {get_precision(inp.precision).high_precision} by default "
        "(TransformerEngine keeps high-precision "
        f"weights plus quantized copies: {plan.memory_gb.quantized_weight_copies:.1f} GB here); storing "
        f"them quantized brings {plan.memory_gb.total:.1f} -> {q.memory_gb.total:.1f} GB per GPU "
        "(the trainer then steps them with TransformerEngine's FusedAdam and fp32 master weights)",
        inp,
        q,
        "memory",
    )


def _low_precision_rec(plan: Plan, evaluate: Evaluate) -> Recommendation | None:
    """Rule 5: the guide's starting format where it pays: from a high precision (on a GPU that runs it), from a
    block-scaled format below ~14B (faster or smaller weight copies), or at ~14B+ from a block-scaled format at
    its peak (faster; the other keeps its finer scaling)."""
    inp, record, large = plan.input, get_precision(plan.input.precision), _large(plan)
    low = GUIDE_DEFAULT_LOW_PRECISION
    from_high = not record.quantized and supports_precision(plan.resolved.gpu, low)
    if not (from_high or record.block_scaled) or (
        large and not from_high and record.dense_peak != get_precision(low).dense_peak
    ):
        return None
    p = _try(evaluate, inp.replace(precision=low))
    if p is None or not p.fits:
        return None
    size, faster = _size(plan), _pct(p.tokens_per_second, plan.tokens_per_second)
    if from_high:
        rule = (
            f"at ~14B+ {low} is the balanced default"
            if large
            else f"below ~14B {'/'.join(QUANTIZED_PRECISIONS)} give similar, modest gains; "
            f"start with {low} (lowest overhead)"
        )
        return _rec(
            f"Try precision {low}",
            f"{size}: {rule}; {faster} tokens/s, "
            f"{p.memory_gb.total:.1f} GB per GPU; validate the loss curve against {inp.precision} first",
            inp,
            p,
            "precision",
        )
    if not large and (
        p.tokens_per_second >= plan.tokens_per_second * (1 + MIN_GAIN / 2)
        or p.memory_gb.total <= plan.memory_gb.total * 0.95
    ):
        reason = (
            f"{size}: below ~14B the low-precision formats give similar gains and {low} has the lowest "
            f"overhead: {faster} tokens/s, "
            f"{plan.memory_gb.total:.1f} -> {p.memory_gb.total:.1f} GB per GPU (smaller quantized weight copies)"
        )
    elif large and p.tokens_per_second > plan.tokens_per_second * (1 + MIN_GAIN):
        reason = (
            f"{size}: {low} is the balanced default ({faster} tokens/s); keep {inp.precision} if convergence "
            "stability matters more (its finer scaling holds accuracy better)"
        )
    else:
        return None
    return _rec(f"Consider precision {low}", reason, inp, p, "precision")


def _checkpoint_recs(plan: Plan, evaluate: Evaluate) -> list[Recommendation]:
    """Rule 6 (:mod:`planner.checkpoint`): save interval checkpoints synchronously when an asynchronous save's
    staging does not fit the host's memory; warn when the save at a stop would outlast SageMaker's grace period
    after SIGTERM (the job ends first and the run resumes from the checkpoint before)."""
    from planner.checkpoint import HOST_STAGING_FRACTION

    ck, inp = plan.throughput.checkpoint, plan.input
    if ck is None:
        return []
    recs = []
    gb = 1e9
    if not ck.staging_fits and ck.host_memory_bytes is not None:
        after = _try(evaluate, inp.replace(checkpoint_save="sync"))
        recs.append(
            _rec(
                "Save interval checkpoints synchronously (checkpoint_save=sync)",
                f"an asynchronous save stages each host's {ck.staging_per_host_bytes / gb:,.0f} GB of model and "
                f"optimizer state in host memory, more than {HOST_STAGING_FRACTION:.0%} of its "
                f"{ck.host_memory_bytes / gb:,.0f} GB; a synchronous save stages nothing and blocks "
                f"{ck.sync_save_s:,.1f} s every {ck.interval} steps instead of {ck.blocking_s:,.1f} s",
                inp,
                after,
                "checkpoint",
            )
        )
    if not ck.stop_fits:
        recs.append(
            _rec(
                f"The save at a stop would outlast SageMaker's {ck.stop_limit_s:.0f} s",
                "after SIGTERM the trainer finishes its step, "
                + ("waits for the asynchronous write in flight, " if ck.save == "async" else "")
                + f"then saves {ck.written_per_host_bytes / gb:,.0f} GB per host: {ck.stop_s:,.0f} s in all; "
                f"SageMaker ends the job {ck.stop_limit_s:.0f} s after SIGTERM, so the run would resume from the "
                "checkpoint before. More instances spread the checkpoint (each host writes size / hosts); "
                "a capacity block's end is planned with the trainer's own margin and is not affected",
                inp,
                None,
                "checkpoint",
            )
        )
    return recs


def _precision_advice(plan: Plan) -> Recommendation | None:
    """Rule 5's advice without a change: a validated recipe for the formats of fewer bytes than the guide's,
    loss curves validated across formats for the others."""
    inp, record = plan.input, get_precision(plan.input.precision)
    low = GUIDE_DEFAULT_LOW_PRECISION
    if not record.quantized:
        return None
    if (record.quantized_bytes or 0.0) < (get_precision(low).quantized_bytes or 0.0):
        return _rec(
            f"{inp.precision}: use a validated recipe",
            f"{inp.precision} pays off for memory-bound large models and needs a validated framework recipe "
            f"(Megatron Core); track loss curves against {low}/{record.high_precision} before production",
            inp,
            None,
            "advice",
        )
    return _rec(
        "Validate convergence",
        f"track loss curves across formats (e.g. against {record.high_precision}) before production; if "
        f"{record.high_precision} already meets "
        "the throughput need, low precision may not be worth its complexity",
        inp,
        None,
        "advice",
    )


def estimate(plan_input: PlanInput) -> Plan:
    """Memory, throughput, cost and recommendations for ``plan_input``.

    Raises:
        PlanInputError: (a ``ValueError``) naming the field and allowed values.
    """
    plan = evaluate(plan_input)
    return dataclasses.replace(plan, recommendations=recommend(plan, Evaluator(plan)))


def auto_tune(plan_input: PlanInput) -> tuple[PlanInput, list[str]] | None:
    """The configuration the recommendations lead to that fits in memory.

    Returns ``(plan_input, [])`` when it already fits (``status == "fits"``); otherwise -- out of memory or
    ``at-risk`` -- the fastest fitting configuration reachable by recomputing more blocks (``selective:N``,
    then ``full`` activation checkpointing), lowering ``batch_size`` (raising ``gradient_accumulation_steps``
    so the tokens per optimizer step do not shrink, unless only fewer tokens per step fit), accumulating
    sharded gradients (``gradient_sync=every_micro_batch``), ``quantized_model_init`` (fp8 and mxfp8, the precisions the
    trainer stores quantized), ``reshard_after_forward=True`` and full sharding -- never changing the model,
    sequence length, precision or instance count -- with one human description per changed field; ``None``
    if nothing fits.

    Raises:
        PlanInputError: the input itself is invalid.
    """
    plan = evaluate(plan_input)
    if plan.fits:
        return plan.input, []
    best = fitting_candidates(plan, Evaluator(plan))
    if not best:
        return None
    return best[0].input, describe_changes(plan.input, best[0].input)


__all__ = [
    "COMM_BOUND_FRACTION",
    "LARGE_MODEL_PARAMS",
    "MIN_GAIN",
    "SELECTIVE_INTERVALS",
    "auto_tune",
    "best_batch",
    "checkpointing_modes",
    "describe_changes",
    "estimate",
    "fitting_candidates",
    "largest_fitting_batch",
    "recommend",
]
