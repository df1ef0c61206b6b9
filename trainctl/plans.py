"""What ``trainctl plan`` shows: the planner's answer for a configuration, as tables or as JSON.

:func:`plan_blocks` is what a plan's tables show (configuration, memory breakdown and verdict, throughput,
cost, recommendations with before/after), the layout's one home, as :mod:`trainctl.tables` blocks;
:func:`plan_and_print` estimates a configuration (:func:`planner.estimate`) and prints them (with rich,
:func:`trainctl.tables.print_blocks`) or the JSON;
:func:`render_plan` prints them on a given rich console (``make demo``);
:func:`guide_default_input` is the guide's default request, what ``trainctl plan`` plans without flags.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import GUIDE_DEFAULT_REQUEST, SHAPE_HYPERPARAMETERS
from platform_spec.models import format_count
from trainctl.tables import Column, Panel, Table, print_blocks

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


NOT_RUN = "—"
"""What a speed figure of a plan predicted out of memory shows (it would not run)."""

_VERDICT = {
    "fits": "[green]fits[/green]",
    "at-risk": "[yellow]AT RISK[/yellow]",
    "out-of-memory": "[red]OUT OF MEMORY[/red]",
}
"""The memory verdict (:data:`planner.memory.MEMORY_STATUSES`) as the tables show it."""


def _verdict(status: str, *, plain: bool = False) -> str:
    if plain:
        return {"fits": "fits", "at-risk": "at-risk", "out-of-memory": "OOM"}.get(status, status)
    return _VERDICT.get(status, status)


def render_plan(plan: Plan, console: Console) -> None:
    """Print ``plan`` (a :class:`planner.Plan`) as rich tables on ``console`` (a ``rich.console.Console``):
    :func:`plan_blocks`, one ``print`` each."""
    for block in plan_blocks(plan):
        console.print(block.rich())


def _overheads(plan: Plan) -> list[tuple[str, str]]:
    """The throughput table's rows of what a step or the run spends besides the micro-batches' work, where
    there is any: activation checkpointing's recompute, the validation loss's evaluations, gradient accumulation's
    reduce-scatters."""
    p, t = plan.input, plan.throughput
    rows = []
    if t.compute.recompute:
        rows.append(("checkpointing recompute", f"+{t.recompute_overhead_pct:.0f}% step time"))
    if p.eval_interval:
        rows.append(
            (
                "validation loss",
                f"{t.eval_time_s:.3f} s every {p.eval_interval} steps (+{t.eval_overhead_pct:.1f}% wall time)",
            )
        )
    if t.micro_batches > 1:
        rows.append(
            ("gradient reduce-scatters", f"{t.gradient_reductions} per step of {t.micro_batches} micro-batches")
        )
    return rows


def plan_blocks(plan: Plan) -> list[Panel | Table]:
    """What ``trainctl plan`` shows for ``plan`` (a :class:`planner.Plan`), in order: a panel with the
    configuration, the memory breakdown and verdict, throughput, the checkpoints (:func:`checkpoint_table`; not
    for a blocks-only plan), cost (with a token budget, for a plan that runs) and the recommendations with the figures before and after each (when there are any); a multi-instance
    plan with inter-container encryption carries the planner's note on it under the throughput table."""
    from planner.memory import AT_RISK_FRACTION, BREAKDOWN_TERMS, SAFETY_FRACTION
    from planner.plan import INTER_CONTAINER_ENCRYPTION_NOTE, notes

    p, r, mem, t = plan.input, plan.resolved, plan.memory_gb, plan.throughput
    m = r.model
    params = m.block_params if p.blocks_only else m.num_params
    accumulation = (
        f" x {p.gradient_accumulation_steps} accumulation ({p.gradient_sync.replace('_', ' ')} reduce-scatter)"
        if p.gradient_accumulation_steps > 1
        else ""
    )
    recomputing = "" if p.activation_checkpointing == "off" else f" ({r.checkpointed_blocks} of {m.num_layers} blocks)"
    config = (
        f"[bold]{m.name}[/bold] ({m.num_layers} layers, hidden {m.hidden_size}, {format_count(params)} parameters"
        f"{', blocks only' if p.blocks_only else ''})  |  {p.precision}"
        f"{' + quantized weights' if p.quantized_model_init else ''}  |  seq {p.seq_length} x batch {p.batch_size}"
        f"{accumulation}  |  checkpointing {p.activation_checkpointing}{recomputing}\n"
        f"{p.instance_count} x {r.instance.instance_type} = {r.world_size} x {r.gpu.name} ({r.gpu.hbm_gb:g} GB)  |  "
        f"FSDP {p.sharding_strategy} (shard {r.shard_degree}, replicas {r.replicate_degree})"
        f"{'' if p.reshard_after_forward else ', no reshard after forward'}"
        f"{'  |  inter-container encryption' if p.inter_container_encryption else ''}"
    )
    blocks: list[Panel | Table] = [Panel(config, title="trainctl plan")]

    mt = Table("Memory per GPU (GB)", [Column("term"), Column("GB", justify="right")])
    for term in BREAKDOWN_TERMS:
        value = mem.terms[term]
        if value > 0:
            mt.add_row(term.replace("_", " "), _num(value, 2))
    mt.add_row("[bold]total (peak allocated)[/bold]", f"[bold]{_num(mem.total, 2)}[/bold]", end_section=True)
    mt.add_row("fragmentation margin (estimate)", _num(mem.fragmentation_margin, 2))
    mt.add_row("CUDA context + NCCL (estimate)", _num(mem.runtime_overhead, 2))
    mt.add_row("required", _num(mem.required, 2))
    low, high = mem.required_band
    mt.add_row("required, published-error band", f"{_num(low, 1)} - {_num(high, 1)}")
    mt.add_row(
        f"usable ({r.gpu.hbm_gb:g} GiB = {mem.capacity:.0f} GB, less {SAFETY_FRACTION:.1%})", _num(mem.usable, 2)
    )
    mt.add_row("verdict", f"{_verdict(mem.status)} ({mem.headroom:+.1f} GB)")
    mt.caption = f"peak at: {mem.peak_phase.replace('_', ' ')}"
    if mem.status == "at-risk":
        mt.caption += f"; at risk: the requirement is within the model's {AT_RISK_FRACTION:.0%} error of usable memory"
    blocks.append(mt)

    tt = Table("Throughput", [Column("figure"), Column("value", justify="right")])
    if not plan.ran:
        # a configuration predicted out of memory would not run: no speed as if it had
        for figure in ("step time", "tokens/s (job)", "tokens/s per GPU", "model TFLOP/s per GPU", "MFU"):
            tt.add_row(figure, NOT_RUN)
        tt.caption = plan.not_run_reason
    else:
        tt.add_row("step time", f"{t.step_time_s:.3f} s")
        tt.add_row("tokens/s (job)", _num(t.tokens_per_second, 0))
        tt.add_row("tokens/s per GPU", _num(t.tokens_per_second_per_gpu, 0))
        tt.add_row("model TFLOP/s per GPU", _num(t.tflops_per_gpu, 1))
        tt.add_row("MFU", f"{t.mfu:.1f}% of {t.peak_tflops:g} TFLOP/s ({p.precision} dense)")
        tt.add_row("bound by", t.bound)
        tt.add_row("exposed communication", f"{t.comm_fraction * 100:.1f}% of the step ({t.comm.link})")
        for figure, value in _overheads(plan):
            tt.add_row(figure, value)
    if INTER_CONTAINER_ENCRYPTION_NOTE in notes(plan):  # what these figures leave out, as --json notes it
        tt.caption = (
            f"{tt.caption}; {INTER_CONTAINER_ENCRYPTION_NOTE}" if tt.caption else INTER_CONTAINER_ENCRYPTION_NOTE
        )
    blocks.append(tt)

    if t.checkpoint is not None:
        blocks.append(checkpoint_table(plan))

    if t.cost is not None and plan.ran:
        ct = Table("Cost", [Column("figure"), Column("value", justify="right")])
        ct.add_row("tokens", format_count(t.cost.tokens))
        ct.add_row("wall time", f"{t.cost.wall_time_hours:,.1f} h ({t.cost.wall_time_hours / 24:,.1f} days)")
        ct.add_row("instance-hours", _num(t.cost.instance_hours, 1))
        if t.cost.cost is not None:
            ct.add_row("cost", f"${t.cost.cost:,.0f} at ${p.price_per_hour:g}/instance-hour")
        blocks.append(ct)

    if plan.recommendations:
        columns = [Column("#", justify="right"), Column("change"), Column("why"), Column("before -> after")]
        rt = Table("Recommendations", columns, show_lines=True)
        for i, rec in enumerate(plan.recommendations, 1):
            if rec.after is None:
                ba = "-"
            else:
                a = rec.after

                def speed(q: Plan, text: str) -> str:
                    return text if q.ran else NOT_RUN

                ba = (
                    f"tokens/s {speed(plan, format_count(plan.tokens_per_second))} -> "
                    f"{speed(a, format_count(a.tokens_per_second))}\n"
                    f"MFU {speed(plan, f'{plan.mfu:.1f}%')} -> {speed(a, f'{a.mfu:.1f}%')}\n"
                    f"memory {plan.memory_gb.total:.1f} -> {a.memory_gb.total:.1f} GB\n"
                    f"{_verdict(plan.status, plain=True)} -> {_verdict(a.status, plain=True)}"
                )
            rt.add_row(str(i), rec.title, rec.reason, ba)
        blocks.append(rt)
    return blocks


