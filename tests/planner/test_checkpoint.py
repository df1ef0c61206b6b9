"""The planner's checkpoint figures (``planner.checkpoint``): each formula against hand-computed values for a real
preset, the step time and cost that include them, the recommendations, the input's validation and ``trainctl
plan``'s output. The comparison with a checkpoint the trainer really saved is
``tests/training/test_checkpoint_size.py``."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from planner import PlanInputError, estimate
from planner.checkpoint import estimate_checkpoint
from planner.inputs import PlanInput, resolve
from planner.plan import CHECKPOINT_NOTE, evaluate
from planner.throughput import estimate_throughput
from platform_spec.capacity import SIGTERM_GRACE_S
from trainctl.cli import main
from trainctl.plans import render_plan

LLAMA3_8B_PARAMS = 8_030_261_248
"""Llama 3 8B's parameters (Meta's model card: 8.03B; untied embedding and head)."""


def llama8b_on_two_p5(**changes) -> PlanInput:
    """Llama 3 8B, bf16, sequence 8192, batch 1, on 2 x ml.p5.48xlarge, FSDP full shard over the 16 GPUs."""
    fields = {
        "model": "llama3-8b",
        "precision": "bf16",
        "seq_length": 8192,
        "batch_size": 1,
        "instance_type": "ml.p5.48xlarge",
        "instance_count": 2,
    }
    return PlanInput(**{**fields, **changes})


def test_llama3_8b_on_two_p5_by_hand() -> None:
    r = resolve(llama8b_on_two_p5())
    assert r.model.num_params == LLAMA3_8B_PARAMS and r.shard_degree == 16
    ck = estimate_checkpoint(r, step_s=1.0)
    assert ck is not None
    state = 12 * 8_030_261_248  # fp32 parameters 4N + AdamW's moments 8N = 96,363,134,976 bytes
    size = state + 16 * 14_462 + 2_000  # + one RNG file per rank + trainer_state.json = 96,363,368,368
    assert ck.state_bytes == state and ck.size_bytes == size == 96_363_368_368
    assert ck.per_gpu_bytes == 6_022_695_936  # state / 16
    assert ck.written_per_host_bytes == 48_181_684_184  # size / 2 hosts
    assert ck.download_per_host_bytes == size  # the whole prefix: one checkpoint, to each host
    assert ck.staging_per_host_bytes == 48_181_567_488  # 8 GPUs x 6,022,695,936
    assert ck.host_memory_bytes == 2048 * 2**30 and ck.staging_fits
    assert ck.staging_s == pytest.approx(6_022_695_936 / 32e9)  # PCIe Gen5 64 GB/s x 0.5 = 0.1882 s
    assert ck.write_s == pytest.approx(48_181_684_184 / 2.7e9)  # 17.845 s at one NVMe device's 2.7 GB/s
    assert ck.sync_save_s == pytest.approx(0.18820925 + 17.84506822)
    assert ck.blocking_s == pytest.approx(0.18820925)  # async: the staging; the write hides behind 500 steps
    assert ck.per_step_s == pytest.approx(0.18820925 / 500)
    assert ck.stop_s == pytest.approx(1.0 + 17.84506822 + 18.03327747)  # step, write in flight, sync save
    assert ck.stop_limit_s == SIGTERM_GRACE_S == 120 and ck.stop_fits


def test_sync_saves_block_for_the_write_and_stage_nothing() -> None:
    ck = estimate_checkpoint(resolve(llama8b_on_two_p5(checkpoint_save="sync", checkpoint_interval=100)), 1.0)
    assert ck is not None
    assert ck.blocking_s == pytest.approx(ck.sync_save_s) and ck.per_step_s == pytest.approx(ck.sync_save_s / 100)
    assert ck.staging_per_host_bytes == 0 and ck.stop_s == pytest.approx(1.0 + ck.sync_save_s)


def test_an_async_write_longer_than_the_interval_makes_the_next_save_wait() -> None:
    r = resolve(llama8b_on_two_p5(checkpoint_interval=10))
    ck = estimate_checkpoint(r, step_s=1.0)  # the write (17.8 s) outlasts 10 steps of 1 s
    assert ck is not None
    assert ck.blocking_s == pytest.approx(ck.staging_s + ck.write_s - 10.0)


def test_hybrid_sharding_stages_a_whole_replica_per_host_and_writes_half_the_checkpoint() -> None:
    ck = estimate_checkpoint(resolve(llama8b_on_two_p5(sharding_strategy="hybrid")), 1.0)
    assert ck is not None
    assert ck.per_gpu_bytes == 12 * LLAMA3_8B_PARAMS / 8  # shard over the 8 GPUs of a host
    assert ck.staging_per_host_bytes == 12 * LLAMA3_8B_PARAMS  # every host holds a replica
    assert ck.written_per_host_bytes == ck.size_bytes / 2  # DCP writes each replicated shard once


def test_the_step_time_tokens_and_cost_include_the_interval_saves() -> None:
    def throughput(**changes):
        return estimate_throughput(resolve(llama8b_on_two_p5(tokens=1e12, **changes)))

    rare, often = throughput(checkpoint_interval=10**9), throughput(checkpoint_interval=1, checkpoint_save="sync")
    assert often.checkpoint is not None and rare.checkpoint is not None
    base = rare.step_time_s - rare.checkpoint.per_step_s
    assert often.step_time_s == pytest.approx(base + often.checkpoint.sync_save_s)
    assert often.tokens_per_second < rare.tokens_per_second and often.mfu < rare.mfu
    assert often.cost is not None and rare.cost is not None
    assert often.cost.wall_time_hours > rare.cost.wall_time_hours


def test_blocks_only_plans_save_no_checkpoints() -> None:
    plan = evaluate(llama8b_on_two_p5(model="gpt-1b", blocks_only=True, precision="bf16", instance_count=1))
    assert plan.throughput.checkpoint is None
    assert plan.to_dict()["checkpoint"] is None and CHECKPOINT_NOTE not in plan.to_dict()["notes"]


def test_a_save_at_a_stop_past_sagemakers_120_s_is_flagged() -> None:
    # Llama 3 70B on 4 x p5: each host writes 212 GB, 78 s at 2.7 GB/s; waiting for the asynchronous write in
    # flight as well takes the stop past 120 s, a synchronous interval save does not
    fields = {"activation_checkpointing": "full", "model": "llama3-70b", "instance_count": 4}
    flagged = estimate(llama8b_on_two_p5(**fields))
    ck = flagged.throughput.checkpoint
    assert flagged.fits and ck is not None and not ck.stop_fits and ck.stop_s > 120
    rec = [r for r in flagged.recommendations if r.kind == "checkpoint"]
    assert len(rec) == 1 and "120 s" in rec[0].title and rec[0].changes == {}
    calm = estimate(llama8b_on_two_p5(**fields, checkpoint_save="sync"))
    assert calm.throughput.checkpoint is not None and calm.throughput.checkpoint.stop_fits
    assert not [r for r in calm.recommendations if r.kind == "checkpoint"]


def test_a_plan_that_does_not_fit_gives_the_stop_warning_once_for_the_configuration_that_fits() -> None:
    """Llama 3 70B on 4 x p5 without activation checkpointing does not fit: the fitting configuration's save at a
    stop is flagged (its figures), the requested one's (a configuration that would not run) is not added again."""
    plan = estimate(llama8b_on_two_p5(model="llama3-70b", instance_count=4))
    assert not plan.fits and plan.recommendations[0].title.startswith("Make it fit")
    stop = [r for r in plan.recommendations if r.kind == "checkpoint" and "120 s" in r.title]
    fitting = plan.recommendations[0].after
    assert fitting is not None and fitting.throughput.checkpoint is not None
    assert len(stop) == 1 and f"{fitting.throughput.checkpoint.stop_s:,.0f} s in all" in stop[0].reason


