"""The optimizer's one home (platform_spec.optimizers): the trainer builds the optimizer it names and the planner
models that same record's memory. Each side is shown to read the home by changing the home's answer (monkeypatch)
and seeing the trainer's optimizer and the planner's terms follow, not by comparing two copies."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from planner import PlanInput
from planner import memory as planner_memory
from planner.inputs import resolve
from platform_spec import optimizers
from platform_spec.hyperparameters import Hyperparameters
from platform_spec.optimizers import FOREACH_ADAMW, FUSED_ADAMW, TE_FUSED_ADAM, optimizer_for
from training import train


def test_the_home_names_fused_adamw_on_cuda_foreach_on_the_cpu_and_te_fused_adam_for_quantized_weights() -> None:
    assert optimizer_for("cuda", quantized_model_init=False) is FUSED_ADAMW
    assert optimizer_for("cpu", quantized_model_init=False) is FOREACH_ADAMW
    assert optimizer_for("cuda", quantized_model_init=True) is TE_FUSED_ADAM
    assert (FUSED_ADAMW.step_temporary_bytes, FOREACH_ADAMW.step_temporary_bytes) == (0.0, 4.0)
    assert FUSED_ADAMW.state_bytes_per_parameter == 8.0 and TE_FUSED_ADAM.state_bytes_per_parameter == 12.0
    with pytest.raises(ValueError, match="device_type 'mps'"):
        optimizer_for("mps", quantized_model_init=False)


@pytest.mark.parametrize("choice", [FOREACH_ADAMW, FUSED_ADAMW])
def test_the_trainer_builds_the_optimizer_the_home_names(monkeypatch: pytest.MonkeyPatch, choice) -> None:
    """The CPU's answer is foreach; told fused (CUDA's answer, whose kernel torch also has on the CPU), the
    trainer builds a fused AdamW: its construction reads the home."""
    asked: list[tuple[str, bool]] = []

    def home(device_type: str, *, quantized_model_init: bool):
        asked.append((device_type, quantized_model_init))
        return choice

    monkeypatch.setattr(train, "optimizer_for", home)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    hp = Hyperparameters(precision="fp32", weight_decay=0.1)
    optimizer = train.build_optimizer(model, hp, torch.device("cpu"))
    assert asked == [("cpu", False)]
    assert type(optimizer) is torch.optim.AdamW
    assert optimizer.defaults[choice.kind] is True
    assert optimizer.defaults["fused" if choice.kind == "foreach" else "foreach"] in (None, False)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]  # matrices decay, vectors do not
    assert optimizer_for("cpu", quantized_model_init=False) is FOREACH_ADAMW  # unpatched: the CPU's answer


def _resolved(**changes):
    base = {"model": "gpt-8b", "instance_type": "ml.p5.48xlarge", "precision": "fp8", "seq_length": 4096}
    return resolve(PlanInput(**{**base, **changes}))


@pytest.mark.parametrize("choice", [FUSED_ADAMW, FOREACH_ADAMW, TE_FUSED_ADAM])
def test_the_planner_models_the_optimizer_the_home_names(monkeypatch: pytest.MonkeyPatch, choice) -> None:
    """The optimizer step's transient and the optimizer state are the home's figures for its answer, whatever it
    answers (a foreach AdamW adds its fp32 temporary; TE's FusedAdam its fp32 master copy of every parameter)."""
    monkeypatch.setattr(planner_memory, "optimizer_for", lambda device_type, *, quantized_model_init: choice)
    r = _resolved()
    N, D = r.model.num_params, r.shard_degree
    breakdown = planner_memory.estimate_memory(r)
    step = breakdown.phase_terms["optimizer_step"]
    assert step["transient"] == pytest.approx(choice.step_temporary_bytes * N / D / 1e9)
    assert step["optimizer_state"] == pytest.approx(choice.state_bytes_per_parameter * N / D / 1e9)
    assert planner_memory.state_bytes(r)[1] == choice.state_bytes_per_parameter * N


def test_quantized_model_init_is_planned_as_te_keeps_it() -> None:
    """quantized_model_init (TE 2.19, FSDP2): the block GEMM weights stored in the layouts TE creates them with
    (fp8 on an H100: data + transpose, 2 bytes), every other parameter fp32, and FusedAdam's 12 bytes per
    parameter (two fp32 moments, the fp32 master of every parameter); the default path keeps fp32 parameters and
    a fused AdamW's 8 bytes."""
    plain, stored = _resolved(), _resolved(quantized_model_init=True)
    m, terms = stored.model, stored.family.terms
    assert terms is not None
    N, LW = m.num_params, m.num_layers * terms.matmul_weights_per_block(m)
    assert planner_memory.trainer_optimizer(stored) is TE_FUSED_ADAM
    assert planner_memory.trainer_optimizer(plain) is optimizers.FUSED_ADAMW
    assert planner_memory.state_bytes(stored) == (2.0 * LW + 4.0 * (N - LW), 12.0 * N)
    assert planner_memory.state_bytes(plain) == (4.0 * N, 8.0 * N)
    # Blackwell reads fp8 in either layout: one byte per stored fp8 weight; mxfp8 keeps both, with scales
    b200 = dataclasses.replace(stored, gpu=_resolved(instance_type="ml.p6-b200.48xlarge").gpu)
    assert planner_memory.state_bytes(b200)[0] == 1.0 * LW + 4.0 * (N - LW)


@pytest.mark.usefixtures("process_group")
def test_a_fused_adamw_steps_fsdp2_shards_as_the_foreach_one_does() -> None:
    """What CUDA's answer relies on: ``_fused_adamw_`` dispatches on DTensor shards (FSDP2's parameters). Its CPU
    kernel goes through the same DTensor rule as the CUDA one, so here it is stepped on a one-process gloo mesh
    against the foreach AdamW the CPU path uses: the same weights after three steps, to fp32 rounding."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from training.parallelize import SHARD_DIM

    weights = {}
    for choice in (FOREACH_ADAMW, FUSED_ADAMW):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 4))
        fully_shard(model, mesh=init_device_mesh("cpu", (1,), mesh_dim_names=(SHARD_DIM,)))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1, **{choice.kind: True})
        for _ in range(3):
            optimizer.zero_grad()
            model(torch.ones(2, 8)).pow(2).sum().backward()
            optimizer.step()
        weights[choice.kind] = [p.full_tensor().detach().clone() for p in model.parameters()]
    for foreach, fused in zip(weights["foreach"], weights["fused"], strict=True):
        torch.testing.assert_close(fused, foreach, rtol=1e-5, atol=1e-6)
