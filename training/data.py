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
     "sources": ["docs.txt", ...],      # input files that went into this shard
     "max_token_id": 255}               # optional: the largest id in the .bin (prepare_data writes it)

Opening a dataset (:class:`TokenDataset`, which the entry point does before
launching any worker) checks every field's type and range and raises
:class:`DataError` naming the shard's header and the field (a header that is
a directory, not JSON, or nested too deeply to parse is named the same way).
It also checks that every token id is below ``vocab_size``: from
``max_token_id`` when the header has it, else by scanning the ``.bin`` with
numpy (16 Mi tokens per chunk; shards written before ``max_token_id``
existed). The scan happens once, in the entry point: the workers open the
data without it, because every batch they sample is checked too (one numpy
max per batch, :meth:`DistributedSampler.batch`), which also catches a header
that understates its largest id. Every shard of a dataset must agree on
dtype, vocab_size, eod_token_id and tokenizer. Shards are memory-mapped
(``numpy.memmap``); apart from that scan, nothing is read until a window is
sampled.

Sampling
--------
Each shard of ``n`` tokens is cut into ``(n - 1) // seq_length`` windows of
``seq_length + 1`` tokens starting at multiples of ``seq_length`` (the input
is the first ``seq_length`` tokens, the target the last ``seq_length``).
Sample number ``g`` of the run is::

    g = samples_consumed(step) + (micro_step * world_size + rank) * batch_size + row
    samples_consumed(step) = n0 + (step - s0) * batch_size * grad_accum * world_size

with ``(s0, n0) = (0, 0)`` for a fresh run and the checkpoint's step and
``samples_consumed`` for a resumed one (:meth:`DistributedSampler.start_at`).
Ranks read disjoint samples, and the number of samples consumed is the whole
data position: a run resumed with another world size (and the same global
batch) reads exactly the samples the uninterrupted run would have read, none
skipped and none twice.
Epoch ``e = g // W`` (``W`` windows) visits the windows in the order of a
permutation seeded by ``(seed, e)``; memory is 4 bytes per window
(``W < 2**31``) or 8 above that.

Fingerprint: :meth:`TokenDataset.fingerprint` hashes each shard's relative
path, header fields that define its tokens, and its first
``FINGERPRINT_TOKENS`` tokens (one small read per shard); checkpoints record
it so a resume notices other data. It identifies a dataset, it does not hash
its content: a shard rewritten with the same length and the same first tokens
is not noticed.

Byte-level fallback tokenizer: the UTF-8 bytes of the text (ids 0-255) and an
end-of-document token 256; vocabulary 257.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from platform_spec.hyperparameters import HyperparameterError

