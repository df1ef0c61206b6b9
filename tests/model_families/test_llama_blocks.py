"""The Llama family's blocks and model: parameter names and counts on both backends (the TransformerEngine
block's through :data:`TE_PARAMETER_NAMES`), both blocks computing the same function, RoPE in Hugging Face's
rotate-half layout with the shape's base, tied embeddings (also under FSDP2), and the export under Hugging
Face's ``LlamaForCausalLM`` names checked against that library's math.

The TE block runs on ``tests/training/fake_transformer_engine.py``, a CPU stand-in with TransformerEngine
2.19's names and layouts (RMSNorm, swiglu, GQA, no biases): these tests check our mapping, never TE itself
(``benchmarks/gpu_check.py`` runs the real one on a GPU). ``transformers`` is not a dependency: the reference
forward below is written from ``transformers/models/llama/modeling_llama.py`` (``LlamaRMSNorm``,
``rotate_half``/``apply_rotary_pos_emb``, ``repeat_kv``, ``LlamaMLP``, ``LlamaDecoderLayer``), on the
exported tensors by their Hugging Face names.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from model_families.llama import (
    BLOCK_PARAMETER_NAMES,
    FAMILY,
    PRESETS,
    TE_PARAMETER_NAMES,
    LlamaShape,
    from_hf_config,
    init_rule,
    residual_init_std,
    te_block,
    torch_block,
)
from platform_spec.errors import FieldError
from platform_spec.models import resolve_shape
from training.model import build_model, canonical_state_dict, export_tensors, load_pretrained, save_pretrained
from training.tokenizer_files import DataTokenizer, byte_level_tokenizer_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "training"))
import fake_transformer_engine as fake_te

SMALL = LlamaShape("small", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=96,
                   vocab_size=128, rope_base=500000.0, norm_eps=1e-5)  # fmt: skip


def test_the_family_record_finds_its_blocks_lazily() -> None:
    assert FAMILY.block_module("torch") is torch_block and FAMILY.block_module("te") is te_block
    with pytest.raises(ValueError, match=r"backend: got 'tpu'; expected one of torch, te \(model family 'llama'\)"):
        FAMILY.block_module("tpu")


def test_parameter_names_and_counts_on_both_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every TE block parameter (the image's TE names, the stand-in's) has a canonical name, the canonical names are
    exactly the torch-native block's, and both blocks hold the shape's parameters per block (no biases, no
    norm biases, ``h + 2k`` QKV rows, ``2f`` FC1 rows)."""
    fake_te.install(monkeypatch)
    te = te_block.build_block(SMALL, 1, device="cpu")
    native = torch_block.build_block(SMALL, 1)
    te_params = dict(te.named_parameters())
    native_params = dict(native.named_parameters())
    assert set(te_params) == set(TE_PARAMETER_NAMES) and len(te_params) == 6
    assert set(TE_PARAMETER_NAMES.values()) == set(native_params)
    for te_name, canonical in TE_PARAMETER_NAMES.items():
        assert te_params[te_name].shape == native_params[canonical].shape, te_name
    h, k, f = SMALL.hidden_size, SMALL.kv_size, SMALL.ffn_hidden_size
    assert native_params["attention.qkv.weight"].shape == (h + 2 * k, h)
    assert native_params["feed_forward.fc1.weight"].shape == (2 * f, h)
    for params in (te_params, native_params):
        assert sum(p.numel() for p in params.values()) == SMALL.params_per_block
    assert FAMILY.parameter_names["te"] == TE_PARAMETER_NAMES
    full = dataclasses.replace(SMALL, qkv_bias=True)
    qwen3 = dataclasses.replace(SMALL, qk_norm=True, head_dim=32)
    names = {*dict(torch_block.build_block(full, 1).named_parameters()),
             *dict(torch_block.build_block(qwen3, 1).named_parameters())}  # fmt: skip
    assert names == set(BLOCK_PARAMETER_NAMES) == set(FAMILY.parameter_names["torch"])
    for shape in (full, qwen3):
        assert sum(p.numel() for p in torch_block.build_block(shape, 1).parameters()) == shape.params_per_block
        with pytest.raises(FieldError, match="torch-native blocks"):
            te_block.build_block(shape, 1, device="cpu")


HF_CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs"