def checkpoint_table(plan: Plan) -> Table:
    """The plan's checkpoint figures (:mod:`planner.checkpoint`): size, restart download per instance (bytes only:
    :data:`planner.checkpoint.DOWNLOAD_TIME_NOTE`), write time of a synchronous save, blocking time of the interval
    saves and their share of the step, the host memory an asynchronous save stages into, and the save at a stop
    against SageMaker's grace period after SIGTERM; a flagged figure is marked in red."""
    from planner.checkpoint import DOWNLOAD_TIME_NOTE, HOST_STAGING_FRACTION, NVME_WRITE_GB_S

    ck = plan.throughput.checkpoint
    assert ck is not None  # the caller checks
    gb = 1e9
    table = Table("Checkpoints", [Column("figure"), Column("value", justify="right")])
    table.add_row("size (one checkpoint)", f"{ck.size_bytes / gb:,.1f} GB ({ck.per_gpu_bytes / gb:,.2f} GB per GPU)")
    table.add_row("written per instance", f"{ck.written_per_host_bytes / gb:,.1f} GB")
    table.add_row("restart download per instance", f"{ck.download_per_host_bytes / gb:,.1f} GB (time: not estimated)")
    table.add_row(
        "synchronous save (write)",
        f"{ck.sync_save_s:,.1f} s ({ck.write_s:,.1f} s at {NVME_WRITE_GB_S:g} GB/s local NVMe)",
    )
    table.add_row("staging (device to host)", f"{ck.staging_s:,.2f} s")
    table.add_row(
        f"interval saves ({ck.save}, every {ck.interval} steps)",
        f"{ck.blocking_s:,.2f} s blocked (+{ck.per_step_s * 1e3:,.2f} ms per step)",
    )
    if ck.save == "async":
        memory = "unknown" if ck.host_memory_bytes is None else f"{ck.host_memory_bytes / gb:,.0f} GB"
        staging = f"{ck.staging_per_host_bytes / gb:,.1f} GB of {memory}"
        if not ck.staging_fits:
            staging = f"[red]{staging} (over {HOST_STAGING_FRACTION:.0%})[/red]"
        table.add_row("staging host memory per instance", staging)
    stop = f"{ck.stop_s:,.0f} s of {ck.stop_limit_s:.0f} s"
    table.add_row("save at a stop (SIGTERM)", stop if ck.stop_fits else f"[red]{stop}: too long[/red]")
    table.caption = (
        "the restart download assumes one checkpoint under the synced prefix; no time: " + DOWNLOAD_TIME_NOTE
    )
    return table


