"""Whether a training state holds only finite values: the guard that keeps a divergence out of checkpoints.

The trainer refuses to save a checkpoint whose parameters are not finite, and a resume skips a checkpoint
whose loaded model or optimizer state is not finite (:meth:`training.checkpoint.manager.CheckpointManager.
load_latest`), so no restart resumes a diverged state. Each rank checks its own shards (a DTensor's local
tensor); callers agree across ranks.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import torch

SHOWN = 3
"""How many non-finite entries a description names (the rest are counted)."""


def _tensors(state: Any, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(state, torch.Tensor):
        local = state.to_local() if hasattr(state, "to_local") else state  # DTensor: this rank's shard
        if local.is_floating_point() or local.is_complex():
            yield prefix, local
    elif isinstance(state, Mapping):
        for key, value in state.items():
            yield from _tensors(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(state, (list, tuple)):
        for index, value in enumerate(state):
            yield from _tensors(value, f"{prefix}.{index}" if prefix else str(index))


@torch.no_grad()
def non_finite(state: Any) -> dict[str, int]:
    """``{dotted name: count of NaN/inf values}`` of the floating-point tensors in ``state`` (nested mappings,
    lists and tensors, e.g. ``{"model": model_state_dict, "optimizer": optimizer_state_dict}``); ``{}`` when all
    are finite. One host synchronisation for the whole state (the counts are stacked on the device first)."""
    named = list(_tensors(state, ""))
    if not named:
        return {}
    counts = [(~torch.isfinite(tensor)).sum() for _, tensor in named]
    by_device: dict[torch.device, list[int]] = {}
    for index, count in enumerate(counts):
        by_device.setdefault(count.device, []).append(index)
    values = [0] * len(named)
    for indices in by_device.values():
        for index, value in zip(indices, torch.stack([counts[i] for i in indices]).tolist(), strict=True):
            values[index] = int(value)
    return {name: value for (name, _), value in zip(named, values, strict=True) if value}


def describe(found: Mapping[str, int]) -> str:
    """``found`` (:func:`non_finite`'s answer) in words: ``"NaN/inf in model.w (3 values), optimizer.state.w.exp_avg
    (1 value) and 2 more tensors"``."""
    items = [f"{name} ({count} value{'s' if count != 1 else ''})" for name, count in list(found.items())[:SHOWN]]
    more = len(found) - len(items)
    return "NaN/inf in " + ", ".join(items) + (f" and {more} more tensor{'s' if more != 1 else ''}" if more else "")


__all__ = ["SHOWN", "describe", "non_finite"]
