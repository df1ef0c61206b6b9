"""A tiny Llama-style model trained through ``trainctl train --model-config`` and the container entry point:
torchrun, 2 CPU processes, gloo, FSDP2 (grouped-query attention, tied embeddings sharded over both ranks),
on CPython's documentation topics; the loss falls, a restart resumes the tied model from its checkpoint, and
the final export carries Hugging Face's names and ``config.json``.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch

from trainctl.cli import main
from training.environment import SageMakerPaths
from training.local import read_metrics
from training.model import load_pretrained
from training.supervision import read_status

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("trainer-llama")]

TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 704, "vocab_size": 512,
    "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "hidden_act": "silu",
}  # fmt: skip
"""A Llama-style config.json (GQA 4:2, tied embeddings), llama-tiny's shape with 2 of its blocks."""

FLAGS = ["--precision", "fp32", "--batch-size", "8", "--seq-length", "64", "--warmup-steps", "2",
         "--learning-rate", "3e-3", "--min-learning-rate", "3e-4", "--log-interval", "1",
         "--checkpoint-interval", "6", "--keep-checkpoints", "2", "--seed", "1234"]  # fmt: skip


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory: pytest.TempPathFactory, pydocs_shards: Path) -> Path:
    """12 steps, then a restart to 13 that resumes from the step-12 checkpoint."""
    root = tmp_path_factory.mktemp("llama")
    config = root / "config.json"
    config.write_text(json.dumps(TINY_LLAMA), encoding="utf-8")
    base = root / "run"
    common = ["train", "--base-dir", str(base), "--data", str(pydocs_shards), "--nproc", "2"]
    assert main([*common, "--model-config", str(config), *FLAGS, "--max-steps", "12"]) == 0
    assert main([*common, "--max-steps", "13"]) == 0  # the previous run's hyperparameters, one more step
    return base


def test_trainctl_train_trains_a_tiny_llama_and_the_loss_falls(llama_run: Path) -> None:
    hp = json.loads((llama_run / "input" / "config" / "hyperparameters.json").read_text())
    assert (hp["model"], hp["num_kv_heads"], hp["tied_embeddings"], hp["max_steps"]) == ("llama", "2", "true", "13")
    records = read_metrics(llama_run)
    assert [r["step"] for r in records] == list(range(1, 14))
    losses = [r["loss"] for r in records]
    assert all(np.isfinite(losses))
    # from about the uniform guess ln(512) = 6.24 nats/token towards byte-level English and Python statistics
    assert losses[0] > math.log(512) - 0.5
    assert statistics.mean(losses[-4:]) < losses[0] - 2.0


def test_the_restart_resumed_the_tied_model_from_its_checkpoint(llama_run: Path) -> None:
    """The DCP checkpoint of the sharded, tied model loads into a fresh 2-process run (a resume refuses
    what does not match, so finishing at step 13 from step 12 is the proof)."""
    status = read_status(SageMakerPaths(llama_run))
    assert status is not None and (status.state, status.step, status.resumed_from) == ("finished", 13, 12)
    steps = sorted(int(p.name.removeprefix("step-")) for p in (llama_run / "checkpoints").glob("step-*"))
    assert steps == [12, 13]


def test_the_export_is_hugging_face_llama_and_reloads(llama_run: Path) -> None:
    from safetensors.torch import load_file

    export = llama_run / "model"
    config = json.loads((export / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"] and config["tie_word_embeddings"] is True
    assert config["num_key_value_heads"] == 2 and config["platform"]["step"] == 13
    weights = load_file(str(export / "model.safetensors"))
    assert "lm_head.weight" not in weights and weights["model.layers.1.self_attn.k_proj.weight"].shape == (128, 256)
    model = load_pretrained(export)
    assert model.output.weight is model.tok_embeddings.weight
    assert model.num_parameters() == sum(t.numel() for t in weights.values())
    tokens = torch.randint(0, 257, (1, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        loss = model(tokens[:, :-1], tokens[:, 1:])
    assert torch.isfinite(loss)
