"""Token shards, their preparation, and the deterministic sampler.

Shard format (version 1)
------------------------
A dataset is a directory of shard pairs (found recursively, so an S3 prefix
copied into ``/opt/ml/input/data/train`` works as is)::

    shard-00000.bin    raw tokens, little-endian, dtype from the header, no padding
    shard-00000.json   the header

Header fields::

    {"format": "token-shard", "version": 1,
     "dtype": "uint16" | "uint32",      # uint16 when vocab_size <= 65536
     "num_tokens": 1048576,             # the .bin holds exactly num_tokens * itemsize bytes
     "vocab_size": 257,                 # every token id < vocab_size
     "eod_token_id": 256,               # end-of-document token appended after each document (or null)
     "tokenizer": "byte-level" | "<tokenizer.json file name>",
     "tokenizer_sha256": "..." | null,  # of the tokenizer.json used
     "sources": ["docs.txt", ...]}      # input files that went into this shard

Every shard of a dataset must agree on dtype, vocab_size, eod_token_id and
tokenizer. Shards are memory-mapped (``numpy.memmap``); nothing is read until a
window is sampled.

Sampling
--------
Each shard of ``n`` tokens is cut into ``(n - 1) // seq_length`` windows of
``seq_length + 1`` tokens starting at multiples of ``seq_length`` (the input
is the first ``seq_length`` tokens, the target the last ``seq_length``).
Sample number ``g`` of the run is::

    g = ((step * grad_accum + micro_step) * world_size + rank) * batch_size + row

so ranks read disjoint samples, and a step counter is the whole data
position: resuming at step ``k`` continues exactly where the run stopped.
Epoch ``e = g // W`` (``W`` windows) visits the windows in the order of a
permutation seeded by ``(seed, e)``; memory is 4 bytes per window
(``W < 2**31``) or 8 above that.

Byte-level fallback tokenizer: the UTF-8 bytes of the text (ids 0-255) and an
end-of-document token 256; vocabulary 257.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from training.hyperparameters import HyperparameterError

FORMAT = "token-shard"
VERSION = 1
BYTE_LEVEL = "byte-level"
BYTE_LEVEL_VOCAB_SIZE = 257
BYTE_LEVEL_EOD = 256
DEFAULT_SHARD_TOKENS = 1 << 26
"""64 Mi tokens per shard (128 MiB as uint16)."""
EOD_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]")


class DataError(ValueError):
    """A dataset is missing, malformed or inconsistent (names the file)."""


@dataclass(frozen=True)
class ShardHeader:
    """One shard's JSON header (see the module docstring)."""

    dtype: str
    num_tokens: int
    vocab_size: int
    eod_token_id: int | None
    tokenizer: str
    tokenizer_sha256: str | None = None
    sources: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "dtype": self.dtype,
            "num_tokens": self.num_tokens,
            "vocab_size": self.vocab_size,
            "eod_token_id": self.eod_token_id,
            "tokenizer": self.tokenizer,
            "tokenizer_sha256": self.tokenizer_sha256,
            "sources": list(self.sources),
        }

    @classmethod
    def from_json(cls, data: Any, where: Path) -> ShardHeader:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise DataError(f"{where}: not a token-shard header (expected \"format\": \"{FORMAT}\")")
        if data.get("version") != VERSION:
            raise DataError(f"{where}: header version {data.get('version')!r}, this trainer reads version {VERSION}")
        dtype = data.get("dtype")
        if dtype not in ("uint16", "uint32"):
            raise DataError(f"{where}: dtype {dtype!r}, expected uint16 or uint32")
        try:
            num_tokens = int(data["num_tokens"])
            vocab_size = int(data["vocab_size"])
        except (KeyError, TypeError, ValueError):
            raise DataError(f"{where}: num_tokens and vocab_size must be integers") from None
        eod = data.get("eod_token_id")
        return cls(
            dtype=dtype,
            num_tokens=num_tokens,
            vocab_size=vocab_size,
            eod_token_id=None if eod is None else int(eod),
            tokenizer=str(data.get("tokenizer", "")),
            tokenizer_sha256=data.get("tokenizer_sha256"),
            sources=tuple(data.get("sources") or ()),
        )


def token_dtype(vocab_size: int) -> str:
    """``uint16`` when every id fits (vocab <= 65536), else ``uint32``."""
    return "uint16" if vocab_size <= 1 << 16 else "uint32"


# ---------------------------------------------------------------------------
# Tokenizers


