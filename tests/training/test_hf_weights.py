"""Starting from Hugging Face weights (training.hf_weights): transformers (the pinned test oracle) builds tiny
random models and saves them, single-file and sharded with an index; our model filled from those files gives
transformers' logits and loss on the same tokens; a folder that does not fit is refused naming the file and
tensor, before any parameter is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file

from platform_spec.hyperparameters import parse
from training.environment import ConfigError, SageMakerPaths, check_init_channel
from training.hf_weights import HfWeightsError, check_folder, load_into, local_rows, read_shape
from training.model import CausalLM

TINY = {"vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}  # fmt: skip
"""A GQA Llama-family shape at a CPU size."""

CASES = {
    "llama-untied": (transformers.LlamaConfig, {"tie_word_embeddings": False}),
    "llama-tied": (transformers.LlamaConfig, {"tie_word_embeddings": True}),
    "qwen2-bias-tied": (transformers.Qwen2Config, {"tie_word_embeddings": True}),
    "qwen2-bias-untied": (transformers.Qwen2Config, {"tie_word_embeddings": False}),
}
"""Qwen2 has Q/K/V biases (cut from our fused QKV bias like the weight)."""


def _save(folder: Path, case: str, *, sharded: bool, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    config_type, extra = CASES[case]
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config_type(**TINY, **extra)).eval()
    with torch.no_grad():
        for param in model.parameters():  # biases and norms away from their 0/1 initial values
            if param.ndim == 1:
                param.normal_(0.0, 0.5)
    model.to(dtype).save_pretrained(folder, max_shard_size="20KB" if sharded else "1GB")
    return model


def _ours(folder: Path) -> CausalLM:
    shape = read_shape(folder)
    model = CausalLM(shape, device="meta")
    model.to_empty(device="cpu")
    model.tie_weights()
    load_into(model, folder, shape)
    return model


@pytest.mark.parametrize("sharded", [False, True], ids=["single-file", "sharded"])
@pytest.mark.parametrize("case", list(CASES))
def test_step_0_logits_and_loss_equal_transformers(tmp_path: Path, case: str, sharded: bool) -> None:
    theirs = _save(tmp_path, case, sharded=sharded)
    assert (tmp_path / "model.safetensors.index.json").exists() == sharded
    ours = _ours(tmp_path)
    assert ours.tied == CASES[case][1]["tie_word_embeddings"]
    tokens = torch.randint(0, TINY["vocab_size"], (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, their_logits = ours(tokens[:, :-1]), theirs(tokens[:, :-1]).logits
        loss, their_loss = ours(tokens[:, :-1], tokens[:, 1:]), theirs(tokens, labels=tokens).loss
    # fp32 both sides, the same operations in another order: float32 rounding (measured: 0.0 on this CPU)
    torch.testing.assert_close(logits, their_logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss, their_loss, rtol=1e-5, atol=1e-5)


def test_bf16_weights_become_fp32_master_weights_of_the_same_values(tmp_path: Path) -> None:
    _save(tmp_path, "llama-untied", sharded=False, dtype=torch.bfloat16)
    ours = _ours(tmp_path)
    stored = load_file(str(tmp_path / "model.safetensors"))
    assert all(p.dtype == torch.float32 for p in ours.parameters())
    assert torch.equal(ours.output.weight, stored["lm_head.weight"].float())
    wq = stored["model.layers.1.self_attn.q_proj.weight"]
    assert torch.equal(ours.layers[1].attention.qkv.weight[: wq.shape[0]], wq.float())


def _rewrite(folder: Path, change) -> None:
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    change(tensors)
    save_file(tensors, str(path), metadata={"format": "pt"})


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), "'model.layers.1.mlp.up_proj.weight' is missing"),
        (
            lambda t: t.update({"model.layers.0.self_attn.k_proj.weight": torch.zeros(8, 32)}),
            r"model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' has shape \[8, 32\]; expected \[16, 32\]",
        ),
        (lambda t: t.update({"model.extra.weight": torch.zeros(2)}), "unexpected tensor 'model.extra.weight'"),
        (
            lambda t: t.update({"model.norm.weight": torch.ones(32, dtype=torch.int32)}),
            "tensor 'model.norm.weight' is I32; expected one of F16, BF16, F32, F64",
        ),
    ],
    ids=["missing", "shape", "unexpected", "dtype"],
)
def test_a_folder_that_does_not_fit_is_refused_before_any_weight_is_written(
    tmp_path: Path, change, message: str
) -> None:
    _save(tmp_path, "llama-untied", sharded=False)
    _rewrite(tmp_path, change)
    shape = read_shape(tmp_path)
    model = CausalLM(shape, device="cpu")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(HfWeightsError, match=message):
        load_into(model, tmp_path, shape)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_a_cut_short_file_and_a_wrong_index_are_refused_naming_the_file(tmp_path: Path) -> None:
    _save(tmp_path / "cut", "llama-untied", sharded=False)
    weights = tmp_path / "cut" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # an interrupted download
    with pytest.raises(HfWeightsError, match=r"model\.safetensors: not a readable safetensors file"):
        check_folder(
            tmp_path / "cut", CausalLM(read_shape(tmp_path / "cut"), device="meta"), read_shape(tmp_path / "cut")
        )
    _save(tmp_path / "index", "llama-untied", sharded=True)
    index = tmp_path / "index" / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    name = "model.norm.weight"
    other = next(f for f in sorted(set(data["weight_map"].values())) if f != data["weight_map"][name])
    data["weight_map"][name] = other
    index.write_text(json.dumps(data))
    shape = read_shape(tmp_path / "index")
    with pytest.raises(HfWeightsError, match=f"{other}: lacks tensor 'model.norm.weight'"):
        check_folder(tmp_path / "index", CausalLM(shape, device="meta"), shape)
    shutil.rmtree(tmp_path / "index")
    (tmp_path / "index").mkdir()
    with pytest.raises(HfWeightsError, match=r"no model\.safetensors and no model\.safetensors\.index\.json"):
        check_folder(tmp_path / "index", CausalLM(shape, device="meta"), shape)


def test_a_run_whose_shape_differs_from_the_weights_config_is_refused_naming_the_key(tmp_path: Path) -> None:
    paths = SageMakerPaths(tmp_path)
    _save(paths.channel_dir("init_from"), "qwen2-bias-tied", sharded=False)
    shape = {"model": "llama", "num_layers": 2, "hidden_size": 32, "num_heads": 4, "num_kv_heads": 2,
             "ffn_hidden_size": 64, "vocab_size": 96, "tied_embeddings": True, "qkv_bias": True,
             "rope_base": 10000.0, "norm_eps": 1e-6, "precision": "fp32"}  # fmt: skip
    check_init_channel(paths, parse(shape))  # the same shape: accepted
    with pytest.raises(ConfigError, match="gives hidden_size=32, the run's model has hidden_size=64"):
        check_init_channel(paths, parse({**shape, "hidden_size": 64, "num_heads": 8, "num_kv_heads": 4}))
    with pytest.raises(ConfigError, match="gives qkv_bias=True, the run's model has qkv_bias=False"):
        check_init_channel(paths, parse({**shape, "qkv_bias": False}))
    # Regression: a config.json nested past Python's stack (an FSx channel is checked by the trainer only)
    # raised RecursionError, a traceback instead of the failure reason naming the file
    (paths.channel_dir("init_from") / "config.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"config.json: expected a Hugging Face config.json \(nested too deeply"):
        check_init_channel(paths, parse(shape))
    with pytest.raises(HfWeightsError, match=r"config.json: expected a Hugging Face config.json \(nested too deeply"):
        read_shape(paths.channel_dir("init_from"))


def test_a_plain_tensor_is_all_rows_of_this_rank() -> None:
    assert local_rows(torch.zeros(5, 3)) == (0, 5)


def test_the_plan_shows_the_bytes_each_gpu_and_instance_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainctl.cli import main

    _save(tmp_path, "llama-untied", sharded=True, dtype=torch.bfloat16)
    total = sum(t.numel() * 2 for f in tmp_path.glob("*.safetensors") for t in load_file(str(f)).values())
    argv = ["plan", "--init-from", str(tmp_path), "--precision", "bf16", "--instance-type", "ml.p5.48xlarge"]
    assert main([*argv, "--instance-count", "2", "--json"]) == 0
    load = json.loads(capsys.readouterr().out)["init_weights"]
    assert load["bytes_total"] == total
    # 16 GPUs shard every tensor by rows: each reads about a 16th, each instance about half
    assert total / 16 <= load["bytes_per_gpu"] < total / 16 * 1.2
    assert total / 2 <= load["bytes_per_instance"] < total / 2 * 1.1
    assert load["peak_extra_bytes"] < load["bytes_per_gpu"] * 3
    assert main([*argv, "--instance-count", "2", "--sharding-strategy", "hybrid", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["init_weights"]["bytes_per_instance"] == total  # a replica each
    assert main([*argv, "--model-config", str(tmp_path / "config.json")]) == 2
    assert "give it or --init-from" in capsys.readouterr().err


def test_a_refused_init_from_config_is_named_by_the_flag_that_gave_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--init-from DIR``'s config.json is refused as ``--init-from``'s (it once said ``--model-config``, a flag
    the user never gave), by plan and by train, before anything is written."""
    from trainctl.cli import main

    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}', encoding="utf-8")
    assert main(["plan", "--init-from", str(folder), "--instance-type", "ml.p5.48xlarge"]) == 2
    assert f"argument --init-from {folder / 'config.json'}: model_config.num_hidden_layers" in capsys.readouterr().err
    assert main(["train", "--base-dir", str(tmp_path / "run"), "--init-from", str(folder), "--max-steps", "1"]) != 0
    assert f"--init-from {folder / 'config.json'}: model_config.num_hidden_layers" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
