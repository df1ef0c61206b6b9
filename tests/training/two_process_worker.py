"""The trainer's build on 2 gloo processes, launched once by torchrun for two tests (``conftest.two_process_results``).

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/training/two_process_worker.py OUT.pt

Saves, from rank 0, ``{"gradient_sync": ..., "init_weights": ..., "quantized_model_init": ...}`` to OUT.pt:

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

``"quantized_model_init"`` (tests/training/test_gpu_readiness.py): for fp8 and mxfp8 under FSDP and fp8 under
HSDP (:func:`qmi_layouts`), builds the model as the trainer does with ``quantized_model_init=true`` (the TE
stand-in's TransformerEngine 2.19 section: blocks under ``te.quantized_model_init``, GEMM weights stored
quantized, :func:`training.train.build_optimizer`'s FusedAdam with fp32 master weights), trains 2 steps, saves
with the trainer's :class:`~training.checkpoint.manager.CheckpointManager` (the FSDP runs asynchronously, the
trainer's default, the HSDP one synchronously), trains 2 more while an asynchronous save is written; a fresh
build resumes the save and trains the same 2; records the initial, saved and resumed master weights (full,
canonical names), the saved and resumed quantized weights (this rank's fp8 bits and scales) and the losses.
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


# ---------------------------------------------------------------------------
# Quantized model init (fp8 and mxfp8 weights stored quantized, FusedAdam with fp32 master weights)

QMI_STEPS = 2
"""Optimizer steps before the save, and again after it (uninterrupted and resumed)."""


def qmi_layouts(world: int) -> dict[str, tuple[str, str, int, bool]]:
    """The quantized-init runs, by name: ``(precision, sharding_strategy, processes per node, asynchronous
    save)``; HSDP as one node of all ranks, whose 2-D mesh shards over TE's ``shard`` dimension across ranks.
    The FSDP runs save as the trainer does by default (``async_checkpoint=true``: DCP's ``async_save``, whose
    staging copies the quantized weights and FusedAdam's state while training goes on), HSDP synchronously."""
    return {
        "fp8": ("fp8", "full", world, True),
        "mxfp8": ("mxfp8", "full", world, True),
        f"fp8 hybrid 1x{world}": ("fp8", "hybrid", world, False),
    }


def qmi_build(
    precision: str, world: int, sharding_strategy: str, per_node: int
) -> tuple[torch.nn.Module, object, object]:
    """The trainer's build with ``quantized_model_init=true``: the model, its optimizer and the recipe."""
    from platform_spec.hyperparameters import Hyperparameters
    from training.train import build_optimizer

    torch.manual_seed(SEED)
    plan = prec.plan(precision)
    recipe = plan.recipe()
    hp = Hyperparameters(precision=precision, quantized_model_init=True, learning_rate=LR, weight_decay=0.1)
    model = build_model(SYNC_CONFIG, backend="te", device="meta", quantized_recipe=recipe)
    mesh = build_mesh("cpu", world, per_node, sharding_strategy)
    parallelize(model, mesh=mesh, precision=plan, activation_checkpointing="selective:2", reshard_after_forward=True)
    initial = materialize(model, torch.device("cpu"), seed=SEED)
    optimizer = build_optimizer(model, hp, torch.device("cpu"), initial_values=initial)
    return model, optimizer, recipe


def qmi_steps(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, recipe: object, precision: str, rank: int, first: int
) -> list[float]:
    """``QMI_STEPS`` optimizer steps of one micro-batch each (batch ``first + i`` of this rank); the losses."""
    losses = []
    for i in range(QMI_STEPS):
        optimizer.zero_grad(set_to_none=True)
        batch = tokens(rank, first + i)
        with prec.autocast(precision, recipe, device_type="cpu"):
            loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def full_masters(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimizer's fp32 master weights of the parameters stored quantized, full tensors by canonical name."""
    out = {}
    for name, param in model.named_parameters():
        local = param._local_tensor if isinstance(param, DTensor) else param
        if isinstance(local, fake_transformer_engine.QuantizedTensor):
            master = optimizer.state[param]["master_param"]
            out[canonical_name(name)] = (master.full_tensor() if isinstance(master, DTensor) else master).clone()
    return out


def quantized_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The parameters stored quantized, as the fp8 bits and scales of this rank's shard, by canonical name."""
    out = {}
    for name, param in model.named_parameters():
        local = param._local_tensor if isinstance(param, DTensor) else param
        if isinstance(local, fake_transformer_engine.QuantizedTensor):
            out[canonical_name(name)] = torch.cat([local._data.flatten().float(), local._scale_inv.flatten()])
    return out


def quantized_run(
    precision: str, world: int, rank: int, sharding_strategy: str, per_node: int, asynchronous: bool, work: Path
) -> dict[str, object]:
    """Build, record the initial masters, train, save (the trainer's CheckpointManager; ``asynchronous``: DCP's
    ``async_save``, the steps after it run while it is written, as in the trainer), train on; then a fresh build
    resumes the save and trains the same steps."""
    from training.checkpoint.manager import CheckpointManager

    model, optimizer, recipe = qmi_build(precision, world, sharding_strategy, per_node)
    quantized = sum(
        isinstance(getattr(p, "_local_tensor", p), fake_transformer_engine.QuantizedTensor) for p in model.parameters()
    )
    initial_masters = full_masters(model, optimizer)
    before = qmi_steps(model, optimizer, recipe, precision, rank, first=0)
    manager = CheckpointManager(  # one filesystem
        work, keep=2, rank=rank, local_rank=rank, world_size=world, asynchronous=asynchronous
    )
    saved_masters = full_masters(model, optimizer)
    saved_weights = quantized_weights(model)
    manager.save(QMI_STEPS, model, optimizer, {"step": QMI_STEPS}, asynchronous=asynchronous)
    pending = manager.pending_step
    continued = qmi_steps(model, optimizer, recipe, precision, rank, first=QMI_STEPS)
    written = manager.wait()
    if asynchronous:  # written while the steps above ran (or before: a CPU thread is quick)
        assert pending == QMI_STEPS and written is not None and written.step == QMI_STEPS
    else:
        assert pending is None and written is None

    exported = None
    if sharding_strategy == "full":  # the export: the fp32 masters of the quantized weights, not their fp8 values
        from training.checkpoint.manager import export_model
        from training.model import is_quantized, load_pretrained

        masters = {n: optimizer.state[p]["master_param"] for n, p in model.named_parameters() if is_quantized(p)}
        export_model(model, work / "export", config=SYNC_CONFIG, dtype=torch.float32, rank=rank, master_weights=masters)
        if rank == 0:
            exported = {k: v.clone() for k, v in load_pretrained(work / "export").state_dict().items()}
    final_masters = full_masters(model, optimizer)

    fresh, fresh_optimizer, _ = qmi_build(precision, world, sharding_strategy, per_node)
    resumed = manager.load_latest(fresh, fresh_optimizer)
    assert resumed is not None and resumed.step == QMI_STEPS
    resumed_masters = full_masters(fresh, fresh_optimizer)
    resumed_weights = quantized_weights(fresh)
    after_resume = qmi_steps(fresh, fresh_optimizer, recipe, precision, rank, first=QMI_STEPS)
    return {
        "asynchronous": asynchronous,
        "saved weights": saved_weights,
        "resumed weights": resumed_weights,
        "quantized parameters": quantized,
        "initial masters": initial_masters,
        "losses": before,
        "saved masters": saved_masters,
        "resumed masters": resumed_masters,
        "continued": continued,
        "resumed": after_resume,
        "final masters": final_masters,
        "exported": exported,
    }


def main(out: str) -> int:
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    sync: dict[str, object] = {mode: sharded_run(mode, world, rank) for mode in GRADIENT_SYNC_MODES}
    if rank == 0:
        sync["reference"] = reference_run(world)
    fake_transformer_engine.install_2_19(_SysModules)  # after the gradient check, which builds torch-native blocks
    init = {
        name: full_weights(backend, world, strategy, per_node)
        for name, (backend, strategy, per_node) in layouts(world).items()
    }
    work = Path(out).parent
    qmi = {
        name: quantized_run(precision, world, rank, strategy, per_node, asynchronous, work / f"qmi-{index}")
        for index, (name, (precision, strategy, per_node, asynchronous)) in enumerate(qmi_layouts(world).items())
    }
    if rank == 0:
        torch.save({"gradient_sync": sync, "init_weights": init, "quantized_model_init": qmi}, out)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
