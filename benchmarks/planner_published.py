"""The planner against independent published FSDP measurements: published vs predicted, and the error.

    python benchmarks/planner_published.py            # Markdown tables
    python benchmarks/planner_published.py --json     # the rows as JSON

The points, each with its source (repository, path, commit, where in the file), are in
``benchmarks/published_points.json``: the guide's own measurements (8x B200, TransformerEngine's FSDP
example; the planner's calibration points), pytorch/torchtitan's (Llama 3.1 8B, FSDP2, H100) and
mosaicml/llm-foundry's (MPT 1B-70B, FSDP, H100 80 GB). Each is planned with :func:`planner.plan.evaluate`
as its configuration says, and compared quantity by quantity:

* ``memory_gb_peak_allocated`` (``torch.cuda.max_memory_allocated``) against ``memory_gb.total``;
* ``memory_gib_max_reserved`` (torchtitan's logged ``max_reserved_gib``) against what the caching allocator
  reserves, ``total + fragmentation_margin``, in GiB;
* ``tokens_per_second_per_gpu`` against ``tokens_per_second_per_gpu``;
* ``ran_on_hbm_gb`` (the run completed on GPUs of that memory) against the verdict: it must not be
  ``out-of-memory``.

Where the point's framework computes something the trainer computes otherwise, the difference is modelled
here, named by the point: ``"loss": "unchunked-fp32"`` -- torchtitan's loss (train.py at 9dec370,
``cross_entropy(pred.flatten(0, 1).float(), ...)``) materialises every logit: at its peak, the
log-softmax backward, the saved fp32 log-softmax output, its incoming fp32 gradient and the fp32 gradient
it produces are live, :data:`UNCHUNKED_LOSS_BYTES_PER_LOGIT` = 12 bytes per logit for the whole micro-batch
(the bf16 logits are deleted before backward), where the trainer's chunked loss holds 16 bytes per logit of
one 2^26-logit chunk. The loss moment of the plan is recomputed with it. Its reserved memory adds the block
of the deleted bf16 logits (:data:`UNCHUNKED_LOSS_CACHED_BYTES_PER_LOGIT`): PyTorch's caching allocator keeps
a freed block reserved and cannot grow it into the larger fp32 gradients the backward then asks for, so it
stays reserved, unused, at the peak.

Targets (issue 14): memory within 15% and never more than 5% below (a test holds this,
``tests/planner/test_published.py``: it is a property of the model, not a timing); tokens/s within 25% on
Hopper. Blackwell points are reported as they are. Points the planner cannot model (a mode the trainer does
not offer) are listed with the reason. Exit status 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository root on the path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from planner import PlanInput
from planner.memory import (
    AT_RISK_FRACTION,
    FRAGMENTATION_FRACTION,
    GB,
    GIB,
    OUT_OF_MEMORY,
)
from planner.plan import Plan, evaluate
from planner.throughput import estimate_throughput

POINTS = Path(__file__).with_name("published_points.json")
MEMORY_WITHIN = 0.15
"""Memory target: within 15% of the published figure..."""
MEMORY_NEVER_BELOW = AT_RISK_FRACTION
"""... and never more than 5% below it (an under-prediction is a wrong "fits"): the planner's at-risk margin, which
is this bound (a requirement closer to usable memory than the model's error is ``at-risk``, not ``fits``)."""
TOKENS_WITHIN = 0.25
"""Throughput target on Hopper: within 25%."""
UNCHUNKED_LOSS_BYTES_PER_LOGIT = 12.0
"""Bytes per logit live at the peak of an unchunked fp32 cross-entropy (torchtitan at 9dec370, see the module
docstring): saved fp32 log-softmax output 4, its fp32 incoming gradient 4, the fp32 gradient it produces 4."""
UNCHUNKED_LOSS_CACHED_BYTES_PER_LOGIT = 2.0
"""Bytes per logit reserved but not allocated at that peak: the bf16 logits' block, freed before backward and
too small for the 4-byte-per-logit gradients allocated after it (module docstring)."""
_ACTIVATION_LIKE = ("activations", "logits_and_loss", "transient")


@dataclass(frozen=True)
class Row:
    """One comparison.

    Attributes:
        point: the point's id.
        quantity: what is compared (a ``published`` key of the point).
        published: the published figure (for ``ran_on_hbm_gb``: the GPU memory it ran on).
        predicted: the planner's figure in the same unit (for ``ran_on_hbm_gb``: the predicted requirement, GB).
        error: ``predicted / published - 1`` (``None`` for ``ran_on_hbm_gb``).
        status: the plan's memory verdict.
        gpu: the planned GPU (``H100``, ``B200``, ...).
        architecture: ``hopper`` or ``blackwell`` (from the GPU's compute capability).
        calibration: the planner was fitted or checked on this point (the guide's).
        within_target: whether the comparison meets its target (``None``: no target, e.g. Blackwell tokens/s).
        note: how the point differs from what is planned.
    """

    point: str
    quantity: str
    published: float
    predicted: float
    error: float | None
    status: str
    gpu: str
    architecture: str
    calibration: bool
    within_target: bool | None
    note: str


@dataclass(frozen=True)
class Unmodelled:
    """A published point the planner cannot plan, and why."""

    point: str
    published: dict[str, Any]
    reason: str


def load_points(path: Path = POINTS) -> list[dict[str, Any]]:
    """The points of ``published_points.json``."""
    return json.loads(path.read_text(encoding="utf-8"))["points"]


def _architecture(plan: Plan) -> str:
    major = plan.resolved.gpu.compute_capability[0]
    return {9: "hopper", 10: "blackwell", 12: "blackwell"}.get(major, f"sm_{major}x")


def _peak_with_loss(plan: Plan, loss: str | None) -> tuple[float, float]:
    """``(peak allocated GB, reserved beyond it GB)`` of ``plan``, its loss moment recomputed for ``loss``: the
    plan's fragmentation margin at that moment, plus the unchunked loss's cached block when it is the peak."""
    mem = plan.memory_gb
    phases = {name: dict(terms) for name, terms in mem.phase_terms.items()}
    cached = 0.0
    if loss == "unchunked-fp32" and "loss" in phases:
        p, m = plan.input, plan.resolved.model
        logits = m.vocab_size * p.batch_size * p.seq_length
        phases["loss"]["logits_and_loss"] = UNCHUNKED_LOSS_BYTES_PER_LOGIT * logits / GB
        cached = UNCHUNKED_LOSS_CACHED_BYTES_PER_LOGIT * logits / GB
    elif loss is not None:
        raise ValueError(f"unknown loss model {loss!r}")
    totals = {name: sum(terms.values()) for name, terms in phases.items()}
    peak = max(totals, key=lambda name: totals[name])
    fragmentation = FRAGMENTATION_FRACTION * sum(phases[peak][t] for t in _ACTIVATION_LIKE)
    return totals[peak], fragmentation + (cached if peak == "loss" else 0.0)


def compare_point(point: dict[str, Any]) -> list[Row]:
    """The rows of one modelled point (every quantity it publishes).

    Raises:
        platform_spec.errors.FieldError: the point's configuration is not one the planner accepts.
    """
    plan = evaluate(PlanInput(**{"num_layers": None, **point["plan"]}))
    arch = _architecture(plan)
    calibration = bool(point.get("calibration", False))
    note = "; ".join(point.get("differences", []))
    peak, fragmentation = _peak_with_loss(plan, point.get("loss"))
    rows: list[Row] = []
    for quantity, published in point["published"].items():
        error: float | None
        if quantity == "memory_gb_peak_allocated":
            predicted = peak
        elif quantity == "memory_gib_max_reserved":
            predicted = (peak + fragmentation) * GB / GIB
        elif quantity == "tokens_per_second_per_gpu":
            predicted = plan.tokens_per_second_per_gpu
        elif quantity == "ran_on_hbm_gb":
            rows.append(
                Row(
                    point["id"], quantity, float(published), plan.memory_gb.required, None, plan.status,
                    plan.resolved.gpu.name, arch, calibration, plan.status != OUT_OF_MEMORY, note,
                )
            )  # fmt: skip
            continue
        else:
            raise ValueError(f"point {point['id']}: unknown published quantity {quantity!r}")
        error = predicted / published - 1
        if quantity == "tokens_per_second_per_gpu":
            speed_target = arch == "hopper" and point.get("speed_target", True)
            within: bool | None = abs(error) <= TOKENS_WITHIN if speed_target else None
        else:
            within = -MEMORY_NEVER_BELOW <= error <= MEMORY_WITHIN
        rows.append(
            Row(
                point["id"], quantity, float(published), predicted, error, plan.status, plan.resolved.gpu.name, arch,
                calibration, within, note,
            )
        )  # fmt: skip
    return rows


def compare(points: Sequence[dict[str, Any]] | None = None) -> tuple[list[Row], list[Unmodelled]]:
    """Every comparison of ``points`` (default: ``published_points.json``), and the points not modelled."""
    rows: list[Row] = []
    unmodelled: list[Unmodelled] = []
    for point in load_points() if points is None else points:
        if point.get("modelled", True) is False:
            unmodelled.append(Unmodelled(point["id"], dict(point["published"]), point["reason"]))
            continue
        rows.extend(compare_point(point))
    return rows, unmodelled


def _pct(error: float | None) -> str:
    return "—" if error is None else f"{error * 100:+.1f}%"


def _mark(within: bool | None) -> str:
    return {True: "yes", False: "**no**", None: "(no target)"}[within]


def markdown(rows: Sequence[Row], unmodelled: Sequence[Unmodelled]) -> str:
    """The comparison as Markdown tables: memory, tokens/s, "ran on" checks, points not modelled, a summary."""
    out: list[str] = []
    memory = [r for r in rows if r.quantity.startswith("memory_")]
    out.append(
        f"### Memory per GPU (target: within {MEMORY_WITHIN:.0%}, never more than {MEMORY_NEVER_BELOW:.0%} below)\n"
    )
    out.append("| point | GPU | quantity | published | predicted | error | within target | trainer's verdict |")
    out.append("|---|---|---|---:|---:|---:|---|---|")
    for r in memory:
        unit = "GiB reserved" if r.quantity.endswith("reserved") else "GB allocated"
        tag = " (calibration)" if r.calibration else ""
        out.append(
            f"| {r.point}{tag} | {r.gpu} | {unit} | {r.published:.1f} | {r.predicted:.1f} | {_pct(r.error)} | "
            f"{_mark(r.within_target)} | {r.status} |"
        )
    speed = [r for r in rows if r.quantity == "tokens_per_second_per_gpu"]
    out.append(f"\n### Tokens/s per GPU (target on Hopper: within {TOKENS_WITHIN:.0%})\n")
    out.append("| point | GPU | published | predicted | error | within target |")
    out.append("|---|---|---:|---:|---:|---|")
    for r in speed:
        tag = " (calibration)" if r.calibration else ""
        out.append(
            f"| {r.point}{tag} | {r.gpu} | {r.published:,.0f} | {r.predicted:,.0f} | {_pct(r.error)} | "
            f"{_mark(r.within_target)} |"
        )
    hopper = [r for r in speed if r.architecture == "hopper" and r.within_target is not None]
    ran = [r for r in rows if r.quantity == "ran_on_hbm_gb"]
    out.append("\n### Runs that completed: the planner must not call them out of memory\n")
    out.append("| point | ran on | predicted requirement | verdict | ok |")
    out.append("|---|---|---:|---|---|")
    for r in ran:
        out.append(
            f"| {r.point} | {r.published:.0f} GB {r.gpu} | {r.predicted:.1f} GB | {r.status} | {_mark(r.within_target)} |"
        )
    if unmodelled:
        out.append("\n### Not modelled\n")
        out.append("| point | published | why |")
        out.append("|---|---|---|")
        for u in unmodelled:
            figures = ", ".join(f"{k} {v:,}" for k, v in u.published.items())
            out.append(f"| {u.point} | {figures} | {u.reason} |")
    out.append("\n### Summary\n")
    independent = [r for r in memory if not r.calibration]
    out.append(
        f"- memory: {sum(bool(r.within_target) for r in memory)} of {len(memory)} within target "
        f"({len(independent)} independent of the calibration); largest under-prediction "
        f"{_pct(min((r.error or 0.0) for r in memory)) if memory else '—'}"
    )
    if hopper:
        errors = [abs(r.error or 0.0) for r in hopper]
        out.append(
            f"- tokens/s on Hopper: {sum(bool(r.within_target) for r in hopper)} of {len(hopper)} within "
            f"{TOKENS_WITHIN:.0%}; "
            f"median absolute error {statistics.median(errors) * 100:.0f}% (points on GPUs outside the catalogue "
            "have no target)"
        )
    blackwell = [r for r in speed if r.architecture == "blackwell"]
    if blackwell:
        out.append(
            "- tokens/s on Blackwell: "
            + ", ".join(f"{r.point} {_pct(r.error)}" for r in blackwell)
            + " (the guide's own figures, the calibration; no independent Blackwell FSDP measurement was found)"
        )
        out.extend(_guide_disagreement(blackwell, speed))
    out.append(
        f"- runs that completed: {sum(bool(r.within_target) for r in ran)} of {len(ran)} not called out of memory"
    )
    for r in rows:
        if r.note and r.quantity in ("tokens_per_second_per_gpu", "memory_gib_max_reserved"):
            out.append(f"- {r.point}: {r.note}")
    return "\n".join(dict.fromkeys(out)) + "\n"  # a point's note once


def _guide_disagreement(blackwell: Sequence[Row], speed: Sequence[Row]) -> list[str]:
    """Where the guide's Blackwell figures disagree with the others: its batch-1 tokens/s against the steady
    state the planner predicts for it, and against llm-foundry's 1B on the slower H100."""
    lines = []
    points = {p["id"]: p for p in load_points()}
    for r in blackwell:
        point = points[r.point]
        if point["plan"].get("batch_size") != 1:
            continue
        plan = evaluate(PlanInput(**{"num_layers": None, **point["plan"]}))
        steady = estimate_throughput(plan.resolved, first_iteration_s=0.0).tokens_per_second_per_gpu
        h100 = next((x for x in speed if x.point == "llm-foundry-mpt-1b-8k-8gpu"), None)
        other = (
            f"; llm-foundry's MPT-1B at sequence 8192 ran {h100.published:,.0f} tokens/s per GPU on an H100"
            if h100 is not None
            else ""
        )
        lines.append(
            f"- the guide's {r.point} ({r.published:,.0f} tokens/s per GPU) is an average of TransformerEngine's "
            f"example over 5 iterations including the first; at steady state the planner predicts {steady:,.0f}"
            f"{other}: the guide's small-batch figures measure start-up more than Blackwell"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args(argv)
    rows, unmodelled = compare()
    if args.json:
        print(
            json.dumps({"rows": [asdict(r) for r in rows], "not_modelled": [asdict(u) for u in unmodelled]}, indent=2)
        )
    else:
        print(markdown(rows, unmodelled), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
