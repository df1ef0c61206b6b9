"""The documents of ``trainctl prepare-data``'s inputs: which files an input is, their format, and their text.

Formats (the content decides, the name only where the content cannot: JSONL and plain text are both text)::

    JSONL             .jsonl .ndjson, or .json whose first line is an object; plain, gzip (.gz) or
                      Zstandard (.zst): one document per line, the string field ``text_field``
    Parquet           .parquet (magic PAR1): the string column ``text_field``, read one record batch at a time
                      (pyarrow); FineWeb's layout, a folder tree of .parquet files, is a folder input
    Arrow             .arrow: an Arrow IPC stream (what ``datasets`` writes) or file, memory-mapped, the column
                      ``text_field``; a ``datasets`` ``save_to_disk`` folder (state.json + dataset_info.json)
                      is read through its ``_data_files`` in order
    plain text        any other UTF-8 file (plain, .gz or .zst): the whole file is one document

Refused, naming the file and what was expected, before anything is written: a binary file (NUL bytes or not
UTF-8), a gzip or Zstandard stream cut short (an interrupted download) or damaged, a compression other than
gzip and Zstandard (bzip2, xz, zip, lz4, ...), a JSON array file, a JSONL line that is not an object with a
string ``text_field``, a Parquet or Arrow file without that column (the columns it has are listed), a
``save_to_disk`` folder of a ``DatasetDict`` (name the split's folder), and a folder whose files are of more
than one format. A folder is read recursively in sorted path order, hidden files and folders
(``.cache``, ``.gitattributes``) skipped, links followed (a Hugging Face cache snapshot is a tree of links
to its blobs); refused, naming the path: a link to nothing, a link to a folder it is inside (a loop), one
file reached twice (by two links, or given twice: its documents would count twice) and anything but a file
or folder (a pipe, a socket, a device).

Text is UTF-8; a byte order mark opening a file is dropped; JSONL lines may end in LF or CRLF.

Memory: one record batch (Parquet, Arrow) or one line (JSONL) at a time; a plain-text file is one document and
is read whole.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from training.data import DataError

DEFAULT_TEXT_FIELD = "text"
COMPRESSIONS: dict[str, bytes] = {"gzip": b"\x1f\x8b", "zstd": b"\x28\xb5\x2f\xfd"}
"""The compressions read, by magic number (RFC 1952 section 2.3.1; RFC 8878 section 3.1.1)."""
COMPRESSION_SUFFIXES = {".gz": "gzip", ".zst": "zstd"}
UNKNOWN_COMPRESSIONS: dict[bytes, str] = {
    b"BZh": "bzip2",
    b"\xfd7zXZ\x00": "xz",
    b"PK\x03\x04": "zip",
    b"\x04\x22\x4d\x18": "lz4",
    b"7z\xbc\xaf\x27\x1c": "7z",
    b"\x5d\x00\x00": "lzma",
}
"""Archives and compressions that are refused, by magic number."""
UNKNOWN_SUFFIXES = {".bz2", ".xz", ".zip", ".lz4", ".7z", ".lzma", ".br", ".tar", ".tgz", ".snappy"}
PARQUET_MAGIC = b"PAR1"
ARROW_FILE_MAGIC = b"ARROW1"
ARROW_STREAM_MAGIC = b"\xff\xff\xff\xff"
"""An Arrow IPC stream starts with a continuation marker (Arrow columnar format, "Encapsulated message format")."""
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
SNIFF_BYTES = 8192
TEXT_ENCODING = "utf-8-sig"
"""UTF-8; a byte order mark opening a file (Windows tools write one) is dropped, not read as text."""
BATCH_ROWS = 1024
"""Rows per Parquet/Arrow record batch read (a FineWeb row is ~3 KB of text: ~3 MB per batch)."""


@dataclass(frozen=True)
class Source:
    """One input file and how it is read."""

    path: Path
    format: str  # "jsonl", "parquet", "arrow", "text"
    compression: str | None = None  # "gzip", "zstd"

    @property
    def name(self) -> str:
        return self.path.name


def resolve_inputs(
    inputs: Sequence[str | os.PathLike[str]], text_field: str = DEFAULT_TEXT_FIELD, output: Path | None = None
) -> list[Source]:
    """The files of ``inputs`` (files and folders), each with its format, every one checked before any is read
    in full (magic number, the first line or the schema).

    Raises:
        DataError: a missing input, an empty folder, a refused file or folder (module docstring), ``output``
            (the shards' folder) inside an input folder.
    """
    if not inputs:
        raise DataError("prepare_data needs at least one input file")
    if output is not None:
        for given in inputs:
            if Path(given).is_dir() and output.resolve().is_relative_to(Path(given).resolve()):
                raise DataError(f"output {output} is inside the input folder {given}; write the shards elsewhere")
    sources: list[Source] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            sources.extend(_folder_sources(path, text_field))
        elif path.is_file():
            sources.append(_file_source(path, text_field))
        else:
            _refuse_entry(path)
    reached: dict[Path, Path] = {}
    for source in sources:
        first = reached.setdefault(source.path.resolve(), source.path)
        if first != source.path:
            raise DataError(
                f"input {source.path} and {first} are one file ({source.path.resolve()}): its documents would be "
                "read twice; expected each file once (remove the duplicate input or link)"
            )
    return sources


def _refuse_entry(path: Path) -> None:
    """Refuse an input path that is neither a file nor a folder, saying what it is."""
    if path.is_symlink():
        raise DataError(
            f"input {path} is a link to {os.readlink(path)}, which does not exist; expected a file or folder"
        )
    if path.exists():
        raise DataError(f"input {path} is neither a regular file nor a folder (a pipe, socket or device)")
    raise DataError(f"input {path} does not exist (expected a file or folder of text, JSONL, Parquet or Arrow)")


def _files_under(folder: Path) -> list[Path]:
    """The files under ``folder``, recursively in sorted path order, hidden names skipped, links followed.

    Raises:
        DataError: a link to a folder that holds it (a loop), a link to nothing, anything but a file or
            folder (each named).
    """
    files: list[Path] = []

    def visit(directory: Path, ancestors: frozenset[Path]) -> None:
        real = directory.resolve()
        if real in ancestors:
            raise DataError(
                f"input {directory} is a link to {real}, a folder it is inside of (a loop); expected links to "
                "files or to folders outside it"
            )
        for entry in sorted(directory.iterdir()):
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                visit(entry, ancestors | {real})
            elif entry.is_file():
                files.append(entry)
            else:
                _refuse_entry(entry)

    visit(folder, frozenset())
    return files


def _folder_sources(folder: Path, text_field: str) -> list[Source]:
    if (folder / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in folder.iterdir() if (p / "state.json").is_file())
        raise DataError(
            f"input {folder} is a datasets DatasetDict (splits: {', '.join(splits) or 'none'}); "
            f"expected one split's save_to_disk folder, e.g. {folder / (splits[0] if splits else 'train')}"
        )
    if (folder / "state.json").is_file() and (folder / "dataset_info.json").is_file():
        return _save_to_disk_sources(folder, text_field)
    files = _files_under(folder)
    if not files:
        raise DataError(f"input folder {folder} holds no files (expected text, JSONL, Parquet or Arrow files)")
    sources = [_file_source(p, text_field) for p in files]
    formats: dict[str, Path] = {}
    for source in sources:
        formats.setdefault(source.format, source.path)
    if len(formats) > 1:
        found = ", ".join(f"{fmt} ({path})" for fmt, path in formats.items())
        raise DataError(
            f"input folder {folder} mixes formats: {found}; expected files of one format (give the data's own "
            "folder, or the files one by one if the mix is meant)"
        )
    return sources


def _save_to_disk_sources(folder: Path, text_field: str) -> list[Source]:
    state_path = folder / "state.json"
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        names = [entry["filename"] for entry in state["_data_files"]]
    except (ValueError, KeyError, TypeError):
        raise DataError(
            f"{state_path}: not a datasets save_to_disk state (expected _data_files: [{{filename: ...}}])"
        ) from None
    sources = []
    for name in names:
        path = folder / name
        if not path.is_file():
            raise DataError(f"{state_path} names {name}, which is not in {folder}")
        source = _file_source(path, text_field)
        if source.format != "arrow":
            raise DataError(f"{path}: expected an Arrow file (datasets save_to_disk), found {source.format}")
        sources.append(source)
    return sources


def _file_source(path: Path, text_field: str) -> Source:
    with open(path, "rb") as fh:
        head = fh.read(SNIFF_BYTES)
    suffixes = [s.lower() for s in path.suffixes]
    compression = next((name for name, magic in COMPRESSIONS.items() if head.startswith(magic)), None)
    if compression is None:
        _refuse_other_compressions(path, head, suffixes)
    elif suffixes and suffixes[-1] in COMPRESSION_SUFFIXES and COMPRESSION_SUFFIXES[suffixes[-1]] != compression:
        raise DataError(f"{path}: named {suffixes[-1]} but {compression}-compressed; rename it")
    inner = suffixes[:-1] if suffixes and suffixes[-1] in COMPRESSION_SUFFIXES else suffixes
    if compression is None and head.startswith(PARQUET_MAGIC):
        _check_columns(path, _parquet_schema_names(path), text_field)
        return Source(path, "parquet")
    if compression is None and (head.startswith(ARROW_FILE_MAGIC) or head.startswith(ARROW_STREAM_MAGIC)):
        _check_columns(path, _arrow_schema_names(path), text_field)
        return Source(path, "arrow")
    first = _first_text(path, compression)
    if inner and inner[-1] in (*JSONL_SUFFIXES, ".json"):
        stripped = first.lstrip()
        if stripped and not stripped.startswith("{"):
            what = "a JSON array" if stripped.startswith("[") else "JSON that is not one object per line"
            raise DataError(f"{path}: {what}; expected JSONL (one object per line with a string {text_field!r} field)")
        return Source(path, "jsonl", compression)
    return Source(path, "text", compression)


def _refuse_other_compressions(path: Path, head: bytes, suffixes: list[str]) -> None:
    kind = next((name for magic, name in UNKNOWN_COMPRESSIONS.items() if head.startswith(magic)), None)
    if kind is None and suffixes and suffixes[-1] in UNKNOWN_SUFFIXES:
        kind = suffixes[-1]
    if kind is None and suffixes and suffixes[-1] in COMPRESSION_SUFFIXES:
        raise DataError(f"{path}: named {suffixes[-1]} but not {COMPRESSION_SUFFIXES[suffixes[-1]]}-compressed")
    if kind is not None:
        raise DataError(
            f"{path}: {kind}, a compression or archive prepare-data does not read; expected plain, gzip (.gz) or "
            "Zstandard (.zst) text or JSONL, Parquet or Arrow"
        )


def _first_text(path: Path, compression: str | None) -> str:
    """The first bytes of the (decompressed) file as UTF-8; a binary file refused."""
    with _open_binary(path, compression) as fh:
        head = fh.read(SNIFF_BYTES)
    if b"\x00" in head:
        raise DataError(
            f"{path}: binary data (a NUL byte at offset {head.index(0)}); expected UTF-8 text or JSONL "
            "(plain, .gz or .zst), Parquet or Arrow"
        )
    try:
        return head.decode(TEXT_ENCODING)
    except UnicodeDecodeError as exc:
        if len(head) == SNIFF_BYTES and exc.start >= len(head) - 3:  # a character cut by the window
            return head[: exc.start].decode(TEXT_ENCODING)
        raise DataError(
            f"{path}: not UTF-8 text (byte 0x{head[exc.start]:02x} at offset {exc.start}); expected UTF-8 text or "
            "JSONL (plain, .gz or .zst), Parquet or Arrow"
        ) from None


def _open_binary(path: Path, compression: str | None) -> IO[bytes]:
    """``path``'s bytes, decompressed; a compressed stream cut short or damaged raises :class:`DataError`."""
    if compression is None:
        return open(path, "rb")
    return io.BufferedReader(_Decompressed(path, compression), buffer_size=READ_BYTES)


READ_BYTES = 1 << 16
"""Compressed bytes read at a time."""


class _Decompressed(io.RawIOBase):
    """A gzip or Zstandard file's bytes, decompressed (every frame or member in turn, as ``zstd -T0`` and appends
    write several). The end of the file must end a frame: a stream cut short (an interrupted download) raises
    :class:`DataError` naming the file, where the libraries' readers would raise ``EOFError`` (gzip) or end
    quietly (zstandard's ``stream_reader``), leaving the whole lines before the cut to pass for a smaller file."""

    def __init__(self, path: Path, compression: str) -> None:
        import zlib

        import zstandard

        self.path, self.compression = path, compression
        self.file = open(path, "rb")  # noqa: SIM115 (closed by close(), as the reader is)
        self.new: Any = (
            (lambda: zlib.decompressobj(16 + zlib.MAX_WBITS))  # 16 +: a gzip member (zlib manual, inflateInit2)
            if compression == "gzip"
            else zstandard.ZstdDecompressor().decompressobj
        )
        self.errors: tuple[type[Exception], ...] = (zlib.error, zstandard.ZstdError)
        self.frame: Any = None  # the frame being decompressed; None between frames
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self.pending:
            data = self.file.read(READ_BYTES)
            if not data:
                if self.frame is not None:
                    raise DataError(
                        f"{self.path}: the {self.compression} stream is cut short (it ends inside a frame, "
                        "before its end marker): an incomplete file, e.g. an interrupted download; fetch it again"
                    )
                return 0
            self._decompress(data)
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n

    def _decompress(self, data: bytes) -> None:
        out = []
        try:
            while data:
                if self.frame is None:
                    self.frame = self.new()
                out.append(self.frame.decompress(data))
                data = b""
                if self.frame.eof:
                    data, self.frame = self.frame.unused_data, None
        except self.errors as exc:
            raise DataError(f"{self.path}: damaged {self.compression} data ({exc}); fetch the file again") from None
        self.pending = b"".join(out)

    def close(self) -> None:
        self.file.close()
        super().close()


def _parquet_schema_names(path: Path) -> list[str]:
    import pyarrow.parquet as pq

    try:
        return list(pq.read_schema(path).names)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for a damaged footer
        raise DataError(f"{path}: not a readable Parquet file ({exc})") from None


def _arrow_schema_names(path: Path) -> list[str]:
    with _arrow_reader(path) as reader:
        return list(reader.schema.names)


class _arrow_reader:
    """An Arrow IPC stream or file reader over a memory map (a context manager)."""

    def __init__(self, path: Path) -> None:
        import pyarrow as pa

        self.path = path
        self.source = pa.memory_map(str(path), "r")
        try:
            if self.source.read(6) == ARROW_FILE_MAGIC:
                self.source.seek(0)
                file_reader = pa.ipc.open_file(self.source)
                self.schema = file_reader.schema
                self.batches: Iterator[Any] = (file_reader.get_batch(i) for i in range(file_reader.num_record_batches))
            else:
                self.source.seek(0)
                stream = pa.ipc.open_stream(self.source)
                self.schema = stream.schema
                self.batches = iter(stream)
        except pa.ArrowException as exc:
            self.source.close()
            raise DataError(f"{path}: not a readable Arrow IPC stream or file ({exc})") from None

    def __enter__(self) -> _arrow_reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.source.close()


def _check_columns(path: Path, names: list[str], text_field: str) -> None:
    if text_field not in names:
        raise DataError(
            f"{path}: no column {text_field!r} (its columns: {', '.join(names) or 'none'}); "
            "name the text column with --text-field"
        )


def iter_documents(source: Source, text_field: str = DEFAULT_TEXT_FIELD) -> Iterator[str]:
    """The documents of ``source`` in file order (nulls and empty strings included as ``""``).

    Raises:
        DataError: a JSONL line that is not an object with a string ``text_field``, text that is not UTF-8, or a
            Parquet/Arrow column that is not of strings (names the file, and the line for JSONL).
    """
    if source.format == "jsonl":
        yield from _jsonl_documents(source, text_field)
    elif source.format == "parquet":
        import pyarrow.parquet as pq

        parquet = pq.ParquetFile(source.path)
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=[text_field]):
            yield from _column_strings(source.path, batch.column(0), text_field)
    elif source.format == "arrow":
        with _arrow_reader(source.path) as reader:
            index = reader.schema.get_field_index(text_field)
            for batch in reader.batches:
                yield from _column_strings(source.path, batch.column(index), text_field)
    else:
        with _open_binary(source.path, source.compression) as fh:
            data = fh.read()
        try:
            yield data.decode(TEXT_ENCODING)
        except UnicodeDecodeError as exc:
            raise DataError(
                f"{source.path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                "expected UTF-8 text"
            ) from None


