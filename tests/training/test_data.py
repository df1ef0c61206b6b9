"""Token shards, tokenizers, header and token-id validation, the fingerprint, and the deterministic sampler."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from platform_spec.hyperparameters import HyperparameterError, Hyperparameters
from training.corpus import python_docs_corpus, python_docs_topics
from training.data import (
    BYTE_LEVEL_EOD,
    DataError,
    DistributedSampler,
    SyntheticSampler,
    TokenDataset,
    largest_token_id,
    resolve_vocab_size,
)
from training.prepare import prepare_data


def test_byte_level_shards_round_trip(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("héllo wörld", encoding="utf-8")
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps({"text": "doc one"}) + "\n\n" + json.dumps({"text": "doc two"}) + "\n", encoding="utf-8")
    result = prepare_data(tmp_path / "out", [a, b], shard_tokens=10)
    assert result.num_documents == 3
    expected = [
        *list("héllo wörld".encode()),
        BYTE_LEVEL_EOD,
        *list(b"doc one"),
        BYTE_LEVEL_EOD,
        *list(b"doc two"),
        BYTE_LEVEL_EOD,
    ]
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
        prepare_data(tmp_path / "out2", [text], tmp_path / "tokenizer.json", separator="<eos>")
    # Regression: a tokenizer.json that is not JSON, or JSON of another shape, raised the tokenizers library's
    # bare Exception (a traceback from trainctl prepare-data) instead of naming the file
    for name, body in (("html.json", "<html>rate limited</html>"), ("config.json", '{"model_type": "llama"}')):
        (tmp_path / name).write_text(body, encoding="utf-8")
        with pytest.raises(DataError, match=rf"tokenizer file .*{name}: expected a Hugging Face tokenizer.json"):
            prepare_data(tmp_path / "out3", [text], tmp_path / name)
        assert not (tmp_path / "out3").exists()


def test_bad_inputs_and_shards_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        prepare_data(tmp_path / "o", [tmp_path / "missing.txt"])
    # Regression: a folder was "does not exist"; JSONL that is not UTF-8 or nests past Python's stack, and a file
    # where the output folder goes, were tracebacks (UnicodeDecodeError, RecursionError, FileExistsError)
    with pytest.raises(DataError, match=r"input folder .* holds no files \(expected text, JSONL, Parquet or Arrow"):
        (tmp_path / "empty").mkdir()
        prepare_data(tmp_path / "o", [tmp_path / "empty"])
    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
    with pytest.raises(DataError, match=r"latin1.jsonl: not UTF-8 text \(byte 0xe9 at offset 28\)"):
        prepare_data(tmp_path / "o", [latin1])
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"text": ' + "[" * 100_000 + "\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"deep.jsonl:1: not valid JSON"):
        prepare_data(tmp_path / "o", [deep])
    ok = tmp_path / "ok.txt"
    ok.write_text("text", encoding="utf-8")
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(DataError, match=r"output .*a-file is a file \(expected a folder for the shards\)"):
        prepare_data(tmp_path / "a-file", [ok])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"txt": "no text field"}\n', encoding="utf-8")
    with pytest.raises(
        DataError, match=r"bad.jsonl:1: expected an object with a string 'text' field \(its fields: txt\)"
    ):
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
    kwargs = {"seq_length": 16, "batch_size": 3, "grad_accum": 2, "world_size": 2, "seed": 7}
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


# ---------------------------------------------------------------------------
# Bad data fails with a reason, before training (issue 11.5)


def _shards(tmp_path: Path, name: str = "out", text: bytes = bytes(range(32, 127)) * 20) -> Path:
    src = tmp_path / f"{name}.txt"
    src.write_bytes(text)
    return prepare_data(tmp_path / name, [src], shard_tokens=1000).output_dir


def _edit_header(directory: Path, **fields: object) -> Path:
    path = directory / "shard-00000.json"
    header = json.loads(path.read_text())
    for key, value in fields.items():
        if value is _DROP:
            header.pop(key, None)
        else:
            header[key] = value
    path.write_text(json.dumps(header))
    return path


_DROP = object()


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"eod_token_id": "x"}, "header field 'eod_token_id': got 'x', expected an integer in [0, 257) or null"),
        ({"eod_token_id": 257}, "header field 'eod_token_id': got 257, expected an integer in [0, 257) or null"),
        ({"eod_token_id": True}, "header field 'eod_token_id': got True, expected an integer in [0, 257) or null"),
        ({"sources": "docs.txt"}, "header field 'sources': got 'docs.txt', expected a list of file names (strings)"),
        ({"sources": [1, 2]}, "header field 'sources': got [1, 2], expected a list of file names (strings)"),
        ({"num_tokens": "1000"}, "header field 'num_tokens': got '1000', expected an integer >= 0"),
        ({"num_tokens": 1000.0}, "header field 'num_tokens': got 1000.0, expected an integer >= 0"),
        ({"num_tokens": _DROP}, "header field 'num_tokens': got 'nothing (field missing)', expected an integer >= 0"),
        ({"vocab_size": 70000}, "header field 'vocab_size': got 70000, expected an integer in [2, 65537)"),
        ({"vocab_size": None}, "header field 'vocab_size': got None, expected an integer in [2, 65537)"),
        ({"dtype": "int8"}, "header field 'dtype': got 'int8', expected uint16 or uint32"),
        ({"version": 2}, "header field 'version': got 2, expected 1 (this trainer reads version 1)"),
        ({"tokenizer": 5}, "header field 'tokenizer': got 5, expected a non-empty string"),
        (
            {"tokenizer_sha256": "zz"},
            "header field 'tokenizer_sha256': got 'zz', expected 64 lowercase hex digits or null",
        ),
        ({"max_token_id": -1}, "header field 'max_token_id': got -1, expected an integer >= 0 or null"),
    ],
)
def test_malformed_header_fields_name_the_shard_and_the_field(tmp_path: Path, fields: dict, expected: str) -> None:
    header = _edit_header(_shards(tmp_path), **fields)
    with pytest.raises(DataError) as err:
        TokenDataset(tmp_path / "out")
    assert str(err.value).startswith(f"{header}: {expected}"), str(err.value)


def _run_entrypoint(tmp_path: Path, data: Path) -> str | None:
    """The container entry point on ``data``: validation fails before any worker starts."""
    from training import entrypoint
    from training.local import prepare_base_dir, read_failure

    base = tmp_path / "ml"
    prepare_base_dir(base, {"model": "gpt-tiny", "precision": "fp32", "seq_length": 16}, data_dir=data)
    env = {"SAGEMAKER_BASE_DIR": str(base), "PATH": os.environ.get("PATH", ""), "CUDA_VISIBLE_DEVICES": ""}
    assert entrypoint.main(["train"], env) == 1
    assert not list((base / "checkpoints").iterdir())  # nothing was launched
    return read_failure(base)


def test_malformed_headers_land_in_the_failure_file(tmp_path: Path) -> None:
    for name, fields in (("eod", {"eod_token_id": "x"}), ("sources", {"sources": {"a": 1}})):
        data = _shards(tmp_path, name)
        header = _edit_header(data, **fields)
        reason = _run_entrypoint(tmp_path / f"run-{name}", data)
        field = next(iter(fields))
        channel_header = (
            tmp_path / f"run-{name}" / "ml" / "input" / "data" / "train" / header.name
        )  # the channel links the data
        assert reason is not None and reason.startswith(f"{channel_header}: header field {field!r}: got "), reason


def test_token_ids_at_or_above_the_vocabulary_are_refused_when_the_data_is_opened(tmp_path: Path) -> None:
    data = _shards(tmp_path)
    header = json.loads((data / "shard-00000.json").read_text())
    assert header["max_token_id"] == 126  # prepare_data records the largest id: '~'
    tokens = np.fromfile(data / "shard-00000.bin", dtype="<u2")
    tokens[500] = 300  # a tokenizer with more ids than the header's vocab_size 257 wrote this
    tokens.tofile(data / "shard-00000.bin")
    bin_path = data / "shard-00000.bin"

    _edit_header(data, max_token_id=300)  # the header says so
    with pytest.raises(DataError) as err:
        TokenDataset(data)
    assert str(err.value).startswith(
        f"{bin_path}: token id 300 (its header's max_token_id) is not below the header's vocab_size 257"
    )
    _edit_header(data, max_token_id=_DROP)  # a shard written before max_token_id: the .bin is scanned
    with pytest.raises(
        DataError,
        match=r"token id 300 \(scanned; the header has no max_token_id\) is not below "
        r"the header's vocab_size 257",
    ):
        TokenDataset(data)
    reason = _run_entrypoint(tmp_path, data)
    channel_bin = tmp_path / "ml" / "input" / "data" / "train" / bin_path.name
    assert reason is not None and reason.startswith(f"{channel_bin}: token id 300 (scanned"), reason

    tokens[500] = 65
    tokens.tofile(data / "shard-00000.bin")
    assert TokenDataset(data).max_token_ids == [126, 256]  # scanned again and in range; shard 2 ends with EOD 256


@pytest.mark.parametrize(
    ("layout", "expected"),
    [
        # Regression: rglob("*.json") returned the directory; reading it raised IsADirectoryError (a traceback)
        (
            "json-directory",
            "{data}/shard-00001.json: a directory, not a token-shard header (the header of "
            "shard-00001.bin must be a JSON file); move it away or rename it",
        ),
        # Regression: json.loads raised RecursionError, which only JSONDecodeError/UnicodeDecodeError were caught for
        ("nested-header", "{data}/shard-00000.json: not a token-shard header (JSON nested too deeply to read)"),
        (
            "binary-header",
            "{data}/shard-00000.json: not a readable JSON header (UnicodeDecodeError; expected a token-shard header)",
        ),
    ],
)
def test_headers_that_cannot_be_read_are_data_errors_in_the_failure_file(
    tmp_path: Path, layout: str, expected: str
) -> None:
    data = _shards(tmp_path)
    if layout == "json-directory":
        (data / "shard-00001.json").unlink()
        (data / "shard-00001.json").mkdir()
    elif layout == "nested-header":
        (data / "shard-00000.json").write_text(
            '{"format": "token-shard", "sources": ' + "[" * 100_000 + "]" * 100_000 + "}"
        )
    else:
        (data / "shard-00000.json").write_bytes(b'{"format": "\xff\xfe"}')
    with pytest.raises(DataError) as err:
        TokenDataset(data)
    assert str(err.value) == expected.format(data=data)
    reason = _run_entrypoint(tmp_path, data)  # the entry point: a failure reason, no traceback of ours
    channel = tmp_path / "ml" / "input" / "data" / "train"
    assert reason == expected.format(data=channel)


def test_any_unexpected_error_during_validation_still_writes_a_reason(tmp_path: Path, monkeypatch, capsys) -> None:
    from training import entrypoint

    def broken(*args, **kwargs):
        raise KeyError("dtype")

    monkeypatch.setattr(entrypoint, "check_train_channel", broken)
    reason = _run_entrypoint(tmp_path, _shards(tmp_path))
    assert reason == "internal error while validating the job: KeyError: 'dtype'"
    err = capsys.readouterr().err
    assert "Traceback" in err and "[entrypoint] internal error while validating the job: KeyError: 'dtype'" in err


def test_every_batch_is_checked_against_the_vocabulary_naming_the_shard(tmp_path: Path) -> None:
    """A header that understates max_token_id used to end in "index out of range in self"."""
    data = _shards(tmp_path)
    bin_path = data / "shard-00000.bin"
    tokens = np.fromfile(bin_path, dtype="<u2")
    tokens[500] = 600  # not below vocab_size 257; the header still says max_token_id 126
    tokens.tofile(bin_path)
    dataset = TokenDataset(data)  # the header's claim passes the open
    sampler = DistributedSampler(dataset, seq_length=16, batch_size=4, grad_accum=1, rank=0, world_size=1, seed=0)
    bad = [g for g in range(sampler.num_windows) if 600 in sampler.window(g)]
    assert bad
    step = bad[0] // 4
    for earlier in range(step):
        sampler.batch(earlier, 0)  # clean batches pass
    with pytest.raises(DataError) as err:
        sampler.batch(step, 0)
    assert str(err.value) == (
        f"{bin_path}: token id 600 at token 500 is not below the vocabulary size 257 (the header's vocab_size; its "
        "header's max_token_id says 126); the shard is corrupt or its header is wrong (re-make it with "
        "`trainctl prepare-data`)"
    )


def test_old_shards_are_scanned_once_by_the_entry_point_not_by_every_worker(tmp_path: Path, monkeypatch) -> None:
    import training.data as data_module

    data = _shards(tmp_path)
    _edit_header(data, max_token_id=_DROP)  # written before max_token_id existed
    scans: list[int] = []
    real = data_module.largest_token_id
    monkeypatch.setattr(
        data_module, "largest_token_id", lambda tokens, *a: scans.append(int(tokens.size)) or real(tokens, *a)
    )
    assert TokenDataset(data).max_token_ids == [126, 256] and len(scans) == 1  # the entry point's open: scanned
    worker = TokenDataset(data, scan=False)  # each worker's open (training.train): no scan ...
    assert worker.max_token_ids == [None, 256] and len(scans) == 1
    tokens = np.fromfile(data / "shard-00000.bin", dtype="<u2")
    tokens[:] = 300  # ... and an id it would have found fails the first batch, naming the shard
    tokens.tofile(data / "shard-00000.bin")
    sampler = DistributedSampler(
        TokenDataset(data, scan=False), seq_length=16, batch_size=2, grad_accum=1, rank=0, world_size=1, seed=0
    )
    with pytest.raises(
        DataError,
        match=r"shard-00000.bin: token id 300 at token \d+ is not below the vocabulary "
        r"size 257 \(the header's vocab_size; its header has no max_token_id\)",
    ):
        for step in range(sampler.num_windows // 2 + 1):
            sampler.batch(step, 0)


def test_largest_token_id_scans_in_chunks() -> None:
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_000, size=10_007, dtype=np.uint32)
    assert largest_token_id(tokens, chunk=64) == int(tokens.max()) == largest_token_id(tokens)
    assert largest_token_id(np.zeros(0, dtype=np.uint16)) == 0


def test_fingerprint_identifies_the_data(tmp_path: Path) -> None:
    data = _shards(tmp_path)
    first = TokenDataset(data).fingerprint()
    assert first == TokenDataset(data).fingerprint()
    assert set(first) == {"sha256", "shards", "num_tokens", "vocab_size", "tokenizer"} and first["shards"] == 2
    link = tmp_path / "channel"
    link.symlink_to(data, target_is_directory=True)  # the train channel as `trainctl train` lays it out
    assert TokenDataset(link).fingerprint() == first
    other = _shards(tmp_path, "other", text=bytes(range(33, 127)) * 20 + b"!")
    assert TokenDataset(other).fingerprint()["sha256"] != first["sha256"]
    (data / "shard-00001.bin").rename(data / "shard-00001.bin.moved")  # a shard less
    assert TokenDataset(data).fingerprint()["sha256"] != first["sha256"]


# ---------------------------------------------------------------------------
# The data position across a world-size change (issue 11.3)


LAYOUTS = [(ws, bs, ga) for ws in (1, 2, 3, 4) for bs in (1, 2, 4) for ga in (1, 2)]
"""(world_size, batch_size, grad_accum): global batches from 1 to 16 sequences."""


def _step_samples(layout: tuple[int, int, int], step: int, start: tuple[int, int] | None = None) -> list[int]:
    """Every sample of optimizer step ``step`` in ``layout``, over all ranks and micro-batches."""
    world, batch, accum = layout
    out: list[int] = []
    for rank in range(world):
        sampler = SyntheticSampler(
            vocab_size=10, seq_length=4, batch_size=batch, grad_accum=accum, rank=rank, world_size=world, seed=0
        )
        if start is not None:
            sampler.start_at(*start)
        for micro in range(accum):
            out.extend(sampler.sample_indices(step, micro).tolist())
    return out


@settings(max_examples=80, deadline=None)
@given(
    before=st.sampled_from(LAYOUTS),
    after=st.sampled_from(LAYOUTS),
    stopped_at=st.integers(0, 6),
    more=st.integers(1, 6),
)
def test_a_world_size_change_continues_the_data_exactly(before, after, stopped_at, more) -> None:
    """Samples before + after a layout change are the uninterrupted run's prefix, none twice.

    With the same global batch (the only change a resume accepts) each optimizer step
    also trains on the same sequences as the uninterrupted run.
    """
    consumed_before = [g for step in range(stopped_at) for g in _step_samples(before, step)]
    resumed_at = (stopped_at, len(consumed_before))  # what the checkpoint records: step and samples_consumed
    after_steps = [_step_samples(after, step, resumed_at) for step in range(stopped_at, stopped_at + more)]
    union = consumed_before + [g for step in after_steps for g in step]
    assert len(union) == len(set(union))  # no sample twice
    assert sorted(union) == list(range(len(union)))  # none skipped
    if before[0] * before[1] * before[2] == after[0] * after[1] * after[2]:
        uninterrupted = [_step_samples(before, step) for step in range(stopped_at + more)]
        for k, samples in enumerate(after_steps):
            assert sorted(samples) == sorted(uninterrupted[stopped_at + k])


def test_the_position_is_a_sample_count_even_when_the_global_batch_changes(tmp_path: Path) -> None:
    ds = TokenDataset(_shards(tmp_path))
    two = [
        DistributedSampler(ds, seq_length=16, batch_size=4, grad_accum=1, rank=r, world_size=2, seed=3)
        for r in range(2)
    ]
    seen = [g for step in range(3) for s in two for g in s.sample_indices(step, 0).tolist()]  # 24 samples
    one = DistributedSampler(ds, seq_length=16, batch_size=4, grad_accum=1, rank=0, world_size=1, seed=3)
    one.start_at(3, 24)
    assert one.sample_indices(3, 0).tolist() == [24, 25, 26, 27]  # before start_at it read step x 4 = 12..15 again
    assert one.samples_consumed(5) == 32
    np.testing.assert_array_equal(one.window(24), two[0].window(24))  # sample g is the same tokens in any layout
    assert not set(seen) & set(one.sample_indices(3, 0).tolist())
    with pytest.raises(ValueError, match="before step 3"):
        one.samples_consumed(2)


def test_a_failed_prepare_data_leaves_the_existing_shards_as_they_were(tmp_path: Path) -> None:
    data = _shards(tmp_path)
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n" + "{not json\n", encoding="utf-8")
    good = tmp_path / "out.txt"
    with pytest.raises(DataError, match=r"bad.jsonl:2: not valid JSON"):
        prepare_data(data, [good, bad], shard_tokens=1000)
    with pytest.raises(DataError, match="does not exist"):
        prepare_data(data, [good, tmp_path / "missing.txt"])
    assert {p.name: p.read_bytes() for p in data.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir() if "prepare-data" in p.name] == []  # no staging folder left
    result = prepare_data(data, [good], shard_tokens=5000)  # a good run replaces them: one shard now
    assert [p.name for p in result.shards] == ["shard-00000.bin"] and result.max_token_id == 256
    assert sorted(p.name for p in data.iterdir()) == ["manifest.json", "shard-00000.bin", "shard-00000.json"]


def test_prepare_data_command_reports_the_largest_id_and_keeps_shards_on_error(tmp_path: Path, capsys) -> None:
    from trainctl.cli import main

    text = tmp_path / "t.txt"
    text.write_text("hello", encoding="utf-8")
    assert main(["prepare-data", "--output", str(tmp_path / "shards"), str(text)]) == 0
    assert "6 tokens from 1 documents, vocab_size 257 (byte-level), largest token id 256" in capsys.readouterr().out
    before = {p.name: p.read_bytes() for p in (tmp_path / "shards").iterdir()}
    assert main(["prepare-data", "--output", str(tmp_path / "shards"), str(tmp_path / "missing.txt")]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in (tmp_path / "shards").iterdir()} == before