@pytest.mark.parametrize(
    ("config", "expected"),
    [("Llama-3.1-8B", "te"), ("Mistral-7B-v0.3", "te"), ("Qwen2.5-7B", "torch"), ("Qwen3-8B", "torch")],
)
def test_the_trainer_builds_a_qwen_shape_on_the_torch_blocks_even_where_te_imports(
    monkeypatch: pytest.MonkeyPatch, config: str, expected: str
) -> None:
    """A bf16 Qwen2/Qwen3 job on a GPU with TransformerEngine once picked the TE blocks, which refuse its
    Q/K/V biases and Q/K norms, and failed when the model was built. The family's one choice
    (ModelFamily.backend_for, what Trainer.setup calls) gives blocks that build the shape, whole."""
    fake_te.install(monkeypatch)
    shape = from_hf_config(json.loads((HF_CONFIGS / f"{config}.json").read_text(encoding="utf-8")))
    assert FAMILY.backend_for(shape, te_available=False, precision="bf16") == "torch"
    backend = FAMILY.backend_for(shape, te_available=True, precision="bf16")
    assert backend == expected
    model = build_model(dataclasses.replace(shape, num_layers=1), backend=backend, device="meta")
    assert model.num_parameters() == dataclasses.replace(shape, num_layers=1).num_params
    if backend == "torch":  # the blocks it did not choose are the ones that refuse the shape
        with pytest.raises(FieldError) as refused:
            te_block.build_block(shape, 1, device="meta")
        assert refused.value.field == ("qkv_bias" if shape.qkv_bias else "qk_norm")


@pytest.mark.parametrize("name", ["llama3-8b", "llama3-70b"])
def test_the_full_models_hold_metas_parameter_counts_on_the_meta_device(name: str) -> None:
    shape = PRESETS[name]
    model = build_model(shape, device="meta")
    assert model.num_parameters() == shape.num_params
    assert not model.tied and model.output.weight is not model.tok_embeddings.weight


def test_the_te_block_computes_the_torch_block_with_its_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    """Weights copied through TE_PARAMETER_NAMES and each backend's own block input (TE's [s, 1, 1, d] angles,
    torch's (cos, sin)): the same outputs and input gradients (a wrong mapping -- gate for up, k for v -- or a
    wrong GQA grouping or rotary layout is what would differ)."""
    fake_te.install(monkeypatch)
    torch.manual_seed(0)
    reference = torch_block.build_block(SMALL, 1)
    te = te_block.build_block(SMALL, 1, device="cpu")
    weights = dict(reference.named_parameters())
    with torch.no_grad():
        for param in reference.parameters():
            param.normal_(0.0, 0.5)  # RMSNorm weights too, so every mapped pair matters
        for name, param in te.named_parameters():
            param.copy_(weights[TE_PARAMETER_NAMES[name]])
    x = torch.randn(2, 16, SMALL.hidden_size)
    outputs = {}
    for label, block, module in (("torch", reference, torch_block), ("te", te, te_block)):
        inp = x.clone().requires_grad_(True)
        y = block(inp, module.block_input(SMALL, 16, "cpu"))
        y.square().sum().backward()
        outputs[label] = (y.detach(), inp.grad)
    torch.testing.assert_close(outputs["te"][0], outputs["torch"][0])
    torch.testing.assert_close(outputs["te"][1], outputs["torch"][1])


