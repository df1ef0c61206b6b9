"""Precision rules (the registry-driven converters, and adding a format), loss scaling, the LR schedule, stop
decisions, metric values, failure reasons."""

from __future__ import annotations

import ast
import dataclasses
import io
import itertools
import json
import math
import re
import time
from pathlib import Path
from types import MappingProxyType

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh

from model_families import gpt
from model_families.gpt import PRESETS
from platform_spec import catalogue, models
from platform_spec import precisions as registry
from platform_spec.hyperparameters import Hyperparameters
from platform_spec.metric_lines import METRIC_DEFINITIONS, parse_line
from platform_spec.precisions import PRECISIONS, Precision, TERecipe
from training import precision
from training.metrics import DeviceInfo, MetricsLogger, peak_memory_gb
from training.model import build_model
from training.parallelize import SHARD_DIM, parallelize
from training.train import StopController, learning_rate, oom_reason

from . import fake_transformer_engine as fake_te

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["fp16", "fp8", "mxfp8", "nvfp4"])
def test_gpu_precisions_are_refused_on_cpu(name: str) -> None:
    with pytest.raises(
        precision.PrecisionError, match=rf"'precision': got '{name}', expected one of fp32, bf16 on CPU"
    ):
        precision.check_supported(name, torch.device("cpu"))


def test_precision_plans() -> None:
    assert precision.plan("fp32").param_dtype == torch.float32 and not precision.plan("fp32").mixed
    bf16 = precision.plan("bf16")
    assert (bf16.param_dtype, bf16.reduce_dtype, bf16.uses_te_recipe) == (torch.bfloat16, torch.float32, False)
    assert precision.plan("fp16").loss_scaling
    for name in ("fp8", "mxfp8", "nvfp4"):
        p = precision.plan(name)
        assert p.uses_te_recipe and p.param_dtype == torch.bfloat16 and p.reduce_dtype == torch.float32
    for record in PRECISIONS:  # every registry dtype is a torch dtype the plan carries
        assert precision.plan(record.name).param_dtype == getattr(torch, record.compute_dtype)
    assert precision.TE_PRECISIONS == ("fp8", "mxfp8", "nvfp4") and precision.BLOCK_SCALED == ("mxfp8", "nvfp4")
    with pytest.raises(
        precision.PrecisionError, match=r"'precision': got 'fp64', expected one of fp32, bf16, fp16, fp8, mxfp8, nvfp4"
    ):
        precision.plan("fp64")


def _cuda_device(monkeypatch: pytest.MonkeyPatch, name: str, capability: tuple[int, int]) -> torch.device:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    return torch.device("cuda", 0)


@pytest.mark.parametrize(
    ("capability", "name", "runs"),
    [
        (
            (11, 0),
            "mxfp8",
            True,
        ),  # Thor: TransformerEngine runs the block-scaled formats (the old catalogue rule said no)
        ((11, 0), "nvfp4", True),
        ((12, 0), "mxfp8", False),  # GeForce/workstation Blackwell: TE refuses mxfp8
        ((12, 0), "nvfp4", False),
        ((10, 3), "nvfp4", True),
        ((9, 0), "fp8", True),
        ((8, 6), "fp8", False),
        ((7, 5), "bf16", False),  # below Ampere PyTorch only emulates bfloat16
        ((7, 5), "fp16", True),
    ],
)
def test_the_trainer_applies_the_registry_hardware_rule(monkeypatch, capability, name, runs) -> None:
    """Regression: the trainer's rule for GPUs missing from the catalogue and the catalogue's disagreed for
    11.x; the trainer now asks the registry, by the device's own compute capability."""
    device = _cuda_device(monkeypatch, "NVIDIA Some GPU", capability)
    if runs:
        precision.check_supported(name, device, te_available=True, seq_length=2048, batch_size=8)
        return
    with pytest.raises(precision.PrecisionError) as refused:
        precision.check_supported(name, device, te_available=True, seq_length=2048, batch_size=8)
    message = str(refused.value)
    assert f"on NVIDIA Some GPU (compute capability {capability[0]}.{capability[1]}); {name} needs " in message
    assert refused.value.field == "precision" and "fp32" in refused.value.expected


