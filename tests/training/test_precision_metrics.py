"""Precision rules, loss scaling, the LR schedule, stop decisions, metric values, failure reasons."""

from __future__ import annotations

import io
import json
import math
import re
import time
from pathlib import Path

import pytest
import torch

from model_families import gpt
from model_families.gpt import PRESETS
from platform_spec import catalogue, models
from platform_spec.hyperparameters import Hyperparameters
from platform_spec.precisions import PRECISIONS
from platform_spec.metric_lines import METRIC_DEFINITIONS, parse_line
from training import precision
from training.metrics import DeviceInfo, MetricsLogger, peak_memory_gb
from training.train import StopController, learning_rate, oom_reason


@pytest.mark.parametrize("name", ["fp16", "fp8", "mxfp8", "nvfp4"])
def test_gpu_precisions_are_refused_on_cpu(name: str) -> None:
    with pytest.raises(precision.PrecisionError, match=rf"'precision': got '{name}', expected one of fp32, bf16 on CPU"):
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
    with pytest.raises(precision.PrecisionError, match=r"'precision': got 'fp64', expected one of fp32, bf16, fp16, fp8, mxfp8, nvfp4"):
        precision.plan("fp64")


def _cuda_device(monkeypatch: pytest.MonkeyPatch, name: str, capability: tuple[int, int]) -> torch.device:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    return torch.device("cuda", 0)


@pytest.mark.parametrize(
    ("capability", "name", "runs"),
    [
        ((11, 0), "mxfp8", True),  # Thor: TransformerEngine runs the block-scaled formats (the old catalogue rule said no)
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
    with pytest.raises(precision.PrecisionError, match=r"one of fp32, bf16, fp16 here: TransformerEngine is not installed"):
        precision.check_supported("fp8", device, te_available=False)


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
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))
    assert learning_rate(5, Hyperparameters(warmup_steps=0, max_steps=10, learning_rate=1e-3, min_learning_rate=0.0)) < 1e-3


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
        tokens_per_step=8 * 8192, world_size=8, flops_per_token=fpt, device=torch.device("cpu"),
        info=DeviceInfo("cuda", "NVIDIA B200", peak), rank=0, metrics_file=tmp_path / "m.jsonl", stream=stream,
    )
    logger.start()
    time.sleep(0.05)
    logger.step_done()
    values = logger.values(step=1, loss=2.5, lr=1e-4, grad_norm=0.5)
    assert values["tokens_per_sec_per_gpu"] == pytest.approx(values["tokens_per_sec"] / 8)
    assert values["tflops_per_gpu"] == pytest.approx(models.model_tflops_per_second(values["tokens_per_sec_per_gpu"], fpt))
    assert values["mfu"] == pytest.approx(models.mfu_percent(values["tokens_per_sec_per_gpu"], fpt, peak))
    line = logger.log(values)
    assert stream.getvalue().strip() == line
    record = json.loads((tmp_path / "m.jsonl").read_text())
    assert record["loss"] == 2.5 and record["step"] == 1
    for definition in METRIC_DEFINITIONS:  # every SageMaker regex captures its value from the printed line
        assert re.search(definition["Regex"], line), definition


def test_cpu_device_info_and_memory() -> None:
    info = DeviceInfo.detect(torch.device("cpu"), "fp32")
    assert info.type == "cpu" and info.peak_tflops is None
    allocated, reserved = peak_memory_gb(torch.device("cpu"))
    assert 0.01 < allocated == reserved < 64
    assert parse_line("[metrics] step=1 mfu=nan")["mfu"] != parse_line("[metrics] step=1 mfu=nan")["mfu"]  # nan
