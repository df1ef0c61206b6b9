"""Checkpoints with torch.distributed.checkpoint (DCP), and the final model export.

Layout of ``<checkpoint_dir>`` (``/opt/ml/checkpoints``, synced to S3 by SageMaker)::

    step-120/
        .metadata, __0_0.distcp, ...   DCP: model + optimizer (sharded DTensors, fp32)
        trainer_state.json              step, data position, LR scheduler, loss scaler, hyperparameters
        rng/rank-00000.pt               per-rank RNG states (python, numpy, torch, cuda)
        .complete                       written last: the checkpoint is whole

Write protocol: every rank writes its files into ``step-N/``, a barrier
waits for all ranks (DCP's ``.metadata`` is written by rank 0 after the
others finished), then each node's local rank 0 writes ``.complete``. A
folder without ``.complete`` (a run killed while saving) is never loaded and
is deleted at the next start. A marker rather than a rename because on
SageMaker each node has its own ``/opt/ml/checkpoints`` that is synced to the
same S3 prefix: every node marks its own copy complete, and nothing is
uploaded twice.

Resume: the newest complete ``step-N`` (chosen by global rank 0 and
broadcast, so all ranks agree) is loaded with
``torch.distributed.checkpoint.state_dict.get_state_dict / set_state_dict``
(FSDP2-aware; resharding to another world size works for model and
optimizer). After each save only the newest ``keep`` complete checkpoints stay.

Final weights: :func:`export_model` gathers the full state dict to rank 0
and writes consolidated safetensors + ``config.json``
(:func:`training.model.save_pretrained`).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

COMPLETE_MARKER = ".complete"
TRAINER_STATE = "trainer_state.json"
_STEP_RE = re.compile(r"^step-(\d+)$")


def step_dirs(directory: Path) -> dict[int, Path]:
    """``{step: folder}`` of every ``step-N`` folder (complete or not)."""
    out: dict[int, Path] = {}
    if directory.is_dir():
        for child in directory.iterdir():
            m = _STEP_RE.match(child.name)
            if m and child.is_dir():
                out[int(m.group(1))] = child
    return out


def is_complete(path: Path) -> bool:
    """A checkpoint folder is complete when its marker exists.

    The marker is written after a barrier that follows every rank's writes,
    so it implies the DCP files, ``trainer_state.json`` and the RNG files exist
    (on this node; on SageMaker the other nodes' shards arrive through S3).
    """
    return (path / COMPLETE_MARKER).is_file()


def complete_steps(directory: Path) -> list[int]:
    """Steps of the complete checkpoints, ascending."""
    return sorted(step for step, path in step_dirs(directory).items() if is_complete(path))


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: Mapping[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _fsync_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class CheckpointManager:
    """Save, prune and resume ``step-N`` DCP checkpoints (see the module docstring).

    Args:
        directory: the checkpoint root (created).
        keep: complete checkpoints kept after each save (>= 1).
        rank, local_rank, world_size: this process's place in the job.
        process_group: group for DCP coordination and barriers (a gloo group
            keeps these object collectives off NCCL); None: the default group.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        keep: int,
        rank: int,
        local_rank: int,
        world_size: int,
        process_group: Any = None,
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.directory = Path(directory)
        self.keep = keep
        self.rank = rank
        self.local_rank = local_rank
        self.world_size = world_size
        self.group = process_group
        self.last_save_seconds = 0.0
        if self.local_rank == 0:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._barrier()

    # -- helpers -------------------------------------------------------------
    def _barrier(self) -> None:
        if dist.is_available() and dist.is_initialized():
            dist.barrier(group=self.group)

    def step_dir(self, step: int) -> Path:
        return self.directory / f"step-{step}"

    def remove_incomplete(self) -> list[int]:
        """Delete ``step-N`` folders without the completion marker (leftovers of a killed save)."""
        removed = []
        if self.local_rank == 0:
            for step, path in step_dirs(self.directory).items():
                if not is_complete(path):
                    shutil.rmtree(path, ignore_errors=True)
                    removed.append(step)
        self._barrier()
        return removed

    def prune(self) -> list[int]:
        """Keep the newest ``keep`` complete checkpoints; returns the steps deleted."""
        removed = []
        if self.local_rank == 0:
            steps = complete_steps(self.directory)
            for step in steps[: max(0, len(steps) - self.keep)]:
                shutil.rmtree(self.step_dir(step), ignore_errors=True)
                removed.append(step)
        return removed

    # -- save ------------------------------------------------------------------
    def save(
        self,
        step: int,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        trainer_state: Mapping[str, Any],
    ) -> Path:
        """Write ``step-N`` (collective: every rank calls it), mark it complete, prune.

        ``trainer_state`` must be JSON-serialisable (step, data position,
        scheduler and loss-scaler state, hyperparameters).
        """
        start = time.monotonic()
        path = self.step_dir(step)
        if self.local_rank == 0:
            if path.exists():
                shutil.rmtree(path)  # a stale, incomplete save of the same step
            path.mkdir(parents=True)
        self._barrier()
        model_sd, optim_sd = get_state_dict(model, optimizer)
        dcp.save({"model": model_sd, "optimizer": optim_sd}, checkpoint_id=str(path), process_group=self.group)
        rng_dir = path / "rng"
        rng_dir.mkdir(exist_ok=True)
        torch.save(_rng_state(), rng_dir / f"rank-{self.rank:05d}.pt")
        if self.local_rank == 0:
            _fsync_write(path / TRAINER_STATE, json.dumps({**trainer_state, "step": step}, indent=2, default=str))
        self._barrier()
        self.last_save_seconds = time.monotonic() - start
        if self.local_rank == 0:
            marker = {"step": step, "world_size": self.world_size, "saved_at": time.time(), "seconds": self.last_save_seconds}
            _fsync_write(path / COMPLETE_MARKER, json.dumps(marker) + "\n")
        self._barrier()
        self.prune()
        self._barrier()
        return path

    # -- load ------------------------------------------------------------------
    def latest_step(self) -> int | None:
        """The newest complete step, as global rank 0 sees it (broadcast to all ranks)."""
        steps = complete_steps(self.directory) if self.rank == 0 else []
        choice = [steps[-1] if steps else None]
        if dist.is_available() and dist.is_initialized():
            dist.broadcast_object_list(choice, src=0, group=self.group)
        return choice[0]

    def load_latest(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
        """Restore model, optimizer and RNG from the newest complete checkpoint.

        Returns:
            The saved ``trainer_state`` (with ``step``), or None when there is none.
        """
        step = self.latest_step()
        if step is None:
            return None
        path = self.step_dir(step)
        trainer_state = json.loads((path / TRAINER_STATE).read_text(encoding="utf-8"))
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optimizer": optim_sd}
        dcp.load(state, checkpoint_id=str(path), process_group=self.group)
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
        rng_file = path / "rng" / f"rank-{self.rank:05d}.pt"
        if rng_file.is_file():
            _set_rng_state(torch.load(rng_file, weights_only=False))
        trainer_state["restored_rng"] = rng_file.is_file()
        return trainer_state


def export_model(
    model: torch.nn.Module,
    directory: str | os.PathLike[str],
    *,
    config: Any,
    dtype: torch.dtype,
    rank: int,
    extra: Mapping[str, Any] | None = None,
) -> Path | None:
    """Gather the full model to rank 0 (CPU) and write consolidated safetensors + ``config.json``.

    Collective. Returns the weights path on rank 0, None elsewhere.
    """
    from training.model import save_pretrained

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    written = None
    if rank == 0:
        # TE quantized weights (quantized model init) are tensor subclasses: back to high precision first
        plain = {k: (v.dequantize() if isinstance(v, torch.Tensor) and type(v) is not torch.Tensor else v)
                 for k, v in state.items()}
        written = save_pretrained(directory, plain, config, dtype=dtype, extra=extra)
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
    return written


__all__ = ["COMPLETE_MARKER", "TRAINER_STATE", "CheckpointManager", "complete_steps", "export_model", "is_complete", "step_dirs"]