def test_the_gemm_multiple_and_the_missing_transformer_engine_come_from_the_registry(monkeypatch) -> None:
    device = _cuda_device(monkeypatch, "NVIDIA B200", (10, 0))
    with pytest.raises(precision.PrecisionError, match=r"divisible by 32 for mxfp8") as odd:
        precision.check_supported("mxfp8", device, te_available=True, seq_length=8, batch_size=3)
    assert odd.value.field == "seq_length"
    precision.check_supported("fp8", device, te_available=True, seq_length=8, batch_size=2)  # 16 for fp8
    with pytest.raises(
        precision.PrecisionError, match=r"one of fp32, bf16, fp16 here: TransformerEngine is not installed"
    ):
        precision.check_supported("fp8", device, te_available=False)


def test_fp32_turns_on_tf32_on_a_gpu_and_nothing_else_does(monkeypatch: pytest.MonkeyPatch) -> None:
    """The TF32 switch is the registry's (fp32's dense peak, its MFU denominator, is TF32's), not a name test."""
    for name in registry.PRECISION_NAMES:
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
        monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)
        precision.plan(name).configure_backends(torch.device("cpu"))
        assert not torch.backends.cuda.matmul.allow_tf32  # never on the CPU
        precision.plan(name).configure_backends(torch.device("cuda", 0))
        tf32 = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
        assert tf32 == ((True, True) if name == "fp32" else (False, False)), name


def test_delayed_scaling_alone_reduces_its_amax_over_the_ranks() -> None:
    assert precision.plan("fp8").reduces_amax("delayed") and not precision.plan("fp8").reduces_amax("current")
    assert not any(precision.plan(p).reduces_amax("delayed") for p in ("fp32", "bf16", "fp16", "mxfp8", "nvfp4"))


def _registry_with(monkeypatch: pytest.MonkeyPatch, *added: Precision) -> None:
    """The precision registry with ``added`` appended: what adding an entry to ``PRECISIONS`` gives (every
    table the registry module derives from it, recomputed); nothing else is changed."""
    records = (*registry.PRECISIONS, *added)
    monkeypatch.setattr(registry, "PRECISIONS", records)
    monkeypatch.setattr(registry, "PRECISION_NAMES", tuple(p.name for p in records))
    monkeypatch.setattr(registry, "_BY_NAME", MappingProxyType({p.name: p for p in records}))
    monkeypatch.setattr(registry, "CPU_PRECISIONS", tuple(p.name for p in records if p.cpu))


FP16_CPU = Precision(
    name="fp16-cpu",
    compute_dtype="float16",
    dense_peak="fp16_tflops",
    high_precision="fp16",
    cpu=True,
    loss_scaling=True,
    hardware="any CUDA GPU",
    capability_source="test",
    color="#000000",
)
"""A format the CPU path runs that the trainer has never heard of: fp16 compute with loss scaling."""