def test_rope_uses_the_shapes_base_in_fp32_and_the_rotate_half_layout() -> None:
    cos, sin = torch_block.block_input(SMALL, 8192, "cpu")
    assert cos.dtype == sin.dtype == torch.float32 and cos.shape == (8192, SMALL.head_size)
    d = SMALL.head_size
    # pair i (and i + d/2, rotate-half) turns by pos * base^(-2i/d); the slowest pair of base 500000
    angles = torch_block.rope_angles(8192, d, 500000.0, "cpu")
    assert angles[8191, d // 2 - 1].item() == pytest.approx(8191 * 500000.0 ** (-(d - 2) / d), rel=1e-6)
    assert torch.equal(angles[:, : d // 2], angles[:, d // 2 :])
    assert not torch.equal(angles, torch_block.rope_angles(8192, d, 10000.0, "cpu"))
    te_angles = te_block.block_input(SMALL, 8192, "cpu")
    assert te_angles.dtype == torch.float32 and te_angles.shape == (8192, 1, 1, d)


def test_the_init_rule_by_canonical_name() -> None:
    assert init_rule("layers.0.attention_norm.weight", SMALL) == "ones" and init_rule("norm.weight", SMALL) == "ones"
    assert init_rule("layers.1.attention.proj.weight", SMALL) == residual_init_std(SMALL) == 0.02 / math.sqrt(4)
    assert init_rule("layers.1.feed_forward.fc2.weight", SMALL) == residual_init_std(SMALL)
    for name in ("tok_embeddings.weight", "output.weight", "layers.0.attention.qkv.weight",
                 "layers.0.feed_forward.fc1.weight"):  # fmt: skip
        assert init_rule(name, SMALL) == 0.02


# ---------------------------------------------------------------------------
# Tied embeddings


def test_a_tied_head_is_the_embedding_once_through_init_loss_and_gradients() -> None:
    shape = resolve_shape("llama-tiny", {"num_layers": 1})
    model = build_model(shape)
    assert model.tied and model.output.weight is model.tok_embeddings.weight
    assert model.num_parameters() == shape.num_params == shape.block_params + 512 * 256 + 256
    assert [n for n, _ in model.named_parameters()].count("tok_embeddings.weight") == 1
    assert "output.weight" not in dict(model.named_parameters())
    tokens = torch.randint(0, shape.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    loss = model(tokens[:, :-1], tokens[:, 1:])
    # near the uniform guess; a tied head scores each position's own token a little higher at first
    assert loss.item() == pytest.approx(math.log(shape.vocab_size), abs=0.5)
    loss.backward()
    # one gradient, summing the lookup's and the head's
    assert model.tok_embeddings.weight.grad is model.output.weight.grad
    meta = build_model(shape, device="meta")
    meta.to_empty(device="cpu")  # a new Parameter per module ...
    meta.init_weights(seed=3)  # ... tied again before any value is written
    assert meta.output.weight is meta.tok_embeddings.weight


def test_fsdp2_keeps_the_tie_through_sharding_materialising_and_a_step(process_group) -> None:
    """The trainer's path: built on meta, fully_shard per block then the root (which holds both the embedding
    and the head), materialised (to_empty + init), one optimizer step: one shared Parameter throughout, equal
    to the unsharded model's (the 2-process run through the entry point shards it over two ranks)."""
    from training import precision as prec
    from training.parallelize import build_mesh, materialize, parallelize

    shape = resolve_shape("llama-tiny", {"num_layers": 2})
    reference = build_model(shape)
    reference.init_weights(seed=11)
    model = build_model(shape, device="meta")
    model = parallelize(
        model,
        mesh=build_mesh("cpu", 1, 1, "full"),
        precision=prec.plan("fp32"),
        activation_checkpointing="off",
        reshard_after_forward=True,
    )
    materialize(model, torch.device("cpu"), seed=11)
    assert model.output.weight is model.tok_embeddings.weight
    assert len(list(model.parameters())) == len(list(reference.parameters()))
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    for name, tensor in reference.state_dict().items():
        torch.testing.assert_close(full[name], tensor, msg=name)
    tokens = torch.randint(0, shape.vocab_size, (2, 9), generator=torch.Generator().manual_seed(1))
    for m in (model, reference):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        m(tokens[:, :-1], tokens[:, 1:]).backward()
        opt.step()
    assert model.output.weight is model.tok_embeddings.weight
    torch.testing.assert_close(model.tok_embeddings.weight.full_tensor(), reference.tok_embeddings.weight)


# ---------------------------------------------------------------------------
# Export under Hugging Face's names


def hf_llama_forward(weights: dict[str, torch.Tensor], config: dict, tokens: torch.Tensor) -> torch.Tensor:
    """Logits of ``LlamaForCausalLM`` as ``transformers``' ``modeling_llama.py`` computes them, from the
    tensors by its names and its ``config.json`` (fp32, eager attention, no cache)."""
    h, n = config["hidden_size"], config["num_attention_heads"]
    g = config.get("num_key_value_heads", n)
    d, eps, base = h // n, config["rms_norm_eps"], config["rope_theta"]

    def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:  # LlamaRMSNorm
        variance = x.pow(2).mean(-1, keepdim=True)
        return weight * (x * torch.rsqrt(variance + eps))

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return torch.cat((-x2, x1), dim=-1)

    b, s = tokens.shape
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))  # LlamaRotaryEmbedding
    freqs = torch.arange(s).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    x = weights["model.embed_tokens.weight"][tokens]
    mask = torch.full((s, s), float("-inf")).triu(1)
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        y = rms_norm(x, weights[p + "input_layernorm.weight"])
        q = (y @ weights[p + "self_attn.q_proj.weight"].T).view(b, s, n, d).transpose(1, 2)
        k = (y @ weights[p + "self_attn.k_proj.weight"].T).view(b, s, g, d).transpose(1, 2)
        v = (y @ weights[p + "self_attn.v_proj.weight"].T).view(b, s, g, d).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin  # apply_rotary_pos_emb
        k, v = (t.repeat_interleave(n // g, dim=1) for t in (k, v))  # repeat_kv
        scores = q @ k.transpose(2, 3) / math.sqrt(d) + mask
        attn = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, h)
        x = x + attn @ weights[p + "self_attn.o_proj.weight"].T
        y = rms_norm(x, weights[p + "post_attention_layernorm.weight"])
        gate, up = y @ weights[p + "mlp.gate_proj.weight"].T, y @ weights[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ weights[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, weights["model.norm.weight"])
    head = weights["model.embed_tokens.weight"] if config["tie_word_embeddings"] else weights["lm_head.weight"]
    return x @ head.T


@pytest.mark.parametrize("tied", [False, True])
def test_the_export_loads_as_hugging_face_llama_computes_it(tmp_path: Path, tied: bool) -> None:
    """save_pretrained writes Hugging Face's names and config.json; Hugging Face's math on those tensors gives
    our logits (q/k rows already in its rotate-half layout: no permutation), and the file reloads here."""
    from safetensors.torch import load_file

    shape = resolve_shape("llama", {"num_layers": 2, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 2,
                                    "ffn_hidden_size": 96, "vocab_size": 128, "tied_embeddings": tied})  # fmt: skip
    model = build_model(shape)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn_like(param) * 0.05)  # norms away from 1, so a swapped norm would show
    save_pretrained(tmp_path, model.state_dict(), shape, dtype=torch.float32, extra={"step": 7})
    config = json.loads((tmp_path / "config.json").read_text())
    weights = load_file(str(tmp_path / "model.safetensors"))
    assert config["architectures"] == ["LlamaForCausalLM"] and config["model_type"] == "llama"
    assert config["tie_word_embeddings"] is tied and ("lm_head.weight" in weights) is not tied
    assert config["platform"] == {"format": "llama", "model": "llama", "num_params": shape.num_params,
                                  "dtype": "float32", "weights": "model.safetensors", "step": 7,
                                  "tokenizer_files": [], "tokenizer_missing": "the export was given no tokenizer"}  # fmt: skip
    assert from_hf_config(config) == shape  # the written config.json is a valid --model-config too
    assert len(weights) == 2 * 9 + 2 + (0 if tied else 1)
    tokens = torch.randint(0, shape.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(hf_llama_forward(weights, config, tokens), model(tokens), rtol=1e-4, atol=1e-4)
        reloaded = load_pretrained(tmp_path)
        assert torch.equal(reloaded(tokens), model(tokens)) and reloaded.tied is tied
        assert (reloaded.output.weight is reloaded.tok_embeddings.weight) is tied


def test_the_export_names_the_datas_end_of_document_as_hugging_faces_bos_eos_and_pad(tmp_path: Path) -> None:
    """Without them, LlamaConfig's defaults (bos 1, eos 2: bytes in the byte-level vocabulary) would start and
    end generation; config.json and generation_config.json agree, and config.json reads back as the same shape."""
    shape = resolve_shape("llama", {"num_layers": 1, "hidden_size": 64, "num_heads": 4, "num_kv_heads": 2,
                                    "ffn_hidden_size": 96, "vocab_size": 260})  # fmt: skip
    model = build_model(shape)
    byte_level = DataTokenizer("byte-level", 256, byte_level_tokenizer_json(), byte_level=True)
    save_pretrained(tmp_path / "a", model.state_dict(), shape, dtype=torch.float32, tokenizer=byte_level)
    config = json.loads((tmp_path / "a" / "config.json").read_text())
    generation = json.loads((tmp_path / "a" / "generation_config.json").read_text())
    assert generation == {"bos_token_id": 256, "eos_token_id": 256, "pad_token_id": 256}
    assert {k: config[k] for k in generation} == generation
    assert config["platform"]["tokenizer_files"] == ["tokenizer.json", "tokenizer_config.json"]
    assert from_hf_config(config) == shape
    save_pretrained(tmp_path / "b", model.state_dict(), shape, dtype=torch.float32)  # synthetic data: none
    config = json.loads((tmp_path / "b" / "config.json").read_text())
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (None, None, None)


def test_the_llama3_8b_export_has_hugging_faces_names_and_shapes() -> None:
    """On the meta device (no memory): every tensor of Meta-Llama-3-8B's checkpoint, by name and shape."""
    shape = PRESETS["llama3-8b"]
    model = build_model(shape, device="meta")
    exported = export_tensors(canonical_state_dict(model.state_dict()), shape)
    h, k, f, v = 4096, 1024, 14336, 128256
    expected = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for i in range(32):
        p = f"model.layers.{i}."
        expected |= {
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (k, h),
            p + "self_attn.v_proj.weight": (k, h), p + "self_attn.o_proj.weight": (h, h),
            p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h), p + "mlp.down_proj.weight": (h, f),
        }  # fmt: skip
    assert {name: tuple(t.shape) for name, t in exported.items()} == expected
    assert sum(math.prod(s) for s in expected.values()) == shape.num_params