class ByteTokenizer:
    """UTF-8 bytes as token ids 0-255, end-of-document 256."""

    name = BYTE_LEVEL
    vocab_size = BYTE_LEVEL_VOCAB_SIZE
    eod_token_id = BYTE_LEVEL_EOD
    sha256: str | None = None

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint32)

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A ``tokenizer.json`` loaded with the ``tokenizers`` library (local file, no download)."""

    def __init__(self, path: str | os.PathLike[str], eod_token: str | None = None) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"tokenizer file {self.path} does not exist")
        self._tok = Tokenizer.from_file(str(self.path))
        self.name = self.path.name
        self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        candidates = (eod_token,) if eod_token else EOD_CANDIDATES
        self.eod_token_id: int | None = None
        for token in candidates:
            tid = self._tok.token_to_id(token)
            if tid is not None:
                self.eod_token_id = tid
                break
        if eod_token and self.eod_token_id is None:
            raise DataError(f"tokenizer {self.path} has no token {eod_token!r} (eod_token)")

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.uint32)

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode(list(ids))


def load_tokenizer(tokenizer_json: str | os.PathLike[str] | None, eod_token: str | None = None):
    """A :class:`HFTokenizer` for ``tokenizer_json``, or the byte-level fallback when None."""
    return ByteTokenizer() if tokenizer_json is None else HFTokenizer(tokenizer_json, eod_token)


# ---------------------------------------------------------------------------
# Preparation


def iter_documents(path: Path) -> Iterator[str]:
    """Documents of a text or JSONL file.

    ``.jsonl``/``.json`` lines: the ``text`` field of each object. Other files:
    the whole file is one document.

    Raises:
        DataError: a JSONL line that is not an object with a string ``text``.
    """
    if path.suffix.lower() in (".jsonl", ".ndjson") or (path.suffix.lower() == ".json" and _looks_like_jsonl(path)):
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    raise DataError(f"{path}:{lineno}: not valid JSON") from None
                text = obj.get("text") if isinstance(obj, dict) else None
                if not isinstance(text, str):
                    raise DataError(f"{path}:{lineno}: expected an object with a string 'text' field")
                yield text
    else:
        yield path.read_text(encoding="utf-8", errors="replace")


def _looks_like_jsonl(path: Path) -> bool:
    with open(path, encoding="utf-8") as fh:
        first = fh.readline().strip()
    return first.startswith("{") and first.endswith("}")


class _ShardWriter:
    def __init__(self, out: Path, tokenizer, shard_tokens: int) -> None:
        self.out = out
        self.tok = tokenizer
        self.shard_tokens = shard_tokens
        self.dtype = token_dtype(tokenizer.vocab_size)
        self.buffer: list[np.ndarray] = []
        self.buffered = 0
        self.sources: list[str] = []
        self.index = 0
        self.written: list[Path] = []

    def add(self, ids: np.ndarray, source: str) -> None:
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
        tokens = np.concatenate(self.buffer).astype(self.dtype)
        stem = self.out / f"shard-{self.index:05d}"
        tmp = stem.with_suffix(".bin.tmp")
        tokens.astype(np.dtype(self.dtype).newbyteorder("<"), copy=False).tofile(tmp)
        os.replace(tmp, stem.with_suffix(".bin"))
        header = ShardHeader(
            dtype=self.dtype,
            num_tokens=int(tokens.size),
            vocab_size=int(self.tok.vocab_size),
            eod_token_id=self.tok.eod_token_id,
            tokenizer=self.tok.name,
            tokenizer_sha256=self.tok.sha256,
            sources=tuple(self.sources),
        )
        stem.with_suffix(".json").write_text(json.dumps(header.to_json(), indent=2) + "\n", encoding="utf-8")
        self.written.append(stem.with_suffix(".bin"))
        self.index += 1
        self.buffer, self.buffered, self.sources = [], 0, []


@dataclass(frozen=True)
class PreparedDataset:
    """What :func:`prepare_data` wrote."""

    output_dir: Path
    shards: tuple[Path, ...]
    num_tokens: int
    num_documents: int
    vocab_size: int
    tokenizer: str


def prepare_data(
    output_dir: str | os.PathLike[str],
    files: Sequence[str | os.PathLike[str]],
    tokenizer_json: str | os.PathLike[str] | None = None,
    *,
    eod_token: str | None = None,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
) -> PreparedDataset:
    """Tokenize text or JSONL ``files`` into token shards in ``output_dir``.

    Args:
        output_dir: created if needed; existing ``shard-*`` files are replaced.
        files: ``.txt``/``.md``/any text (one document per file) or ``.jsonl``
            (one document per line, the ``text`` field).
        tokenizer_json: a local ``tokenizer.json`` (``tokenizers`` library);
            None: byte-level (bytes 0-255 + end-of-document 256).
        eod_token: the end-of-document token of ``tokenizer_json``; default: the
            first of ``<|endoftext|>``, ``</s>``, ``<eos>``, ... it has (none: no separator).
        shard_tokens: tokens per shard.

    Raises:
        DataError: no input files, a missing file, malformed JSONL, or no tokens at all.
    """
    if not files:
        raise DataError("prepare_data needs at least one input file")
    if shard_tokens < 2:
        raise DataError(f"shard_tokens must be >= 2, got {shard_tokens}")
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    for old in list(out.glob("shard-*.bin")) + list(out.glob("shard-*.json")):
        old.unlink()
    tok = load_tokenizer(tokenizer_json, eod_token)
    writer = _ShardWriter(out, tok, shard_tokens)
    documents = 0
    total = 0
    for file in files:
        path = Path(file)
        if not path.is_file():
            raise DataError(f"input file {path} does not exist")
        for doc in iter_documents(path):
            ids = tok.encode(doc)
            if tok.eod_token_id is not None:
                ids = np.append(ids, np.uint32(tok.eod_token_id))
            if not ids.size:
                continue
            writer.add(ids, path.name)
            documents += 1
            total += int(ids.size)
    writer.flush()
    if not total:
        raise DataError("the input files hold no text")
    return PreparedDataset(out, tuple(writer.written), total, documents, int(tok.vocab_size), tok.name)


# ---------------------------------------------------------------------------
# Reading


class TokenDataset:
    """Memory-mapped shards of a dataset directory (see the module docstring).

    Raises:
        DataError: no shards, a header/size mismatch, or shards that disagree.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        headers = sorted(p for p in self.directory.rglob("*.json") if p.with_suffix(".bin").is_file())
        self.headers: list[ShardHeader] = []
        self.tokens: list[np.memmap] = []
        self.paths: list[Path] = []
        for hpath in headers:
            try:
                data = json.loads(hpath.read_text(encoding="utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError):
                raise DataError(f"{hpath}: not a readable JSON header (expected a token-shard header)") from None
            if not isinstance(data, dict) or data.get("format") != FORMAT:
                continue  # some other JSON file next to a .bin: not ours
            header = ShardHeader.from_json(data, hpath)
            bpath = hpath.with_suffix(".bin")
            itemsize = np.dtype(header.dtype).itemsize
            size = bpath.stat().st_size
            if size != header.num_tokens * itemsize:
                raise DataError(
                    f"{bpath}: {size} bytes, header says {header.num_tokens} {header.dtype} tokens "
                    f"({header.num_tokens * itemsize} bytes); the shard is truncated or not this header's"
                )
            if header.num_tokens:
                self.tokens.append(np.memmap(bpath, dtype=np.dtype(header.dtype).newbyteorder("<"), mode="r"))
                self.headers.append(header)
                self.paths.append(bpath)
        if not self.headers:
            raise DataError(
                f"no token shards in {self.directory} (expected shard-*.bin + shard-*.json pairs; "
                "make them with `trainctl prepare-data`)"
            )
        first = self.headers[0]
        for path, h in zip(self.paths, self.headers):
            if (h.dtype, h.vocab_size, h.eod_token_id, h.tokenizer) != (
                first.dtype, first.vocab_size, first.eod_token_id, first.tokenizer
            ):
                raise DataError(
                    f"{path}: shard disagrees with {self.paths[0]} on dtype/vocab_size/eod_token_id/tokenizer"
                )

    @property
    def vocab_size(self) -> int:
        return self.headers[0].vocab_size

    @property
    def tokenizer(self) -> str:
        return self.headers[0].tokenizer

    @property
    def eod_token_id(self) -> int | None:
        return self.headers[0].eod_token_id

    @property
    def num_tokens(self) -> int:
        return sum(h.num_tokens for h in self.headers)

    def describe(self) -> dict[str, Any]:
        return {
            "shards": len(self.headers),
            "num_tokens": self.num_tokens,
            "vocab_size": self.vocab_size,
            "tokenizer": self.tokenizer,
            "eod_token_id": self.eod_token_id,
        }


class _RankBatches:
    """What every sampler shares: one rank's micro-batches of ``seq_length + 1`` tokens per step."""

    def __init__(self, *, seq_length: int, batch_size: int, grad_accum: int, rank: int, world_size: int, seed: int) -> None:
        self.seq_length = seq_length
        self.batch_size = batch_size
        self.grad_accum = grad_accum
        self.rank = rank
        self.world_size = world_size
        self.seed = seed

    @property
    def samples_per_step(self) -> int:
        """Samples consumed by all ranks in one optimizer step."""
        return self.grad_accum * self.world_size * self.batch_size


class DistributedSampler(_RankBatches):
    """Deterministic, disjoint windows per rank; the position is the step counter.

    Args:
        dataset: the shards.
        seq_length: tokens per sample (inputs); each window holds ``seq_length + 1``.
        batch_size: samples per micro-batch per rank.
        grad_accum: micro-batches per optimizer step.
        rank, world_size: data-parallel rank and size.
        seed: permutation seed.

    Raises:
        DataError: no shard is long enough for one window.
    """

    def __init__(
        self,
        dataset: TokenDataset,
        *,
        seq_length: int,
        batch_size: int,
        grad_accum: int,
        rank: int,
        world_size: int,
        seed: int,
    ) -> None:
        super().__init__(
            seq_length=seq_length, batch_size=batch_size, grad_accum=grad_accum, rank=rank, world_size=world_size, seed=seed
        )
        self.dataset = dataset
        per_shard = np.array([max(0, (h.num_tokens - 1) // seq_length) for h in dataset.headers], dtype=np.int64)
        self.num_windows = int(per_shard.sum())
        if self.num_windows == 0:
            raise DataError(
                f"the dataset in {dataset.directory} ({dataset.num_tokens} tokens) has no window of "
                f"seq_length + 1 = {seq_length + 1} tokens; lower seq_length or add data"
            )
        self._starts = np.concatenate([[0], np.cumsum(per_shard)])
        self._epoch = -1
        self._perm: np.ndarray | None = None

    def _permutation(self, epoch: int) -> np.ndarray:
        if epoch != self._epoch:
            rng = np.random.default_rng([self.seed, epoch])
            perm = rng.permutation(self.num_windows)
            self._perm = perm.astype(np.int32) if self.num_windows < 2**31 else perm
            self._epoch = epoch
        assert self._perm is not None
        return self._perm

    def sample_indices(self, step: int, micro_step: int) -> np.ndarray:
        """Global sample numbers of this rank's micro-batch (``step`` counts from 0)."""
        base = ((step * self.grad_accum + micro_step) * self.world_size + self.rank) * self.batch_size
        return np.arange(base, base + self.batch_size, dtype=np.int64)

    def window(self, sample: int) -> np.ndarray:
        """The ``seq_length + 1`` tokens of global sample number ``sample``."""
        epoch, pos = divmod(int(sample), self.num_windows)
        w = int(self._permutation(epoch)[pos])
        shard = int(np.searchsorted(self._starts, w, side="right") - 1)
        offset = (w - int(self._starts[shard])) * self.seq_length
        return np.asarray(self.dataset.tokens[shard][offset : offset + self.seq_length + 1], dtype=np.int64)

    def batch(self, step: int, micro_step: int) -> np.ndarray:
        """``[batch_size, seq_length + 1]`` int64 tokens for (``step``, ``micro_step``)."""
        return np.stack([self.window(g) for g in self.sample_indices(step, micro_step)])


class SyntheticSampler(_RankBatches):
    """Uniform random tokens, seeded by (seed, step, micro step, rank): deterministic and resumable."""

    def __init__(
        self, *, vocab_size: int, seq_length: int, batch_size: int, grad_accum: int, rank: int, world_size: int, seed: int
    ) -> None:
        super().__init__(
            seq_length=seq_length, batch_size=batch_size, grad_accum=grad_accum, rank=rank, world_size=world_size, seed=seed
        )
        self.vocab_size = vocab_size

    def batch(self, step: int, micro_step: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, step, micro_step, self.rank])
        return rng.integers(0, self.vocab_size, size=(self.batch_size, self.seq_length + 1), dtype=np.int64)


def resolve_vocab_size(hp: Any, preset_vocab: int, data_vocab: int | None) -> int:
    """The model's vocabulary: ``vocab_size`` if set, else the preset's, grown to the data's (rounded up to 128).

    Raises:
        HyperparameterError: ``vocab_size`` smaller than the data's vocabulary.
    """
    if hp.vocab_size is not None:
        if data_vocab is not None and hp.vocab_size < data_vocab:
            raise HyperparameterError("vocab_size", hp.vocab_size, f">= {data_vocab} (the training data's vocabulary)")
        return hp.vocab_size
    if data_vocab is None:
        return preset_vocab
    return max(preset_vocab, -(-data_vocab // 128) * 128)


__all__ = [
    "BYTE_LEVEL",
    "BYTE_LEVEL_EOD",
    "BYTE_LEVEL_VOCAB_SIZE",
    "ByteTokenizer",
    "DataError",
    "DistributedSampler",
    "HFTokenizer",
    "PreparedDataset",
    "ShardHeader",
    "SyntheticSampler",
    "TokenDataset",
    "iter_documents",
    "load_tokenizer",
    "prepare_data",
    "resolve_vocab_size",
    "token_dtype",
]
