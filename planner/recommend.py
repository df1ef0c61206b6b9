"""The guide's tuning rules, applied to a plan.

Rules (from the published guide; digest: ``shared/docs/seed-digest.md``):

1. **Fit first.** Out of memory: turn on activation checkpointing (at ~14B
   parameters and above it is a prerequisite), lower the micro-batch (keeping
   the tokens per optimizer step with gradient accumulation), reshard after
   forward, shard over every GPU; if even that fails, more instances. The
   sequence length is never cut (for long-context work it comes first).
2. **Throughput goal: batch size first.** The largest micro-batch that fits,
   stopping where a doubling gains less than :data:`MIN_GAIN` -- batch size
   matters more than the number format below ~14B.
3. **Whether checkpointing pays.** Its 10-30% recompute against the batch it
   frees: compare the best fitting batch with and without it.
4. **Communication-bound: shard less first.** HSDP (shard within an instance)
   instead of sharding across instances; keep parameters gathered between
   forward and backward (``reshard_after_forward=false``) when memory allows.
5. **Precision by size and hardware.** Below ~14B start with fp8 (lowest
   quantization overhead); at ~14B and above fp8 is the balanced default,
   mxfp8 when convergence stability matters, nvfp4 only on Blackwell and with
   a validated recipe (Megatron Core); validate loss curves across formats.
   Low precision is a throughput optimization, not a memory saving, unless
   weights are stored quantized.

Nothing the trainer refuses is recommended: storing weights quantized
(``quantized_model_init``) is suggested only while
:data:`platform_spec.hyperparameters.QUANTIZED_MODEL_INIT_REFUSAL` is None (the
trainer image's TransformerEngine 2.10 cannot shard quantized weights), and
every candidate goes through :func:`planner.inputs.resolve`, which applies the
trainer's own rules.

Which formats quantize, which are block-scaled and which GPU runs which are the
precision registry's (:mod:`platform_spec.precisions`); the formats the guide
names in its advice (fp8 as the balanced default, mxfp8's stability, nvfp4's
recipe) are named here as the guide names them.

Each recommendation carries the plan after its change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from planner.inputs import PlanInput
from platform_spec.catalogue import supports_precision
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import QUANTIZED_MODEL_INIT_REFUSAL, QUANTIZED_PRECISIONS
from platform_spec.precisions import get_precision

if TYPE_CHECKING:
    from planner.plan import Plan, Recommendation

LARGE_MODEL_PARAMS = 14e9
"""The guide's threshold (~14B parameters) for checkpointing and precision advice."""
MIN_GAIN = 0.05
"""Smallest relative tokens/s gain worth a recommendation (5%)."""
COMM_BOUND_FRACTION = 0.15
"""Exposed communication share of the step above which a plan counts as communication-bound."""
MAX_BATCH = 4096
GUIDE_DEFAULT_LOW_PRECISION = "fp8"
"""The low-precision format the guide starts with (lowest quantization overhead; the balanced default at ~14B+)."""

Evaluate = Callable[[PlanInput], "Plan"]


def _params(plan: Plan) -> int:
    m = plan.resolved.model
    return m.block_params if plan.input.blocks_only else m.num_params


def _try(evaluate: Evaluate, inp: PlanInput) -> Plan | None:
    try:
        return evaluate(inp)
    except FieldError:  # PlanInputError and the catalogue's refusals
        return None


def largest_fitting_batch(inp: PlanInput, evaluate: Evaluate) -> int | None:
    """The largest ``batch_size`` (1..4096) that fits with everything else of ``inp`` unchanged; ``None`` if 1 does not."""
    if not evaluate(inp.replace(batch_size=1)).fits:
        return None
    lo, hi = 1, MAX_BATCH
    if evaluate(inp.replace(batch_size=hi)).fits:
        return hi
    while hi - lo > 1:  # memory grows with the batch: bisect
        mid = (lo + hi) // 2
        if evaluate(inp.replace(batch_size=mid)).fits:
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
    tokens_per_step = inp.batch_size * inp.gradient_accumulation_steps

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


