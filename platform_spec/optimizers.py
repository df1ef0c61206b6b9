"""The trainer's optimizer: which AdamW implementation runs where, and its memory at the step. One home.

The trainer builds its optimizer from :func:`optimizer_for` (``training.train.build_optimizer``) and the
planner models the same record's memory (``planner.memory``: the ``optimizer_state`` term and the optimizer
step's ``transient``), so the optimizer the planner models is the one that runs.

=====================  ==================================  ===========  ==============  ============
device, quantized init  implementation                      moments      master weights  step temps
=====================  ==================================  ===========  ==============  ============
cuda, false            ``torch.optim.AdamW(fused=True)``   2 x fp32     none (FSDP2's)  0
cpu, false             ``torch.optim.AdamW(foreach=True)``  2 x fp32     none (FSDP2's)  1 x fp32
any, true              TE ``FusedAdam(master_weights=     2 x fp32     fp32, every     0
                       True)``                                          parameter
=====================  ==================================  ===========  ==============  ============

* Without ``quantized_model_init`` FSDP2 keeps fp32 sharded parameters: they are the master weights the
  optimizer steps, so the optimizer keeps only AdamW's two moments (``exp_avg``, ``exp_avg_sq``, the
  parameter's dtype: fp32). On CUDA the fused kernel (``_fused_adamw_``, which DTensor dispatches per shard:
  PyTorch ``torch/distributed/tensor/_ops/_pointwise_ops.py``) updates in place with no parameter-sized
  temporary. On the CPU the trainer runs the multi-tensor (foreach) path, DTensor-aware:
  ``torch/optim/adam.py`` ``_multi_tensor_adam`` allocates ``exp_avg_sq_sqrt = torch._foreach_sqrt(...)``, one
  parameter-sized temporary in the state dtype (fp32), live during the step.
* With ``quantized_model_init`` the block matmul weights are TransformerEngine quantized tensors, which
  ``torch.optim.AdamW`` cannot step; TransformerEngine's ``FusedAdam(master_weights=True,
  master_weight_dtype=torch.float32)`` keeps an fp32 ``master_param`` for *every* parameter it is given
  (``initialize_state`` creates it whenever ``master_weights`` is set, also for the fp32 embedding, norms and
  head, whose own fp32 values it then updates directly), steps the quantized ones' masters and quantizes them
  back into the parameters, with no parameter-sized temporary (multi-tensor CUDA kernels; the gradients are
  fp32 already, FSDP2's reduce dtype). Its states are DTensors where the parameters are (TransformerEngine
  #2795), so DCP saves and loads them. Source: NVIDIA/TransformerEngine ``release_v2.19``
  ``transformer_engine/pytorch/optimizers/fused_adam.py`` (``initialize_state``, ``step``); the FSDP2 recipe
  is TransformerEngine's ``examples/pytorch/quantized_model_init/fully_shard.py``.

Pure Python, standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "FOREACH_ADAMW",
    "FUSED_ADAMW",
    "OPTIMIZERS",
    "TE_FUSED_ADAM",
    "OptimizerChoice",
    "optimizer_for",
]

FP32_BYTES = 4.0


@dataclass(frozen=True)
class OptimizerChoice:
    """One optimizer implementation and what it holds in memory.

    Attributes:
        name: the implementation as the trainer constructs it, e.g. ``"torch.optim.AdamW(fused=True)"``.
        kind: ``"fused"`` / ``"foreach"`` (``torch.optim.AdamW`` with that flag) or ``"te_fused_adam"``
            (``transformer_engine.pytorch.optimizers.FusedAdam``).
        moment_bytes: bytes per parameter element of each of AdamW's two moments (fp32: 4).
        master_weight_bytes: bytes per parameter element of the optimizer's own master copy (0: none, FSDP2's
            fp32 sharded parameters are the master weights; 4: fp32 ``master_param`` for every parameter).
        step_temporary_bytes: bytes per parameter element of the temporaries live during ``step()``
            (foreach: one fp32 ``exp_avg_sq`` square root; fused kernels: 0).
        source: where the figures come from.
    """

    name: str
    kind: str
    moment_bytes: float
    master_weight_bytes: float
    step_temporary_bytes: float
    source: str

    @property
    def state_bytes_per_parameter(self) -> float:
        """Bytes of persistent optimizer state per parameter element: two moments plus the master copy."""
        return 2 * self.moment_bytes + self.master_weight_bytes


FUSED_ADAMW = OptimizerChoice(
    name="torch.optim.AdamW(fused=True)",
    kind="fused",
    moment_bytes=FP32_BYTES,
    master_weight_bytes=0.0,
    step_temporary_bytes=0.0,
    source="PyTorch torch/optim/adamw.py fused=True: _fused_adamw_ updates params, moments in place",
)
FOREACH_ADAMW = OptimizerChoice(
    name="torch.optim.AdamW(foreach=True)",
    kind="foreach",
    moment_bytes=FP32_BYTES,
    master_weight_bytes=0.0,
    step_temporary_bytes=FP32_BYTES,
    source="PyTorch torch/optim/adam.py _multi_tensor_adam: exp_avg_sq_sqrt = torch._foreach_sqrt(exp_avg_sqs)",
)
TE_FUSED_ADAM = OptimizerChoice(
    name="transformer_engine.pytorch.optimizers.FusedAdam(master_weights=True, master_weight_dtype=torch.float32)",
    kind="te_fused_adam",
    moment_bytes=FP32_BYTES,
    master_weight_bytes=FP32_BYTES,
    step_temporary_bytes=0.0,
    source=(
        "NVIDIA/TransformerEngine release_v2.19 transformer_engine/pytorch/optimizers/fused_adam.py: "
        "exp_avg/exp_avg_sq/master_weight dtype float32 by default; initialize_state creates master_param "
        "for every parameter when master_weights=True"
    ),
)

OPTIMIZERS: tuple[OptimizerChoice, ...] = (FUSED_ADAMW, FOREACH_ADAMW, TE_FUSED_ADAM)
"""Every optimizer the trainer builds."""


def optimizer_for(device_type: str, *, quantized_model_init: bool) -> OptimizerChoice:
    """The optimizer the trainer builds on a ``device_type`` device (``torch.device.type``: ``"cuda"`` or
    ``"cpu"``) with or without ``quantized_model_init`` (the module docstring's table). The planner plans
    GPUs: it asks for ``"cuda"``.

    Raises:
        ValueError: ``device_type`` is neither ``"cuda"`` nor ``"cpu"``.
    """
    if device_type not in ("cuda", "cpu"):
        raise ValueError(f"device_type {device_type!r}: expected 'cuda' or 'cpu'")
    if quantized_model_init:
        return TE_FUSED_ADAM
    return FUSED_ADAMW if device_type == "cuda" else FOREACH_ADAMW
