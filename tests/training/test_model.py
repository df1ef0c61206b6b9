"""The single-device model skeleton around a family's blocks: parameter count, structure, loss, export
names and round trip; TE never imported on CPU. (The GPT blocks' own tests: tests/model_families/.)"""

from __future__ import annotations

import importlib.abc
import json
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from model_families.gpt import FAMILY, PRESETS, ModelConfig
from platform_spec.models import UnknownModelError
from training import model as model_mod
from training.model import CausalLM, build_model, canonical_name, chunked_cross_entropy


@pytest.mark.parametrize(
    "config",
    [
        PRESETS["gpt-tiny"],
        PRESETS["gpt-tiny"].with_overrides(num_layers=2, vocab_size=384),
        ModelConfig("odd", num_layers=3, hidden_size=96, num_attention_heads=3, ffn_hidden_size=200, vocab_size=300),
    ],
)
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

    def find_spec(self, fullname, path, target=None):
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
    for a, b in zip(g_chunked, g_full, strict=True):
        torch.testing.assert_close(a, b)


def test_canonical_names_of_the_skeleton_and_the_wrappers() -> None:
    """Wrapper parts go, skeleton names stay, a block's names go through its family's (``gpt``: TE's names;
    the mapping itself is pinned in tests/model_families/test_gpt_blocks.py); with or without the family."""
    family = FAMILY
    for fam in (family, None):
        assert canonical_name("layers.0._checkpoint_wrapped_module.layer.layernorm_mlp.fc2_weight", fam) == (
            "layers.0.feed_forward.fc2.weight"
        )
        assert (
            canonical_name("_orig_mod.layers.2._fsdp_wrapped_module.attention.qkv.bias", fam)
            == "layers.2.attention.qkv.bias"
        )
        assert canonical_name("layers.3.layer.self_attention.core_attention._extra_state", fam) is None
        assert canonical_name("tok_embeddings.weight", fam) == "tok_embeddings.weight"
        with pytest.raises(KeyError, match=r"unknown block parameter 'layers\.0\.layer\.self_attention\.new_thing'"):
            canonical_name("layers.0.layer.self_attention.new_thing", fam)
    # a torch-native name the other backend does not have is refused too: both blocks must match
    with pytest.raises(KeyError, match="unknown block parameter"):
        canonical_name("layers.0.attention.extra.weight", family)


def test_the_model_is_built_from_its_family_and_refuses_a_backend_it_lacks() -> None:
    model = build_model(PRESETS["gpt-tiny"].with_overrides(num_layers=1))
    assert model.family is FAMILY and model.backend == "torch" and type(model.norm) is torch.nn.LayerNorm
    with pytest.raises(ValueError, match=r"backend 'tpu': expected one of torch, te"):
        build_model(PRESETS["gpt-tiny"], backend="tpu")
    with pytest.raises(ValueError, match=r"backend='te' needs a CUDA \(or meta\) device"):
        build_model(PRESETS["gpt-tiny"], backend="te")
    with pytest.raises(UnknownModelError, match="a shape of a registered family"):
        build_model(object())


def test_save_and_load_pretrained_round_trip(tmp_path) -> None:
    config = PRESETS["gpt-tiny"].with_overrides(num_layers=2)
    model = build_model(config)
    model_mod.save_pretrained(tmp_path, model.state_dict(), config, dtype=torch.float32, extra={"step": 7})
    loaded = model_mod.load_pretrained(tmp_path)
    assert isinstance(loaded, CausalLM) and loaded.config == config
    tokens = torch.randint(0, config.vocab_size, (2, 9))
    torch.testing.assert_close(loaded(tokens), model(tokens))
    meta = json.loads((tmp_path / "config.json").read_text())
    assert list(meta)[:9] == [
        "format",
        "model",
        "num_layers",
        "hidden_size",
        "num_attention_heads",
        "ffn_hidden_size",
        "vocab_size",
        "num_params",
        "dtype",
    ]  # the export's layout before families existed
    assert (meta["format"], meta["rope_base"], meta["layernorm_eps"], meta["activation"], meta["step"]) == (
        "gpt-decoder",
        10000.0,
        1e-5,
        "gelu_tanh",
        7,
    )


def test_load_pretrained_refuses_a_format_no_family_exports(tmp_path) -> None:
    config = PRESETS["gpt-tiny"].with_overrides(num_layers=1)
    model_mod.save_pretrained(tmp_path, build_model(config).state_dict(), config, dtype=torch.float32)
    meta = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**meta, "format": "mamba"}))
    with pytest.raises(ValueError, match=r"format 'mamba'; expected one of gpt-decoder, llama"):
        model_mod.load_pretrained(tmp_path)
