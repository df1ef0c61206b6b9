"""Preparation: documents (:mod:`training.documents`) -> token shards (:mod:`training.data`'s format) and a
manifest per split.

Layout of the output folder::

    without a validation split          with --validation-fraction F
    out/shard-00000.bin / .json         out/train/shard-00000.bin / .json     out/train/manifest.json
    out/manifest.json                   out/validation/shard-00000.bin / .json out/validation/manifest.json
    out/tokenizer.json                  out/train/tokenizer.json              out/validation/tokenizer.json

``tokenizer.json`` (:data:`training.tokenizer_files.TOKENIZER_FILE`) is a copy of the ``--tokenizer`` file
(none for the byte-level tokenizer, which the trainer builds): the trainer's export takes it from its
channel (:class:`training.tokenizer_files.DataTokenizer`), matched by the shards' ``tokenizer_sha256``.

The train channel is ``out`` (or ``out/train``); a validation channel is ``out/validation``. A
:class:`training.data.TokenDataset` opened on ``out`` when it holds a validation split is refused, so the
held-out documents never reach training.

Split: document number ``i`` (0-based, counted over all inputs in order, empty ones included) is held out when
``splitmix64(seed * 2**32 + i) / 2**64 < F`` (``--validation-fraction F``), or when ``i`` is among the ``N``
numbers that ``numpy.random.default_rng(seed).choice(total, N, replace=False)`` draws (``--validation-documents
N``; the documents are counted first: Parquet from its footer, Arrow from its batches, JSONL by a pass over the
lines). By document, seeded, the same for any batching or machine; each document's tokens go whole to one split.

Manifest (``manifest.json``, version 1)::

    {"format": "token-dataset", "version": 1, "split": "train" | "validation" | null,
     "shards": [{"file": "shard-00000.bin", "num_tokens": 1048576}, ...],
     "num_tokens": int, "num_documents": int, "dtype": "uint16" | "uint32", "vocab_size": int,
     "eod_token_id": int | null, "tokenizer": str, "tokenizer_sha256": str | null,
     "text_field": "text", "sources": ["a.parquet", ...],
     "validation": {"fraction": F, "seed": S} | {"documents": N, "seed": S} | null}
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.data import (
    DEFAULT_SHARD_TOKENS,
    MANIFEST,
    REPLACING_MARKER,
    SPLITS,
    ByteTokenizer,
    DataError,
    HFTokenizer,
    ShardHeader,
    load_tokenizer,
    token_dtype,
)
from training.documents import DEFAULT_TEXT_FIELD, Source, count_documents, iter_documents, resolve_inputs
from training.tokenizer_files import TOKENIZER_FILE

MANIFEST_FORMAT = "token-dataset"
MANIFEST_VERSION = 1
DOCUMENT_BATCH = 1024
"""Documents tokenized per ``encode_batch`` call (``tokenizers`` spreads one batch over every core)."""


class _ShardWriter:
    def __init__(self, out: Path, tokenizer: ByteTokenizer | HFTokenizer, shard_tokens: int) -> None:
        self.out = out
        self.tok = tokenizer
        self.shard_tokens = shard_tokens
        self.dtype = token_dtype(tokenizer.vocab_size)
        self.buffer: list[np.ndarray] = []
        self.buffered = 0
        self.sources: list[str] = []
        self.all_sources: list[str] = []
        self.index = 0
        self.written: list[tuple[Path, int]] = []
        self.max_token_id = 0
        self.documents = 0
        self.tokens = 0

    def add(self, ids: np.ndarray, source: str) -> None:
        self.documents += 1
        self.tokens += int(ids.size)
        if source not in self.all_sources:
            self.all_sources.append(source)
        if source not in self.sources:
            self.sources.append(source)
        while ids.size:
            room = self.shard_tokens - self.buffered
            take, ids = ids[:room], ids[room:]
            self.buffer.append(take)
            self.buffered += take.size
            if self.buffered >= self.shard_tokens:
                self.flush()
                if ids.size:
                    self.sources.append(source)

    def flush(self) -> None:
        if not self.buffered:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        tokens = np.concatenate(self.buffer).astype(self.dtype)
        stem = self.out / f"shard-{self.index:05d}"
        tokens.astype(np.dtype(self.dtype).newbyteorder("<"), copy=False).tofile(stem.with_suffix(".bin"))
        header = ShardHeader(
            dtype=self.dtype,
            num_tokens=int(tokens.size),
            vocab_size=int(self.tok.vocab_size),
            eod_token_id=self.tok.eod_token_id,
            tokenizer=self.tok.name,
            tokenizer_sha256=self.tok.sha256,
            sources=tuple(self.sources),
            max_token_id=int(tokens.max()),
        )
        self.max_token_id = max(self.max_token_id, int(header.max_token_id or 0))
        stem.with_suffix(".json").write_text(json.dumps(header.to_json(), indent=2) + "\n", encoding="utf-8")
        self.written.append((stem.with_suffix(".bin"), int(tokens.size)))
        self.index += 1
        self.buffer, self.buffered, self.sources = [], 0, []

    def manifest(self, split: str | None, text_field: str, validation: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "version": MANIFEST_VERSION,
            "split": split,
            "shards": [{"file": path.name, "num_tokens": n} for path, n in self.written],
            "num_tokens": self.tokens,
            "num_documents": self.documents,
            "dtype": self.dtype,
            "vocab_size": int(self.tok.vocab_size),
            "eod_token_id": self.tok.eod_token_id,
            "tokenizer": self.tok.name,
            "tokenizer_sha256": self.tok.sha256,
            "text_field": text_field,
            "sources": self.all_sources,
            "validation": validation,
        }


@dataclass(frozen=True)
class PreparedSplit:
    """One split's shards: its folder, shard paths, tokens and documents."""

    directory: Path
    shards: tuple[Path, ...]
    num_tokens: int
    num_documents: int