def test_a_new_cpu_format_is_planned_from_its_registry_entry_alone(
    monkeypatch: pytest.MonkeyPatch, process_group
) -> None:
    """Adding a format is its registry entry: the trainer's CPU path checks it, gathers FSDP2 parameters in its
    dtype, keeps fp32 masters, scales the loss, and trains a step -- with no edit to training/."""
    _registry_with(monkeypatch, FP16_CPU)
    plan = precision.plan("fp16-cpu")
    assert type(plan) is precision.PrecisionPlan and plan.mixed and plan.recipe("current") is None
    assert (plan.param_dtype, plan.reduce_dtype, plan.uses_te_recipe) == (torch.float16, torch.float32, False)
    assert isinstance(plan.loss_scaler(), precision.DynamicLossScaler) and not plan.reduces_amax("delayed")
    precision.check_supported("fp16-cpu", torch.device("cpu"))
    with pytest.raises(precision.PrecisionError, match=r"expected one of fp32, bf16, fp16-cpu on CPU \(fp16 needs"):
        precision.check_supported("fp16", torch.device("cpu"))  # the refusal names the new CPU format too
    with pytest.raises(precision.PrecisionError, match=r"one of fp32, bf16, fp16, fp8, mxfp8, nvfp4, fp16-cpu"):
        precision.plan("fp64")

    torch.manual_seed(0)
    model = build_model(PRESETS["gpt-tiny"].with_overrides(num_layers=1, vocab_size=64))
    seen = []
    model.layers[0].register_forward_pre_hook(lambda module, args: seen.append(args[0].dtype))
    parallelize(
        model,
        mesh=init_device_mesh("cpu", (1,), mesh_dim_names=(SHARD_DIM,)),
        precision=plan,
        activation_checkpointing="off",
        reshard_after_forward=True,
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    scaler = plan.loss_scaler()
    tokens = torch.randint(0, 64, (2, 17), generator=torch.Generator().manual_seed(1))
    with plan.autocast(plan.recipe(), device_type="cpu"):
        loss = model(tokens[:, :-1], tokens[:, 1:])
    scaler.scale_loss(loss).backward()
    params = [p for p in model.parameters() if p.grad is not None]
    grads = [p.grad.full_tensor().clone() for p in params]
    scaler.unscale_(params)
    assert all(
        torch.allclose(p.grad.full_tensor() * scaler.scale, g) for p, g in zip(params, grads, strict=True)
    )  # unscaled
    assert scaler.update(float(torch.stack([p.grad.full_tensor().norm() for p in params]).norm()))
    optimizer.step()
    assert seen == [torch.float16] and math.isfinite(loss.item())  # the block computed in the new format's dtype
    assert {p.to_local().dtype for p in model.parameters()} == {torch.float32}  # fp32 master shards


FP8_E4M3 = Precision(
    name="fp8-e4m3",
    compute_dtype="bfloat16",
    te_recipes=MappingProxyType(
        {"current": TERecipe("Float8CurrentScaling", MappingProxyType({"fp8_format": "E4M3"}))}
    ),
    quantized_bytes=1.0,
    dense_peak="fp8_tflops",
    high_precision="bf16",
    min_capability=(8, 9),
    hardware="compute capability >= 8.9 (test)",
    capability_source="test",
    gemm_multiple=16,
    color="#000001",
)
"""A TransformerEngine format the trainer has never heard of: its entry names its recipe."""


def test_a_new_transformer_engine_format_is_its_registry_entry_plus_its_recipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A TE format is its registry entry plus its recipe in TransformerEngine (here the CPU stand-in's): the
    trainer builds the recipe, applies the hardware rule and the GEMM multiple, and refuses it on the CPU."""
    fake_te.install(monkeypatch)
    missing = dataclasses.replace(
        FP8_E4M3, name="fp8-next", te_recipes=MappingProxyType({"block": TERecipe("Float8NextScaling")})
    )
    _registry_with(monkeypatch, FP8_E4M3, missing)
    plan = precision.plan("fp8-e4m3")
    assert type(plan) is precision.TransformerEnginePlan and plan.param_dtype == torch.bfloat16
    assert plan.recipe("current") == fake_te.Float8CurrentScaling(fp8_format=fake_te.Format.E4M3)
    assert precision.te_recipe("fp8-e4m3") == plan.recipe()
    with pytest.raises(precision.PrecisionError, match=r"needs an NVIDIA GPU with TransformerEngine"):
        plan.check(torch.device("cpu"))
    precision.check_supported(
        "fp8-e4m3", _cuda_device(monkeypatch, "NVIDIA H100", (9, 0)), te_available=True, seq_length=8, batch_size=2
    )
    with pytest.raises(precision.PrecisionError, match=r"divisible by 16 for fp8-e4m3"):
        plan.check(_cuda_device(monkeypatch, "NVIDIA H100", (9, 0)), te_available=True, seq_length=5, batch_size=3)
    with pytest.raises(precision.PrecisionError, match=r"fp8-e4m3 needs compute capability >= 8.9 \(test\)"):
        plan.check(_cuda_device(monkeypatch, "NVIDIA A100", (8, 0)), te_available=True)
    with pytest.raises(precision.PrecisionError, match=r"recipe.Float8NextScaling \(installed TE is too old\)"):
        precision.te_recipe("fp8-next")


def test_the_default_recipe_is_the_registrys_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression: ``te_recipe``'s default scaling was the literal ``"current"``, not the registry's first, so a
    format offering a choice of other scalings was refused without ``fp8_scaling``."""
    fake_te.install(monkeypatch)
    two = dataclasses.replace(
        FP8_E4M3,
        name="fp8-two",
        te_recipes=MappingProxyType(
            {
                "tensorwise": TERecipe("Float8CurrentScaling", MappingProxyType({"fp8_format": "E4M3"})),
                "history": TERecipe("DelayedScaling", MappingProxyType({"fp8_format": "HYBRID"})),
            }
        ),
    )
    _registry_with(monkeypatch, two)
    assert precision.te_recipe("fp8-two") == precision.plan("fp8-two").recipe("tensorwise")
    assert precision.te_recipe("fp8-two", "history") == precision.plan("fp8-two").recipe("history")


def _precision_literal_comparisons(source: str, where: str) -> list[str]:
    """``x == "fp32"`` / ``x in ("fp8", ...)`` / ``x != "delayed"``: comparisons with a precision or scaling name."""
    names = set(registry.PRECISION_NAMES) | {s for p in registry.PRECISIONS for s in p.scalings}
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        for operand in (node.left, *node.comparators):
            items = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
            if any(isinstance(i, ast.Constant) and i.value in names for i in items):
                found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_trainer_compares_no_precision_name() -> None:
    """The precision seam: the trainer's code asks the registry (through its converters) and never tests a
    format's or a scaling's name (``hp.precision == "fp32"`` chose TF32, ``fp8_scaling == "delayed"`` the
    amax group, before)."""
    found = [
        hit
        for path in sorted((REPO / "training").glob("*.py"))
        for hit in _precision_literal_comparisons(path.read_text(encoding="utf-8"), path.name)
    ]
    assert found == []
    before = 'if cuda and hp.precision == "fp32":\n    pass\ngroup = WORLD if hp.fp8_scaling == "delayed" else None\n'
    assert _precision_literal_comparisons(before, "train.py") == [  # what the scan finds where there is one
        "train.py:1: hp.precision == 'fp32'",
        "train.py:3: hp.fp8_scaling == 'delayed'",
    ]


def test_dynamic_loss_scaler() -> None:
    scaler = precision.DynamicLossScaler(init_scale=8.0, growth_interval=2)
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.full((3,), 16.0)
    scaler.unscale_([p])
    assert p.grad.tolist() == [2.0, 2.0, 2.0]
    assert not scaler.update(math.inf) and scaler.scale == 4.0  # overflow: skip the step, halve
    assert scaler.update(1.0) and scaler.update(1.0) and scaler.scale == 8.0  # grows after 2 good steps
    state = scaler.state_dict()
    other = precision.DynamicLossScaler()
    other.load_state_dict(state)
    assert other.state_dict() == state


def test_learning_rate_schedule() -> None:
    hp = Hyperparameters(learning_rate=1e-3, min_learning_rate=1e-4, warmup_steps=10, max_steps=110)
    assert learning_rate(1, hp) == pytest.approx(1e-4)
    assert learning_rate(10, hp) == pytest.approx(1e-3)
    assert learning_rate(60, hp) == pytest.approx(0.55e-3)  # half-way down the cosine
    assert learning_rate(110, hp) == pytest.approx(1e-4)
    lrs = [learning_rate(s, hp) for s in range(10, 111)]
    assert all(a >= b for a, b in itertools.pairwise(lrs))
    assert (
        learning_rate(5, Hyperparameters(warmup_steps=0, max_steps=10, learning_rate=1e-3, min_learning_rate=0.0))
        < 1e-3
    )


def test_stop_controller_signal_and_capacity_deadline() -> None:
    stopper = StopController(deadline=None, group=None, world_size=1)
    assert stopper.check() is None
    stopper._handler(15, None)
    assert stopper.check() == "SIGTERM/SIGINT received"
    # 10 minutes left before the reclaim point: beyond the 300 s margin -> keep going
    assert StopController(time.time() + 600, None, 1).check(step_seconds=1.0, save_seconds=10.0) is None
    # 4 minutes left: inside 300 s + 2 x (step + save) -> stop now and checkpoint
    assert StopController(time.time() + 240, None, 1).check(step_seconds=1.0) == "capacity block ends soon"
    # slow checkpoints widen the margin: 10 minutes left but a 200 s save
    assert StopController(time.time() + 600, None, 1).check(save_seconds=200.0) == "capacity block ends soon"


def test_oom_reason_names_the_settings_to_change() -> None:
    hp = Hyperparameters(model="gpt-8b", batch_size=16, seq_length=8192, activation_checkpointing="off")
    reason = oom_reason(hp, torch.device("cpu"), rank=3, step=1)
    assert "out of memory on rank 3" in reason
    assert "set activation_checkpointing=full" in reason and "lower batch_size (now 16" in reason
    assert "lower seq_length (now 8192)" in reason and len(reason) < 1024
    with_ac = oom_reason(Hyperparameters(activation_checkpointing="full"), torch.device("cpu"), 0, 1)
    assert "activation_checkpointing=full" not in with_ac.split(":", 1)[1]


def test_metric_values_use_the_planner_flops_and_peak(tmp_path: Path) -> None:
    config = PRESETS["gpt-1b"]
    fpt = gpt.flops_per_token(config, 8192)
    peak = catalogue.dense_peak_tflops("B200", "mxfp8")
    stream = io.StringIO()
    logger = MetricsLogger(
        tokens_per_step=8 * 8192,
        world_size=8,
        flops_per_token=fpt,
        device=torch.device("cpu"),
        info=DeviceInfo("cuda", "NVIDIA B200", peak),
        rank=0,
        metrics_file=tmp_path / "m.jsonl",
        stream=stream,
    )
    logger.start()
    time.sleep(0.05)
    logger.step_done()
    logger.publish_once({"all_gather_busbw_gb_s": 310.5, "reduce_scatter_busbw_gb_s": 298.25})  # the pre-flight's
    values = logger.values(step=1, loss=2.5, lr=1e-4, grad_norm=0.5)
    assert values["all_gather_busbw_gb_s"] == 310.5
    assert "all_gather_busbw_gb_s" not in logger.values(step=2, loss=2.5, lr=1e-4, grad_norm=0.5)  # the first only
    assert values["tokens_per_sec_per_gpu"] == pytest.approx(values["tokens_per_sec"] / 8)
    assert values["tflops_per_gpu"] == pytest.approx(
        models.model_tflops_per_second(values["tokens_per_sec_per_gpu"], fpt)
    )
    assert values["mfu"] == pytest.approx(models.mfu_percent(values["tokens_per_sec_per_gpu"], fpt, peak))
    line = logger.log(values)
    assert stream.getvalue().strip() == line
    record = json.loads((tmp_path / "m.jsonl").read_text())
    assert record["loss"] == 2.5 and record["step"] == 1
    validation = logger.log({"step": 1, "validation_loss": 2.75})
    assert validation == "[metrics] step=1 validation_loss=2.7500"
    for definition in METRIC_DEFINITIONS:  # every SageMaker regex captures its value from the line that has it
        training = definition["Name"] != "validation:loss"
        assert bool(re.search(definition["Regex"], line)) is training, definition
        # the validation line feeds validation:loss and the step, never train:loss (a "\b" before "loss=")
        captured = re.search(definition["Regex"], validation)
        assert bool(captured) is (definition["Name"] in ("validation:loss", "train:step")), definition


def test_cpu_device_info_and_memory() -> None:
    info = DeviceInfo.detect(torch.device("cpu"), "fp32")
    assert info.type == "cpu" and info.peak_tflops is None
    allocated, reserved = peak_memory_gb(torch.device("cpu"))
    assert 0.01 < allocated == reserved < 64
    assert parse_line("[metrics] step=1 mfu=nan")["mfu"] != parse_line("[metrics] step=1 mfu=nan")["mfu"]  # nan
