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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from platform_spec.hyperparameters import HyperparameterError
from platform_spec.processing import MANIFEST, PART_PREFIX, SPLITS

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


REPLACING_MARKER = ".prepare-data-replacing"
"""Present in a dataset folder while ``prepare-data`` replaces its files (:func:`training.prepare.prepare_data`):
one left behind means the preparation was killed part way (SIGKILL, a lost machine) and the folder holds some
shards of each dataset, which :class:`TokenDataset` refuses."""


def _refuse_half_replaced(directory: Path) -> None:
    for marker in sorted(directory.rglob(REPLACING_MARKER)):
        raise DataError(
            f"{marker.parent} is half replaced: a `trainctl prepare-data` into it was stopped while it moved the "
            f"new shards in ({marker.name} is left), so it holds some shards of each preparation. Prepare the "
            "data again into it (the earlier dataset's files were set aside in "
            f"{marker.read_text(encoding='utf-8').strip() or 'a .replaced- folder beside it'})"
        )


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
    """UTF-8 bytes as token ids 0-255, end-of-document 256 (None with ``no_separator``: documents concatenated)."""

    name = BYTE_LEVEL
    vocab_size = BYTE_LEVEL_VOCAB_SIZE
    sha256: str | None = None

    def __init__(self, *, no_separator: bool = False) -> None:
        self.eod_token_id: int | None = None if no_separator else BYTE_LEVEL_EOD

    def encode(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint32)

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [self.encode(text) for text in texts]

    def decode(self, ids: Iterable[int]) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


class HFTokenizer:
    """A ``tokenizer.json`` loaded with the ``tokenizers`` library (local file, no download).

    The document separator appended after each document: ``separator``; else the first of
    :data:`EOD_CANDIDATES` the tokenizer has; none with ``no_separator``.

    Raises:
        DataError: the file is missing or not a tokenizer the ``tokenizers`` library reads (not JSON, or JSON
            of another shape); ``separator`` is not a token of it; it has none of
            :data:`EOD_CANDIDATES` and neither ``separator`` nor ``no_separator`` is given (the message lists
            its special tokens and both options: documents would otherwise run together unmarked).
    """

    def __init__(
        self, path: str | os.PathLike[str], separator: str | None = None, *, no_separator: bool = False
    ) -> None:
        from tokenizers import Tokenizer

        self.path = Path(path)
        if not self.path.is_file():
            raise DataError(f"tokenizer file {self.path} does not exist")
        try:
            self._tok = Tokenizer.from_file(str(self.path))
        except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot parse
            raise DataError(
                f"tokenizer file {self.path}: expected a Hugging Face tokenizer.json (what "
                f"PreTrainedTokenizerFast.save_pretrained writes); the tokenizers library refused it: {exc}"
            ) from None
        self.name = self.path.name
        self.sha256 = hashlib.sha256(self.path.read_bytes()).hexdigest()
        self.vocab_size = self._tok.get_vocab_size(with_added_tokens=True)
        self.eod_token_id: int | None = None
        if no_separator:
            return
        for token in (separator,) if separator else EOD_CANDIDATES:
            tid = self._tok.token_to_id(token)
            if tid is not None:
                self.eod_token_id = tid
                return
        if separator:
            raise DataError(f"tokenizer {self.path} has no token {separator!r} (--separator)")
        special = [t.content for _, t in sorted(self._tok.get_added_tokens_decoder().items()) if t.special]
        shown = ", ".join(special[:12]) + (f", ... ({len(special)} in all)" if len(special) > 12 else "")
        raise DataError(
            f"tokenizer {self.path} has no document separator (none of {', '.join(EOD_CANDIDATES)}); its special "
            f"tokens: {shown or 'none'}. Name the token to append after each document with --separator TOKEN, or "
            "give --no-separator to concatenate documents with nothing between them"
        )

    def encode(self, text: str) -> np.ndarray:
        return np.asarray(self._tok.encode(text, add_special_tokens=False).ids, dtype=np.uint32)

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        """The ids of each text, in order; ``tokenizers`` encodes the batch on every core (Rust threads)."""
        encodings = self._tok.encode_batch_fast(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.uint32) for e in encodings]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tok.decode(list(ids))


def load_tokenizer(
    tokenizer_json: str | os.PathLike[str] | None, separator: str | None = None, *, no_separator: bool = False
) -> ByteTokenizer | HFTokenizer:
    """A :class:`HFTokenizer` for ``tokenizer_json``, or the byte-level fallback when None.

    Raises:
        DataError: see :class:`HFTokenizer`; ``separator`` without ``tokenizer_json`` (the byte-level separator
            is id 256) or with ``no_separator``.
    """
    if separator is not None and no_separator:
        raise DataError("--separator and --no-separator exclude each other: give one")
    if tokenizer_json is None:
        if separator is not None:
            raise DataError(
                f"--separator {separator!r} needs --tokenizer (the byte-level tokenizer separates with id 256)"
            )
        return ByteTokenizer(no_separator=no_separator)
    return HFTokenizer(tokenizer_json, separator, no_separator=no_separator)


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


