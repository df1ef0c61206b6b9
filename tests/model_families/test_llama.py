"""The Llama family's pure module: presets and parameter counts against Meta's, FLOPs with GQA and SwiGLU,
the planner's per-block terms, the one shape rule (trainer, planner and submitter), shapes as
hyperparameters, and the Hugging Face ``config.json`` mapping.

``tests/fixtures/llama3_8b_config.json`` is written from Meta's published Hugging Face configuration of
Meta-Llama-3-8B (``huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json``: 32 layers, hidden
4096, 32 heads, 8 KV heads, intermediate 14336, vocabulary 128256, rope_theta 500000.0, rms_norm_eps
1e-05, untied); nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from model_families import llama
from model_families.llama import (
    FAMILY,
    PRESETS,
    LlamaShape,
    export_layout,
    flops_per_token,
    from_hf_config,
    to_hf_config,
)
from platform_spec import hyperparameters as hpmod
from platform_spec import models
from platform_spec.errors import FieldError

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "llama3_8b_config.json"
L8, L70 = PRESETS["llama3-8b"], PRESETS["llama3-70b"]
BF16 = {"activation_bytes": 2.0, "quantized_bytes": None}
MXFP8 = {"activation_bytes": 2.0, "quantized_bytes": 1.0 + 1.0 / 32}


def hf_fixture() -> dict:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


# ---------------------------------------------------------------------------
# Presets, parameters, FLOPs


def test_the_llama3_presets_are_metas_shapes_and_count_its_parameters() -> None:
    """Meta's Llama 3 model card: 8B (8.03B) and 70B (70.6B); GQA with 8 KV heads, 128256-token vocabulary."""
    assert (L8.num_layers, L8.hidden_size, L8.num_heads, L8.num_kv_heads, L8.ffn_hidden_size, L8.vocab_size) == (
        32, 4096, 32, 8, 14336, 128256,
    )  # fmt: skip
    assert (L70.num_layers, L70.hidden_size, L70.num_heads, L70.num_kv_heads, L70.ffn_hidden_size) == (
        80, 8192, 64, 8, 28672,
    )  # fmt: skip
    for shape in (L8, L70):
        assert (shape.rope_base, shape.norm_eps, shape.tied_embeddings, shape.head_size) == (500000.0, 1e-5, False, 128)
    assert L8.num_params == 8_030_261_248 and round(L8.num_params / 1e9, 2) == 8.03
    assert L70.num_params == 70_553_706_496 and round(L70.num_params / 1e9, 1) == 70.6
    # per block: q and o h*h, k and v h*(8*128), gate/up/down h*f, two RMSNorm weights
    assert L8.params_per_block == 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096


def test_tied_embeddings_count_the_shared_weight_once() -> None:
    tiny = PRESETS["llama-tiny"]
    untied = models.resolve_shape("llama-tiny", {"tied_embeddings": False})
    assert tiny.tied_embeddings and untied.num_params - tiny.num_params == tiny.vocab_size * tiny.hidden_size


def test_flops_count_gqa_projections_swiglu_and_causal_attention() -> None:
    s, h, k, f, L = 8192, 4096, 1024, 14336, 32
    blocks = 6 * L * (2 * h * h + 2 * h * k + 3 * h * f + 2 * h)
    attention = 6 * L * h * s  # scores per query head: 32 heads x 128 = h wide, GQA or not
    assert flops_per_token(L8, s, include_embedding=False) == blocks + attention
    assert flops_per_token(L8, s) - flops_per_token(L8, s, include_embedding=False) == 6 * h * 128256
    assert flops_per_token(L8, s, causal=False) - flops_per_token(L8, s) == attention
    # the head's matmul costs the same tied or not (a lookup in, a matmul out)
    tied = models.resolve_shape("llama3-8b", {"tied_embeddings": True})
    assert flops_per_token(tied, s) == flops_per_token(L8, s)
    with pytest.raises(ValueError):
        flops_per_token(L8, 0)


def test_the_family_is_registered_by_name_with_its_presets() -> None:
    assert models.family_names() == ("gpt", "llama") and models.get_family("llama") is FAMILY
    assert models.family_of("llama3-8b") is FAMILY and models.get_preset("llama3-70b") is L70
    assert isinstance(L8, models.ModelShape) and FAMILY.flops_per_token is flops_per_token
    assert dict(FAMILY.blocks) == {"torch": ".torch_block", "te": ".te_block"}
    assert [row["model"] for row in llama.preset_table()] == ["llama-tiny", "llama3-8b", "llama3-70b"]


# ---------------------------------------------------------------------------
# The planner's per-block terms