def count_documents(source: Source, text_field: str = DEFAULT_TEXT_FIELD) -> int:
    """How many documents :func:`iter_documents` yields for ``source``: Parquet from its footer, Arrow from its
    batches (memory-mapped), JSONL by one pass over its non-blank lines, plain text 1."""
    if source.format == "parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(source.path).metadata.num_rows)
    if source.format == "arrow":
        with _arrow_reader(source.path) as reader:
            return sum(batch.num_rows for batch in reader.batches)
    if source.format == "jsonl":
        with _open_binary(source.path, source.compression) as fh:
            return sum(1 for line in fh if line.strip())
    return 1


def _column_strings(path: Path, column: Any, text_field: str) -> Iterator[str]:
    import pyarrow as pa

    kind = column.type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind)):
        raise DataError(f"{path}: column {text_field!r} is {kind}, expected strings")
    for value in column.to_pylist():
        yield value or ""


def _jsonl_documents(source: Source, text_field: str) -> Iterator[str]:
    path = source.path
    with io.TextIOWrapper(_open_binary(path, source.compression), encoding=TEXT_ENCODING) as fh:
        lineno = 0
        while True:
            try:
                line = next(fh)
            except StopIteration:
                return
            except UnicodeDecodeError as exc:
                # the decoder reads ahead in blocks, so no line number: the byte says what was found
                raise DataError(
                    f"{path}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); JSONL is UTF-8"
                ) from None
            lineno += 1
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, RecursionError):  # RecursionError: nesting deeper than Python's stack
                raise DataError(f"{path}:{lineno}: not valid JSON") from None
            text = obj.get(text_field) if isinstance(obj, dict) else None
            if not isinstance(text, str):
                fields = f" (its fields: {', '.join(obj)})" if isinstance(obj, dict) else ""
                raise DataError(f"{path}:{lineno}: expected an object with a string {text_field!r} field{fields}")
            yield text


__all__ = ["DEFAULT_TEXT_FIELD", "Source", "count_documents", "iter_documents", "resolve_inputs"]
