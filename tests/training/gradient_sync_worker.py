"""One rank of the gradient-synchronisation check (tests/training/test_memory_modes.py), launched by torchrun.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/training/gradient_sync_worker.py OUT.pt

For each ``gradient_sync`` mode, builds the test model the way the trainer does (meta device,
``selective:2`` activation checkpointing, FSDP2 over every rank, :func:`training.parallelize.materialize`),
runs one optimizer step of 3 micro-batches through the trainer's own loop
(:func:`training.train.accumulate_gradients`) and AdamW, and records, on rank 0:

* ``"<mode>"``: the full gradients before the step and the full weights after it (canonical names);
* ``"<mode> sharded grads after micro-batch 1"``: how many parameters held a (sharded) ``.grad`` when the
  second micro-batch started: all of them after a reduce-scatter (``every_micro_batch``), none while FSDP2
  keeps unsharded gradients to itself (``last_micro_batch``);
* ``"reference"``: the gradients and updated weights of the unsharded model on every rank's micro-batches.

and saves them to OUT.pt.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from model_families.gpt import ModelConfig
from platform_spec.training_modes import GRADIENT_SYNC_MODES
from training import precision as prec
from training.model import build_model, canonical_name, canonical_state_dict
from training.parallelize import build_mesh, materialize, parallelize
from training.train import accumulate_gradients

CONFIG = ModelConfig("sync", num_layers=4, hidden_size=64, num_attention_heads=4, ffn_hidden_size=192, vocab_size=97)
SEED = 1234
MICRO_BATCHES = 3
BATCH, SEQ = 2, 16
LR = 1e-3


def tokens(rank: int, micro: int) -> torch.Tensor:
    """Rank ``rank``'s micro-batch ``micro``: ``[BATCH, SEQ + 1]`` token ids, the same on every call."""
    generator = torch.Generator().manual_seed(1000 * rank + micro)
    return torch.randint(0, CONFIG.vocab_size, (BATCH, SEQ + 1), generator=generator)


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
    model = build_model(CONFIG, device="meta")
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
    model = build_model(CONFIG)
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


def main(out: str) -> int:
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    result: dict[str, object] = {mode: sharded_run(mode, world, rank) for mode in GRADIENT_SYNC_MODES}
    if rank == 0:
        result["reference"] = reference_run(world)
        torch.save(result, out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