FORMAT = "token-shard"
VERSION = 1
BYTE_LEVEL = "byte-level"
BYTE_LEVEL_VOCAB_SIZE = 257
BYTE_LEVEL_EOD = 256
DEFAULT_SHARD_TOKENS = 1 << 26
"""64 Mi tokens per shard (128 MiB as uint16)."""
EOD_CANDIDATES = ("<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>", "[SEP]")
DTYPES: dict[str, int] = {"uint16": 1 << 16, "uint32": 1 << 32}
"""Token dtypes of the shard format and how many ids each can hold."""
SCAN_CHUNK_TOKENS = 1 << 24
"""Tokens per numpy reduction when a shard without ``max_token_id`` is scanned."""
FINGERPRINT_TOKENS = 64
"""Leading tokens of each shard that go into the dataset fingerprint."""


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
    max_token_id: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
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
        if self.max_token_id is not None:
            out["max_token_id"] = self.max_token_id
        return out

    @classmethod
    def from_json(cls, data: Any, where: Path) -> ShardHeader:
        """Validate a parsed header.

        Raises:
            DataError: ``"<where>: header field '<name>': got <value>, expected <what>"``
                for the first field that is missing, of the wrong type or out of range.
        """
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise DataError(f'{where}: not a token-shard header (expected "format": "{FORMAT}")')

        def bad(name: str, expected: str) -> DataError:
            value = data.get(name, "nothing (field missing)")
            return DataError(f"{where}: header field {name!r}: got {value!r}, expected {expected}")

        def integer(name: str, low: int, high: int | None, *, optional: bool = False) -> int | None:
            value = data.get(name)
            if value is None and optional:
                return None
            expected = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high})"
            # bool is an int subclass in Python; JSON true/false is not a count or a token id
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or value < low
                or (high is not None and value >= high)
            ):
                raise bad(name, expected + (" or null" if optional else ""))
            return value

        if data.get("version") != VERSION or isinstance(data.get("version"), bool):
            raise bad("version", f"{VERSION} (this trainer reads version {VERSION})")
        dtype = data.get("dtype")
        if dtype not in DTYPES:
            raise bad("dtype", " or ".join(DTYPES))
        num_tokens = integer("num_tokens", 0, None)
        vocab_size = integer("vocab_size", 2, DTYPES[dtype] + 1)
        assert num_tokens is not None and vocab_size is not None
        eod = integer("eod_token_id", 0, vocab_size, optional=True)
        tokenizer = data.get("tokenizer")
        if not isinstance(tokenizer, str) or not tokenizer:
            raise bad("tokenizer", f"a non-empty string ({BYTE_LEVEL!r} or a tokenizer.json file name)")
        sha = data.get("tokenizer_sha256")
        if sha is not None and not (
            isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)
        ):
            raise bad("tokenizer_sha256", "64 lowercase hex digits or null")
        sources = data.get("sources", [])
        if not isinstance(sources, list) or not all(isinstance(x, str) for x in sources):
            raise bad("sources", "a list of file names (strings)")
        max_id = integer("max_token_id", 0, None, optional=True)  # checked against vocab_size with the tokens
        return cls(
            dtype=dtype,
            num_tokens=num_tokens,
            vocab_size=vocab_size,
            eod_token_id=eod,
            tokenizer=tokenizer,
            tokenizer_sha256=sha,
            sources=tuple(sources),
            max_token_id=max_id,
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
        DataError: a JSONL line that is not an object with a string ``text``, or JSONL that is not UTF-8 (JSON
            text is UTF-8: RFC 8259 section 8.1).
    """
    if path.suffix.lower() in (".jsonl", ".ndjson") or (path.suffix.lower() == ".json" and _looks_like_jsonl(path)):
        with open(path, encoding="utf-8") as fh:
            for lineno, line in _numbered_lines(path, fh):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except (json.JSONDecodeError, RecursionError):  # RecursionError: nesting deeper than Python's stack
                    raise DataError(f"{path}:{lineno}: not valid JSON") from None
                text = obj.get("text") if isinstance(obj, dict) else None
                if not isinstance(text, str):
                    raise DataError(f"{path}:{lineno}: expected an object with a string 'text' field")
                yield text
    else:
        yield path.read_text(encoding="utf-8", errors="replace")


def _numbered_lines(path: Path, fh: Iterator[str]) -> Iterator[tuple[int, str]]:
    """``enumerate(fh, 1)``, text that is not UTF-8 refused as a :class:`DataError` naming the file."""
    lineno = 0
    while True:
        try:
            line = next(fh)
        except StopIteration:
            return
        except UnicodeDecodeError as exc:
            # the decoder reads ahead in blocks, so no line number: the byte says what was found
            raise DataError(f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); JSONL is UTF-8") from None
        lineno += 1
        yield lineno, line


def _looks_like_jsonl(path: Path) -> bool:
    with open(path, encoding="utf-8", errors="replace") as fh:
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
        self.max_token_id = 0

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
            max_token_id=int(tokens.max()),
        )
        self.max_token_id = max(self.max_token_id, int(header.max_token_id or 0))
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
    max_token_id: int = 0


def prepare_data(
    output_dir: str | os.PathLike[str],
    files: Sequence[str | os.PathLike[str]],
    tokenizer_json: str | os.PathLike[str] | None = None,
    *,
    eod_token: str | None = None,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
) -> PreparedDataset:
    """Tokenize text or JSONL ``files`` into token shards in ``output_dir``.

    The shards are written to a staging folder beside ``output_dir`` (not
    inside: datasets are found recursively) and moved into place only when
    every input has been read, so an error leaves the shards already there as
    they were.

    Args:
        output_dir: created if needed; existing ``shard-*`` files are replaced
            once the new shards are complete.
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
    for file in files:
        if not Path(file).is_file():
            what = "is a folder" if Path(file).is_dir() else "does not exist"
            raise DataError(f"input file {file} {what} (expected a text or JSONL file)")
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise DataError(f"output {out} is a file (expected a folder for the shards)")
    tok = load_tokenizer(tokenizer_json, eod_token)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.resolve().name}.prepare-data-", dir=out.resolve().parent))
    try:
        writer = _ShardWriter(staging, tok, shard_tokens)
        documents = 0
        total = 0
        for file in files:
            path = Path(file)
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
        new = {f.name for f in staging.iterdir()}
        for old in list(out.glob("shard-*.bin")) + list(out.glob("shard-*.json")):
            if old.name not in new:
                old.unlink()
        for name in sorted(new):  # each .bin before its .json: a header never points at a missing .bin
            os.replace(staging / name, out / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    shards = tuple(out / p.name for p in writer.written)
    return PreparedDataset(out, shards, total, documents, int(tok.vocab_size), tok.name, writer.max_token_id)


# ---------------------------------------------------------------------------
# Reading


def largest_token_id(tokens: np.ndarray, chunk: int = SCAN_CHUNK_TOKENS) -> int:
    """The largest id in ``tokens`` (a memmap is read ``chunk`` tokens at a time; 0 when empty)."""
    largest = 0
    for start in range(0, int(tokens.size), chunk):
        largest = max(largest, int(tokens[start : start + chunk].max()))
    return largest


def _check_token_ids(bin_path: Path, header: ShardHeader, tokens: np.ndarray, *, scan: bool = True) -> int | None:
    """The shard's largest id (header ``max_token_id``, else a scan; None without either);
    raises when it is >= ``vocab_size``."""
    if header.max_token_id is not None:
        largest, how = header.max_token_id, "its header's max_token_id"
    elif scan:
        largest, how = largest_token_id(tokens), "scanned; the header has no max_token_id"
    else:
        return None
    if largest >= header.vocab_size:
        raise DataError(
            f"{bin_path}: token id {largest} ({how}) is not below the header's vocab_size {header.vocab_size}; "
            "the shard was written with another tokenizer or is corrupt (re-make it with `trainctl prepare-data`)"
        )
    return largest


class TokenDataset:
    """Memory-mapped shards of a dataset directory (see the module docstring).

    Args:
        directory: searched recursively for ``*.json`` headers with a ``.bin`` beside them.
        scan: scan the ``.bin`` of a shard whose header has no ``max_token_id``
            (16 Mi tokens per numpy reduction). The entry point opens the data with
            a scan before launching the workers; the workers open it without one
            (``scan=False``), since :meth:`DistributedSampler.batch` checks every
            batch's ids anyway, so an old shard is read once, not once per process.
            A header's ``max_token_id`` is always checked.

    Raises:
        DataError: no shards; a header that cannot be read (a directory, unreadable,
            not JSON, nested too deep; names the file) or is malformed (names the
            header file and the field); a ``.bin`` whose size is not the header's; a
            token id >= ``vocab_size`` (names the shard, the largest id and the
            vocabulary size); shards that disagree on dtype, vocab_size,
            eod_token_id or tokenizer.
    """

    def __init__(self, directory: str | os.PathLike[str], *, scan: bool = True) -> None:
        self.directory = Path(directory)
        headers = sorted(p for p in self.directory.rglob("*.json") if p.with_suffix(".bin").is_file())
        self.headers: list[ShardHeader] = []
        self.tokens: list[np.memmap] = []
        self.paths: list[Path] = []
        self.max_token_ids: list[int | None] = []
        """Each shard's largest token id (its header's, or scanned; None: not scanned, ``scan=False``)."""
        for hpath in headers:
            if not hpath.is_file():
                raise DataError(
                    f"{hpath}: a {'directory' if hpath.is_dir() else 'special file'}, not a token-shard header "
                    f"(the header of {hpath.with_suffix('.bin').name} must be a JSON file); move it away or rename it"
                )
            try:
                data = json.loads(hpath.read_text(encoding="utf-8"))
            except RecursionError:
                raise DataError(f"{hpath}: not a token-shard header (JSON nested too deeply to read)") from None
            except (ValueError, OSError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
                detail = exc.strerror if isinstance(exc, OSError) else type(exc).__name__
                raise DataError(
                    f"{hpath}: not a readable JSON header ({detail}; expected a token-shard header)"
                ) from None
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
                tokens = np.memmap(bpath, dtype=np.dtype(header.dtype).newbyteorder("<"), mode="r")
                self.max_token_ids.append(_check_token_ids(bpath, header, tokens, scan=scan))
                self.tokens.append(tokens)
                self.headers.append(header)
                self.paths.append(bpath)
        if not self.headers:
            raise DataError(
                f"no token shards in {self.directory} (expected shard-*.bin + shard-*.json pairs; "
                "make them with `trainctl prepare-data`)"
            )
        first = self.headers[0]
        for path, h in zip(self.paths, self.headers, strict=True):
            for name in ("dtype", "vocab_size", "eod_token_id", "tokenizer"):
                if getattr(h, name) != getattr(first, name):
                    raise DataError(
                        f"{path}: {name} {getattr(h, name)!r} disagrees with {getattr(first, name)!r} of {self.paths[0]}; "
                        "every shard of a dataset must come from the same tokenizer"
                    )
        self._fingerprint: dict[str, Any] | None = None

    def fingerprint(self) -> dict[str, Any]:
        """What identifies this dataset (see the module docstring); computed once.

        Returns:
            ``{"sha256": hex, "shards": int, "num_tokens": int, "vocab_size": int, "tokenizer": str}``.
        """
        if self._fingerprint is None:
            digest = hashlib.sha256()
            for path, header, tokens in zip(self.paths, self.headers, self.tokens, strict=True):
                fields = [
                    path.relative_to(self.directory).as_posix(),
                    header.dtype,
                    header.num_tokens,
                    header.vocab_size,
                    header.eod_token_id,
                    header.tokenizer,
                    header.tokenizer_sha256,
                ]
                digest.update(json.dumps(fields).encode("utf-8"))
                digest.update(np.asarray(tokens[:FINGERPRINT_TOKENS], dtype="<u4").tobytes())
            self._fingerprint = {
                "sha256": digest.hexdigest(),
                "shards": len(self.headers),
                "num_tokens": self.num_tokens,
                "vocab_size": self.vocab_size,
                "tokenizer": self.tokenizer,
            }
        return dict(self._fingerprint)

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

    def __init__(
        self, *, seq_length: int, batch_size: int, grad_accum: int, rank: int, world_size: int, seed: int
    ) -> None:
        self.seq_length = seq_length
        self.batch_size = batch_size
        self.grad_accum = grad_accum
        self.rank = rank
        self.world_size = world_size
        self.seed = seed
        self._origin = (0, 0)  # (step, samples consumed before it): a fresh run

    @property
    def samples_per_step(self) -> int:
        """Samples consumed by all ranks in one optimizer step (the global batch, in sequences)."""
        return self.grad_accum * self.world_size * self.batch_size

    def start_at(self, step: int, samples_consumed: int) -> None:
        """Continue a run whose first ``step`` optimizer steps consumed ``samples_consumed`` samples.

        The earlier steps may have used another world size or micro-batch
        layout: the position is a count of samples, so sample
        ``samples_consumed`` is the next one read, whatever the layout.

        Raises:
            ValueError: a negative step or sample count.
        """
        if step < 0 or samples_consumed < 0:
            raise ValueError(f"start_at(step={step}, samples_consumed={samples_consumed}): both must be >= 0")
        self._origin = (int(step), int(samples_consumed))

    def samples_consumed(self, step: int) -> int:
        """Samples read by the whole run before optimizer step ``step`` (0-based) starts.

        Raises:
            ValueError: ``step`` before the step this sampler started at.
        """
        origin_step, origin_samples = self._origin
        if step < origin_step:
            raise ValueError(f"step {step} is before step {origin_step}, where this run's data position starts")
        return origin_samples + (step - origin_step) * self.samples_per_step

    def sample_indices(self, step: int, micro_step: int) -> np.ndarray:
        """Global sample numbers of this rank's micro-batch (``step`` counts from 0)."""
        base = self.samples_consumed(step) + (micro_step * self.world_size + self.rank) * self.batch_size
        return np.arange(base, base + self.batch_size, dtype=np.int64)


class DistributedSampler(_RankBatches):
    """Deterministic, disjoint windows per rank; the position is the number of samples consumed.

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
            seq_length=seq_length,
            batch_size=batch_size,
            grad_accum=grad_accum,
            rank=rank,
            world_size=world_size,
            seed=seed,
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

    def window(self, sample: int) -> np.ndarray:
        """The ``seq_length + 1`` tokens of global sample number ``sample``."""
        epoch, pos = divmod(int(sample), self.num_windows)
        w = int(self._permutation(epoch)[pos])
        shard = int(np.searchsorted(self._starts, w, side="right") - 1)
        offset = (w - int(self._starts[shard])) * self.seq_length
        return np.asarray(self.dataset.tokens[shard][offset : offset + self.seq_length + 1], dtype=np.int64)

    def batch(self, step: int, micro_step: int) -> np.ndarray:
        """``[batch_size, seq_length + 1]`` int64 tokens for (``step``, ``micro_step``).

        Every id is checked against the data's ``vocab_size`` (one numpy max per
        batch): a shard whose header understates its ids, or an old shard the
        worker did not scan, fails here with the shard named instead of inside
        the embedding ("index out of range in self").

        Raises:
            DataError: an id >= ``vocab_size``; names the shard, the token's
                position in it, the id and the vocabulary size.
        """
        samples = self.sample_indices(step, micro_step)
        tokens = np.stack([self.window(g) for g in samples])
        if tokens.size and int(tokens.max()) >= self.dataset.vocab_size:
            row = int(np.argmax(tokens.max(axis=1) >= self.dataset.vocab_size))
            raise self._out_of_vocabulary(int(samples[row]), tokens[row])
        return tokens

    def _out_of_vocabulary(self, sample: int, tokens: np.ndarray) -> DataError:
        epoch, pos = divmod(sample, self.num_windows)
        w = int(self._permutation(epoch)[pos])
        shard = int(np.searchsorted(self._starts, w, side="right") - 1)
        column = int(np.argmax(tokens >= self.dataset.vocab_size))
        offset = (w - int(self._starts[shard])) * self.seq_length + column
        header = self.dataset.headers[shard]
        claim = (
            f"its header's max_token_id says {header.max_token_id}"
            if header.max_token_id is not None
            else "its header has no max_token_id"
        )
        return DataError(
            f"{self.dataset.paths[shard]}: token id {int(tokens[column])} at token {offset} is not below the "
            f"vocabulary size {self.dataset.vocab_size} (the header's vocab_size; {claim}); the shard is corrupt or "
            "its header is wrong (re-make it with `trainctl prepare-data`)"
        )


class SyntheticSampler(_RankBatches):
    """Uniform random tokens, seeded by (seed, step, micro step, rank): deterministic and resumable."""

    def __init__(
        self,
        *,
        vocab_size: int,
        seq_length: int,
        batch_size: int,
        grad_accum: int,
        rank: int,
        world_size: int,
        seed: int,
    ) -> None:
        super().__init__(
            seq_length=seq_length,
            batch_size=batch_size,
            grad_accum=grad_accum,
            rank=rank,
            world_size=world_size,
            seed=seed,
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
    "largest_token_id",
    "load_tokenizer",
    "prepare_data",
    "resolve_vocab_size",
    "token_dtype",
]
