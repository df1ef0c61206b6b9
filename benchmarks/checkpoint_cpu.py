"""Asynchronous vs synchronous checkpoint: how long training waits, as a ratio to a synchronous save of the
same state measured side by side.

Run: ``.venv/bin/python benchmarks/checkpoint_cpu.py [--model gpt-tiny] [--num-layers 4] [--repeats 7]``.

One process, CPU, no process group (DCP's single-process save): a model of the preset (torch blocks, fp32) and
its AdamW state after one step, saved by :class:`training.checkpoint.manager.CheckpointManager` into fresh
folders, alternately synchronously and asynchronously (which goes first alternates per repeat). The table gives
each side's median seconds: the synchronous save's time (training waits for all of it), the asynchronous save's
blocking time (staging the state to host memory: what training waits for) and its write time (until the marker
could be written), and the median of the per-repeat ratios blocking / synchronous.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch

from platform_spec.models import get_preset
from training.checkpoint.manager import CheckpointManager, SaveRecord
from training.model import build_model


def _state(model_name: str, num_layers: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, int]:
    config = get_preset(model_name).with_overrides(num_layers=num_layers)
    model = build_model(config, backend="torch", device="cpu")
    model.init_weights(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens = torch.randint(0, config.vocab_size, (1, 17))
    model(tokens[:, :-1], tokens[:, 1:]).backward()
    optimizer.step()
    size = sum(p.numel() * 4 * 3 for p in model.parameters())  # fp32 weights + two AdamW moments
    return model, optimizer, size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-tiny")
    parser.add_argument("--num-layers", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    model, optimizer, size = _state(args.model, args.num_layers)
    sync_s, blocking_s, write_s, ratios = [], [], [], []
    with tempfile.TemporaryDirectory() as root:
        records: list[SaveRecord] = []
        manager = CheckpointManager(
            Path(root), keep=1, rank=0, local_rank=0, world_size=1, asynchronous=True, on_saved=records.append,
            log=lambda _: None,
        )  # fmt: skip
        step = 0
        for repeat in range(args.repeats):
            pair: dict[bool, SaveRecord] = {}
            for asynchronous in (False, True) if repeat % 2 == 0 else (True, False):
                step += 1
                start = time.perf_counter()
                manager.save(step, model, optimizer, {"data": {"step": step}}, asynchronous=asynchronous)
                blocked = time.perf_counter() - start
                manager.wait()
                pair[asynchronous] = records[-1]
                if asynchronous:
                    blocking_s.append(blocked)
            sync_s.append(pair[False].write_seconds)
            write_s.append(pair[True].write_seconds)
            ratios.append(blocking_s[-1] / pair[False].write_seconds)
    print(f"{args.model} with {args.num_layers} layers: {size / 1e6:.1f} MB of model and optimizer state, CPU")
    print("| measure | median s |")
    print("|---|---|")
    print(f"| synchronous save (training waits) | {statistics.median(sync_s):.3f} |")
    print(f"| asynchronous save: training waits (staging) | {statistics.median(blocking_s):.3f} |")
    print(f"| asynchronous save: written (marker possible) | {statistics.median(write_s):.3f} |")
    print(f"| ratio blocking / synchronous (median of {args.repeats} pairs) | {statistics.median(ratios):.3f} |")


if __name__ == "__main__":
    main()