def _refuse_held_out_split(directory: Path) -> None:
    """A folder holding a prepared validation split below it (a ``validation/`` folder whose manifests say
    ``split: validation``) is not one dataset: training on it would train on the held-out documents. The
    validation channel itself (a remote preparation's holds one part folder per instance) is one."""
    for manifest in sorted(directory.rglob(MANIFEST)):
        if "validation" not in manifest.parent.relative_to(directory).parts:
            continue
        try:
            split = json.loads(manifest.read_text(encoding="utf-8")).get("split")
        except (ValueError, OSError, AttributeError):
            continue  # not ours
        if split == "validation":
            raise DataError(
                f"{directory} holds the held-out validation split {manifest.parent}; give its train split "
                f"({manifest.parent.parent / 'train'}) as the training data, the validation split as validation data"
            )


def _read_manifest(path: Path) -> dict[str, Any] | None:
    """A manifest's JSON object, None when it is not one (not ours)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _refuse_incomplete_parts(directory: Path) -> None:
    """A remote preparation's parts (``part-<host>`` folders whose manifest names its ``processing_job``,
    :mod:`platform_spec.processing`) are a dataset only under the manifest ``trainctl`` writes over them once
    every part is there: without it the job failed or was not finished, and the parts present are some of
    the documents. The manifest's ``parts`` and ``shards`` must be the folder's: a part or shard missing (a
    copy cut short) or a part or shard it does not list (parts of another run mixed in, or two jobs run into
    one output at once) is refused too."""
    jobs: dict[Path, dict[str, str]] = {}  # dataset folder -> part folder name -> its processing job
    for manifest in sorted(directory.rglob(f"{PART_PREFIX}*/{MANIFEST}")):
        part = _read_manifest(manifest)
        if part is not None and isinstance(part.get("processing_job"), str) and manifest.parent != directory:
            jobs.setdefault(manifest.parent.parent, {})[manifest.parent.name] = part["processing_job"]
    for folder, parts in jobs.items():
        job = sorted(set(parts.values()))
        if not (folder / MANIFEST).exists():
            raise DataError(
                f"{folder} holds the parts {', '.join(sorted(parts))} of processing job {', '.join(job)} but no "
                f"{MANIFEST} over them: the job failed or was not finished, and they may hold only some of the "
                f"documents. Finish it with `trainctl prepare-data --remote --attach {job[0]}` (it writes the "
                "manifest when every part is there), or prepare the data again"
            )
        merged = _read_manifest(folder / MANIFEST) or {}
        listed = merged.get("parts")
        if not (isinstance(listed, list) and all(isinstance(name, str) for name in listed)):
            raise DataError(
                f"{folder / MANIFEST}: not the manifest over the parts in {folder} (expected a JSON object whose "
                "'parts' lists the part folders, as `trainctl prepare-data --remote` writes it)"
            )
        missing = [name for name in listed if name not in parts]
        extra = sorted(set(parts) - set(listed))
        shards = merged.get("shards") if isinstance(merged.get("shards"), list) else []
        files = {str(s.get("file")) for s in shards if isinstance(s, dict)}
        lost = sorted(file for file in files if not (folder / file).is_file())
        stray = sorted(  # another run's shards beside this one's (two jobs into one output)
            path.relative_to(folder).as_posix()
            for name in parts
            if name in listed
            for path in (folder / name).glob("*.bin")
            if path.relative_to(folder).as_posix() not in files
        )
        if missing or extra or lost or stray:
            found = ", ".join(
                f"{what} {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}"
                for what, names in (
                    ("missing part", missing),
                    ("missing shard", lost),
                    ("extra part", extra),
                    ("extra shard", stray),
                )
                if names
            )
            raise DataError(
                f"{folder / MANIFEST} does not cover the parts in {folder} ({found}): a copy cut short or parts of "
                "another preparation mixed in; copy the prepared dataset's prefix again, whole and alone"
            )


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
            eod_token_id or tokenizer; a remote preparation's parts without the
            manifest over them, or with one that does not list exactly the parts
            and shards present (names the folder and the job to finish); a folder
            a killed ``prepare-data`` left half replaced (:data:`REPLACING_MARKER`).
    """

    def __init__(self, directory: str | os.PathLike[str], *, scan: bool = True) -> None:
        self.directory = Path(directory)
        _refuse_half_replaced(self.directory)
        _refuse_held_out_split(self.directory)
        _refuse_incomplete_parts(self.directory)
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


def check_same_tokenizer(train: TokenDataset, other: TokenDataset, channel: str) -> None:
    """``other`` (the ``channel``'s shards, e.g. ``validation``) was tokenized like ``train``: the same tokenizer
    (name and ``tokenizer.json`` hash), vocabulary and end-of-document token, so its loss is comparable.

    Raises:
        DataError: naming the channel's first shard, the field, both values and ``train``'s first shard.
    """
    mine, theirs = train.headers[0], other.headers[0]
    for name in ("tokenizer", "tokenizer_sha256", "vocab_size", "eod_token_id"):
        if getattr(theirs, name) != getattr(mine, name):
            raise DataError(
                f"{other.paths[0]}: the {channel} channel's {name} {getattr(theirs, name)!r} differs from "
                f"{getattr(mine, name)!r} of the train channel ({train.paths[0]}); prepare both with the same "
                "tokenizer (trainctl prepare-data)"
            )


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
    "MANIFEST",
    "REPLACING_MARKER",
    "SPLITS",
    "ByteTokenizer",
    "DataError",
    "DistributedSampler",
    "HFTokenizer",
    "ShardHeader",
    "SyntheticSampler",
    "TokenDataset",
    "check_same_tokenizer",
    "largest_token_id",
    "load_tokenizer",
    "resolve_vocab_size",
    "token_dtype",
]