@dataclass(frozen=True)
class PreparedDataset:
    """What :func:`prepare_data` wrote.

    ``output_dir`` is the folder given; the train channel is ``train.directory`` (``output_dir`` itself without
    a validation split, ``output_dir/train`` with one). The top-level counts are the train split's.
    """

    output_dir: Path
    shards: tuple[Path, ...]
    num_tokens: int
    num_documents: int
    vocab_size: int
    tokenizer: str
    max_token_id: int = 0
    validation: PreparedSplit | None = None
    skipped_documents: int = 0
    """Documents with no text (empty strings, Parquet/Arrow nulls): nothing written for them."""

    @property
    def train(self) -> PreparedSplit:
        directory = self.output_dir / "train" if self.validation else self.output_dir
        return PreparedSplit(directory, self.shards, self.num_tokens, self.num_documents)


def validation_mask(first: int, count: int, fraction: float, seed: int) -> np.ndarray:
    """Which of documents ``first .. first + count - 1`` are held out (module docstring's rule): bool ``[count]``."""
    x = (np.uint64(seed & 0xFFFFFFFF) << np.uint64(32)) + np.arange(first, first + count, dtype=np.uint64)
    x = x + np.uint64(0x9E3779B97F4A7C15)  # splitmix64 (Steele, Lea, Flood 2014), wrapping uint64 arithmetic
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) / float(1 << 53) < fraction


@dataclass(frozen=True)
class _Split:
    """The held-out rule: a fraction, or a drawn set of document numbers (module docstring)."""

    flag: str  # how the user asked, for messages: "--validation-fraction 0.01"
    rule: dict[str, Any]
    fraction: float | None = None
    chosen: np.ndarray | None = None  # sorted document numbers

    def mask(self, first: int, count: int) -> np.ndarray:
        if self.fraction is not None:
            return validation_mask(first, count, self.fraction, int(self.rule["seed"]))
        assert self.chosen is not None
        return np.isin(np.arange(first, first + count), self.chosen)


def _split(
    sources: Sequence[Source], text_field: str, fraction: float | None, documents: int | None, seed: int
) -> _Split | None:
    if fraction is not None and documents is not None:
        raise DataError("--validation-fraction and --validation-documents exclude each other: give one")
    if fraction is not None:
        if not 0 < fraction < 1:
            raise DataError(f"--validation-fraction: got {fraction}, expected a number in (0, 1)")
        return _Split(f"--validation-fraction {fraction}", {"fraction": fraction, "seed": seed}, fraction=fraction)
    if documents is None:
        return None
    if documents < 1:
        raise DataError(f"--validation-documents: got {documents}, expected an integer >= 1")
    total = sum(count_documents(source, text_field) for source in sources)
    if documents >= total:
        raise DataError(f"--validation-documents: got {documents}, expected fewer than the inputs' {total} documents")
    chosen = np.sort(np.random.default_rng(seed).choice(total, documents, replace=False))
    return _Split(f"--validation-documents {documents}", {"documents": documents, "seed": seed}, chosen=chosen)