def test_the_planners_terms_for_gqa_and_swiglu() -> None:
    terms = FAMILY.terms
    h, k, f, n = 4096, 1024, 14336, 32
    assert terms.matmul_weights_per_block(L8) == 2 * h * h + 2 * h * k + 3 * h * f
    assert terms.attention_flops_per_token(L8, 8192) == 6 * 32 * h * 8192
    saved = terms.block_activation_terms(L8, **BF16)
    assert saved["q_k_v"] == 2 * (h + 2 * k)  # K and V are num_kv_heads * head_dim wide
    assert saved["fc1_output"] == 2 * 2 * f  # gate and up, saved for the SwiGLU backward
    assert saved["fc2_gemm_input"] == 2 * f and saved["softmax_lse"] == 4 * n and saved["proj_gemm_input"] == 0
    assert sum(saved.values()) == 139_392  # 34.0h bytes per token per block in bf16 (module docstring)
    quantized = terms.block_activation_terms(L8, **MXFP8)
    q = MXFP8["quantized_bytes"]
    assert quantized["qkv_gemm_input"] == q * h and quantized["proj_gemm_input"] == q * h
    assert quantized["fc2_gemm_input"] == q * f
    dropout = terms.block_activation_terms(L8, **BF16, dropout=True)
    assert sum(dropout.values()) - sum(saved.values()) == 2 * h


def test_backward_transient_and_elementwise_traffic_for_swiglu_and_rope() -> None:
    terms = FAMILY.terms
    h, k, f = 4096, 1024, 14336
    q = MXFP8["quantized_bytes"]
    assert terms.block_backward_transient_bytes_per_token(L8, **BF16) == 2 * h + 2 * 2 * f
    assert terms.block_backward_transient_bytes_per_token(L8, **MXFP8) == 2 * h + 2 * f + 3 * q * f
    fwd, bwd = terms.block_elementwise_bytes_per_token(L8, **BF16)
    assert fwd == 8 * h + 12 * h + 6 * f + 4 * (h + k) and bwd == 2 * fwd
    fwd_q, bwd_q = terms.block_elementwise_bytes_per_token(L8, **MXFP8)
    assert fwd_q == fwd + (2 + 2 * q) * (3 * h + f)
    assert bwd_q == bwd + (2 + 2 * q) * (3 * h + 2 * k + 2 * f)


# ---------------------------------------------------------------------------
# The one shape rule


@pytest.mark.parametrize(
    ("overrides", "precision", "field", "words"),
    [
        ({"num_heads": 30}, None, "num_heads", "a divisor of hidden_size (4096)"),
        ({"num_kv_heads": 5}, None, "num_kv_heads", "a divisor of num_heads (32)"),
        ({"hidden_size": 4064, "num_heads": 32}, None, "num_heads", "(4064 / 32 = 127) even"),
        ({"rope_base": 1.0}, None, "rope_base", "a finite number > 1"),
        ({"norm_eps": 0.0}, None, "norm_eps", "a number > 0 and < 1"),
        ({"num_layers": 0}, None, "num_layers", "an integer >= 1"),
        ({"ffn_hidden_size": 14000}, "mxfp8", "ffn_hidden_size", "(14000) a multiple of 32 for precision mxfp8"),
        ({"hidden_size": 4104, "num_heads": 36, "num_kv_heads": 4}, "fp8", "hidden_size", "multiple of 16 for precision fp8"),
        ({"num_heads": 256, "num_kv_heads": 1}, "mxfp8", "num_kv_heads", "K/V width num_kv_heads * head size (16) a"),
    ],
)  # fmt: skip
def test_the_shape_rule_names_the_field(overrides: dict, precision: str | None, field: str, words: str) -> None:
    with pytest.raises(FieldError) as refused:
        models.resolve_shape("llama3-8b", overrides, precision=precision)
    assert refused.value.field == field and words in str(refused.value)


def test_the_gemm_multiples_come_from_the_precision_registry() -> None:
    shape = {"ffn_hidden_size": 14008}  # a multiple of 8 only
    assert models.resolve_shape("llama3-8b", shape, precision="bf16").ffn_hidden_size == 14008  # no TE GEMM rule
    assert models.resolve_shape("llama3-8b", {"ffn_hidden_size": 14016}, precision="fp8").ffn_hidden_size == 14016
    for precision in ("fp8", "mxfp8", "nvfp4"):
        with pytest.raises(FieldError, match="ffn_hidden_size"):
            models.resolve_shape("llama3-8b", shape, precision=precision)


