"""Parallelism, applied in one place to the single-device model of :mod:`training.model`.

Order (torchtitan's): activation checkpointing per block, then FSDP2
``fully_shard`` per block, then the root (token embedding, final norm and
head stay in the root's FSDP unit).

* Activation checkpointing (:mod:`platform_spec.training_modes`, the one list of
  modes the planner models too): ``full`` wraps every block with
  ``checkpoint_wrapper`` (non-reentrant), ``selective:N`` every Nth block
  (blocks ``N, 2N, ...`` counted from 1, torchtitan's block-level selective
  checkpointing), ``off`` none. TransformerEngine blocks use
  ``te.checkpoint`` (``transformer_engine.pytorch.distributed.checkpoint``) as the checkpoint function, which keeps FP8
  scaling state consistent during the recompute. Wrapping happens before
  ``fully_shard``, so FSDP2 shards the wrapper (torchtitan's order).
* FSDP2 mixed precision: parameters all-gathered in the precision's compute
  dtype (bf16/fp16), gradients reduce-scattered in fp32, fp32 sharded master
  parameters (what AdamW steps). fp32: no cast. The blocks' forward inputs are
  not cast (``cast_forward_inputs=False``): their second input is the
  family's block input (the GPT family's rotary table), which must stay fp32
  (:mod:`training.model`), and their hidden state
  already is in the compute dtype (it comes from the embedding, whose weight
  the root unit all-gathers in that dtype).
* ``reshard_after_forward``: free the gathered parameters after each block's
  forward (ZeRO-3 memory) or keep them until backward (ZeRO-2-like, less
  all-gather traffic). The last block is never resharded after forward: its
  parameters are needed again at once by backward.
* HSDP (``sharding_strategy=hybrid``): a 2-D DeviceMesh
  ``(replicate=nodes, shard=GPUs per node)``: parameters are sharded
  within a node (NVLink) and replicated across nodes, so only the gradient
  all-reduce crosses EFA. The dimension names are TransformerEngine's
  (:data:`SHARD_DIM`, :data:`REPLICATE_DIM`): its ``reset_parameters`` looks up
  the shard group of a 2-D mesh by name to reduce a quantized weight's amax over
  its shards (TransformerEngine 2.19 ``module/base.py``:
  ``device_mesh.get_group(mesh_dim="shard")``; any other name raises ``KeyError``).
* Quantized model init (``quantized_model_init``, fp8 and mxfp8): the blocks are
  built under ``te.quantized_model_init`` (:func:`training.model.build_model`),
  so TE's ``reset_parameters`` in :func:`materialize` creates their matmul
  weights as quantized tensors (DTensor shards), which FSDP2 all-gathers in
  their quantized form (TE's ``fsdp_pre_all_gather``/``fsdp_post_all_gather``);
  :meth:`training.model.CausalLM.init_weights` then writes the family's initial
  values into them (quantizing) and returns those values in fp32, from which the
  optimizer's master weights are seeded (:func:`training.train.build_optimizer`).
* Materialisation (:func:`materialize`): the model is built on the meta device,
  sharded, then allocated and initialised shard by shard
  (:meth:`training.model.CausalLM.init_weights`: each rank keeps its shard of the
  full initial tensor, so the sharded model equals the unsharded one).
* Python attributes on TE parameters: ``fully_shard`` replaces every
  Parameter object (a DTensor shard), and so does TE's ``reset_parameters``
  in :func:`materialize` (the trainer image's TransformerEngine, ``module/base.py``
  ``reset_parameters`` on ``release_v2.19``: ``setattr(self, name, nn.Parameter(DTensor.from_local(...)))``;
  TE's own subclasses then set their parallelism attributes again on the new
  objects). Attributes found on the block parameters before sharding are put
  back after ``fully_shard`` and again after ``reset_parameters`` (where TE did
  not set them itself), so the Parameters the optimizer and FSDP2's lazy
  initialisation adopt carry them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

from platform_spec.training_modes import check_activation_checkpointing_for
from training.model import CausalLM
from training.precision import PrecisionPlan

SHARD_DIM = "shard"
"""The mesh dimension FSDP2 shards over: the name TransformerEngine 2.19 looks up on a 2-D (HSDP) mesh
(``module/base.py`` ``reset_parameters``: ``device_mesh.get_group(mesh_dim="shard")``; its FSDP2 tests name
their HSDP mesh ``("replicate", "shard")``, ``tests/pytorch/distributed/fsdp2_tests/run_fsdp2_model.py``)."""
REPLICATE_DIM = "replicate"
"""The mesh dimension HSDP replicates over (one index per node); TransformerEngine's tests' name for it."""


def build_mesh(device_type: str, world_size: int, local_world_size: int, sharding_strategy: str) -> DeviceMesh:
    """FSDP mesh ``(shard,)`` or HSDP mesh ``(replicate, shard)`` (:data:`SHARD_DIM`, :data:`REPLICATE_DIM`).

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
        return init_device_mesh(device_type, (nodes, local_world_size), mesh_dim_names=(REPLICATE_DIM, SHARD_DIM))
    if sharding_strategy != "full":
        raise ValueError(f"sharding_strategy {sharding_strategy!r}: expected full or hybrid")
    return init_device_mesh(device_type, (world_size,), mesh_dim_names=(SHARD_DIM,))