def _batches(sources: Sequence[Source], text_field: str) -> Iterator[tuple[str, list[str]]]:
    for source in sources:
        documents = iter_documents(source, text_field)
        while batch := list(itertools.islice(documents, DOCUMENT_BATCH)):
            yield source.name, batch


def prepare_data(
    output_dir: str | os.PathLike[str],
    files: Sequence[str | os.PathLike[str]],
    tokenizer_json: str | os.PathLike[str] | None = None,
    *,
    separator: str | None = None,
    no_separator: bool = False,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    text_field: str = DEFAULT_TEXT_FIELD,
    validation_fraction: float | None = None,
    validation_documents: int | None = None,
    seed: int = 0,
) -> PreparedDataset:
    """Tokenize ``files`` (files and folders of the formats of :mod:`training.documents`) into token shards and
    manifests in ``output_dir`` (layout: the module docstring).

    The shards are written to a staging folder beside ``output_dir`` (not inside: datasets are found
    recursively) and moved into place only when every input has been read: on any error nothing is written
    and the shards already there stay as they were. The staging folder of an earlier preparation of the same
    output that was killed is removed. Preparations of one output at once each tokenize on
    their own and replace the output one after the other (an exclusive lock on its parent folder): it holds
    the last one's shards, complete.

    Args:
        files: inputs; each is checked (format, column) before any is tokenized.
        tokenizer_json: a local ``tokenizer.json`` (``tokenizers`` library); None: byte-level (bytes 0-255 +
            end-of-document 256).
        separator, no_separator: the document separator (:class:`training.data.HFTokenizer`).
        shard_tokens: tokens per shard (>= 2).
        text_field: the JSONL field, Parquet or Arrow column holding the text.
        validation_fraction: the share of documents held out in ``validation/``, in (0, 1); None: no split.
        validation_documents: or the number of documents held out (>= 1, fewer than the inputs hold).
        seed: the split's seed (an integer in [0, 2**32)).

    Raises:
        DataError: a bad argument (names it), an input refused by :func:`training.documents.resolve_inputs` or
            while read, no text at all, or a split that leaves either side without documents.
    """
    if shard_tokens < 2:
        raise DataError(f"--shard-tokens: got {shard_tokens}, expected an integer >= 2 (tokens per shard)")
    if not 0 <= seed < 1 << 32:
        raise DataError(f"--seed: got {seed}, expected an integer in [0, 2**32)")
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise DataError(f"output {out} is a file (expected a folder for the shards)")
    sources = resolve_inputs(files, text_field, out)
    split = _split(sources, text_field, validation_fraction, validation_documents, seed)
    tok = load_tokenizer(tokenizer_json, separator, no_separator=no_separator)
    parent = out.resolve().parent
    created = [p for p in (parent, *parent.parents) if not p.exists()]
    parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.resolve().name}.prepare-data-", dir=parent))
    owner = os.open(staging, os.O_RDONLY)
    fcntl.flock(owner, fcntl.LOCK_EX)  # held while this process lives: its staging folder is not stale
    try:
        _remove_stale_staging(parent, out.resolve().name)
        result = _write(staging, out, sources, tok, shard_tokens, text_field, split)
        with _locked(parent):  # two preparations of one output: the last complete one wins, never a mix
            _replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        for folder in created:  # innermost first: the folders this call made for the staging area
            if folder.exists() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    finally:
        os.close(owner)
    shutil.rmtree(staging, ignore_errors=True)
    return result


def _remove_stale_staging(parent: Path, name: str) -> None:
    """Remove the staging folders of earlier preparations of ``name`` that were killed (SIGKILL, a lost
    machine: no ``finally`` ran), which hold up to a whole dataset each. A live preparation holds an exclusive
    ``flock`` on its own staging folder, so a folder whose lock is free has no owner; a live one's is left."""
    for folder in parent.glob(f".{name}.prepare-data-*"):
        try:
            fd = os.open(folder, os.O_RDONLY)
        except OSError:
            continue  # gone meanwhile, or not a folder we can open
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its preparation is running
        else:
            shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(fd)


