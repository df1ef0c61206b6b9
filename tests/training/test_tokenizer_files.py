"""The export's tokenizer files, against transformers (the pinned test oracle): ``AutoTokenizer`` on an export
encodes a document into exactly the ids prepare-data wrote for it (no BOS the data lacks, the data's separator
as eos), for the byte-level fallback and for a Llama 3 style tokenizer (byte-level BPE whose template prepends
``<|begin_of_text|>``, trained here on CPython's documentation topics: no download).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from platform_spec.models import resolve_shape
from training.corpus import python_docs_topics
from training.data import ByteTokenizer, TokenDataset
from training.model import build_model, save_pretrained
from training.prepare import prepare_data
from training.tokenizer_files import DataTokenizer, byte_level_tokenizer_json

SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
SHAPE = {"num_layers": 1, "hidden_size": 32, "num_heads": 2, "num_kv_heads": 1, "ffn_hidden_size": 64}


@pytest.fixture(scope="module")
def topics() -> list[str]:
    return list(python_docs_topics().values())[:12]


@pytest.fixture(scope="module")
def llama3_style(tmp_path_factory: pytest.TempPathFactory, topics: list[str]) -> Path:
    """A byte-level BPE (vocabulary 512) with Llama 3's special tokens and its BOS-prepending template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(topics, trainer)
    bos = tok.token_to_id(SPECIAL[0])
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{SPECIAL[0]} $A", pair=f"{SPECIAL[0]} $A {SPECIAL[0]} $B:1", special_tokens=[(SPECIAL[0], bos)]
            ),
        ]
    )
    assert tok.encode("def f").ids[0] == bos  # the tokenizer as published prepends a BOS
    path = tmp_path_factory.mktemp("tok") / "llama3-style.json"
    tok.save(str(path))
    return path


def _export(tmp_path: Path, tokenizer: DataTokenizer, vocab_size: int) -> Path:
    shape = resolve_shape("llama", {**SHAPE, "vocab_size": vocab_size})
    save_pretrained(tmp_path, build_model(shape).state_dict(), shape, dtype=torch.float32, tokenizer=tokenizer)
    return tmp_path


def _documents(dataset: TokenDataset) -> list[list[int]]:
    """The shards' tokens cut after each end-of-document token (each document's ids and its separator)."""
    tokens = np.concatenate([np.asarray(t) for t in dataset.tokens]).tolist()
    cuts = [i + 1 for i, t in enumerate(tokens) if t == dataset.eod_token_id]
    return [tokens[a:b] for a, b in zip([0, *cuts[:-1]], cuts, strict=True)]


@pytest.mark.parametrize("separator", [None, "<|eot_id|>"])
def test_auto_tokenizer_of_the_export_gives_the_shards_tokens_without_the_bos_the_data_lacks(
    tmp_path: Path, topics: list[str], llama3_style: Path, separator: str | None
) -> None:
    """By default the separator is <|end_of_text|>; with --separator <|eot_id|> (a separator that is not what
    the tokenizer's authors call eos) the export's eos is <|eot_id|>, in the tokenizer and both configs."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in topics), encoding="utf-8")
    prepare_data(tmp_path / "data", [corpus], llama3_style, separator=separator)
    dataset = TokenDataset(tmp_path / "data")
    tokenizer = DataTokenizer.of_dataset(dataset)
    assert tokenizer.missing is None and tokenizer.name == "llama3-style.json"
    export = _export(tmp_path / "export", tokenizer, dataset.vocab_size)

    hf = transformers.AutoTokenizer.from_pretrained(export)
    eos = separator or "<|end_of_text|>"
    assert hf.eos_token == eos and hf.eos_token_id == dataset.eod_token_id == Tokenizer.from_file(
        str(llama3_style)
    ).token_to_id(eos)
    for name in ("config.json", "generation_config.json"):
        config = json.loads((export / name).read_text())
        assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (hf.eos_token_id,) * 3
    documents = _documents(dataset)
    assert len(documents) == len(topics)
    for text, shard_ids in zip(topics, documents, strict=True):
        assert [*hf(text).input_ids, hf.eos_token_id] == shard_ids
    assert hf.decode(documents[0][:-1]) == topics[0]
    # the tokenizers library itself, reading the exported tokenizer.json, adds no BOS either
    assert Tokenizer.from_file(str(export / "tokenizer.json")).encode(topics[0]).ids == documents[0][:-1]


def test_the_byte_level_export_tokenizer_is_the_byte_level_fallback(tmp_path: Path) -> None:
    """Every byte, multi-byte characters, and the separator's own name as text (bytes, as prepare-data wrote)."""
    text = "tab\t nl\n ü é 漢字 🙂 \x00\x7f <|endoftext|> end"
    export = _export(tmp_path, DataTokenizer("byte-level", 256, byte_level_tokenizer_json(), byte_level=True), 257)
    hf = transformers.AutoTokenizer.from_pretrained(export)
    assert hf(text).input_ids == ByteTokenizer().encode(text).tolist()
    assert (hf.eos_token, hf.eos_token_id, hf.decode(ByteTokenizer().encode(text))) == ("<|endoftext|>", 256, text)


