"""The Llama family's Hugging Face architectures against transformers itself (the pinned test oracle,
``requirements-dev.txt``): every published config of ``tests/fixtures/hf_configs/`` in the transformers 4 form
it was published in and the transformers 5 form transformers writes for it; parameter counts of the model
transformers builds on the meta device; the ``llama3`` RoPE frequencies of transformers' ``ROPE_INIT_FUNCTIONS``;
and logits of tiny random models, weights copied both ways (transformers -> ours through ``import_tensors``,
ours -> transformers through ``save_pretrained`` and ``from_pretrained``).

The fixtures are the published ``config.json`` files' fields (nothing is downloaded): meta-llama/Llama-3.1-8B,
meta-llama/Llama-3.2-1B, meta-llama/Llama-3.3-70B-Instruct, mistralai/Mistral-7B-v0.3, Qwen/Qwen2.5-7B,
Qwen/Qwen2.5-0.5B, Qwen/Qwen3-8B, Qwen/Qwen3-0.6B (each file is named after its model id).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from model_families.llama import HF_ARCHITECTURES, from_hf_config
from platform_spec.errors import FieldError
from training.model import build_model, import_tensors, save_pretrained

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"
PUBLISHED = sorted(p.stem for p in FIXTURES.glob("*.json"))


def published(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))


def v5_form(config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    """``config`` as transformers (5.x) writes it: loaded and saved by ``save_pretrained``."""
    hf_config(config).save_pretrained(tmp_path)
    return json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))


def hf_config(config: dict[str, Any]) -> Any:
    """transformers' configuration object of ``config`` (a copy: loading sets RoPE defaults in its dicts)."""
    return transformers.AutoConfig.for_model(**copy.deepcopy(config))


