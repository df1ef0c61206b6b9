"""The GPT family's TransformerEngine block (the trainer's ``te`` backend: CUDA with TransformerEngine).

Imported only when the trainer asks :data:`model_families.gpt.FAMILY` for it
(:meth:`platform_spec.models.ModelFamily.block_module`); TransformerEngine
itself is imported when a block is built. Each block is one
``transformer_engine.pytorch.TransformerLayer`` (fused LayerNorm+QKV, fused
attention, LayerNorm+MLP, so the fp8 / mxfp8 / nvfp4 recipes apply) configured
to match :class:`model_families.gpt.torch_block.TransformerBlock`: the same
parameters (count, shapes, math), named as
:data:`model_families.gpt.TE_PARAMETER_NAMES` maps to the canonical names.
TE API names follow the trainer image's TransformerEngine
(:data:`platform_spec.trainer_image.TRANSFORMER_ENGINE_VERSION`; read against its ``release_v2.19`` branch).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from model_families.gpt import INIT_STD, LAYERNORM_EPS, ROPE_BASE, ModelConfig, residual_init_std
from model_families.rotary import rope_angles


class TEBlock(nn.Module):
    """One ``te.TransformerLayer`` configured to match the torch-native block.

    ``params_dtype`` is fp32 in training: FSDP2 keeps fp32 master shards and
    all-gathers bf16 copies (MixedPrecisionPolicy), so TE sees bf16 weights and inputs.
    """

    def __init__(
        self, config: ModelConfig, layer_number: int, *, device: str | torch.device, params_dtype: torch.dtype
    ) -> None:
        super().__init__()
        import transformer_engine.pytorch as te

        std_out = residual_init_std(config)  # TE's own init; CausalLM.init_weights overwrites it by the family's rule
        self.layer = te.TransformerLayer(
            config.hidden_size,
            config.ffn_hidden_size,
            config.num_attention_heads,
            layernorm_epsilon=LAYERNORM_EPS,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            init_method=partial(nn.init.normal_, mean=0.0, std=INIT_STD),
            output_layer_init_method=partial(nn.init.normal_, mean=0.0, std=std_out),
            layer_number=layer_number,
            self_attn_mask_type="causal",
            params_dtype=params_dtype,
            fuse_qkv_params=True,
            qkv_weight_interleaved=False,
            bias=True,
            activation="gelu",
            normalization="LayerNorm",
            attn_input_format="bshd",
            device=device,
        )

    def forward(self, x: torch.Tensor, rope_angles_sb11d: torch.Tensor) -> torch.Tensor:
        """``x`` ``[batch, seq, hidden]`` (compute dtype); ``rope_angles_sb11d`` ``[seq, 1, 1, head_dim]`` fp32 radians."""
        return self.layer(x, rotary_pos_emb=rope_angles_sb11d)


def build_block(config: ModelConfig, layer_number: int, *, device: str | torch.device = "cuda") -> TEBlock:
    """Block ``layer_number`` (1-based, TE's ``layer_number``) on ``device`` (CUDA, or ``"meta"``),
    fp32 ``params_dtype`` (FSDP2 keeps fp32 master shards)."""
    return TEBlock(config, layer_number, device=device, params_dtype=torch.float32)


def block_input(config: ModelConfig, seq_length: int, device: torch.device | str) -> torch.Tensor:
    """What every block receives besides the hidden state: the rotary angles in TE's
    ``[seq_length, 1, 1, head_dim]`` layout, fp32 radians."""
    return rope_angles(seq_length, config.head_dim, ROPE_BASE, device).view(seq_length, 1, 1, -1)


__all__ = ["TEBlock", "block_input", "build_block"]
