"""CheckpointManager: completeness marker, keep-last-K, resume of model/optimizer/RNG (single process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from training.checkpoint import COMPLETE_MARKER, TRAINER_STATE, CheckpointManager, complete_steps, step_dirs


pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def _model_and_optimizer(seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2)


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(5, 8)).square().mean().backward()
        opt.step()


def test_keep_last_k_and_half_written_checkpoints_are_ignored(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    manager = CheckpointManager(tmp_path, keep=2, rank=0, local_rank=0, world_size=1)
    for step in (1, 2, 3):
        _train(model, opt, 1)
        manager.save(step, model, opt, {"data": {"step": step}})
    assert complete_steps(tmp_path) == [2, 3]
    assert set(step_dirs(tmp_path)) == {2, 3}
    marker = json.loads((tmp_path / "step-3" / COMPLETE_MARKER).read_text())
    assert marker["step"] == 3 and marker["world_size"] == 1

    # A save killed half-way: newer step, files present, no completion marker.
    half = tmp_path / "step-9"
    half.mkdir()
    (half / "__0_0.distcp").write_bytes(b"partial")
    (half / TRAINER_STATE).write_text('{"step": 9}')
    assert manager.latest_step() == 3
    assert manager.remove_incomplete() == [9]
    assert not half.exists()


def test_resume_restores_model_optimizer_and_rng(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    _train(model, opt, 3)
    torch.manual_seed(42)
    CheckpointManager(tmp_path, keep=3, rank=0, local_rank=0, world_size=1).save(
        3, model, opt, {"data": {"step": 3}, "scheduler": {"last_epoch": 3}}
    )
    expected_random = torch.rand(4)
    torch.manual_seed(7)
    _train(model, opt, 2)  # the uninterrupted run continues

    fresh, fresh_opt = _model_and_optimizer(1)  # other initial weights, empty optimizer state
    torch.manual_seed(999)
    state = CheckpointManager(tmp_path, keep=3, rank=0, local_rank=0, world_size=1).load_latest(fresh, fresh_opt)
    assert state is not None and state["step"] == 3 and state["data"] == {"step": 3} and state["restored_rng"]
    torch.testing.assert_close(torch.rand(4), expected_random)  # the RNG continues where it was saved
    torch.manual_seed(7)
    _train(fresh, fresh_opt, 2)  # the resumed run
    for a, b in zip(fresh.parameters(), model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # weights and Adam moments restored exactly


def test_no_checkpoint_means_fresh_start(tmp_path: Path) -> None:
    model, opt = _model_and_optimizer(0)
    assert CheckpointManager(tmp_path / "empty", keep=1, rank=0, local_rank=0, world_size=1).load_latest(model, opt) is None
