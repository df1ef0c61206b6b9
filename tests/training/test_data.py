"""Token shards, tokenizers and the deterministic sampler."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from training.corpus import python_docs_corpus, python_docs_topics
from training.data import (
    BYTE_LEVEL_EOD,
    DataError,
    DistributedSampler,
    SyntheticSampler,
    TokenDataset,
    prepare_data,
    resolve_vocab_size,
)
from training.hyperparameters import HyperparameterError, Hyperparameters


def test_byte_level_shards_round_trip(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("héllo wörld", encoding="utf-8")
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps({"text": "doc one"}) + "\n\n" + json.dumps({"text": "doc two"}) + "\n", encoding="utf-8")
    result = prepare_data(tmp_path / "out", [a, b], shard_tokens=10)
    assert result.num_documents == 3
    expected = (
        list("héllo wörld".encode()) + [BYTE_LEVEL_EOD] + list(b"doc one") + [BYTE_LEVEL_EOD]
        + list(b"doc two") + [BYTE_LEVEL_EOD]
    )
    assert result.num_tokens == len(expected)
    assert len(result.shards) == -(-len(expected) // 10)
    ds = TokenDataset(tmp_path / "out")
    assert ds.vocab_size == 257 and ds.tokenizer == "byte-level" and ds.eod_token_id == BYTE_LEVEL_EOD
    assert np.concatenate([np.asarray(t) for t in ds.tokens]).tolist() == expected
    header = json.loads((tmp_path / "out" / "shard-00000.json").read_text())
    assert header["format"] == "token-shard" and header["dtype"] == "uint16" and header["num_tokens"] == 10


def test_tokenizer_json_from_the_tokenizers_library(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<|endoftext|>": 1, "hello": 2, "world": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(tmp_path / "tokenizer.json"))
    text = tmp_path / "t.txt"
    text.write_text("hello world hello mars", encoding="utf-8")
    result = prepare_data(tmp_path / "out", [text], tmp_path / "tokenizer.json")
    ds = TokenDataset(tmp_path / "out")
    assert (result.vocab_size, ds.vocab_size, ds.eod_token_id, ds.tokenizer) == (4, 4, 1, "tokenizer.json")
    assert np.asarray(ds.tokens[0]).tolist() == [2, 3, 2, 0, 1]
    with pytest.raises(DataError, match="no token '<eos>'"):
        prepare_data(tmp_path / "out2", [text], tmp_path / "tokenizer.json", eod_token="<eos>")


def test_bad_inputs_and_shards_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        prepare_data(tmp_path / "o", [tmp_path / "missing.txt"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"txt": "no text field"}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad.jsonl:1: expected an object with a string 'text' field"):
        prepare_data(tmp_path / "o", [bad])
    with pytest.raises(DataError, match="no token shards"):
        TokenDataset(tmp_path)
    good = tmp_path / "g.txt"
    good.write_text("x" * 100, encoding="utf-8")
    prepare_data(tmp_path / "trunc", [good])
    binfile = tmp_path / "trunc" / "shard-00000.bin"
    binfile.write_bytes(binfile.read_bytes()[:-2])
    with pytest.raises(DataError, match="truncated"):
        TokenDataset(tmp_path / "trunc")


def test_sampler_is_disjoint_across_ranks_and_a_pure_function_of_the_step(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_bytes(bytes(range(32, 127)) * 40)
    ds = TokenDataset(prepare_data(tmp_path / "out", [text], shard_tokens=1000).output_dir)
    kwargs = dict(seq_length=16, batch_size=3, grad_accum=2, world_size=2, seed=7)
    samplers = [DistributedSampler(ds, rank=r, **kwargs) for r in range(2)]
    windows = samplers[0].num_windows
    seen: list[int] = []
    steps = windows // samplers[0].samples_per_step
    for step in range(steps):
        for micro in range(2):
            for s in samplers:
                seen.extend(s.sample_indices(step, micro).tolist())
    assert len(seen) == len(set(seen))  # no sample twice within the epoch, across ranks and micro-batches
    batch = samplers[1].batch(3, 1)
    assert batch.shape == (3, 17) and batch.dtype == np.int64
    # a fresh sampler (a resumed run) returns the same batch for the same step: the step is the position
    fresh = DistributedSampler(ds, rank=1, **kwargs)
    np.testing.assert_array_equal(fresh.batch(3, 1), batch)
    # windows tile each shard with stride seq_length: input/target shift by one token
    w = samplers[0].window(0)
    assert len(w) == 17
    # another seed, another order
    other = DistributedSampler(ds, rank=1, **{**kwargs, "seed": 8})
    assert not np.array_equal(other.batch(3, 1), batch)


def test_sampler_needs_one_window(tmp_path: Path) -> None:
    text = tmp_path / "t.txt"
    text.write_text("short", encoding="utf-8")
    ds = TokenDataset(prepare_data(tmp_path / "out", [text]).output_dir)
    with pytest.raises(DataError, match="lower seq_length"):
        DistributedSampler(ds, seq_length=64, batch_size=1, grad_accum=1, rank=0, world_size=1, seed=0)


def test_synthetic_sampler_is_deterministic() -> None:
    s = SyntheticSampler(vocab_size=100, seq_length=8, batch_size=2, grad_accum=1, rank=1, world_size=2, seed=3)
    np.testing.assert_array_equal(s.batch(5, 0), s.batch(5, 0))
    assert s.batch(5, 0).max() < 100
    assert not np.array_equal(s.batch(5, 0), s.batch(6, 0))


def test_vocab_size_resolution() -> None:
    hp = Hyperparameters()
    assert resolve_vocab_size(hp, 512, 257) == 512  # the preset's vocabulary covers byte-level data
    assert resolve_vocab_size(hp, 50304, 128256) == 128256
    assert resolve_vocab_size(hp, 512, 1000) == 1024  # grown to the data, rounded up to 128
    assert resolve_vocab_size(hp, 512, None) == 512
    with pytest.raises(HyperparameterError, match="vocab_size"):
        resolve_vocab_size(Hyperparameters(vocab_size=200), 512, 257)


def test_python_docs_corpus(tmp_path: Path) -> None:
    topics = python_docs_topics()
    assert len(topics) > 50 and sum(map(len, topics.values())) > 100_000
    lines = python_docs_corpus(tmp_path / "c.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == len(topics) and json.loads(lines[0])["text"]
    assert python_docs_corpus(tmp_path / "c.txt").stat().st_size > 100_000