def apply_activation_checkpointing(model: CausalLM, mode: str) -> tuple[int, ...]:
    """Wrap the blocks ``mode`` recomputes in backward (``off``: none; ``full``: all; ``selective:N``: every
    Nth, :meth:`platform_spec.training_modes.ActivationCheckpointing.checkpointed_blocks`).

    Returns:
        The 0-based indices of the wrapped blocks.

    Raises:
        platform_spec.errors.FieldError: ``mode`` is not a mode (field ``activation_checkpointing``), or
            ``selective:N`` on a model of fewer than ``N`` blocks (it would recompute none).
    """
    parsed = check_activation_checkpointing_for(mode, len(model.layers))
    chosen = parsed.checkpointed_blocks(len(model.layers))
    for i in chosen:
        block = model.layers[i]
        if model.backend == "te":
            import transformer_engine.pytorch as te

            wrapped = checkpoint_wrapper(block, checkpoint_fn=te.checkpoint, use_reentrant=False)
        else:
            wrapped = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT, preserve_rng_state=False)
        model.layers[i] = wrapped
    return chosen


def _custom_param_attrs(module: nn.Module) -> dict[str, dict[str, Any]]:
    """Python attributes TE sets on its parameters (fully_shard replaces the Parameter objects)."""
    attrs: dict[str, dict[str, Any]] = {}
    for name, param in module.named_parameters():
        public = {k: v for k, v in vars(param).items() if not k.startswith("_")}
        if public:
            attrs[name] = public
    return attrs


_PARAM_ATTRS = "_block_param_attrs"
"""Attribute of the model holding :func:`_custom_param_attrs` from before ``fully_shard`` (for :func:`materialize`)."""


def _restore_param_attrs(module: nn.Module, attrs: dict[str, dict[str, Any]]) -> None:
    """Set ``attrs`` on ``module``'s current Parameters, leaving alone what a Parameter already has (TE's own)."""
    for name, param in module.named_parameters():
        for key, value in attrs.get(name, {}).items():
            if not hasattr(param, key):
                setattr(param, key, value)


def block_policy(precision: PrecisionPlan) -> MixedPrecisionPolicy:
    """The FSDP2 policy of each block: the precision's dtypes, forward inputs left as they are.

    ``cast_forward_inputs=False`` keeps the rotary table fp32 (FSDP2's default
    casts every floating-point forward argument to ``param_dtype``).
    """
    if not precision.mixed:
        return MixedPrecisionPolicy(cast_forward_inputs=False)
    return MixedPrecisionPolicy(
        param_dtype=precision.param_dtype, reduce_dtype=precision.reduce_dtype, cast_forward_inputs=False
    )


def root_policy(precision: PrecisionPlan) -> MixedPrecisionPolicy:
    """The FSDP2 policy of the root unit (embedding, final norm, head); its inputs are token ids (integers)."""
    if not precision.mixed:
        return MixedPrecisionPolicy()
    return MixedPrecisionPolicy(param_dtype=precision.param_dtype, reduce_dtype=precision.reduce_dtype)


def apply_fsdp(model: CausalLM, mesh: DeviceMesh, precision: PrecisionPlan, *, reshard_after_forward: bool) -> CausalLM:
    """``fully_shard`` each block (:func:`block_policy`), then the root (:func:`root_policy`)."""
    attrs = _custom_param_attrs(model) if model.backend == "te" else {}
    last = len(model.layers) - 1
    for i, block in enumerate(model.layers):
        fully_shard(
            block,
            mesh=mesh,
            mp_policy=block_policy(precision),
            reshard_after_forward=reshard_after_forward and i < last,
        )
    fully_shard(model, mesh=mesh, mp_policy=root_policy(precision), reshard_after_forward=reshard_after_forward)
    if attrs:
        _restore_param_attrs(model, attrs)
        setattr(model, _PARAM_ATTRS, attrs)  # a plain attribute, for materialize()
    return model


def parallelize(
    model: CausalLM,
    *,
    mesh: DeviceMesh,
    precision: PrecisionPlan,
    activation_checkpointing: str,
    reshard_after_forward: bool,
) -> CausalLM:
    """Activation checkpointing, then FSDP2 (see the module docstring)."""
    apply_activation_checkpointing(model, activation_checkpointing)
    return apply_fsdp(model, mesh, precision, reshard_after_forward=reshard_after_forward)


def materialize(model: CausalLM, device: torch.device, *, seed: int | None = None) -> dict[str, torch.Tensor]:
    """Allocate a meta-device model's (sharded) parameters on ``device`` and initialise them.

    Torch modules: ``to_empty``. TransformerEngine blocks: each TE module's own
    ``reset_parameters()`` allocates its meta DTensor shards on the GPU (as
    TransformerEngine's FSDP2 tests do); it also fills them from the same seed
    on every rank, so every shard would start as the same rows, and it replaces
    the Parameter objects, so the attributes :func:`apply_fsdp` recorded are
    set again on the new ones. Then :meth:`CausalLM.init_weights` writes every
    parameter's values (each rank its shard of the full tensor), on both
    backends.

    Args:
        seed: the run's seed (default ``torch.initial_seed()``).

    Returns:
        :meth:`CausalLM.init_weights`' initial values of the parameters stored quantized (quantized model
        init): ``{parameter name: this rank's shard in fp32}``; empty otherwise.
    """
    if model.backend == "te":
        for module in (model.tok_embeddings, model.norm, model.output):
            module.to_empty(device=device)
        for wrapped in model.layers:
            for module in wrapped.modules():
                if module is not wrapped and hasattr(module, "reset_parameters"):
                    module.reset_parameters()
        _restore_param_attrs(model, getattr(model, _PARAM_ATTRS, {}))
    else:
        model.to_empty(device=device)
    return model.init_weights(seed)


__all__ = [
    "REPLICATE_DIM",
    "SHARD_DIM",
    "apply_activation_checkpointing",
    "apply_fsdp",
    "block_policy",
    "build_mesh",
    "materialize",
    "parallelize",
    "root_policy",
]