def describe_changes(before: PlanInput, after: PlanInput) -> list[str]:
    """One human sentence per changed field, e.g. ``"batch_size: 16 -> 4"`` with the reason."""
    why = {
        "activation_checkpointing": "recompute each block in backward instead of keeping its activations",
        "batch_size": "smaller micro-batch",
        "gradient_accumulation_steps": "keeps the tokens per optimizer step",
        "quantized_model_init": "store block weights quantized, dropping the high-precision copy",
        "reshard_after_forward": "free gathered parameters after forward",
        "sharding_strategy": "shard parameters and optimizer state over every GPU",
        "instance_count": "more GPUs to shard over",
        "precision": "number format",
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
    that way are fewer tokens per step accepted. Used by :func:`planner.auto_tune`."""
    inp = plan.input
    ckpts = [inp.activation_checkpointing] + (["full"] if inp.activation_checkpointing == "off" else [])
    if _params(plan) >= LARGE_MODEL_PARAMS:
        ckpts = ["full"]  # the guide: a prerequisite at ~14B+
    qmis = [inp.quantized_model_init] + (
        [True] if _quantized_init_available(inp) and not inp.quantized_model_init else []
    )
    reshards = [inp.reshard_after_forward] + ([True] if not inp.reshard_after_forward else [])
    shardings = [inp.sharding_strategy] + (
        ["full"] if inp.sharding_strategy == "hybrid" and inp.instance_count > 1 else []
    )
    tokens_per_step = inp.batch_size * inp.gradient_accumulation_steps
    batches = []
    b = inp.batch_size
    while True:
        batches.append(b)
        if b == 1:
            break
        b = max(1, b // 2)
    found: list[tuple[float, int, Plan]] = []
    # first keep the tokens per optimizer step (accumulate more micro-batches); if nothing fits that
    # way -- accumulation keeps unsharded gradients -- accept fewer tokens per step
    for keep_tokens in (True, False):
        for ck in ckpts:
            for qmi in qmis:
                for rs in reshards:
                    for sh in shardings:
                        for b in batches:
                            gas = inp.gradient_accumulation_steps
                            if keep_tokens:
                                gas = max(gas, math.ceil(tokens_per_step / b))
                            cand = inp.replace(
                                activation_checkpointing=ck,
                                quantized_model_init=qmi,
                                reshard_after_forward=rs,
                                sharding_strategy=sh,
                                batch_size=b,
                                gradient_accumulation_steps=gas,
                            )
                            p = _try(evaluate, cand)
                            if p is not None and p.fits:
                                found.append((p.tokens_per_second, len(_changes(inp, cand)), p))
                                break  # larger batches first: the first that fits is this path's best
        if found:
            break
    if not found:
        return []
    # fastest first, but within 2% of the fastest prefer fewer changed fields
    fastest = max(t[0] for t in found)
    found.sort(key=lambda t: (t[0] < fastest * 0.98, t[1], -t[0]))
    return [p for _, _, p in found]


def _quantized_init_available(inp: PlanInput) -> bool:
    """Whether ``quantized_model_init=true`` is a change the trainer accepts for ``inp`` (fp8 family, and
    :data:`platform_spec.hyperparameters.QUANTIZED_MODEL_INIT_REFUSAL` is None)."""
    return QUANTIZED_MODEL_INIT_REFUSAL is None and inp.precision in QUANTIZED_PRECISIONS


def _rec(title: str, reason: str, before: PlanInput, after: Plan | None, kind: str) -> Recommendation:
    from planner.plan import Recommendation

    changes = {} if after is None else _changes(before, after.input)
    return Recommendation(title=title, reason=reason, changes=changes, after=after, kind=kind)


def _pct(new: float, old: float) -> str:
    return f"{(new / old - 1) * 100:+.0f}%" if old > 0 else "n/a"


def recommend(plan: Plan, evaluate: Evaluate) -> list[Recommendation]:
    """The guide's rules applied to ``plan`` (module docstring), most important first."""
    recs: list[Recommendation] = []
    inp = plan.input
    large = _params(plan) >= LARGE_MODEL_PARAMS
    size = f"{_params(plan) / 1e9:.1f}B parameters"

    if not plan.fits:
        mem = plan.memory_gb
        candidates = fitting_candidates(plan, evaluate)
        if candidates:
            best = candidates[0]
            recs.append(
                _rec(
                    "Make it fit: " + ", ".join(f"{k}={_fmt(v)}" for k, v in _changes(inp, best.input).items()),
                    f"needs {mem.required:.1f} GB per GPU of {mem.usable:.1f} GB usable; "
                    + ("at ~14B+ parameters activation checkpointing is a prerequisite; " if large else "")
                    + "the fastest fitting configuration that keeps the model, sequence length, precision and "
                    "instance count"
                    + (
                        ""
                        if best.input.batch_size * best.input.gradient_accumulation_steps
                        >= inp.batch_size * inp.gradient_accumulation_steps
                        else " (fewer tokens per optimizer step: gradient accumulation would keep unsharded "
                        "gradients that do not fit)"
                    ),
                    inp,
                    best,
                    "fit",
                )
            )
            if best.input.quantized_model_init and not inp.quantized_model_init:
                plain = next((c for c in candidates if not c.input.quantized_model_init), None)
                if plain is not None:
                    recs.append(
                        _rec(
                            "Or, without quantized weights: "
                            + ", ".join(f"{k}={_fmt(v)}" for k, v in _changes(inp, plain.input).items()),
                            "quantized_model_init needs an optimizer that supports quantized parameters; this is the "
                            f"fastest fit without it ({_pct(plain.tokens_per_second, best.tokens_per_second)} tokens/s)",
                            inp,
                            plain,
                            "fit",
                        )
                    )
            # what to do next, on top of the fitting configuration (changes relative to the request)
            for follow in recommend(best, evaluate):
                if follow.after is None:
                    recs.append(follow)
                    continue
                recs.append(_rec("Then: " + follow.title, follow.reason, inp, follow.after, follow.kind))
            return recs
        # more instances (full sharding divides parameters and optimizer state)
        base = inp.replace(
            activation_checkpointing="full", batch_size=1, sharding_strategy="full", reshard_after_forward=True
        )
        for count in (2, 4, 8, 16, 32, 64, 128, 256):
            if count <= inp.instance_count:
                continue
            p = _try(evaluate, base.replace(instance_count=count))
            if p is not None and p.fits:
                recs.append(
                    _rec(
                        f"Use {count} instances",
                        f"does not fit on {inp.instance_count} x {inp.instance_type} even with activation "
                        f"checkpointing and batch 1 ({mem.required:.1f} GB needed of {mem.usable:.1f} GB); "
                        "sharding over more GPUs divides parameters, gradients and optimizer state",
                        inp,
                        p,
                        "fit",
                    )
                )
                break
        else:
            recs.append(
                _rec(
                    "Nothing fits on this hardware",
                    f"{mem.required:.1f} GB needed of {mem.usable:.1f} GB per GPU; choose a smaller model "
                    "or a GPU with more memory",
                    inp,
                    None,
                    "fit",
                )
            )
        return recs

    # 2. batch size first
    accumulating = inp.gradient_accumulation_steps > 1
    cur_ckpt_best = best_batch(inp, evaluate, start=inp.batch_size, keep_tokens=accumulating)
    if cur_ckpt_best is not None and cur_ckpt_best.input.batch_size != inp.batch_size:
        gain = cur_ckpt_best.tokens_per_second / plan.tokens_per_second - 1
        if gain >= MIN_GAIN:
            same_tokens = (
                cur_ckpt_best.input.batch_size * cur_ckpt_best.input.gradient_accumulation_steps
                == inp.batch_size * inp.gradient_accumulation_steps
            )
            recs.append(
                _rec(
                    f"Raise batch_size to {cur_ckpt_best.input.batch_size}",
                    f"throughput goal: tune the batch first; {_pct(cur_ckpt_best.tokens_per_second, plan.tokens_per_second)} "
                    f"tokens/s, {cur_ckpt_best.memory_gb.total:.1f} GB per GPU "
                    + (
                        "(fewer accumulation steps keep the tokens per optimizer step)"
                        if same_tokens
                        else "(more tokens per optimizer step: revisit the learning rate)"
                    ),
                    inp,
                    cur_ckpt_best,
                    "throughput",
                )
            )

    # 3. whether checkpointing pays
    other = "full" if inp.activation_checkpointing == "off" else "off"
    alt = best_batch(inp.replace(activation_checkpointing=other), evaluate)
    mine = cur_ckpt_best or plan
    turning_off_large = large and other == "off"  # the guide: a prerequisite at ~14B+, keep it
    if alt is not None and not turning_off_large and alt.tokens_per_second > mine.tokens_per_second * (1 + MIN_GAIN):
        if other == "full":
            title = f"Turn on activation checkpointing and raise batch_size to {alt.input.batch_size}"
            reason = (
                f"recompute costs {alt.throughput.recompute_overhead_pct:.0f}% of the step but frees memory for "
                f"batch {alt.input.batch_size}: {_pct(alt.tokens_per_second, mine.tokens_per_second)} tokens/s "
                f"over the best batch without it ({mine.input.batch_size})"
            )
        else:
            title = f"Turn off activation checkpointing (batch_size {alt.input.batch_size})"
            reason = (
                f"below ~14B parameters checkpointing is usually unnecessary; without its recompute batch "
                f"{alt.input.batch_size} runs {_pct(alt.tokens_per_second, mine.tokens_per_second)} tokens/s "
                f"faster than the best batch with it ({mine.input.batch_size})"
            )
        recs.append(_rec(title, reason, inp, alt, "checkpointing"))
    elif large and inp.activation_checkpointing == "off":
        headroom = plan.memory_gb.headroom / plan.memory_gb.usable
        if headroom < 0.15:
            ck = _try(evaluate, inp.replace(activation_checkpointing="full"))
            recs.append(
                _rec(
                    "Consider activation checkpointing",
                    f"{size}: at ~14B+ most configurations run out of memory without it; this one leaves "
                    f"{plan.memory_gb.headroom:.1f} GB headroom",
                    inp,
                    ck,
                    "checkpointing",
                )
            )

    # 4. communication-bound: shard less
    if plan.throughput.comm_fraction > COMM_BOUND_FRACTION:
        options = []
        if inp.sharding_strategy == "full" and inp.instance_count > 1:
            options.append(inp.replace(sharding_strategy="hybrid"))
        if inp.reshard_after_forward:
            options.append(inp.replace(reshard_after_forward=False))
        best_opt = None
        for o in options:
            p = _try(evaluate, o)
            if p is not None and p.fits and (best_opt is None or p.tokens_per_second > best_opt.tokens_per_second):
                best_opt = p
        if best_opt is not None and best_opt.tokens_per_second > plan.tokens_per_second * (1 + MIN_GAIN):
            what = ", ".join(f"{k}={_fmt(v)}" for k, v in _changes(inp, best_opt.input).items())
            recs.append(
                _rec(
                    f"Shard less: {what}",
                    f"communication-bound: {plan.throughput.comm_fraction * 100:.0f}% of the step is exposed FSDP "
                    f"communication ({plan.throughput.comm.link}); simplify sharding first: "
                    f"{_pct(best_opt.tokens_per_second, plan.tokens_per_second)} tokens/s",
                    inp,
                    best_opt,
                    "communication",
                )
            )

    # quantized weights when memory is the constraint (only where the trainer can store them)
    if _quantized_init_available(inp) and not inp.quantized_model_init:
        q = _try(evaluate, inp.replace(quantized_model_init=True))
        if q is not None and plan.memory_gb.headroom / plan.memory_gb.usable < 0.25:
            recs.append(
                _rec(
                    "Store weights quantized (quantized_model_init)",
                    f"low precision uses more memory than bf16 by default (TransformerEngine keeps high-precision "
                    f"weights plus quantized copies: {plan.memory_gb.quantized_weight_copies:.1f} GB here); storing "
                    f"them quantized brings {plan.memory_gb.total:.1f} -> {q.memory_gb.total:.1f} GB per GPU, "
                    "if your optimizer supports it",
                    inp,
                    q,
                    "memory",
                )
            )

    return recs + _precision_recs(plan, evaluate, large, size)


def _precision_recs(plan: Plan, evaluate: Evaluate, large: bool, size: str) -> list[Recommendation]:
    inp = plan.input
    gpu = plan.resolved.gpu
    record = get_precision(inp.precision)
    low = GUIDE_DEFAULT_LOW_PRECISION
    recs: list[Recommendation] = []
    if not record.quantized and supports_precision(gpu, low):
        p = _try(evaluate, inp.replace(precision=low))
        if p is not None and p.fits:
            rule = (
                f"at ~14B+ {low} is the balanced default"
                if large
                else f"below ~14B {'/'.join(QUANTIZED_PRECISIONS)} give similar, modest gains; "
                f"start with {low} (lowest overhead)"
            )
            recs.append(
                _rec(
                    f"Try precision {low}",
                    f"{size}: {rule}; {_pct(p.tokens_per_second, plan.tokens_per_second)} tokens/s, "
                    f"{p.memory_gb.total:.1f} GB per GPU; validate the loss curve against {inp.precision} first",
                    inp,
                    p,
                    "precision",
                )
            )
    elif record.block_scaled and not large:
        p = _try(evaluate, inp.replace(precision=low))
        if (
            p is not None
            and p.fits
            and (
                p.tokens_per_second >= plan.tokens_per_second * (1 + MIN_GAIN / 2)
                or p.memory_gb.total <= plan.memory_gb.total * 0.95
            )
        ):
            recs.append(
                _rec(
                    f"Consider precision {low}",
                    f"{size}: below ~14B the low-precision formats give similar gains and {low} has the lowest "
                    f"overhead: {_pct(p.tokens_per_second, plan.tokens_per_second)} tokens/s, "
                    f"{plan.memory_gb.total:.1f} -> {p.memory_gb.total:.1f} GB per GPU (smaller quantized weight copies)",
                    inp,
                    p,
                    "precision",
                )
            )
    elif inp.precision == "mxfp8" and large:
        p = _try(evaluate, inp.replace(precision=low))
        if p is not None and p.fits and p.tokens_per_second > plan.tokens_per_second * (1 + MIN_GAIN):
            recs.append(
                _rec(
                    f"Consider precision {low}",
                    f"{size}: {low} is the balanced default ({_pct(p.tokens_per_second, plan.tokens_per_second)} tokens/s); "
                    "keep mxfp8 if convergence stability matters more (its finer scaling holds accuracy better)",
                    inp,
                    p,
                    "precision",
                )
            )
    if inp.precision == "nvfp4":
        recs.append(
            _rec(
                "nvfp4: use a validated recipe",
                "nvfp4 pays off for memory-bound large models and needs a validated framework recipe "
                "(Megatron Core); track loss curves against fp8/bf16 before production",
                inp,
                None,
                "advice",
            )
        )
    elif record.quantized:
        recs.append(
            _rec(
                "Validate convergence",
                "track loss curves across formats (e.g. against bf16) before production; if bf16 already meets "
                "the throughput need, low precision may not be worth its complexity",
                inp,
                None,
                "advice",
            )
        )
    return recs


__all__ = [
    "COMM_BOUND_FRACTION",
    "LARGE_MODEL_PARAMS",
    "MIN_GAIN",
    "best_batch",
    "describe_changes",
    "fitting_candidates",
    "largest_fitting_batch",
    "recommend",
]