def test_data_without_its_tokenizer_file_exports_without_one_and_says_why(
    tmp_path: Path, topics: list[str], llama3_style: Path
) -> None:
    """Data prepared before prepare-data carried its tokenizer (and a foreign tokenizer.json beside the shards,
    of another hash, is not taken): no tokenizer files, the reason in the platform key, stale files of an
    earlier export into the folder removed; the ids still name the separator."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(topics[0], encoding="utf-8")
    prepare_data(tmp_path / "data", [corpus], llama3_style)
    dataset = TokenDataset(tmp_path / "data")
    export = _export(tmp_path / "export", DataTokenizer.of_dataset(dataset), dataset.vocab_size)
    assert (export / "tokenizer.json").is_file()
    (tmp_path / "data" / "tokenizer.json").write_text(byte_level_tokenizer_json(), encoding="utf-8")
    missing = DataTokenizer.of_dataset(dataset)
    assert missing.tokenizer_json is None and "llama3-style.json" in str(missing.missing)
    _export(export, missing, dataset.vocab_size)  # over the earlier export
    assert not (export / "tokenizer.json").exists() and not (export / "tokenizer_config.json").exists()
    platform = json.loads((export / "config.json").read_text())["platform"]
    assert platform["tokenizer_files"] == [] and "re-run `trainctl prepare-data`" in platform["tokenizer_missing"]
    assert json.loads((export / "generation_config.json").read_text())["eos_token_id"] == dataset.eod_token_id


def test_an_export_over_the_same_export_writes_the_same_files(tmp_path: Path) -> None:
    tokenizer = DataTokenizer("byte-level", 256, byte_level_tokenizer_json(), byte_level=True)
    first = _export(tmp_path / "a", tokenizer, 257)
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    _export(first, tokenizer, 257)
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before  # no temporary file left either
    assert sorted(before) == [
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"
    ]  # fmt: skip


def test_prepare_data_carries_its_tokenizer_and_a_byte_level_preparation_over_it_removes_it(
    tmp_path: Path, llama3_style: Path
) -> None:
    corpus = tmp_path / "a.jsonl"
    corpus.write_text('{"text": "one document"}\n{"text": "another"}\n', encoding="utf-8")
    prepare_data(tmp_path / "out", [corpus], llama3_style, validation_documents=1)
    for split in ("train", "validation"):
        assert (tmp_path / "out" / split / "tokenizer.json").read_bytes() == llama3_style.read_bytes()
    prepare_data(tmp_path / "out", [corpus])
    assert not list((tmp_path / "out").rglob("tokenizer.json"))


@pytest.mark.parametrize("separator", ["<eos>", None])
def test_a_separator_of_the_vocabulary_or_none(tmp_path: Path, separator: str | None) -> None:
    """A separator that is a plain vocabulary entry (not an added token) is still the export's eos; data made
    with --no-separator exports a tokenizer with no bos/eos/pad and null ids."""
    vocab = {"[UNK]": 0, "<eos>": 1, "hello": 2, "world": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    eod = None if separator is None else vocab[separator]
    export = _export(tmp_path, DataTokenizer("words.json", eod, tok.to_str()), len(vocab))
    hf = transformers.AutoTokenizer.from_pretrained(export)
    assert (hf.eos_token, hf.eos_token_id, hf.bos_token_id, hf("hello world").input_ids) == (
        separator,
        eod,
        eod,
        [2, 3],
    )
    assert json.loads((export / "generation_config.json").read_text())["eos_token_id"] == eod
