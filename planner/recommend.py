"""The guide's tuning rules, applied to a plan.

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

Nothing the trainer refuses is recommended: storing weights quantized
(``quantized_model_init``) is suggested only while
:data:`platform_spec.hyperparameters.QUANTIZED_MODEL_INIT_REFUSAL` is None (the
trainer image's TransformerEngine 2.10 cannot shard quantized weights), and
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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from planner.inputs import PlanInput
from planner.memory import AT_RISK_FRACTION, OUT_OF_MEMORY
from platform_spec.catalogue import supports_precision
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import QUANTIZED_MODEL_INIT_REFUSAL, QUANTIZED_PRECISIONS
from platform_spec.precisions import get_precision
from platform_spec.training_modes import DEFAULT_GRADIENT_SYNC
from platform_spec.training_modes import activation_checkpointing as parse_activation_checkpointing

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
SELECTIVE_INTERVALS: tuple[int, ...] = (8, 4, 3, 2)
"""The ``selective:N`` modes the recommendations weigh between ``off`` and ``full``: every 8th, 4th, 3rd and
2nd block (1/8 to 1/2 of the blocks recompute; torchtitan's block-level selective checkpointing takes any N)."""

Evaluate = Callable[[PlanInput], "Plan"]
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
    layers = plan.resolved.model.num_layers
    current = _recomputed(inp.activation_checkpointing, layers)
    # the current mode and every mode that recomputes more blocks (least recompute first)
    ckpts = [inp.activation_checkpointing] + [
        m for m in checkpointing_modes(layers) if _recomputed(m, layers) > current
    ]
    if _params(plan) >= LARGE_MODEL_PARAMS:
        ckpts = [m for m in ckpts if m != "off"]  # the guide: a prerequisite at ~14B+
    syncs = [inp.gradient_sync] + ([DEFAULT_GRADIENT_SYNC] if inp.gradient_sync != DEFAULT_GRADIENT_SYNC else [])
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
    # micro-batches that keep the sequences per optimizer step exactly: the divisors of it, up to the batch
    # (batch 7 -> 3 with 3 micro-batches would train 9 per step: another run, not the same one in less memory)
    dividing = [d for d in range(inp.batch_size, 0, -1) if tokens_per_step % d == 0]
    found: list[tuple[float, int, Plan]] = []
    # first keep the tokens per optimizer step (accumulate more micro-batches); if nothing fits that
    # way -- the sharded gradients of accumulation still take memory -- accept fewer tokens per step
    for keep_tokens in (True, False):
        for ck in ckpts:
            for sync in syncs:
                for qmi in qmis:
                    for rs in reshards:
                        for sh in shardings:
                            for b in dividing if keep_tokens else batches:
                                gas = inp.gradient_accumulation_steps
                                if keep_tokens:
                                    gas = tokens_per_step // b
                                cand = inp.replace(
                                    activation_checkpointing=ck,
                                    gradient_sync=sync,
                                    quantized_model_init=qmi,
                                    reshard_after_forward=rs,
                                    sharding_strategy=sh,
                                    batch_size=b,
                                    gradient_accumulation_steps=gas,
                                )
                                p = _try_fitting(evaluate, cand)
                                if p is not None:
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
        need = (
            f"needs {mem.required:.1f} GB per GPU of {mem.usable:.1f} GB usable"
            if plan.status == OUT_OF_MEMORY
            else f"at risk: needs {mem.required:.1f} GB per GPU of {mem.usable:.1f} GB usable, within the model's "
            f"{AT_RISK_FRACTION:.0%} error of the limit"
        )
        candidates = fitting_candidates(plan, evaluate)
        if candidates:
            best = candidates[0]
            recs.append(
                _rec(
                    "Make it fit: " + ", ".join(f"{k}={_fmt(v)}" for k, v in _changes(inp, best.input).items()),
                    f"{need}; "
                    + ("at ~14B+ parameters activation checkpointing is a prerequisite; " if large else "")
                    + "the fastest fitting configuration that keeps the model, sequence length, precision and "
                    "instance count"
                    + (
                        ""
                        if best.input.batch_size * best.input.gradient_accumulation_steps
                        >= inp.batch_size * inp.gradient_accumulation_steps
                        else " (fewer tokens per optimizer step: even the sharded gradients of accumulation and "
                        "one sequence per micro-batch do not fit otherwise)"
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
            activation_checkpointing="full",
            batch_size=1,
            sharding_strategy="full",
            reshard_after_forward=True,
            gradient_sync=DEFAULT_GRADIENT_SYNC,
        )
        for count in (2, 4, 8, 16, 32, 64, 128, 256):
            if count <= inp.instance_count:
                continue
            p = _try_fitting(evaluate, base.replace(instance_count=count))
            if p is not None:
                # the title names every change the figures include (checkpointing, batch ...), not the count only
                also = {k: v for k, v in _changes(inp, p.input).items() if k != "instance_count"}
                recs.append(
                    _rec(
                        f"Use {count} instances" + "".join(f", {k}={_fmt(v)}" for k, v in also.items()),
                        f"does not fit on {inp.instance_count} x {inp.instance_type} even with activation "
                        f"checkpointing and batch 1 ({need}); "
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
                    f"{need}; choose a smaller model or a GPU with more memory",
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

    # 3. whether checkpointing pays: the best fitting batch of every mode between off and full
    layers = plan.resolved.model.num_layers
    mine = cur_ckpt_best or plan
    alt = None
    for mode in checkpointing_modes(layers):
        if mode == inp.activation_checkpointing or (large and mode == "off"):  # the guide: a prerequisite at ~14B+
            continue
        candidate = best_batch(inp.replace(activation_checkpointing=mode), evaluate)
        if candidate is not None and (alt is None or candidate.tokens_per_second > alt.tokens_per_second):
            alt = candidate
    if alt is not None and alt.tokens_per_second > mine.tokens_per_second * (1 + MIN_GAIN):
        mode = alt.input.activation_checkpointing
        recomputing = _recomputed(mode, layers)
        faster = _pct(alt.tokens_per_second, mine.tokens_per_second)
        if recomputing > _recomputed(inp.activation_checkpointing, layers):
            what = "Turn on activation checkpointing" if mode == "full" else f"Checkpoint every {mode[10:]}th block"
            if inp.activation_checkpointing != "off":
                what = f"Recompute more blocks ({mode})"
            title = f"{what} and raise batch_size to {alt.input.batch_size}"
            reason = (
                f"{mode} recomputes {recomputing} of {layers} blocks: it costs "
                f"{alt.throughput.recompute_overhead_pct:.0f}% of the step but frees memory for batch "
                f"{alt.input.batch_size}: {faster} tokens/s over the best batch with {inp.activation_checkpointing} "
                f"({mine.input.batch_size})"
            )
        elif mode == "off":
            title = f"Turn off activation checkpointing (batch_size {alt.input.batch_size})"
            reason = (
                f"below ~14B parameters checkpointing is usually unnecessary; without its recompute batch "
                f"{alt.input.batch_size} runs {faster} tokens/s faster than the best batch with it "
                f"({mine.input.batch_size})"
            )
        else:
            title = f"Recompute fewer blocks ({mode}, batch_size {alt.input.batch_size})"
            reason = (
                f"{mode} recomputes {recomputing} of {layers} blocks and still fits batch {alt.input.batch_size}: "
                f"{faster} tokens/s over the best batch with {inp.activation_checkpointing} ({mine.input.batch_size})"
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

    # 4. communication-bound: shard less (and, accumulating, reduce-scatter once per step)
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

    # accumulating: reduce-scatter once per step when the unsharded gradients fit with the margin to spare
    if inp.gradient_accumulation_steps > 1 and inp.gradient_sync != "last_micro_batch":
        once = _try(evaluate, inp.replace(gradient_sync="last_micro_batch"))
        if once is not None and once.fits and once.tokens_per_second > plan.tokens_per_second * (1 + MIN_GAIN):
            t = plan.throughput
            recs.append(
                _rec(
                    "Reduce-scatter gradients once per step (gradient_sync=last_micro_batch)",
                    f"{t.gradient_reductions} reduce-scatters per step of {t.micro_batches} micro-batches become 1 "
                    f"({t.comm.link}): {_pct(once.tokens_per_second, plan.tokens_per_second)} tokens/s; the unsharded "
                    f"fp32 gradients kept between micro-batches raise the requirement {plan.memory_gb.required:.1f} "
                    f"-> {once.memory_gb.required:.1f} GB per GPU, which still fits with the at-risk margin to spare",
                    inp,
                    once,
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
                    f"low precision uses more memory than {get_precision(inp.precision).high_precision} by default "
                    "(TransformerEngine keeps high-precision "
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
    guide = get_precision(low)
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
    elif record.block_scaled and record.dense_peak == guide.dense_peak and large:
        p = _try(evaluate, inp.replace(precision=low))
        if p is not None and p.fits and p.tokens_per_second > plan.tokens_per_second * (1 + MIN_GAIN):
            recs.append(
                _rec(
                    f"Consider precision {low}",
                    f"{size}: {low} is the balanced default ({_pct(p.tokens_per_second, plan.tokens_per_second)} tokens/s); "
                    f"keep {inp.precision} if convergence stability matters more (its finer scaling holds accuracy "
                    "better)",
                    inp,
                    p,
                    "precision",
                )
            )
    if record.quantized and (record.quantized_bytes or 0.0) < (guide.quantized_bytes or 0.0):
        recs.append(
            _rec(
                f"{inp.precision}: use a validated recipe",
                f"{inp.precision} pays off for memory-bound large models and needs a validated framework recipe "
                f"(Megatron Core); track loss curves against {low}/{record.high_precision} before production",
                inp,
                None,
                "advice",
            )
        )
    elif record.quantized:
        recs.append(
            _rec(
                "Validate convergence",
                f"track loss curves across formats (e.g. against {record.high_precision}) before production; if "
                f"{record.high_precision} already meets "
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
    "SELECTIVE_INTERVALS",
    "best_batch",
    "checkpointing_modes",
    "describe_changes",
    "fitting_candidates",
    "largest_fitting_batch",
    "recommend",
]
