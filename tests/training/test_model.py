"""The single-device model: parameter count, structure, loss, export names; TE never imported on CPU."""

from __future__ import annotations

import importlib.abc
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from model_families.gpt import PRESETS, ModelConfig
from training import model as model_mod
from training.model import GPT, build_model, canonical_name, chunked_cross_entropy


@pytest.mark.parametrize("config", [
    PRESETS["gpt-tiny"],
    PRESETS["gpt-tiny"].with_overrides(num_layers=2, vocab_size=384),
    ModelConfig("odd", num_layers=3, hidden_size=96, num_attention_heads=3, ffn_hidden_size=200, vocab_size=300),
])
def test_parameter_count_equals_model_config(config: ModelConfig) -> None:
    model = build_model(config)
    assert model.num_parameters() == config.num_params


@pytest.mark.parametrize("name", ["gpt-1b", "gpt-8b"])
def test_parameter_count_of_large_presets_on_meta_device(name: str) -> None:
    config = PRESETS[name]
    model = build_model(config, device="meta")
    assert model.num_parameters() == config.num_params
    # the guide's 1B shape: 24 blocks of 41.97M parameters
    if name == "gpt-1b":
        assert config.block_params == 24 * (4 * 2048**2 + 2 * 2048 * 6144 + 9 * 2048 + 6144)


class _ForbidTransformerEngine(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.attempts: list[str] = []

    def find_spec(self, fullname, path, target=None):  # noqa: ANN001
        if fullname.split(".")[0] == "transformer_engine":
            self.attempts.append(fullname)
            raise ImportError(f"test forbids importing {fullname} on the CPU path")
        return None


def test_cpu_path_never_imports_transformer_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    from training import precision

    finder = _ForbidTransformerEngine()
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    for mod in [m for m in sys.modules if m.split(".")[0] == "transformer_engine"]:
        monkeypatch.delitem(sys.modules, mod)
    model = build_model(PRESETS["gpt-tiny"])
    tokens = torch.randint(0, 512, (2, 17))
    loss = model(tokens[:, :-1], tokens[:, 1:])
    loss.backward()
    for p in ("fp32", "bf16"):
        precision.check_supported(p, torch.device("cpu"))
    assert precision.te_recipe("bf16") is None
    with precision.autocast("bf16", None):
        pass
    assert finder.attempts == []


def test_initial_loss_is_log_vocab_and_causal() -> None:
    torch.manual_seed(0)
    config = PRESETS["gpt-tiny"]
    model = build_model(config)
    tokens = torch.randint(0, config.vocab_size, (4, 33))
    loss = model(tokens[:, :-1], tokens[:, 1:])
    assert abs(loss.item() - math.log(config.vocab_size)) < 0.15
    # causality: changing the last token never changes earlier logits
    logits = model(tokens[:, :-1])
    changed = tokens[:, :-1].clone()
    changed[:, -1] = (changed[:, -1] + 1) % config.vocab_size
    logits2 = model(changed)
    torch.testing.assert_close(logits[:, :-1], logits2[:, :-1])
    assert not torch.allclose(logits[:, -1], logits2[:, -1])


def test_chunked_cross_entropy_matches_full_loss_and_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    hidden = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(40, 16, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 40, (50,))
    full = F.cross_entropy(hidden @ weight.T, targets)
    g_full = torch.autograd.grad(full, (hidden, weight))
    monkeypatch.setattr(model_mod, "LOSS_CHUNK_ELEMENTS", 40 * 7)  # 7 tokens per chunk -> 8 chunks
    chunked = chunked_cross_entropy(hidden, weight, targets)
    g_chunked = torch.autograd.grad(chunked, (hidden, weight))
    torch.testing.assert_close(chunked, full)
    for a, b in zip(g_chunked, g_full):
        torch.testing.assert_close(a, b)


def test_canonical_names_cover_every_transformer_engine_parameter() -> None:
    te_names = [
        "self_attention.layernorm_qkv.layer_norm_weight", "self_attention.layernorm_qkv.layer_norm_bias",
        "self_attention.layernorm_qkv.weight", "self_attention.layernorm_qkv.bias",
        "self_attention.proj.weight", "self_attention.proj.bias",
        "layernorm_mlp.layer_norm_weight", "layernorm_mlp.layer_norm_bias",
        "layernorm_mlp.fc1_weight", "layernorm_mlp.fc1_bias", "layernorm_mlp.fc2_weight", "layernorm_mlp.fc2_bias",
    ]
    native = {n for n in build_model(PRESETS["gpt-tiny"].with_overrides(num_layers=1)).state_dict() if n.startswith("layers.0.")}
    mapped = {canonical_name(f"layers.0._checkpoint_wrapped_module.layer.{n}") for n in te_names}
    assert mapped == native
    assert canonical_name("layers.3.layer.self_attention.core_attention._extra_state") is None
    assert canonical_name("tok_embeddings.weight") == "tok_embeddings.weight"
    with pytest.raises(KeyError, match="unknown TransformerEngine parameter"):
        canonical_name("layers.0.layer.self_attention.new_thing")


def test_save_and_load_pretrained_round_trip(tmp_path) -> None:
    config = PRESETS["gpt-tiny"].with_overrides(num_layers=2)
    model = build_model(config)
    model_mod.save_pretrained(tmp_path, model.state_dict(), config, dtype=torch.float32, extra={"step": 7})
    loaded = model_mod.load_pretrained(tmp_path)
    assert isinstance(loaded, GPT) and loaded.config == config
    tokens = torch.randint(0, config.vocab_size, (2, 9))
    torch.testing.assert_close(loaded(tokens), model(tokens))