def _write(
    staging: Path,
    out: Path,
    sources: Sequence[Source],
    tok: ByteTokenizer | HFTokenizer,
    shard_tokens: int,
    text_field: str,
    split: _Split | None,
) -> PreparedDataset:
    train = _ShardWriter(staging / "train" if split else staging, tok, shard_tokens)
    held = _ShardWriter(staging / "validation", tok, shard_tokens)
    index = skipped = 0
    for name, texts in _batches(sources, text_field):
        mask = split.mask(index, len(texts)) if split else None
        index += len(texts)
        for n, ids in enumerate(tok.encode_batch(texts)):
            if not ids.size:
                skipped += 1
                continue
            if tok.eod_token_id is not None:
                ids = np.append(ids, np.uint32(tok.eod_token_id))
            (held if mask is not None and mask[n] else train).add(ids, name)
    train.flush()
    held.flush()
    if not train.tokens + held.tokens:
        raise DataError("the input files hold no text")
    if split:
        for writer, what in ((train, "train"), (held, "validation")):
            if not writer.documents:
                raise DataError(
                    f"{split.flag} leaves the {what} split empty ({index} documents, seed {split.rule['seed']}); "
                    f"{'lower' if what == 'train' else 'raise'} it or add data"
                )
            _write_manifest(writer.out, writer.manifest(what, text_field, split.rule))
    else:
        _write_manifest(staging, train.manifest(None, text_field, None))
    if isinstance(tok, HFTokenizer):  # the trainer's export needs the tokenizer, offline: it travels with the data
        for writer in (train, held) if split else (train,):
            (writer.out / TOKENIZER_FILE).write_bytes(tok.path.read_bytes())

    def moved(writer: _ShardWriter) -> tuple[Path, ...]:
        return tuple(out / p.relative_to(staging) for p, _ in writer.written)

    validation = PreparedSplit(out / "validation", moved(held), held.tokens, held.documents) if split else None
    return PreparedDataset(
        out,
        moved(train),
        train.tokens,
        train.documents,
        int(tok.vocab_size),
        tok.name,
        max(train.max_token_id, held.max_token_id),
        validation,
        skipped,
    )


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` (the output's parent) while the block runs."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")


def _replace(staging: Path, out: Path) -> None:
    """Move the staged shards into ``out``, replacing the shards, manifests and tokenizer copies of an earlier preparation there
    (at the top and in ``train/`` and ``validation/``): shards in name order (each ``.bin`` before its
    ``.json``, a header never dangles), the manifests last. The earlier files are set aside first and put back
    if the moves stop (an error, Ctrl-C, a SIGTERM's ``SystemExit``), so ``out`` holds one dataset whole, the
    earlier or the new, never some shards of each. A kill that leaves no time to put them back (SIGKILL) leaves
    :data:`~training.data.REPLACING_MARKER` in each folder, written before the first move and removed after
    the last, which the trainer refuses."""
    aside = Path(tempfile.mkdtemp(prefix=f".{out.resolve().name}.replaced-", dir=out.resolve().parent))
    set_aside: list[tuple[Path, Path]] = []
    placed: list[Path] = []
    folders = [out, *(out / split for split in SPLITS if (out / split).is_dir() or (staging / split).is_dir())]
    markers = [folder / REPLACING_MARKER for folder in folders]
    try:
        for marker in markers:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(f"{aside}\n", encoding="utf-8")
        for folder in (out, *(out / split for split in SPLITS)):
            if folder.is_dir():
                earlier = (*folder.glob("shard-*.bin"), *folder.glob("shard-*.json"), *folder.glob(MANIFEST))
                for old in (*earlier, *folder.glob(TOKENIZER_FILE)):
                    kept = aside / str(len(set_aside))
                    os.replace(old, kept)
                    set_aside.append((old, kept))
        for new in sorted(sorted(staging.rglob("*")), key=lambda path: path.name == MANIFEST):
            if new.is_file():
                target = out / new.relative_to(staging)
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(new, target)
                placed.append(target)
    except BaseException:
        for target in placed:
            target.unlink(missing_ok=True)
        for old, kept in set_aside:
            os.replace(kept, old)
        raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)
        for marker in markers:  # the earlier or the new dataset is whole again
            marker.unlink(missing_ok=True)


__all__ = ["PreparedDataset", "PreparedSplit", "prepare_data", "validation_mask"]