def test_a_shape_is_a_preset_with_overrides_or_a_custom_shape_of_a_family() -> None:
    custom = models.resolve_shape(
        "llama",
        {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 1, "ffn_hidden_size": 160, "vocab_size": 96},
    )  # fmt: skip
    assert custom == LlamaShape("llama", 2, 64, 4, 1, 160, 96)  # the family's defaults for the rest: Llama 3's
    assert (custom.rope_base, custom.norm_eps, custom.tied_embeddings) == (500000.0, 1e-5, False)
    assert models.resolve_shape("llama3-8b", {"num_layers": 2}).name == "llama3-8b"  # a preset keeps its name
    with pytest.raises(FieldError, match="model 'llama' is a custom llama shape, which needs num_layers") as missing:
        models.resolve_shape("llama", {"hidden_size": 64})
    assert missing.value.field == "num_layers"
    # a family's fields are refused for another family, naming what it takes
    with pytest.raises(FieldError, match="model family 'gpt' has no num_kv_heads") as other:
        models.resolve_shape("gpt-1b", {"num_kv_heads": 8})
    assert other.value.field == "num_kv_heads"
    for name in ("rope_base", "tied_embeddings", "norm_eps"):
        with pytest.raises(FieldError, match=f"model family 'gpt' has no {name}"):
            models.resolve_shape("gpt-tiny", {name: 1})
    with pytest.raises(FieldError, match="'gpt', the family of model 'gpt-1b'") as family:
        models.resolve_shape("gpt-1b", model_family="llama")
    assert family.value.field == "model_family"
    with pytest.raises(models.UnknownModelError):
        models.resolve_shape("gpt-1b", model_family="mamba")


def test_shapes_are_hyperparameters_validated_by_the_family_rule() -> None:
    """The trainer's parser (the submitter's too) resolves every shape through the family's rule."""
    hp = hpmod.parse({"model_family": "llama", "num_layers": "2", "hidden_size": "64", "num_heads": "4",
                      "num_kv_heads": "2", "ffn_hidden_size": "128", "vocab_size": "512", "precision": "fp32",
                      "tied_embeddings": "true", "rope_base": "10000"})  # fmt: skip
    assert hp.model == "llama" and hp.model_family == "llama"  # model_family alone: a custom shape
    shape = hpmod.model_shape(hp)
    assert shape == LlamaShape("llama", 2, 64, 4, 2, 128, 512, rope_base=10000.0, tied_embeddings=True)
    assert hpmod.parse(hp.to_strings()) == hp  # as SageMaker carries them, and back
    assert hpmod.parse({"model": "llama3-8b"}).model == "llama3-8b"
    assert hpmod.model_shape(hpmod.parse({"model": "llama3-8b", "model_family": "llama"})) == L8
    assert "model_family" not in hpmod.Hyperparameters().to_strings()  # unset shape fields are not sent
    for values, field in (
        ({"num_kv_heads": "8"}, "num_kv_heads"),  # gpt-1b, the default model, has no KV heads of its own
        ({"model": "llama3-8b", "num_kv_heads": "3"}, "num_kv_heads"),
        ({"model": "gpt-1b", "model_family": "llama"}, "model_family"),
        ({"model": "llama3-8b", "hidden_size": "4100", "num_heads": "41", "num_kv_heads": "41"}, "hidden_size"),
        ({"model_family": "llama", "num_layers": "2"}, "hidden_size"),
    ):
        with pytest.raises(hpmod.HyperparameterError) as refused:
            hpmod.parse(values)
        assert refused.value.field == field, (values, refused.value)


# ---------------------------------------------------------------------------
# Hugging Face config.json


def test_the_fixture_maps_to_the_llama3_8b_shape_and_back() -> None:
    config = hf_fixture()
    shape = from_hf_config(config)
    assert shape == LlamaShape(
        "llama", num_layers=32, hidden_size=4096, num_heads=32, num_kv_heads=8, ffn_hidden_size=14336,
        vocab_size=128256, rope_base=500000.0, tied_embeddings=False, norm_eps=1e-5,
    )  # fmt: skip
    assert shape.num_params == L8.num_params
    written = to_hf_config(L8)
    for key, value in written.items():  # every key the export writes agrees with Meta's file where both have it
        if key in config:
            assert config[key] == value, key
    assert written["head_dim"] == 128 and from_hf_config(written) == shape
    as_hyperparameters = models.shape_hyperparameters(shape)
    assert as_hyperparameters["model"] == "llama" and as_hyperparameters["num_kv_heads"] == 8
    assert models.resolve_shape(as_hyperparameters.pop("model"), as_hyperparameters) == shape


