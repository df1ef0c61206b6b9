"""A tiny Qwen3 (per-head Q/K RMSNorm, a head_dim other than hidden_size / num_heads, untied head) trained
through ``trainctl train --model-config`` from the ``config.json`` transformers 5 writes (``rope_parameters``),
on CPython's documentation topics, torchrun with 2 CPU processes (gloo, FSDP2: the Q/K norm weights sharded
over both ranks like the rest): the loss falls, and the export is a ``Qwen3ForCausalLM``
that transformers loads with its tokenizer (``AutoTokenizer`` gives the shard's tokens of a document) and that
gives our model's loss on that training sequence (within 1e-4, fp32).
"""

from __future__ import annotations

import copy
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from trainctl.cli import main
from training.local import read_metrics
from training.model import load_pretrained

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("trainer-qwen3")]

TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": 2, "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 128,
    "vocab_size": 512, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False,
    "hidden_act": "silu", "use_sliding_window": False, "max_window_layers": 2, "max_position_embeddings": 4096,
}  # fmt: skip
"""Qwen3-8B's keys at a CPU size (head_dim 32, so Q is 128 wide on a 64-wide residual stream)."""

FLAGS = ["--precision", "fp32", "--batch-size", "8", "--seq-length", "64", "--warmup-steps", "2",
         "--learning-rate", "1e-2", "--min-learning-rate", "1e-3", "--log-interval", "1",
         "--checkpoint-interval", "10", "--seed", "1234", "--max-steps", "10"]  # fmt: skip


def test_trainctl_trains_a_tiny_qwen3_from_a_transformers_5_config(
    tmp_path: Path, pydocs_shards: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    transformers.AutoConfig.for_model(**copy.deepcopy(TINY_QWEN3)).save_pretrained(tmp_path / "hf")
    config = tmp_path / "hf" / "config.json"
    assert "rope_parameters" in json.loads(config.read_text())
    base = tmp_path / "run"
    argv = ["train", "--base-dir", str(base), "--data", str(pydocs_shards), "--nproc", "2"]
    assert main([*argv, "--model-config", str(config), *FLAGS]) == 0
    hp = json.loads((base / "input" / "config" / "hyperparameters.json").read_text())
    assert (hp["qk_norm"], hp["head_dim"], hp["qkv_bias"]) == ("true", "32", "false")
    captured = capfd.readouterr()
    run_lines = [line for line in (captured.out + captured.err).splitlines() if "[run] state=finished" in line]
    assert run_lines and all("step=10 " in line and "world_size=2" in line for line in run_lines), run_lines
    losses = [r["loss"] for r in read_metrics(base)]
    assert len(losses) == 10 and all(np.isfinite(losses))
    assert losses[0] > math.log(512) - 0.5 and statistics.mean(losses[-3:]) < losses[0] - 1.0

    export = base / "model"
    assert json.loads((export / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    # the export is a model repository: its tokenizer gives the shard's tokens of the first document
    tokenizer = transformers.AutoTokenizer.from_pretrained(export)
    first = json.loads((pydocs_shards.parent / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[0])["text"]
    ids = tokenizer(first).input_ids
    shard = sorted(pydocs_shards.rglob("*.bin"))[0]
    dtype = json.loads(shard.with_suffix(".json").read_text())["dtype"]
    assert np.fromfile(shard, dtype=dtype)[: len(ids) + 1].tolist() == [*ids, tokenizer.eos_token_id]
    assert tokenizer.eos_token_id == 256 and "no tokenizer files" not in captured.out + captured.err
    ours = load_pretrained(export)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(export).float().eval()
    assert theirs.generation_config.eos_token_id == theirs.config.eos_token_id == 256
    tokens = torch.tensor(ids[:65])
    with torch.no_grad():
        loss = ours(tokens[None, :-1], tokens[None, 1:])
        their_loss = theirs(tokens[None], labels=tokens[None]).loss  # transformers shifts the labels itself
    torch.testing.assert_close(their_loss, loss, rtol=1e-4, atol=1e-4)
