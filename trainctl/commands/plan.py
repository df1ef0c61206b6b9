"""``trainctl plan``: predict memory, speed and cost of a training configuration
and recommend changes (the planner, :mod:`planner`).

Without flags it plans the guide's default request (``GUIDE_DEFAULT_REQUEST``:
gpt-1b with 10 layers, mxfp8, batch 8, sequence 2048) on one
``ml.p6-b200.48xlarge``. ``--json`` prints :meth:`planner.Plan.to_dict`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from platform_spec.catalogue import DEFAULT_INSTANCE_TYPE, TRAINABLE_INSTANCE_TYPES, TRAINER_IMAGE_ARCHITECTURES
from platform_spec.errors import FieldError
from platform_spec.hyperparameters import (
    ACTIVATION_CHECKPOINTING,
    GUIDE_DEFAULT_REQUEST,
    MODEL_PRESETS,
    PRECISIONS,
    QUANTIZED_MODEL_INIT_REFUSAL,
    SHARDING_STRATEGIES,
)

HELP = "Predict per-GPU memory, tokens/s, MFU and cost of a training config, and recommend changes."

_FLAGS = {
    "model": "--model",
    "num_layers": "--num-layers",
    "vocab_size": "--vocab-size",
    "precision": "--precision",
    "seq_length": "--seq-length",
    "batch_size": "--batch-size",
    "gradient_accumulation_steps": "--gradient-accumulation-steps",
    "activation_checkpointing": "--activation-checkpointing",
    "instance_type": "--instance-type",
    "instance_count": "--instance-count",
    "sharding_strategy": "--sharding-strategy",
    "reshard_after_forward": "--reshard-after-forward",
    "quantized_model_init": "--quantized-model-init",
    "blocks_only": "--blocks-only",
    "price_per_hour": "--price-per-hour",
    "tokens": "--tokens",
}


def _positive_int(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer >= 1") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer >= 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a positive number (e.g. 1e12)") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a positive number (e.g. 1e12)")
    return value


def _instance_type(text: str) -> str:
    """An instance type the trainer image runs on (the planner's one rule), normalised (``p5.48xlarge`` ->
    ``ml.p5.48xlarge``); otherwise the types to use and, for a known one, why not."""
    from platform_spec.catalogue import get_trainable_instance

    try:
        return get_trainable_instance(text).instance_type
    except FieldError as exc:
        detail = f" ({exc.detail})" if exc.detail else ""
        raise argparse.ArgumentTypeError(f"got {text!r}, expected {exc.expected}{detail}") from None


QUANTIZED_MODEL_INIT_HELP = (
    "store block weights quantized (fp8, mxfp8, nvfp4)"
    if QUANTIZED_MODEL_INIT_REFUSAL is None
    else "store block weights quantized (fp8 family). REFUSED with the current trainer image (exit 2, no plan): "
    + QUANTIZED_MODEL_INIT_REFUSAL.removeprefix("false: ")
    + ". The flag mirrors the trainer's hyperparameter, so the planner answers with the reason and plans it "
    "again once the image supports it"
)
"""``--quantized-model-init``'s help, from the trainer's one refusal rule."""


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"got {text!r}, expected true or false")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model")
    g.add_argument("--model", choices=MODEL_PRESETS, default=None,
                   help=f"model preset (default: the guide's request, {GUIDE_DEFAULT_REQUEST['model']} with "
                        f"{GUIDE_DEFAULT_REQUEST['num_layers']} layers)")
    g.add_argument("--num-layers", type=_positive_int, default=None, help="transformer blocks (default: the preset's)")
    g.add_argument("--vocab-size", type=_positive_int, default=None, help="vocabulary size (default: the preset's)")
    g.add_argument("--blocks-only", action="store_true",
                   help="model TransformerEngine's FSDP example (the guide's benchmark: blocks only, bf16 Adam)")
    t = parser.add_argument_group("training")
    t.add_argument("--precision", choices=PRECISIONS, default=GUIDE_DEFAULT_REQUEST["precision"], help="(default: %(default)s)")
    t.add_argument("--seq-length", type=_positive_int, default=int(GUIDE_DEFAULT_REQUEST["seq_length"]),
                   help="tokens per sequence (default: %(default)s)")
    t.add_argument("--batch-size", type=_positive_int, default=int(GUIDE_DEFAULT_REQUEST["batch_size"]),
                   help="micro-batch, sequences per GPU (default: %(default)s)")
    t.add_argument("--gradient-accumulation-steps", type=_positive_int, default=1, help="(default: %(default)s)")
    t.add_argument("--activation-checkpointing", choices=ACTIVATION_CHECKPOINTING, default="off",
                   help="(default: %(default)s)")
    t.add_argument("--sharding-strategy", choices=SHARDING_STRATEGIES, default="full",
                   help="full: FSDP over every GPU; hybrid: HSDP (default: %(default)s)")
    t.add_argument("--reshard-after-forward", type=_bool, default=True, metavar="{true,false}",
                   help="free gathered parameters after forward (default: true)")
    t.add_argument("--quantized-model-init", action="store_true", help=QUANTIZED_MODEL_INIT_HELP.replace("%", "%%"))
    h = parser.add_argument_group("hardware and budget")
    h.add_argument("--instance-type", type=_instance_type, default=DEFAULT_INSTANCE_TYPE,
                   metavar="{" + ",".join(TRAINABLE_INSTANCE_TYPES) + "}",
                   help=f"an instance type the trainer image runs on ({', '.join(TRAINER_IMAGE_ARCHITECTURES)} hosts; "
                        "platform_spec.catalogue) (default: %(default)s)")
    h.add_argument("--instance-count", type=_positive_int, default=1, help="(default: %(default)s)")
    h.add_argument("--price-per-hour", type=_positive_float, default=None, help="USD per instance-hour (for cost)")
    h.add_argument("--tokens", type=_positive_float, default=None, help="training-token budget, e.g. 1e12")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON (planner.Plan.to_dict)")


def plan_input_from_args(args: argparse.Namespace) -> Any:
    """The :class:`planner.PlanInput` for parsed ``trainctl plan`` arguments."""
    from planner import PlanInput

    model = args.model
    num_layers = args.num_layers
    if model is None:
        model = GUIDE_DEFAULT_REQUEST["model"]
        if num_layers is None:
            num_layers = int(GUIDE_DEFAULT_REQUEST["num_layers"])
    return PlanInput(
        model=model,
        num_layers=num_layers,
        precision=args.precision,
        seq_length=args.seq_length,
        batch_size=args.batch_size,
        activation_checkpointing=args.activation_checkpointing,
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        sharding_strategy=args.sharding_strategy,
        reshard_after_forward=args.reshard_after_forward,
        quantized_model_init=args.quantized_model_init,
        gradient_accumulation_steps=args.gradient_accumulation_steps,
        vocab_size=args.vocab_size,
        blocks_only=args.blocks_only,
        price_per_hour=args.price_per_hour,
        tokens=args.tokens,
    )


def guide_default_input(instance_type: str = DEFAULT_INSTANCE_TYPE) -> Any:
    """The :class:`planner.PlanInput` of the guide's default request (``GUIDE_DEFAULT_REQUEST``) on one
    ``instance_type`` -- what ``trainctl plan`` plans without flags (for ``make demo``)."""
    from planner import PlanInput

    return PlanInput.from_request(GUIDE_DEFAULT_REQUEST, instance_type=instance_type)


def _num(v: float, digits: int = 1) -> str:
    return f"{v:,.{digits}f}"


def _tps(v: float) -> str:
    return f"{v / 1000:,.1f}K" if v >= 1000 else f"{v:,.0f}"


def render_plan(plan: Any, console: Any) -> None:
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


def run(args: argparse.Namespace) -> int:
    from planner import estimate

    try:
        plan = estimate(plan_input_from_args(args))
    except FieldError as exc:  # PlanInputError and the catalogue's refusals
        flag = _FLAGS.get(exc.field, exc.field)
        detail = f" ({exc.detail})" if exc.detail else ""
        print(f"trainctl plan: error: argument {flag}: got {exc.value!r}, expected {exc.expected}{detail}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(plan.to_dict(), indent=2))
        return 0
    from rich.console import Console

    render_plan(plan, Console())
    return 0