def test_absent_optional_keys_take_transformers_defaults() -> None:
    config = {k: v for k, v in hf_fixture().items() if k not in ("rope_theta", "rms_norm_eps", "num_key_value_heads",
                                                                 "tie_word_embeddings", "rope_scaling")}  # fmt: skip
    shape = from_hf_config(config)
    assert (shape.rope_base, shape.norm_eps, shape.num_kv_heads, shape.tied_embeddings) == (10000.0, 1e-6, 32, False)


@pytest.mark.parametrize(
    ("change", "key", "words"),
    [
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope_scaling.rope_type", "'default' or 'llama3'"),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "rope_scaling.low_freq_factor", "required"),
        ({"hidden_act": "gelu"}, "hidden_act", "'silu'"),
        ({"attention_bias": True}, "attention_bias", "no biases"),
        ({"mlp_bias": True}, "mlp_bias", "no biases"),
        ({"attention_dropout": 0.1}, "attention_dropout", "no dropout"),
        ({"pretraining_tp": 2}, "pretraining_tp", "1"),
        ({"model_type": "mixtral"}, "model_type", "llama, mistral, qwen2, qwen3"),
        ({"architectures": ["MistralForCausalLM"]}, "architectures", "LlamaForCausalLM"),
        ({"head_dim": 63}, "head_dim", "an even integer"),
        ({"sliding_window": 4096}, "sliding_window", "no such key"),
        ({"num_key_value_heads": 5}, "num_key_value_heads", "a divisor of num_heads"),
        ({"hidden_size": "4096"}, "hidden_size", "an integer"),
        ({"num_hidden_layers": None}, "num_hidden_layers", "required"),
        ({"attention_bias": 0}, "attention_bias", "no biases"),
    ],
)
def test_unsupported_content_is_refused_with_the_key_named(change: dict, key: str, words: str) -> None:
    config = {**hf_fixture(), **change}
    with pytest.raises(FieldError) as refused:
        from_hf_config(config)
    assert refused.value.field == key and words in str(refused.value)


def test_a_config_without_model_type_or_not_an_object_is_refused() -> None:
    config = hf_fixture()
    del config["model_type"]
    with pytest.raises(FieldError, match="model_type"):
        from_hf_config(config)
    with pytest.raises(FieldError, match="a JSON object"):
        from_hf_config(["not", "a", "mapping"])  # type: ignore[arg-type]


def test_the_export_layout_names_every_tensor_as_hugging_face_does() -> None:
    """LlamaForCausalLM's names: 9 per layer + embeddings, final norm and (untied) lm_head = 291 for 8B."""
    layout = export_layout(L8)
    names = [piece.name for pieces in layout.values() for piece in pieces]
    assert len(names) == len(set(names)) == 32 * 9 + 3
    assert {n for n in names if not n.startswith("model.layers.")} == {
        "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
    }  # fmt: skip
    qkv = layout["layers.7.attention.qkv.weight"]
    assert [(p.name, p.start, p.stop) for p in qkv] == [
        ("model.layers.7.self_attn.q_proj.weight", 0, 4096),
        ("model.layers.7.self_attn.k_proj.weight", 4096, 5120),
        ("model.layers.7.self_attn.v_proj.weight", 5120, 6144),
    ]
    fc1 = layout["layers.0.feed_forward.fc1.weight"]
    assert [(p.name, p.start, p.stop) for p in fc1] == [
        ("model.layers.0.mlp.gate_proj.weight", 0, 14336),
        ("model.layers.0.mlp.up_proj.weight", 14336, 28672),
    ]
    assert export_layout(PRESETS["llama-tiny"])["output.weight"] == ()  # tied: no lm_head.weight


def test_the_gpt_family_takes_custom_shapes_through_the_same_rule() -> None:
    """The seam is family-independent: GPT's shape hyperparameters (num_heads is its num_attention_heads)
    and its own rule, named by the hyperparameter users set."""
    gpt = models.resolve_shape("gpt", {"num_layers": 2, "hidden_size": 128, "num_heads": 2, "ffn_hidden_size": 384})
    assert (gpt.name, gpt.num_attention_heads, gpt.vocab_size) == ("gpt", 2, 50304)
    with pytest.raises(FieldError) as refused:
        models.resolve_shape("gpt-1b", {"num_heads": 7})
    assert refused.value.field == "num_heads" and "a divisor of hidden_size (2048)" in str(refused.value)
    with pytest.raises(FieldError, match="ffn_hidden_size") as gemm:
        models.resolve_shape("gpt-1b", {"ffn_hidden_size": 6000}, precision="mxfp8")
    assert "a multiple of 32 for precision mxfp8" in str(gemm.value)
    assert models.resolve_shape("gpt-1b", {"ffn_hidden_size": 6000}, precision="bf16").ffn_hidden_size == 6000
