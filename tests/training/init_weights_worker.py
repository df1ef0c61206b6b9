"""One rank of the initial-weights check (tests/training/test_gpu_readiness.py), launched by torchrun.

    python -m torch.distributed.run --standalone --nproc-per-node N tests/training/init_weights_worker.py OUT.pt

Builds the test model the way the trainer does (meta device, activation checkpointing, FSDP2 over
every rank, :func:`training.parallelize.materialize`) on both backends -- the TE one with the CPU
stand-in of ``fake_transformer_engine`` (whose ``reset_parameters`` fills each rank's shard from the
same seed, as TransformerEngine 2.10's does) -- and the TE one on HSDP meshes too (``hybrid``: every
rank a node, and all ranks one node), gathers the full state dicts and, on rank 0, saves
``{"torch": {...}, "te": {...}, "te hybrid <nodes>x<per node>": {...}}`` with canonical names to OUT.pt.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

import fake_transformer_engine

from model_families.gpt import ModelConfig
from training import precision as prec
from training.model import build_model, canonical_state_dict
from training.parallelize import build_mesh, materialize, parallelize

CONFIG = ModelConfig("odd", num_layers=2, hidden_size=96, num_attention_heads=3, ffn_hidden_size=200, vocab_size=301)
"""Odd sizes: 301 embedding rows and 200 FFN rows split unevenly over 2 ranks."""
SEED = 1234


class _SysModules:
    @staticmethod
    def setitem(mapping: dict, key: str, value: object) -> None:
        mapping[key] = value


def layouts(world: int) -> dict[str, tuple[str, str, int]]:
    """The builds compared, by name: ``(backend, sharding_strategy, processes per node)``."""
    return {
        "torch": ("torch", "full", world),
        "te": ("te", "full", world),
        f"te hybrid {world}x1": ("te", "hybrid", 1),
        f"te hybrid 1x{world}": ("te", "hybrid", world),
    }


def full_weights(
    backend: str, world: int, sharding_strategy: str = "full", per_node: int | None = None
) -> dict[str, torch.Tensor]:
    torch.manual_seed(SEED)  # as the trainer does on every rank
    model = build_model(CONFIG, backend=backend, device="meta")
    mesh = build_mesh("cpu", world, per_node or world, sharding_strategy)
    parallelize(
        model, mesh=mesh, precision=prec.plan("fp32"), activation_checkpointing="full", reshard_after_forward=True
    )
    materialize(model, torch.device("cpu"), seed=SEED)
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.clone() for k, v in canonical_state_dict(state).items()}


def main(out: str) -> int:
    dist.init_process_group("gloo")
    fake_transformer_engine.install(_SysModules)
    world = dist.get_world_size()
    result = {
        name: full_weights(backend, world, strategy, per_node)
        for name, (backend, strategy, per_node) in layouts(world).items()
    }
    if dist.get_rank() == 0:
        torch.save(result, out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
