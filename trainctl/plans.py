"""What ``trainctl plan`` shows: the planner's answer for a configuration, as rich tables or as JSON.

:func:`plan_and_print` estimates a configuration (:func:`planner.estimate`) and prints it;
:func:`render_plan` draws a plan's tables (configuration, memory breakdown and verdict, throughput, cost,
recommendations with before/after) on any console (``make demo`` uses it too);
:func:`guide_default_input` is the guide's default request, what ``trainctl plan`` plans without flags.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import GUIDE_DEFAULT_REQUEST

if TYPE_CHECKING:
    from rich.console import Console

    from planner import Plan, PlanInput


def guide_default_input(instance_type: str = DEFAULT_INSTANCE_TYPE) -> PlanInput:
    """The :class:`planner.PlanInput` of the guide's default request (``GUIDE_DEFAULT_REQUEST``) on one
    ``instance_type`` -- what ``trainctl plan`` plans without flags (for ``make demo``)."""
    from planner import PlanInput

    return PlanInput.from_request(GUIDE_DEFAULT_REQUEST, instance_type=instance_type)


def _num(v: float, digits: int = 1) -> str:
    return f"{v:,.{digits}f}"


def _tps(v: float) -> str:
    return f"{v / 1000:,.1f}K" if v >= 1000 else f"{v:,.0f}"


def render_plan(plan: Plan, console: Console) -> None:
    """Print ``plan`` (a :class:`planner.Plan`) as rich tables on ``console`` (a ``rich.console.Console``):
    configuration, memory breakdown and verdict, throughput, cost, recommendations with before/after."""
    from rich.panel import Panel
    from rich.table import Table

    from planner.memory import BREAKDOWN_TERMS

    p, r, mem, t = plan.input, plan.resolved, plan.memory_gb, plan.throughput
    m = r.model
    params = m.block_params if p.blocks_only else m.num_params
    config = (
        f"[bold]{m.name}[/bold] ({m.num_layers} layers, hidden {m.hidden_size}, {params / 1e9:.2f}B parameters"
        f"{', blocks only' if p.blocks_only else ''})  |  {p.precision}"
        f"{' + quantized weights' if p.quantized_model_init else ''}  |  seq {p.seq_length} x batch {p.batch_size}"
        f"{f' x {p.gradient_accumulation_steps} accumulation' if p.gradient_accumulation_steps > 1 else ''}"
        f"  |  checkpointing {p.activation_checkpointing}\n"
        f"{p.instance_count} x {r.instance.instance_type} = {r.world_size} x {r.gpu.name} ({r.gpu.hbm_gb:g} GB)  |  "
        f"FSDP {p.sharding_strategy} (shard {r.shard_degree}, replicas {r.replicate_degree})"
        f"{'' if p.reshard_after_forward else ', no reshard after forward'}"
    )
    console.print(Panel(config, title="trainctl plan", expand=False))

    mt = Table(title="Memory per GPU (GB)", show_header=True, header_style="bold")
    mt.add_column("term")
    mt.add_column("GB", justify="right")
    for term in BREAKDOWN_TERMS:
        value = mem.terms[term]
        if value > 0:
            mt.add_row(term.replace("_", " "), _num(value, 2))
    mt.add_row("[bold]total (peak allocated)[/bold]", f"[bold]{_num(mem.total, 2)}[/bold]", end_section=True)
    mt.add_row("fragmentation margin (estimate)", _num(mem.fragmentation_margin, 2))
    mt.add_row("CUDA context + NCCL (estimate)", _num(mem.runtime_overhead, 2))
    mt.add_row("required", _num(mem.required, 2))
    mt.add_row(f"usable ({r.gpu.hbm_gb:g} GiB = {mem.capacity:.0f} GB, less 5%)", _num(mem.usable, 2))
    verdict = "[green]fits[/green]" if mem.fits else "[red]OUT OF MEMORY[/red]"
    mt.add_row("verdict", f"{verdict} ({mem.headroom:+.1f} GB)")
    mt.caption = f"peak at: {mem.peak_phase.replace('_', ' ')}"
    console.print(mt)

    tt = Table(title="Throughput", show_header=True, header_style="bold")
    tt.add_column("figure")
    tt.add_column("value", justify="right")
    tt.add_row("step time", f"{t.step_time_s:.3f} s")
    tt.add_row("tokens/s (job)", _num(t.tokens_per_second, 0))
    tt.add_row("tokens/s per GPU", _num(t.tokens_per_second_per_gpu, 0))
    tt.add_row("model TFLOP/s per GPU", _num(t.tflops_per_gpu, 1))
    tt.add_row("MFU", f"{t.mfu:.1f}% of {t.peak_tflops:g} TFLOP/s ({p.precision} dense)")
    tt.add_row("bound by", t.bound)
    tt.add_row("exposed communication", f"{t.comm_fraction * 100:.1f}% of the step ({t.comm.link})")
    if t.compute.recompute:
        tt.add_row("checkpointing recompute", f"+{t.recompute_overhead_pct:.0f}% step time")
    console.print(tt)

    if t.cost is not None:
        ct = Table(title="Cost", show_header=True, header_style="bold")
        ct.add_column("figure")
        ct.add_column("value", justify="right")
        ct.add_row("tokens", f"{t.cost.tokens:.3g}")
        ct.add_row("wall time", f"{t.cost.wall_time_hours:,.1f} h ({t.cost.wall_time_hours / 24:,.1f} days)")
        ct.add_row("instance-hours", _num(t.cost.instance_hours, 1))
        if t.cost.cost is not None:
            ct.add_row("cost", f"${t.cost.cost:,.0f} at ${p.price_per_hour:g}/instance-hour")
        console.print(ct)

    if plan.recommendations:
        rt = Table(title="Recommendations", show_header=True, header_style="bold", show_lines=True)
        rt.add_column("#", justify="right")
        rt.add_column("change")
        rt.add_column("why")
        rt.add_column("before -> after")
        for i, rec in enumerate(plan.recommendations, 1):
            if rec.after is None:
                ba = "-"
            else:
                a = rec.after
                ba = (
                    f"tokens/s {_tps(plan.tokens_per_second)} -> {_tps(a.tokens_per_second)}\n"
                    f"MFU {plan.mfu:.1f}% -> {a.mfu:.1f}%\n"
                    f"memory {plan.memory_gb.total:.1f} -> {a.memory_gb.total:.1f} GB\n"
                    f"{'fits' if plan.fits else 'OOM'} -> {'fits' if a.fits else 'OOM'}"
                )
            rt.add_row(str(i), rec.title, rec.reason, ba)
        console.print(rt)


def plan_and_print(fields: Mapping[str, Any], *, as_json: bool = False, flags: Mapping[str, str] | None = None) -> int:
    """Estimate the configuration ``fields`` (:class:`planner.PlanInput`'s keyword arguments) and print the plan:
    rich tables, or :meth:`planner.Plan.to_dict` as JSON with ``as_json``.

    Args:
        flags: input field -> the command-line flag that sets it, to name the flag in an error.

    Returns:
        0; 2 when a field is refused (one line on stderr naming the flag, the value and what was expected;
        nothing else is printed).
    """
    from planner import PlanInput, estimate

    try:
        plan = estimate(PlanInput(**fields))
    except FieldError as exc:  # PlanInputError and the catalogue's refusals
        flag = (flags or {}).get(exc.field, exc.field)
        detail = f" ({exc.detail})" if exc.detail else ""
        print(
            f"trainctl plan: error: argument {flag}: got {exc.value!r}, expected {exc.expected}{detail}",
            file=sys.stderr,
        )
        return 2
    if as_json:
        print(json.dumps(plan.to_dict(), indent=2))
        return 0
    from rich.console import Console

    render_plan(plan, Console())
    return 0


__all__ = ["guide_default_input", "plan_and_print", "render_plan"]
