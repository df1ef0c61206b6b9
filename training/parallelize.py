"""Parallelism, applied in one place to the single-device model of :mod:`training.model`.

Order (torchtitan's): activation checkpointing per block, then FSDP2
``fully_shard`` per block, then the root (token embedding, final norm and
head stay in the root's FSDP unit).

* Activation checkpointing ``full``: every block is wrapped with
  ``checkpoint_wrapper`` (non-reentrant). TransformerEngine blocks use
  ``te.distributed.checkpoint`` as the checkpoint function, which keeps FP8
  scaling state consistent during the recompute.
* FSDP2 mixed precision: parameters all-gathered in the precision's compute
  dtype (bf16/fp16), gradients reduce-scattered in fp32, fp32 sharded master
  parameters (what AdamW steps). fp32: no cast.
* ``reshard_after_forward``: free the gathered parameters after each block's
  forward (ZeRO-3 memory) or keep them until backward (ZeRO-2-like, less
  all-gather traffic). The last block is never resharded after forward: its
  parameters are needed again at once by backward.
* HSDP (``sharding_strategy=hybrid``): a 2-D DeviceMesh
  ``(dp_replicate=nodes, dp_shard=GPUs per node)``: parameters are sharded
  within a node (NVLink) and replicated across nodes, so only the gradient
  all-reduce crosses EFA.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from training.model import GPT
from training.precision import PrecisionPlan


def build_mesh(device_type: str, world_size: int, local_world_size: int, sharding_strategy: str) -> DeviceMesh:
    """FSDP mesh ``(dp_shard,)`` or HSDP mesh ``(dp_replicate, dp_shard)``.

    Raises:
        ValueError: ``world_size`` is not a multiple of ``local_world_size`` (uneven nodes).
    """
    if sharding_strategy == "hybrid":
        if world_size % local_world_size:
            raise ValueError(
                f"sharding_strategy=hybrid needs the same number of processes on every node "
                f"(world size {world_size}, {local_world_size} per node)"
            )
        nodes = world_size // local_world_size
        return init_device_mesh(device_type, (nodes, local_world_size), mesh_dim_names=("dp_replicate", "dp_shard"))
    if sharding_strategy != "full":
        raise ValueError(f"sharding_strategy {sharding_strategy!r}: expected full or hybrid")
    return init_device_mesh(device_type, (world_size,), mesh_dim_names=("dp_shard",))


def apply_activation_checkpointing(model: GPT, mode: str) -> None:
    """Wrap every block for full recompute in backward (``mode="full"``); ``"off"`` does nothing."""
    if mode == "off":
        return
    if mode != "full":
        raise ValueError(f"activation_checkpointing {mode!r}: expected off or full")
    for i, block in enumerate(model.layers):
        if model.backend == "te":
            import transformer_engine.pytorch as te

            te_checkpoint = getattr(te, "checkpoint", None) or te.distributed.checkpoint
            wrapped = checkpoint_wrapper(block, checkpoint_fn=te_checkpoint, use_reentrant=False)
        else:
            wrapped = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False)
        model.layers[i] = wrapped


def _custom_param_attrs(module: nn.Module) -> dict[str, dict[str, Any]]:
    """Python attributes TE sets on its parameters (fully_shard replaces the Parameter objects)."""
    attrs: dict[str, dict[str, Any]] = {}
    for name, param in module.named_parameters():
        public = {k: v for k, v in vars(param).items() if not k.startswith("_")}
        if public:
            attrs[name] = public
    return attrs


def _restore_param_attrs(module: nn.Module, attrs: dict[str, dict[str, Any]]) -> None:
    for name, param in module.named_parameters():
        for key, value in attrs.get(name, {}).items():
            setattr(param, key, value)


def apply_fsdp(
    model: GPT,
    mesh: DeviceMesh,
    precision: PrecisionPlan,
    *,
    reshard_after_forward: bool,
    quantized_blocks: bool = False,
) -> GPT:
    """``fully_shard`` each block, then the root.

    Args:
        quantized_blocks: TE blocks built under quantized model init hold
            quantized weights that FSDP2 all-gathers as they are (no cast policy
            for the blocks; TE's FusedAdam keeps the fp32 master copies).
    """
    mp = (
        MixedPrecisionPolicy(param_dtype=precision.param_dtype, reduce_dtype=precision.reduce_dtype)
        if precision.mixed
        else MixedPrecisionPolicy()
    )
    block_mp = MixedPrecisionPolicy(reduce_dtype=precision.reduce_dtype) if quantized_blocks else mp
    attrs = _custom_param_attrs(model) if model.backend == "te" else {}
    last = len(model.layers) - 1
    for i, block in enumerate(model.layers):
        fully_shard(block, mesh=mesh, mp_policy=block_mp, reshard_after_forward=reshard_after_forward and i < last)
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    if attrs:
        _restore_param_attrs(model, attrs)
    return model


def parallelize(
    model: GPT,
    *,
    mesh: DeviceMesh,
    precision: PrecisionPlan,
    activation_checkpointing: str,
    reshard_after_forward: bool,
    quantized_blocks: bool = False,
) -> GPT:
    """Activation checkpointing, then FSDP2 (see the module docstring)."""
    apply_activation_checkpointing(model, activation_checkpointing)
    return apply_fsdp(
        model, mesh, precision, reshard_after_forward=reshard_after_forward, quantized_blocks=quantized_blocks
    )


def materialize(model: GPT, device: torch.device) -> None:
    """Allocate a meta-device model's (sharded) parameters on ``device`` and initialise them.

    Torch modules: ``to_empty`` then :meth:`GPT.init_weights`. TransformerEngine
    blocks are left to their own ``reset_parameters()`` (called by
    ``init_weights``), which materialises meta DTensor shards on the GPU,
    quantized ones included, as TransformerEngine's FSDP2 tests do.
    """
    if model.backend == "te":
        for module in (model.tok_embeddings, model.norm, model.output):
            module.to_empty(device=device)
    else:
        model.to_empty(device=device)
    model.init_weights()


__all__ = ["apply_activation_checkpointing", "apply_fsdp", "build_mesh", "materialize", "parallelize"]