def test_staging_beyond_host_memory_recommends_synchronous_saves() -> None:
    # Llama 3 70B on 2 x ml.p5.4xlarge: 423 GB of state per host against 256 GiB of host memory
    plan = estimate(llama8b_on_two_p5(model="llama3-70b", instance_type="ml.p5.4xlarge"))
    ck = plan.throughput.checkpoint
    assert ck is not None and not ck.staging_fits
    rec = [r for r in plan.recommendations if r.kind == "checkpoint" and r.changes]
    assert len(rec) == 1 and rec[0].changes == {"checkpoint_save": "sync"}
    assert rec[0].after is not None and rec[0].after.throughput.checkpoint is not None
    assert rec[0].after.throughput.checkpoint.staging_fits


@pytest.mark.parametrize(
    "instance_type", ["ml.p5.48xlarge", "ml.p5en.48xlarge", "ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge"]
)
def test_state_that_fits_the_gpus_fits_the_host_when_staged(instance_type: str) -> None:
    # 12 bytes per parameter staged against at least 16 in HBM: on these hosts the host memory exceeds 12/16 of the
    # GPUs' (so only a plan that does not fit the GPUs meets the host-memory rule)
    r = resolve(llama8b_on_two_p5(instance_type=instance_type, precision="bf16"))
    assert r.instance.host_memory_gib is not None
    assert 0.75 * r.instance.host_memory_gib * 2**30 > 12 / 16 * r.instance.gpu_memory_gb * 1e9


