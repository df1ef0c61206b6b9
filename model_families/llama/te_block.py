"""The Llama family's TransformerEngine block (the trainer's ``te`` backend: CUDA with TransformerEngine).

Imported only when the trainer asks :data:`model_families.llama.FAMILY` for it
(:meth:`platform_spec.models.ModelFamily.block_module`); TransformerEngine
itself is imported when a block is built. Each block is one
``transformer_engine.pytorch.TransformerLayer`` (fused RMSNorm+QKV, fused
attention, RMSNorm+SwiGLU MLP, so the fp8 / mxfp8 / nvfp4 recipes apply)
configured to match :class:`model_families.llama.torch_block.TransformerBlock`:
the same parameters (count, shapes, math), named as
:data:`model_families.llama.TE_PARAMETER_NAMES` maps to the canonical names.
It builds no shape with ``qkv_bias`` or ``qk_norm`` (:data:`model_families.llama.TE_UNBUILT_FIELDS`,
why there): the trainer trains those on the torch-native blocks
(:meth:`platform_spec.models.ModelFamily.backend_for`).

The trainer image's TransformerEngine (:data:`platform_spec.trainer_image.TRANSFORMER_ENGINE_VERSION`;
``git show release_v2.19:transformer_engine/pytorch/transformer.py`` in NVIDIA/TransformerEngine)
arguments used, each checked against that branch:

===============================  ==============================================================
``TransformerLayer`` argument    what it sets
===============================  ==============================================================
``num_gqa_groups``               ``num_kv_heads`` (``None`` or ``num_attention_heads`` is MHA)
``kv_channels``                  ``head_dim`` (``None``: ``hidden_size / num_heads``)
``normalization="RMSNorm"``      both norms RMSNorm: ``layer_norm_weight`` only, no ``layer_norm_bias``
``layernorm_epsilon``            ``norm_eps`` (both norms)
``activation="swiglu"``          FC1 ``2f`` rows ``[gate; up]``, ``silu`` of the first half times the
                                 second (``LayerNormMLP``; TE's gated activations gate the first half)
``bias=False``                   no bias parameters anywhere
``fuse_qkv_params=True``         one ``layernorm_qkv.weight`` of ``h + 2k`` rows
``qkv_weight_interleaved=False`` its rows ``[q; k; v]`` (query heads, then KV heads, then V heads)
``rotary_pos_interleaved=False`` rotate-half RoPE (Hugging Face's layout), angles from :func:`block_input`
``attn_input_format="bshd"``     batch-first hidden states, as the skeleton passes them
``self_attn_mask_type="causal"`` causal attention
``hidden_dropout``,              0.0 (the family has no dropout)
``attention_dropout``
===============================  ==============================================================

Parameter names (``TE_PARAMETER_NAMES``): ``self_attention.layernorm_qkv.layer_norm_weight`` ->
``attention_norm.weight``, ``self_attention.layernorm_qkv.weight`` -> ``attention.qkv.weight``,
``self_attention.proj.weight`` -> ``attention.proj.weight``, ``layernorm_mlp.layer_norm_weight`` ->
``ffn_norm.weight``, ``layernorm_mlp.fc1_weight`` -> ``feed_forward.fc1.weight``,
``layernorm_mlp.fc2_weight`` -> ``feed_forward.fc2.weight`` (each under the block's ``layer.``).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

from model_families.llama import INIT_STD, TE_UNBUILT_REASON, LlamaShape, residual_init_std, te_unbuilt
from model_families.llama.torch_block import rotary_angles
from platform_spec.errors import FieldError


class TEBlock(nn.Module):
    """One ``te.TransformerLayer`` configured to match the torch-native block.

    ``params_dtype`` is fp32 in training: FSDP2 keeps fp32 master shards and
    all-gathers bf16 copies (MixedPrecisionPolicy), so TE sees bf16 weights and inputs.

    Raises:
        FieldError: naming ``qkv_bias`` or ``qk_norm`` when ``shape`` sets it
            (:func:`model_families.llama.te_unbuilt`), before TransformerEngine is imported.
    """

    def __init__(
        self, shape: LlamaShape, layer_number: int, *, device: str | torch.device, params_dtype: torch.dtype
    ) -> None:
        super().__init__()
        unbuilt = te_unbuilt(shape)
        if unbuilt is not None:  # the trainer never asks (ModelFamily.backend_for); a direct build_model may
            raise FieldError(
                unbuilt,
                True,
                f"false with the TransformerEngine blocks ({TE_UNBUILT_REASON}): use the torch-native blocks",
            )
        import transformer_engine.pytorch as te

        std_out = residual_init_std(shape)  # TE's own init; CausalLM.init_weights overwrites it by the family's rule
        self.layer = te.TransformerLayer(
            shape.hidden_size,
            shape.ffn_hidden_size,
            shape.num_heads,
            num_gqa_groups=shape.num_kv_heads,
            kv_channels=shape.head_dim,  # None: hidden_size / num_heads
            layernorm_epsilon=shape.norm_eps,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            init_method=partial(nn.init.normal_, mean=0.0, std=INIT_STD),
            output_layer_init_method=partial(nn.init.normal_, mean=0.0, std=std_out),
            layer_number=layer_number,
            self_attn_mask_type="causal",
            params_dtype=params_dtype,
            fuse_qkv_params=True,
            qkv_weight_interleaved=False,
            rotary_pos_interleaved=False,
            bias=False,
            activation="swiglu",
            normalization="RMSNorm",
            attn_input_format="bshd",
            device=device,
        )

    def forward(self, x: torch.Tensor, rope_angles_sb11d: torch.Tensor) -> torch.Tensor:
        """``x`` ``[batch, seq, hidden]`` (compute dtype); ``rope_angles_sb11d`` ``[seq, 1, 1, head_dim]`` fp32 radians."""
        return self.layer(x, rotary_pos_emb=rope_angles_sb11d)


def build_block(shape: LlamaShape, layer_number: int, *, device: str | torch.device = "cuda") -> TEBlock:
    """Block ``layer_number`` (1-based, TE's ``layer_number``) on ``device`` (CUDA, or ``"meta"``),
    fp32 ``params_dtype`` (FSDP2 keeps fp32 master shards)."""
    return TEBlock(shape, layer_number, device=device, params_dtype=torch.float32)


def block_input(shape: LlamaShape, seq_length: int, device: torch.device | str) -> torch.Tensor:
    """What every block receives besides the hidden state: the rotary angles (base ``rope_base``, ``llama3``
    scaling where set; :func:`model_families.llama.torch_block.rotary_angles`) in TE's
    ``[seq_length, 1, 1, head_dim]`` layout, fp32 radians."""
    return rotary_angles(shape, seq_length, device).view(seq_length, 1, 1, -1)


__all__ = ["TEBlock", "block_input", "build_block"]
