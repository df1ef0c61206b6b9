"""``trainctl train --init-from`` end to end, torchrun with 2 CPU processes (gloo, FSDP2): each rank reads only
the rows of its own shards of a sharded transformers ``save_pretrained`` folder, and a resume starts from the
run's checkpoint, never from the HF weights again (the logits against transformers: test_hf_weights.py); with
``--tensorboard DIR`` each step's loss is in DIR's event file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from trainctl.cli import main
from training.hf_weights import read_plan
from training.local import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("trainer-hf-init")]

FLAGS = ["--precision", "fp32", "--batch-size", "4", "--seq-length", "32", "--warmup-steps", "1",
         "--learning-rate", "1e-2", "--log-interval", "1", "--checkpoint-interval", "2", "--seed", "7",
         "--max-steps", "2", "--nproc", "2"]  # fmt: skip


def test_init_from_reads_each_ranks_rows_and_a_resume_keeps_the_trained_weights(
    tmp_path: Path, pydocs_shards: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    config = transformers.LlamaConfig(
        vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=False, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(0)
    hf = tmp_path / "hf"
    transformers.LlamaForCausalLM(config).save_pretrained(hf, max_shard_size="40KB")
    assert (hf / "model.safetensors.index.json").exists()
    stored = {k: v for f in sorted(hf.glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    total = sum(t.numel() * t.element_size() for t in stored.values())
    base = tmp_path / "run"
    events = tmp_path / "tb"  # trainctl train --tensorboard: what tensorboard --logdir shows
    argv = ["train", "--base-dir", str(base), "--data", str(pydocs_shards), "--init-from", str(hf), *FLAGS,
            "--tensorboard", str(events)]  # fmt: skip

    assert main(argv) == 0
    out = capfd.readouterr().out
    read = {int(r): (int(b.replace(",", "")), int(t.replace(",", ""))) for r, b, t in re.findall(
        r"rank (\d) read [\d,]+ rows, ([\d,]+) of ([\d,]+) bytes", out  # the ranks' lines may interleave
    )}  # fmt: skip
    assert sorted(read) == [0, 1], out[-3000:]
    assert all(t == total for _, t in read.values())
    # FSDP2 shards every tensor by rows: each rank reads its half of each (an odd row count: one row apart)
    assert read[0][0] + read[1][0] == total and abs(read[0][0] - read[1][0]) < total // 10
    assert [s.bytes_read for s in read_plan(hf, 2)] == [read[0][0], read[1][0]]  # the plan's figures are these
    first = [r["loss"] for r in read_metrics(base)]
    assert len(first) == 2
    (event_file,) = events.glob("events.out.tfevents.*")
    logged = EventAccumulator(str(event_file)).Reload().Scalars("loss")
    assert [(e.step, e.value) for e in logged] == [
        (1, pytest.approx(first[0], rel=1e-6)),
        (2, pytest.approx(first[1], rel=1e-6)),
    ]
    trained = load_file(str(base / "model" / "model.safetensors"))
    assert not torch.equal(trained["lm_head.weight"], stored["lm_head.weight"])

    assert main(argv) == 0  # the same command again: resumes step-2 (nothing left to train) and exports
    out = capfd.readouterr().out
    assert "the checkpoint wins over the init_from weights" in out and "initial weights from" not in out
    again = load_file(str(base / "model" / "model.safetensors"))
    assert all(torch.equal(again[k], trained[k]) for k in trained)