def plan_and_print(
    fields: Mapping[str, Any],
    *,
    as_json: bool = False,
    flags: Mapping[str, str] | None = None,
    model_config: str | os.PathLike[str] | None = None,
    init_from: str | os.PathLike[str] | None = None,
) -> int:
    """Estimate the configuration ``fields`` (:class:`planner.PlanInput`'s keyword arguments) and print the plan:
    tables (:func:`plan_blocks`), or :meth:`planner.Plan.to_dict` as JSON with ``as_json``.

    Args:
        flags: input field -> the command-line flag that sets it, to name the flag in an error.
        model_config: a Hugging Face ``config.json`` giving the model's shape
            (:func:`trainctl.model_config.model_config_values`; ``fields`` may not set one too).
        init_from: a Hugging Face model folder the run starts from: its ``config.json`` is the shape (a
            ``model_config`` given too is refused) and the plan adds what loading its weights costs
            (:func:`init_weights_load`).

    Returns:
        0; 2 when a field is refused (one line on stderr naming the flag, the value and what was expected;
        nothing else is printed).
    """
    from planner import PlanInput, estimate

    if init_from is not None:
        if model_config is not None:
            print(
                "trainctl plan: error: argument --model-config: give it or --init-from (whose config.json is the shape), not both",
                file=sys.stderr,
            )
            return 2
        model_config = os.path.join(init_from, "config.json")
    source = "--init-from" if init_from is not None else "--model-config"  # the flag that gave the config.json
    if model_config is not None:
        from trainctl.model_config import ModelConfigError, model_config_values

        try:
            fields = model_config_values(model_config, fields, flag=source)
        except ModelConfigError as exc:
            print(f"trainctl plan: error: argument {exc}", file=sys.stderr)
            return 2
    try:
        plan = estimate(PlanInput(**fields))
    except FieldError as exc:  # PlanInputError and the catalogue's refusals
        flag = (flags or {}).get(exc.field, exc.field)
        if model_config is not None and exc.field in SHAPE_HYPERPARAMETERS:  # the file set it, not a flag
            flag = f"{source} {model_config}: its shape's {exc.field}"
        detail = f" ({exc.detail})" if exc.detail else ""
        print(
            f"trainctl plan: error: argument {flag}: got {exc.value!r}, expected {exc.expected}{detail}",
            file=sys.stderr,
        )
        return 2
    load = None
    if init_from is not None:
        from training.hf_weights import HfWeightsError

        try:
            load = init_weights_load(init_from, plan)
        except HfWeightsError as exc:
            print(f"trainctl plan: error: argument --init-from: {exc}", file=sys.stderr)
            return 2
    if as_json:
        import json  # here: the tables do not need it

        print(json.dumps({**plan.to_dict(), **({"init_weights": load} if load else {})}, indent=2))
        return 0
    blocks = plan_blocks(plan)
    if load is not None:
        lt = Table(f"Loading the initial weights ({init_from})", [Column("what"), Column("size", justify="right")])
        lt.add_row("read by each GPU (the rows of its shards, at most)", _size(load["bytes_per_gpu"]))
        lt.add_row("read by each instance", _size(load["bytes_per_instance"]))
        lt.add_row("the folder's weights", _size(load["bytes_total"]))
        lt.add_row("peak extra memory per GPU while loading", _size(load["peak_extra_bytes"]))
        lt.add_row("time", "not estimated (" + load["time"] + ")")
        blocks.insert(1, lt)
    print_blocks(blocks)
    return 0


