"""Restarts on real checkpoints of the 2-process reference run (``conftest.reference_run``).

Each test copies the reference run's DCP checkpoints (``step-15``, ``step-20``;
written by 2 processes) into its own base directory, damages or reuses them,
and runs the container entry point on them:

* a cut-off shard of the newest checkpoint is skipped with a log line, and a
  1-process run resumes the previous one and continues the 2-process run's data
  and losses (DCP reshards model and optimizer; same global batch); stopped by
  ``trainctl train --stop-at-step``, every report names the step the trainer
  really stopped after and the checkpoint a restart really uses;
* a run of another model shape and global batch is refused before training
  with both values named, the other run's checkpoints stay as they were, and
  ``trainctl train`` puts the previous settings back so a plain rerun resumes;
* when nothing can be loaded (one checkpoint's ``.metadata`` cut, the other's
  RNG file cut on rank 1 only), every rank gives up together and the failure
  reason names each folder and what is wrong with it.

The resharding itself (2-process checkpoint into 1 process, equal weights and
AdamW state) is checked in this process, without a run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from platform_spec.models import get_preset
from trainctl.cli import main
from training.checkpoint.manager import CheckpointManager
from training.checkpoint.verify import complete_steps, verify_checkpoint
from training.environment import SageMakerPaths
from training.local import prepare_base_dir, read_failure, read_metrics, run_local
from training.model import build_model, load_pretrained
from training.supervision import read_status

from .conftest import REFERENCE_HP

pytestmark = [
    pytest.mark.slow,
    pytest.mark.xdist_group("trainer-runs"),
    pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning"),
]


def _copy_checkpoints(reference: Path, base: Path, steps: tuple[int, ...]) -> Path:
    target = base / "checkpoints"
    for step in steps:
        shutil.copytree(reference / "checkpoints" / f"step-{step}", target / f"step-{step}")
    return target


def _files(directory: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_a_two_process_checkpoint_loads_into_one_process_with_equal_weights(reference_run, tmp_path: Path) -> None:
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    ref_base, _ = reference_run
    config = get_preset("gpt-tiny").with_overrides(num_layers=REFERENCE_HP["num_layers"])
    model = build_model(config)  # one process, no FSDP: plain tensors
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    manager = CheckpointManager(ref_base / "checkpoints", keep=2, rank=0, local_rank=0, world_size=1)
    resumed = manager.load_latest(model, optimizer)
    assert resumed is not None and resumed.step == 20 and resumed.skipped == {}
    assert resumed.trainer_state["run"]["world_size"] == 2

    # The weights equal the 2-process run's consolidated export of the same step ...
    exported = load_pretrained(ref_base / "model").state_dict()
    loaded = model.state_dict()
    assert set(loaded) == set(exported)
    for name, tensor in exported.items():
        torch.testing.assert_close(loaded[name], tensor, rtol=0, atol=0, msg=name)
    # ... and the AdamW moments equal the checkpoint's, gathered by DCP's own converter.
    dcp_to_torch_save(ref_base / "checkpoints" / "step-20", tmp_path / "full.pt")
    full = torch.load(tmp_path / "full.pt", weights_only=False)
    names = {id(p): n for n, p in model.named_parameters()}
    compared = 0
    for param, state in optimizer.state.items():
        saved = full["optimizer"]["state"][names[id(param)]]
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(state[key], saved[key], rtol=0, atol=0)
            compared += 1
        assert float(state["step"]) == 20.0
    assert compared == 2 * len(list(model.parameters()))


def test_damaged_newest_is_skipped_and_one_process_continues_the_two_process_run(
    reference_run, pydocs_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref_base, _ = reference_run
    reference = {int(r["step"]): r for r in read_metrics(ref_base)}
    base = tmp_path / "restart"
    checkpoints = _copy_checkpoints(ref_base, base, (15, 20))
    shard = checkpoints / "step-20" / "__0_0.distcp"
    size = shard.stat().st_size
    with open(shard, "r+b") as fh:
        fh.truncate(1000)  # the upload of the large shard was cut short; .complete arrived
    cut = f"step-20: __0_0.distcp has 1000 of the {size} bytes .metadata needs (cut short)"

    # One process, batch 16: the same global batch of 16 sequences as 2 processes x 8. Through `trainctl train`,
    # stopped with --stop-at-step as SageMaker stops a job: the reports must name the step the trainer really
    # stopped after and the checkpoint a restart really uses (regression: both named the damaged step-20).
    prepare_base_dir(base, {**REFERENCE_HP, "batch_size": 16}, data_dir=pydocs_shards)
    assert main(["train", "--base-dir", str(base), "--nproc", "1", "--stop-at-step", "16"]) == 0
    out = capsys.readouterr().out
    assert read_failure(base) is None
    assert f"skipping checkpoint step-20: {cut[len('step-20: ') :]}; falling back to step-15" in out
    assert f"resumed from {checkpoints.resolve() / 'step-15'} (step 15; rng restored: True)" in out
    assert (
        "resuming step-15 with changes: layout 2 processes x batch_size 8 x gradient_accumulation_steps 1 -> "
        "1 process x batch_size 16 x gradient_accumulation_steps 1 (same global batch of 16" in out
    )
    assert "data continues at sample 240 of the run" in out  # 15 steps x 16 sequences, none re-read
    stopped = max(int(r["step"]) for r in read_metrics(base))
    assert 16 <= stopped < 20
    assert f"[trainer] stopped after step {stopped}: SIGTERM/SIGINT received" in out
    assert (
        f"[entrypoint] stopped by SIGTERM: the workers stopped after step {stopped} and saved it (checkpoint "
        f"step-{stopped}); a restart resumes from step-{stopped} (newer ones do not verify and are skipped: {cut})"
    ) in out
    assert (
        f"trainctl train: stopped after step {stopped} (checkpoint step-{stopped}); the same command resumes from "
        f"step-{stopped} (newer ones do not verify and are skipped: {cut})"
    ) in out
    status = read_status(SageMakerPaths(base))
    assert (status.state, status.resumed_from, status.saved, status.step) == ("stopped", 15, stopped, stopped)
    assert list(status.skipped) == [20]

    # The same command again (the layout as it is): skips step-20 again, resumes the stop's checkpoint.
    run = run_local(base, None, nproc=1, timeout=600)
    assert run.returncode == 0, run.output[-3000:]
    assert (
        f"resumed from {checkpoints.resolve() / f'step-{stopped}'} (step {stopped}; rng restored: True)" in run.output
    )
    records = read_metrics(base)
    assert [r["step"] for r in records] == [16, 17, 18, 19, 20]  # none lost, none repeated
    for r in records:
        # Same sequences in each step as the 2-process run; only the order of fp32 sums differs
        # (1 x 16 vs 2 x 8 sequences), as in the 1-vs-2-process comparison of test_training_runs.
        assert r["loss"] == pytest.approx(reference[r["step"]]["loss"], abs=2e-4), r["step"]
        assert r["lr"] == reference[r["step"]]["lr"], r["step"]
    # step-20 was written again, whole; pruning (keep=2) kept the stop's checkpoint as the older loadable one.
    assert complete_steps(checkpoints) == [stopped, 20]
    assert verify_checkpoint(checkpoints / "step-20", 20).ok
    assert run.restart is not None and run.restart.step == 20 and run.restart.skipped == {}


def test_another_model_and_global_batch_are_refused_and_the_checkpoints_stay(
    reference_run, pydocs_shards: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ref_base, _ = reference_run
    base = tmp_path / "other-run"
    checkpoints = _copy_checkpoints(ref_base, base, (15, 20))
    paths = prepare_base_dir(
        base, REFERENCE_HP, data_dir=pydocs_shards
    )  # the checkpoints' run, as trainctl laid it out
    before = _files(checkpoints)
    layout = _files(paths.config_dir)
    # num_layers 2 -> 1 (a partial load used to "succeed"), and 1 process x 8 sequences: half the global batch
    assert main(["train", "--base-dir", str(base), "--num-layers", "1", "--nproc", "1"]) == 1
    captured = capsys.readouterr()
    reason = read_failure(base)
    assert reason is not None
    assert reason.startswith(
        f"checkpoint {checkpoints.resolve() / 'step-20'} belongs to another run: "
        "model num_layers: 2 in the checkpoint, 1 in this run; global batch: 16 sequences per "
        "optimizer step in the checkpoint (2 processes x batch_size 8 x gradient_accumulation_steps 1), "
        "8 in this run (1 process x batch_size 8 x gradient_accumulation_steps 1)"
    ), reason
    assert "keep 16 (with 1 process set gradient_accumulation_steps=2 or batch_size=16)" in reason
    assert "Nothing was loaded, pruned or overwritten" in reason and len(reason) <= 1024
    assert "[metrics]" not in captured.out  # not one step trained
    assert _files(checkpoints) == before
    assert not (base / "model" / "model.safetensors").exists()
    assert read_status(paths).state == "refused"
    # Regression: the refused settings stayed in hyperparameters.json, so the plain rerun was refused again.
    assert _files(paths.config_dir) == layout
    assert (
        f"trainctl train: put back the previous run's settings (input/config/hyperparameters.json), so "
        f"`trainctl train --base-dir {base.resolve()}` resumes the checkpoint's run; to train with the new settings, "
        "give them another --base-dir"
    ) in captured.err
    assert main(["train", "--base-dir", str(base)]) == 0  # the plain rerun resumes (and has nothing left to train)
    assert f"resumed from {checkpoints.resolve() / 'step-20'} (step 20; rng restored: True)" in capsys.readouterr().out
    assert _files(checkpoints) == before


def test_nothing_loadable_fails_on_every_rank_with_each_folder_named(
    reference_run, pydocs_shards: Path, tmp_path: Path
) -> None:
    ref_base, _ = reference_run
    base = tmp_path / "all-damaged"
    checkpoints = _copy_checkpoints(ref_base, base, (15, 20))
    with open(checkpoints / "step-20" / ".metadata", "r+b") as fh:
        fh.truncate(64)
    # Only rank 1 fails to load step-15 (its RNG file is cut); rank 0 loads it. All ranks must give up together.
    with open(checkpoints / "step-15" / "rng" / "rank-00001.pt", "r+b") as fh:
        fh.truncate(10)
    before = _files(checkpoints)

    run = run_local(base, REFERENCE_HP, data_dir=pydocs_shards, nproc=2, timeout=300)
    assert run.returncode == 1, run.output[-3000:]  # not killed by the timeout: no rank waited forever
    reason = read_failure(base)
    assert reason is not None
    assert reason.startswith(
        f"no loadable checkpoint in {checkpoints.resolve()} (step-20: DCP .metadata (64 bytes) does not parse: "
    ), reason
    assert "; step-15: on rank 1: loading failed: RuntimeError: rng/rank-00001.pt: " in reason
    assert "skipping checkpoint step-20: DCP .metadata (64 bytes) does not parse" in run.output
    assert "falling back to step-15" in run.output
    assert "[metrics]" not in run.output
    assert _files(checkpoints) == before  # nothing pruned, removed or overwritten
    assert not (base / "model" / "model.safetensors").exists()
