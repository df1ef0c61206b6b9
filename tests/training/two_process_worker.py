"""The trainer's build on 2 gloo processes, launched once by torchrun for two tests (``conftest.two_process_results``).

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/training/two_process_worker.py OUT.pt

Saves, from rank 0, ``{"gradient_sync": ..., "init_weights": ...}`` to OUT.pt:

``"gradient_sync"`` (tests/training/test_memory_modes.py): for each ``gradient_sync`` mode, builds the
test model the way the trainer does (meta device, ``selective:2`` activation checkpointing, FSDP2 over
every rank, :func:`training.parallelize.materialize`), runs one optimizer step of 3 micro-batches through
the trainer's own loop (:func:`training.train.accumulate_gradients`) and AdamW, and records:

* ``"<mode>"``: the full gradients before the step and the full weights after it (canonical names);
* ``"<mode> sharded grads after micro-batch 1"``: how many parameters held a (sharded) ``.grad`` when the
  second micro-batch started: all of them after a reduce-scatter (``every_micro_batch``), none while FSDP2
  keeps unsharded gradients to itself (``last_micro_batch``);
* ``"reference"``: the gradients and updated weights of the unsharded model on every rank's micro-batches.

``"init_weights"`` (tests/training/test_gpu_readiness.py): builds the test model the way the trainer does
(meta device, activation checkpointing, FSDP2 over every rank, materialize) on both backends -- the TE one
with the CPU stand-in of ``fake_transformer_engine`` (whose ``reset_parameters`` fills each rank's shard
from the same seed, as the image's TransformerEngine does) -- and the TE one on HSDP meshes too (``hybrid``:
every rank a node, and all ranks one node), and gathers the full state dicts:
``{"torch": {...}, "te": {...}, "te hybrid <nodes>x<per node>": {...}}`` with canonical names.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[2]))

import fake_transformer_engine

from model_families.gpt import ModelConfig
from platform_spec.training_modes import GRADIENT_SYNC_MODES
from training import precision as prec
from training.model import build_model, canonical_name, canonical_state_dict
from training.parallelize import build_mesh, materialize, parallelize
from training.train import accumulate_gradients

SEED = 1234

# ---------------------------------------------------------------------------
# Gradient synchronisation

SYNC_CONFIG = ModelConfig(
    "sync", num_layers=4, hidden_size=64, num_attention_heads=4, ffn_hidden_size=192, vocab_size=97
)
MICRO_BATCHES = 3
BATCH, SEQ = 2, 16
LR = 1e-3


def tokens(rank: int, micro: int) -> torch.Tensor:
    """Rank ``rank``'s micro-batch ``micro``: ``[BATCH, SEQ + 1]`` token ids, the same on every call."""
    generator = torch.Generator().manual_seed(1000 * rank + micro)
    return torch.randint(0, SYNC_CONFIG.vocab_size, (BATCH, SEQ + 1), generator=generator)


def optimizer_of(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0, foreach=True)


def full_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, param in model.named_parameters():
        grad = param.grad
        if isinstance(grad, DTensor):
            grad = grad.full_tensor()
        canonical = canonical_name(name)
        if canonical is not None and grad is not None:
            out[canonical] = grad.detach().clone()
    return out


def sharded_run(mode: str, world: int, rank: int) -> dict[str, object]:
    torch.manual_seed(SEED)
    model = build_model(SYNC_CONFIG, device="meta")
    mesh = build_mesh("cpu", world, world, "full")
    parallelize(
        model,
        mesh=mesh,
        precision=prec.plan("fp32"),
        activation_checkpointing="selective:2",
        reshard_after_forward=True,
    )
    materialize(model, torch.device("cpu"), seed=SEED)
    optimizer = optimizer_of(model)
    seen: list[int] = []

    def loss_of(micro: int) -> torch.Tensor:
        if micro == 1:
            seen.append(sum(p.grad is not None for p in model.parameters()))
        batch = tokens(rank, micro)
        return model(batch[:, :-1], batch[:, 1:])

    loss = accumulate_gradients(model, loss_of, micro_batches=MICRO_BATCHES, gradient_sync=mode)
    grads = full_grads(model)
    optimizer.step()
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {
        "loss": loss.item(),
        "grads": grads,
        "weights": {k: v.clone() for k, v in canonical_state_dict(state).items()},
        "sharded grads after micro-batch 1": seen[0],
        "parameters": sum(1 for _ in model.parameters()),
    }


def reference_run(world: int) -> dict[str, object]:
    """The unsharded model on every rank's micro-batches: the mean loss over ranks and micro-batches."""
    torch.manual_seed(SEED)
    model = build_model(SYNC_CONFIG)
    model.init_weights(SEED)
    optimizer = optimizer_of(model)
    total = torch.zeros(())
    for rank in range(world):
        for micro in range(MICRO_BATCHES):
            batch = tokens(rank, micro)
            loss = model(batch[:, :-1], batch[:, 1:]) / (world * MICRO_BATCHES)
            loss.backward()
            total += loss.detach()
    grads = full_grads(model)
    optimizer.step()
    return {"loss": total.item(), "grads": grads, "weights": {k: v.clone() for k, v in model.state_dict().items()}}


# ---------------------------------------------------------------------------
# Initial weights

INIT_CONFIG = ModelConfig(
    "odd", num_layers=2, hidden_size=96, num_attention_heads=3, ffn_hidden_size=200, vocab_size=301
)
"""Odd sizes: 301 embedding rows and 200 FFN rows split unevenly over 2 ranks."""


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
    model = build_model(INIT_CONFIG, backend=backend, device="meta")
    mesh = build_mesh("cpu", world, per_node or world, sharding_strategy)
    parallelize(
        model, mesh=mesh, precision=prec.plan("fp32"), activation_checkpointing="full", reshard_after_forward=True
    )
    materialize(model, torch.device("cpu"), seed=SEED)
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {k: v.clone() for k, v in canonical_state_dict(state).items()}


def main(out: str) -> int:
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    sync: dict[str, object] = {mode: sharded_run(mode, world, rank) for mode in GRADIENT_SYNC_MODES}
    if rank == 0:
        sync["reference"] = reference_run(world)
    fake_transformer_engine.install(_SysModules)  # after the gradient check, which builds torch-native blocks
    init = {
        name: full_weights(backend, world, strategy, per_node)
        for name, (backend, strategy, per_node) in layouts(world).items()
    }
    if rank == 0:
        torch.save({"gradient_sync": sync, "init_weights": init}, out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