LOAD_TIME_NOTE = "no published read bandwidth of a SageMaker FastFile channel, the submitter's mode, to cite"
"""Why the plan gives the load's bytes and no time."""


def _size(n: int) -> str:
    return f"{n / 1e9:.3f} GB" if n >= 1e8 else f"{n / 1e6:.3f} MB"


def init_weights_load(folder: str | os.PathLike[str], plan: Any) -> dict[str, Any]:
    """What loading the folder's weights costs in ``plan``'s layout (:func:`training.hf_weights.read_plan`, from
    the safetensors headers): ``bytes_total`` (the weights the model needs), ``bytes_per_gpu`` (the most any
    rank reads: its rows of every tensor), ``bytes_per_instance`` (what one instance's ranks read together:
    the folder's bytes divided among the instances sharing a shard group), ``peak_extra_bytes`` (the largest
    transient per GPU: one parameter's local rows as stored plus as fp32; freed before the first step, so not
    part of the training peak), ``time`` (why no time is given).

    Raises:
        training.hf_weights.HfWeightsError: the folder does not fit its config (names the file and tensor).
    """
    from training.hf_weights import read_plan

    r = plan.resolved
    ranks = read_plan(folder, r.shard_degree)
    per_instance = min(r.shard_degree, r.instance.gpus_per_instance)
    instance_reads = [
        sum(s.bytes_read for s in ranks[i : i + per_instance]) for i in range(0, r.shard_degree, per_instance)
    ]
    return {
        "bytes_total": ranks[0].bytes_total,
        "bytes_per_gpu": max(s.bytes_read for s in ranks),
        "bytes_per_instance": max(instance_reads),
        "peak_extra_bytes": max(s.peak_extra_bytes for s in ranks),
        "time": LOAD_TIME_NOTE,
    }


__all__ = [
    "checkpoint_table",
    "guide_default_input",
    "init_weights_load",
    "plan_and_print",
    "plan_blocks",
    "render_plan",
]
