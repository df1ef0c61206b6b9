"""The validation loss of one rank (:mod:`training.evaluation`); the 2-process run is in test_training_runs.py."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from platform_spec.hyperparameters import Hyperparameters, model_shape
from training.data import DataError, TokenDataset
from training.environment import ConfigError, SageMakerPaths, check_validation_channel
from training.evaluation import SYNTHETIC_SEED_OFFSET, Evaluator
from training.model import build_model
from training.prepare import prepare_data

HP = Hyperparameters(
    model="gpt-tiny", num_layers=1, precision="fp32", batch_size=2, seq_length=16, eval_interval=5, eval_batches=3
)


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("validation")
    text = root / "docs.jsonl"
    text.write_text("".join(json.dumps({"text": f"document {i}: " + "abc xyz " * i}) + "\n" for i in range(40)))
    return prepare_data(root / "shards", [text]).output_dir


def _evaluator(hp: Hyperparameters, shards: Path, *, train: TokenDataset | None = None) -> Evaluator:
    evaluator = Evaluator.for_run(
        hp, validation_dir=shards, train=train, vocab_size=512, rank=0, world_size=1, device=torch.device("cpu")
    )
    assert evaluator is not None
    return evaluator


def _model():
    torch.manual_seed(0)
    return build_model(model_shape(HP).with_overrides(vocab_size=512))


def test_the_loss_is_every_validation_token_cross_entropy_over_their_number(shards: Path) -> None:
    evaluator = _evaluator(HP, shards, train=TokenDataset(shards))
    model = _model()
    loss = evaluator.evaluate(model, contextlib.nullcontext)
    assert model.training  # back in train mode
    # the reference: the logits of each batch, one cross-entropy sum over every target token
    total, tokens = 0.0, 0
    with torch.no_grad():
        for index in range(HP.eval_batches):
            inputs, targets = evaluator.batch(index)
            logits = model(inputs)
            total += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum").item()
            tokens += targets.numel()
    assert tokens == HP.eval_batches * HP.batch_size * HP.seq_length
    assert loss == pytest.approx(total / tokens, rel=1e-6)
    # the same batches every evaluation, and no gradient kept
    assert evaluator.evaluate(model, contextlib.nullcontext) == loss
    assert all(p.grad is None for p in model.parameters())


def test_the_model_is_back_in_train_mode_when_an_evaluation_fails(shards: Path) -> None:
    evaluator = _evaluator(HP, shards)
    model = _model()

    def failing():
        raise RuntimeError("autocast failed")

    with pytest.raises(RuntimeError, match="autocast failed"):
        evaluator.evaluate(model, failing)
    assert model.training


def test_off_by_default_and_synthetic_data_evaluates_a_stream_of_its_own(shards: Path) -> None:
    assert Hyperparameters().eval_interval == 0
    assert (
        Evaluator.for_run(
            dataclasses.replace(HP, eval_interval=0),
            validation_dir=shards,
            train=None,
            vocab_size=512,
            rank=0,
            world_size=1,
            device=torch.device("cpu"),
        )
        is None
    )
    synthetic = _evaluator(dataclasses.replace(HP, synthetic_data=True), shards / "absent")
    assert synthetic.sampler.seed == HP.seed + SYNTHETIC_SEED_OFFSET
    first, _ = synthetic.batch(0)
    assert torch.equal(first, synthetic.batch(0)[0]) and int(first.max()) < 512


def test_too_few_validation_windows_and_another_tokenizer_are_refused(shards: Path, tmp_path: Path) -> None:
    windows = TokenDataset(shards).num_tokens // HP.seq_length
    greedy = dataclasses.replace(HP, eval_batches=windows)
    with pytest.raises(DataError, match=r"hyperparameter 'eval_batches': got \d+, expected at most \d+") as refused:
        _evaluator(greedy, shards)
    assert "validation channel" in str(refused.value) and "lower eval_batches" in str(refused.value)
    header = json.loads((shards / "shard-00000.json").read_text())
    other = tmp_path / "other"
    other.mkdir()
    (other / "shard-00000.bin").write_bytes((shards / "shard-00000.bin").read_bytes())
    (other / "shard-00000.json").write_text(json.dumps({**header, "eod_token_id": 10}))
    with pytest.raises(DataError, match="validation channel's eod_token_id 256 differs from 10 of the train channel"):
        _evaluator(HP, shards, train=TokenDataset(other))


def test_the_entry_point_needs_the_validation_channel_when_evaluating(tmp_path: Path) -> None:
    paths = SageMakerPaths(tmp_path)
    check_validation_channel(paths, dataclasses.replace(HP, eval_interval=0))  # off: no channel needed
    check_validation_channel(paths, dataclasses.replace(HP, synthetic_data=True))  # synthetic validation tokens
    with pytest.raises(ConfigError, match=r"missing data channel 'validation'.*eval_interval=5"):
        check_validation_channel(paths, HP)


def test_the_entry_point_refuses_a_missing_or_foreign_validation_channel_before_any_worker(
    shards: Path, tmp_path: Path
) -> None:
    """Nothing launched, the reason in the failure file: no channel, then shards of another end-of-document token."""
    from training import entrypoint
    from training.local import prepare_base_dir, read_failure

    base = tmp_path / "ml"
    hp = {"model": "gpt-tiny", "precision": "fp32", "seq_length": 16, "eval_interval": 10}
    env = {"SAGEMAKER_BASE_DIR": str(base), "PATH": os.environ.get("PATH", ""), "CUDA_VISIBLE_DEVICES": ""}
    prepare_base_dir(base, hp, data_dir=shards)
    assert entrypoint.main(["train"], env) == 1
    assert "missing data channel 'validation'" in (read_failure(base) or "")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "shard-00000.bin").write_bytes((shards / "shard-00000.bin").read_bytes())
    header = json.loads((shards / "shard-00000.json").read_text())
    (foreign / "shard-00000.json").write_text(json.dumps({**header, "tokenizer": "other.json"}))
    (base / "input" / "data" / "validation").symlink_to(foreign)
    (base / "output" / "failure").unlink()
    assert entrypoint.main(["train"], env) == 1
    assert "the validation channel's tokenizer 'other.json' differs from 'byte-level'" in (read_failure(base) or "")
    assert not list((base / "checkpoints").iterdir())  # nothing was launched