def test_checkpoint_save_is_validated() -> None:
    with pytest.raises(PlanInputError) as err:
        evaluate(llama8b_on_two_p5(checkpoint_save="lazy"))
    assert err.value.field == "checkpoint_save" and "async, sync" in str(err.value)
    with pytest.raises(ValueError, match="step_s"):
        estimate_checkpoint(resolve(llama8b_on_two_p5()), -1.0)


def test_trainctl_plan_prints_and_serialises_the_checkpoint(capsys) -> None:
    argv = ["--model", "llama3-8b", "--precision", "bf16", "--seq-length", "8192", "--batch-size", "1"]
    argv += ["--instance-type", "ml.p5.48xlarge", "--instance-count", "2", "--checkpoint-interval", "200"]
    assert main(["plan", "--json", *argv, "--checkpoint-save", "sync"]) == 0
    d = json.loads(capsys.readouterr().out)
    ck = d["checkpoint"]
    assert d["input"]["checkpoint_save"] == "sync" and d["input"]["checkpoint_interval"] == 200
    assert ck["size_gb"] == pytest.approx(96.3634) and ck["download_per_host_gb"] == pytest.approx(96.3634)
    assert ck["written_per_host_gb"] == pytest.approx(48.1817) and ck["staging_per_host_gb"] == 0
    assert ck["write_s"] == pytest.approx(17.845, abs=1e-3) and ck["stop_fits"] is True
    assert d["time_breakdown_s"]["checkpoint"] == pytest.approx(ck["sync_save_s"] / 200, rel=1e-3)
    assert CHECKPOINT_NOTE in d["notes"]

    console = Console(file=io.StringIO(), width=200, record=True)
    render_plan(estimate(llama8b_on_two_p5()), console)
    text = console.export_text()
    for needle in (
        "Checkpoints",
        "size (one checkpoint)",
        "96.4 GB (6.02 GB per GPU)",
        "restart download per instance",
        "synchronous save (write)",
        "17.8 s at 2.7 GB/s local NVMe",
        "interval saves (async, every 500 steps)",
        "staging host memory per instance",
        "48.2 GB of 2,199 GB",
        "save at a stop (SIGTERM)",
        "of 120 s",
    ):
        assert needle in text, needle