def hf_param_count(config: dict[str, Any]) -> int:
    """Parameters of the model transformers builds from ``config`` (meta device: no memory; a tied weight once)."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config(config))
    return sum(p.numel() for p in model.parameters())


def test_the_fixtures_cover_every_architecture() -> None:
    assert {published(n)["model_type"] for n in PUBLISHED} == set(HF_ARCHITECTURES)


@pytest.mark.parametrize("name", PUBLISHED)
def test_a_published_config_in_both_forms_is_one_shape_with_transformers_parameter_count(
    name: str, tmp_path: Path
) -> None:
    v4 = published(name)
    v5 = v5_form(v4, tmp_path)
    assert "rope_parameters" in v5 and "rope_theta" not in v5 and "rope_scaling" not in v5
    shape = from_hf_config(v4)
    assert from_hf_config(v5) == shape
    assert shape.num_params == hf_param_count(v4)


def test_published_figures_hold() -> None:
    """The model cards' sizes: Llama 3.1 8B 8.03B, Llama 3.2 1B 1.24B (tied), Qwen2.5-7B 7.61B (with the
    Q/K/V biases the flags alone missed, 129,024 of them), Qwen3-8B 8.19B."""
    assert from_hf_config(published("Llama-3.1-8B")).num_params == 8_030_261_248
    assert from_hf_config(published("Llama-3.2-1B")).num_params == 1_235_814_400
    qwen = from_hf_config(published("Qwen2.5-7B"))
    assert qwen.num_params == 7_615_616_512 and qwen.num_layers * (qwen.q_size + 2 * qwen.kv_size) == 129_024
    assert from_hf_config(published("Qwen3-8B")).num_params == 8_190_735_360


@pytest.mark.parametrize("model_type", sorted(HF_ARCHITECTURES))
def test_absent_keys_take_the_configuration_classs_defaults(model_type: str) -> None:
    sizes = {"model_type": model_type, "num_hidden_layers": 2, "hidden_size": 2048, "num_attention_heads": 32,
             "intermediate_size": 64, "vocab_size": 100}  # fmt: skip
    hf = hf_config(sizes)
    shape = from_hf_config(sizes)
    assert shape.num_kv_heads == hf.num_key_value_heads
    assert shape.head_size == (getattr(hf, "head_dim", None) or 2048 // 32)
    assert shape.norm_eps == hf.rms_norm_eps and shape.tied_embeddings == hf.tie_word_embeddings
    assert shape.rope_base == hf.rope_parameters["rope_theta"] and shape.rope_scaling is None
    # Mistral's window is the shape's (4096 absent: MistralConfig's default); Qwen's is off unless used
    assert shape.sliding_window == (hf.sliding_window if model_type == "mistral" else None)


def test_llama3_rope_frequencies_and_angles_are_transformers() -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from model_families.llama.torch_block import rotary_angles

    for name in ("Llama-3.1-8B", "Llama-3.2-1B"):
        config = published(name)
        hf = hf_config(config)
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")
        shape = from_hf_config(config)
        ours = rotary_angles(shape, 2, "cpu")[1, : shape.head_size // 2]  # position 1: the inverse frequencies
        assert attention_factor == 1.0 and torch.equal(ours, inv_freq.float())
        rotary = transformers.models.llama.modeling_llama.LlamaRotaryEmbedding(hf)
        positions = torch.arange(16384)[None]
        cos, sin = rotary(torch.zeros(1, dtype=torch.float32), positions)
        angles = rotary_angles(shape, 16384, "cpu")
        torch.testing.assert_close(angles.cos(), cos[0], rtol=0, atol=2e-6)
        torch.testing.assert_close(angles.sin(), sin[0], rtol=0, atol=2e-6)


TINY: dict[str, dict[str, Any]] = {
    "llama3-untied": {**published("Llama-3.1-8B"), "num_hidden_layers": 2, "hidden_size": 64,
                      "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 256,
                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 4.0, "original_max_position_embeddings": 16}},
    "llama3.2-tied-head_dim": {**published("Llama-3.2-1B"), "num_hidden_layers": 2, "hidden_size": 64,
                               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
                               "intermediate_size": 96, "vocab_size": 256,
                               "rope_scaling": {**published("Llama-3.2-1B")["rope_scaling"],
                                                "original_max_position_embeddings": 32}},
    "mistral": {**published("Mistral-7B-v0.3"), "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 256},
    "mistral-window": {**published("Mistral-7B-v0.3"), "num_hidden_layers": 2, "hidden_size": 64,
                       "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 256,
                       "sliding_window": 48},  # the tested sequence's length: the window never binds
    "qwen2-tied": {**published("Qwen2.5-0.5B"), "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 256, "max_window_layers": 2},
    "qwen3-untied": {**published("Qwen3-8B"), "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                     "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 96, "vocab_size": 256,
                     "max_window_layers": 2},
    "qwen3-tied": {**published("Qwen3-0.6B"), "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                   "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 96, "vocab_size": 256,
                   "max_window_layers": 2},
}  # fmt: skip
"""Tiny random configs of each architecture (the published files' other keys kept), ``llama3`` scaling with an
``original_max_position_embeddings`` inside the tested sequence so every branch of it acts."""


def _random_hf_model(config: dict[str, Any]) -> Any:
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config(config))
    with torch.no_grad():
        for param in model.parameters():  # norms away from 1 and biases away from 0, so a swap would show
            param.add_(torch.randn_like(param) * 0.1)
    return model.float().eval()


@pytest.mark.parametrize("form", ["v4", "v5"])
@pytest.mark.parametrize("name", sorted(TINY))
def test_our_model_computes_transformers_logits_with_its_weights_both_ways(
    name: str, form: str, tmp_path: Path
) -> None:
    config = TINY[name] if form == "v4" else v5_form(TINY[name], tmp_path / "v5")
    hf_model = _random_hf_model(TINY[name])
    shape = from_hf_config(config)
    assert shape.num_params == sum(p.numel() for p in hf_model.parameters())
    ours = build_model(shape)
    weights = hf_model.state_dict()
    if shape.tied_embeddings:  # a module's state dict names the tied head too; a checkpoint file does not
        del weights["lm_head.weight"]
    state = import_tensors(weights, shape)
    ours.load_state_dict(state, strict=True)
    ours.tie_weights()
    tokens = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = hf_model(tokens).logits
        torch.testing.assert_close(ours(tokens), expected, rtol=1e-4, atol=1e-4)
        # ours -> transformers: our export loads into transformers' class and computes the same logits
        save_pretrained(tmp_path / "export", ours.state_dict(), shape, dtype=torch.float32)
        reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "export").float().eval()
        torch.testing.assert_close(reloaded(tokens).logits, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("name", "change", "key", "words"),
    [
        ("Mistral-7B-v0.3", {"sliding_window": 0}, "sliding_window", "an integer >= 1"),
        ("Qwen2.5-7B", {"use_sliding_window": True}, "use_sliding_window", "sliding-window attention"),
        ("Qwen3-8B", {"layer_types": ["full_attention"] * 35 + ["sliding_attention"]}, "layer_types",
         "full_attention"),
        ("Qwen3-8B", {"attention_bias": True}, "attention_bias", "no biases"),
        ("Llama-3.1-8B", {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}},
         "rope_scaling.rope_type", "'default' or 'llama3'"),
        ("Llama-3.1-8B", {"rope_scaling": {**published("Llama-3.1-8B")["rope_scaling"], "attention_factor": 1.0}},
         "rope_scaling.attention_factor", "no such key"),
        ("Llama-3.1-8B", {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}, "rope_theta", "not both"),
        ("Llama-3.1-8B", {"rope_scaling": {**published("Llama-3.1-8B")["rope_scaling"], "factor": 0.5}},
         "rope_scaling.factor", ">= 1"),
        ("Llama-3.1-8B", {"num_local_experts": 8}, "num_local_experts", "no such key"),
        ("Llama-3.1-8B", {"model_type": "mixtral"}, "model_type", "llama, mistral, qwen2, qwen3"),
        ("Qwen3-8B", {"architectures": ["LlamaForCausalLM"]}, "architectures", "Qwen3ForCausalLM"),
    ],
)  # fmt: skip
def test_what_the_blocks_do_not_compute_is_refused_naming_the_key(
    name: str, change: dict[str, Any], key: str, words: str
) -> None:
    with pytest.raises(FieldError) as refused:
        from_hf_config({**published(name), **change})
    assert refused.value.field == key and words in str(refused.value), str(refused.value)


def test_a_transformers_5_config_with_another_rope_type_is_refused_inside_rope_parameters(tmp_path: Path) -> None:
    v5 = v5_form(published("Llama-3.1-8B"), tmp_path)
    v5["rope_parameters"]["rope_type"] = "dynamic"
    with pytest.raises(FieldError) as refused:
        from_hf_config(v5)
    assert refused.value.field == "rope_parameters.rope_type" and refused.value.value == "dynamic"


def test_a_qwen_shape_is_refused_for_a_transformer_engine_precision_naming_its_option() -> None:
    from platform_spec.hyperparameters import merge_model_config, parse

    for name, option in (("Qwen2.5-7B", "qkv_bias"), ("Qwen3-8B", "qk_norm")):
        values = merge_model_config({"precision": "mxfp8"}, published(name))
        with pytest.raises(FieldError) as refused:
            parse(values)
        assert refused.value.field == option and "precision mxfp8" in str(refused.value)
        assert parse({**values, "precision": "bf16"}).model == "llama"


def test_a_mistral_window_is_accepted_up_to_its_length_and_refused_beyond_naming_it(tmp_path: Path) -> None:
    """transformers' default ``MistralConfig()`` saves ``sliding_window: 4096``. Up to ``w`` tokens its model
    computes full causal attention, our blocks' (the logits test above, at ``w`` = 48 tokens); at ``w + 1`` its
    window binds and its logits leave ours, so there the run is refused, naming the key, its value and
    ``seq_length``, wherever the sequence length is known (the hyperparameters' rule: plan, train, request)."""
    from platform_spec.hyperparameters import HyperparameterError, merge_model_config, parse

    default = transformers.MistralConfig()
    default.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text(encoding="utf-8"))
    assert saved["sliding_window"] == 4096 and from_hf_config(saved).sliding_window == 4096
    values = merge_model_config({"precision": "bf16"}, saved)
    assert parse({**values, "seq_length": 4096}).sliding_window == 4096
    with pytest.raises(HyperparameterError) as refused:
        parse({**values, "seq_length": 4097})
    assert refused.value.field == "sliding_window" and refused.value.value == 4096
    assert "at least seq_length (4097)" in str(refused.value)

    config = TINY["mistral-window"]
    hf_model = _random_hf_model(config)
    ours = build_model(from_hf_config(config))
    ours.load_state_dict(import_tensors(hf_model.state_dict(), from_hf_config(config)), strict=True)
    tokens = torch.randint(0, 256, (1, 49), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        expected, mine = hf_model(tokens).logits, ours(tokens)
    torch.testing.assert_close(mine[:, :48], expected[:, :48], rtol=1e-4, atol=1e-4)
    assert not torch.allclose(mine[:, 48], expected[:, 48], rtol=1e-4, atol=1e-4)  # token 49 loses key 0
