"""``trainctl prepare-data`` on the formats people keep data in, each file written by its own library (gzip,
zstandard, pyarrow, datasets), the refusals (nothing written), the separator choice and the validation split."""

from __future__ import annotations

import bz2
import contextlib
import gzip
import json
import lzma
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from training.data import BYTE_LEVEL_EOD, DataError, TokenDataset
from training.prepare import prepare_data, validation_mask

DOCS = [f"document {i}: {'héllo wörld ' * (i % 5)}end" for i in range(40)]


def _documents(directory: Path) -> list[str]:
    """The byte-level documents of a dataset, in shard order."""
    tokens = np.concatenate([np.asarray(t) for t in TokenDataset(directory).tokens]).tolist()
    docs, current = [], bytearray()
    for t in tokens:
        if t == BYTE_LEVEL_EOD:
            docs.append(current.decode("utf-8"))
            current = bytearray()
        else:
            current.append(t)
    assert not current  # every document ends with the separator
    return docs


def _jsonl(docs: list[str], field: str = "text") -> bytes:
    return "".join(json.dumps({field: d, "id": i}) + "\n" for i, d in enumerate(docs)).encode("utf-8")


def _nothing_written(tmp_path: Path, out: Path) -> None:
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir() if "prepare-data" in p.name] == []  # no staging folder left


def test_jsonl_plain_gzip_and_zstandard_give_the_same_documents(tmp_path: Path) -> None:
    import zstandard

    (tmp_path / "a.jsonl").write_bytes(_jsonl(DOCS[:10]))
    with gzip.open(tmp_path / "b.jsonl.gz", "wb") as fh:
        fh.write(_jsonl(DOCS[10:25]))
    zstd = zstandard.ZstdCompressor(level=3)  # two frames, as `zstd -T0` or an appended file has
    (tmp_path / "c.jsonl.zst").write_bytes(zstd.compress(_jsonl(DOCS[25:30])) + zstd.compress(_jsonl(DOCS[30:])))
    (tmp_path / "empty.jsonl").write_bytes(b"")
    inputs = [tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz", tmp_path / "empty.jsonl", tmp_path / "c.jsonl.zst"]
    result = prepare_data(tmp_path / "out", inputs, shard_tokens=500)
    assert _documents(tmp_path / "out") == DOCS
    assert result.num_documents == len(DOCS) and len(result.shards) > 1
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["split"] is None and manifest["sources"] == ["a.jsonl", "b.jsonl.gz", "c.jsonl.zst"]
    with pytest.raises(DataError, match=r"output .*out is inside the input folder"):
        prepare_data(tmp_path / "out", [tmp_path])  # its own shards would be read back as input
    assert [s["file"] for s in manifest["shards"]] == [p.name for p in result.shards]
    assert sum(s["num_tokens"] for s in manifest["shards"]) == manifest["num_tokens"] == result.num_tokens


def test_fineweb_parquet_tree_with_a_named_column_streams_row_groups(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # FineWeb's layout: data/<dump>/<NNN>_<NNNNN>.parquet with text, id, dump, url, ... columns
    tree = tmp_path / "fineweb" / "data"
    for n, dump in enumerate(["CC-MAIN-2024-10", "CC-MAIN-2024-18"]):
        (tree / dump).mkdir(parents=True)
        part = DOCS[n * 20 : (n + 1) * 20]
        table = pa.table({"content": [*part, None], "url": [f"https://example.org/{i}" for i in range(21)]})
        pq.write_table(table, tree / dump / "000_00000.parquet", row_group_size=3)
    (tmp_path / "fineweb" / ".gitattributes").write_text("*.parquet filter=lfs\n")  # hidden: skipped
    result = prepare_data(tmp_path / "out", [tmp_path / "fineweb"], text_field="content")
    assert _documents(tmp_path / "out") == DOCS
    assert result.skipped_documents == 2  # the two null rows
    with pytest.raises(DataError, match=r"000_00000.parquet: no column 'text' \(its columns: content, url\); name"):
        prepare_data(tmp_path / "out2", [tmp_path / "fineweb"])
    _nothing_written(tmp_path, tmp_path / "out2")


def test_datasets_arrow_files_and_save_to_disk_folders(tmp_path: Path) -> None:
    import datasets

    datasets.disable_progress_bars()
    dataset = datasets.Dataset.from_dict({"text": DOCS, "n": list(range(len(DOCS)))})
    dataset.save_to_disk(str(tmp_path / "saved"), max_shard_size="2KB")  # several data-*.arrow files
    assert len(list((tmp_path / "saved").glob("data-*.arrow"))) > 1
    prepare_data(tmp_path / "out", [tmp_path / "saved"])
    assert _documents(tmp_path / "out") == DOCS
    arrow = sorted((tmp_path / "saved").glob("data-*.arrow"))[0]  # one Arrow IPC stream file on its own
    prepare_data(tmp_path / "one", [arrow])
    assert _documents(tmp_path / "one") == DOCS[: len(_documents(tmp_path / "one"))]
    datasets.DatasetDict({"train": dataset, "test": dataset}).save_to_disk(str(tmp_path / "dict"))
    with pytest.raises(DataError, match=r"a datasets DatasetDict \(splits: test, train\); expected one split's"):
        prepare_data(tmp_path / "out2", [tmp_path / "dict"])
    with pytest.raises(DataError, match=r"no column 'body' \(its columns: text, n\)"):
        prepare_data(tmp_path / "out2", [tmp_path / "saved"], text_field="body")
    _nothing_written(tmp_path, tmp_path / "out2")


def test_plain_text_files_are_one_document_each(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(DOCS[0], encoding="utf-8")
    with gzip.open(tmp_path / "b.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write(DOCS[1])
    prepare_data(tmp_path / "out", [tmp_path / "a.md", tmp_path / "b.txt.gz"])
    assert _documents(tmp_path / "out") == DOCS[:2]


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", r"image.png: binary data \(a NUL byte at offset 8\)"),
        ("latin1.txt", "café crème".encode("latin-1"), r"latin1.txt: not UTF-8 text \(byte 0xe9 at offset 3\)"),
        ("c.jsonl.bz2", bz2.compress(b'{"text": "x"}\n'), r"c.jsonl.bz2: bzip2, a compression .* does not read"),
        ("c.jsonl.xz", lzma.compress(b'{"text": "x"}\n'), r"c.jsonl.xz: xz, a compression .* does not read"),
        ("c.jsonl.gz", b'{"text": "x"}\n', r"c.jsonl.gz: named .gz but not gzip-compressed"),
        ("array.json", b'[{"text": "a"}, {"text": "b"}]', r"array.json: a JSON array; expected JSONL"),
        ("no-field.jsonl", b'{"body": "a", "id": 1}\n', r"no-field.jsonl:1: .*'text' field \(its fields: body, id\)"),
    ],
)
def test_refusals_name_the_file_and_write_nothing(tmp_path: Path, name: str, content: bytes, expected: str) -> None:
    good = tmp_path / "good.jsonl"
    good.write_bytes(_jsonl(DOCS))
    (tmp_path / name).write_bytes(content)
    with pytest.raises(DataError, match=expected):
        prepare_data(tmp_path / "new" / "out", [good, tmp_path / name])
    _nothing_written(tmp_path, tmp_path / "new")  # not even the parent folder it would have made


def test_a_folder_of_mixed_formats_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "data").mkdir()
    pq.write_table(pa.table({"text": DOCS}), tmp_path / "data" / "part.parquet")
    (tmp_path / "data" / "README.md").write_text("# a dataset card\n")
    with pytest.raises(DataError, match=r"data mixes formats: text \(.*README.md\), parquet \(.*part.parquet\)"):
        prepare_data(tmp_path / "out", [tmp_path / "data"])
    _nothing_written(tmp_path, tmp_path / "out")
    prepare_data(tmp_path / "out", [tmp_path / "data" / "part.parquet", tmp_path / "data" / "README.md"])  # meant
    assert _documents(tmp_path / "out") == [*DOCS, "# a dataset card\n"]


def _tokenizer(path: Path, specials: list[str]) -> Path:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"[UNK]": 0, "hello": 1, "world": 2} | {s: 3 + i for i, s in enumerate(specials)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(specials)
    tok.save(str(path))
    return path


def test_a_tokenizer_without_a_document_separator_is_a_choice_not_a_silent_merge(tmp_path: Path) -> None:
    # Llama 3 Instruct's end tokens: <|eot_id|> (end of turn), none of the end-of-document candidates
    tokenizer = _tokenizer(tmp_path / "tokenizer.json", ["<|begin_of_text|>", "<|eot_id|>"])
    data = tmp_path / "d.jsonl"
    data.write_bytes(_jsonl(["hello world", "world hello"]))
    with pytest.raises(DataError, match=r"no document separator .* its special tokens: <\|begin_of_text\|>, <\|eot"):
        prepare_data(tmp_path / "out", [data], tokenizer)
    _nothing_written(tmp_path, tmp_path / "out")
    prepare_data(tmp_path / "out", [data], tokenizer, separator="<|eot_id|>")
    assert np.asarray(TokenDataset(tmp_path / "out").tokens[0]).tolist() == [1, 2, 4, 2, 1, 4]
    prepare_data(tmp_path / "out", [data], tokenizer, no_separator=True)
    dataset = TokenDataset(tmp_path / "out")
    assert np.asarray(dataset.tokens[0]).tolist() == [1, 2, 2, 1] and dataset.eod_token_id is None
    with pytest.raises(DataError, match="exclude each other"):
        prepare_data(tmp_path / "out", [data], tokenizer, separator="<|eot_id|>", no_separator=True)
    with pytest.raises(DataError, match=r"--separator '</s>' needs --tokenizer"):
        prepare_data(tmp_path / "out", [data], separator="</s>")


def test_validation_split_is_by_document_seeded_and_kept_out_of_training(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    docs = [f"doc {i} " + "x" * (i % 7) for i in range(400)]
    pq.write_table(pa.table({"text": docs}), tmp_path / "d.parquet", row_group_size=50)
    result = prepare_data(tmp_path / "out", [tmp_path / "d.parquet"], validation_fraction=0.1, seed=7)
    held = _documents(tmp_path / "out" / "validation")
    train = _documents(tmp_path / "out" / "train")
    mask = validation_mask(0, len(docs), 0.1, 7)
    assert held == [d for d, m in zip(docs, mask, strict=True) if m]  # whole documents, in order
    assert train == [d for d, m in zip(docs, mask, strict=True) if not m]
    assert 20 <= len(held) <= 60 and result.validation is not None and result.validation.num_documents == len(held)
    assert result.train.directory == tmp_path / "out" / "train" and result.num_documents == len(train)
    manifest = json.loads((tmp_path / "out" / "validation" / "manifest.json").read_text())
    assert manifest["split"] == "validation" and manifest["validation"] == {"fraction": 0.1, "seed": 7}
    assert manifest["num_documents"] == len(held)
    with pytest.raises(DataError, match=r"holds the held-out validation split .*validation; give its train split"):
        TokenDataset(tmp_path / "out")
    before = {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()}
    prepare_data(tmp_path / "out", [tmp_path / "d.parquet"], validation_fraction=0.1, seed=7)  # the same again
    assert {p: p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()} == before
    prepare_data(tmp_path / "out", [tmp_path / "d.parquet"], validation_fraction=0.1, seed=8)
    assert _documents(tmp_path / "out" / "validation") != held  # another seed, another split
    prepare_data(tmp_path / "out", [tmp_path / "d.parquet"])  # no split now: the old split's shards are gone
    assert _documents(tmp_path / "out") == docs
    assert not list((tmp_path / "out" / "train").glob("shard-*")) and not list(
        (tmp_path / "out").glob("*/manifest.json")
    )
    with pytest.raises(DataError, match=r"--validation-fraction 0.0001 leaves the validation split empty"):
        prepare_data(tmp_path / "o2", [tmp_path / "d.parquet"], validation_fraction=0.0001)
    with pytest.raises(DataError, match=r"--validation-fraction: got 1.0, expected a number in \(0, 1\)"):
        prepare_data(tmp_path / "o2", [tmp_path / "d.parquet"], validation_fraction=1.0)
    _nothing_written(tmp_path, tmp_path / "o2")


def test_a_validation_count_holds_out_exactly_that_many_documents(tmp_path: Path) -> None:
    import datasets

    datasets.disable_progress_bars()
    docs = [f"doc {i}" for i in range(300)]
    with gzip.open(tmp_path / "a.jsonl.gz", "wb") as fh:  # counted by a pass over its lines
        fh.write(_jsonl(docs[:100]) + b"\n\n")
    datasets.Dataset.from_dict({"text": docs[100:]}).save_to_disk(str(tmp_path / "saved"))  # from its batches
    inputs = [tmp_path / "a.jsonl.gz", tmp_path / "saved"]
    result = prepare_data(tmp_path / "out", inputs, validation_documents=37, seed=3)
    held = _documents(tmp_path / "out" / "validation")
    train = _documents(tmp_path / "out" / "train")
    chosen = set(np.random.default_rng(3).choice(300, 37, replace=False).tolist())
    assert held == [d for i, d in enumerate(docs) if i in chosen] and len(held) == 37
    assert train == [d for i, d in enumerate(docs) if i not in chosen]
    assert result.validation is not None and result.validation.num_documents == 37
    manifest = json.loads((tmp_path / "out" / "train" / "manifest.json").read_text())
    assert manifest["validation"] == {"documents": 37, "seed": 3} and manifest["num_documents"] == 263
    with pytest.raises(DataError, match=r"--validation-documents: got 300, expected fewer than the inputs' 300 doc"):
        prepare_data(tmp_path / "o2", inputs, validation_documents=300)
    with pytest.raises(DataError, match="exclude each other"):
        prepare_data(tmp_path / "o2", inputs, validation_documents=3, validation_fraction=0.1)
    _nothing_written(tmp_path, tmp_path / "o2")


def test_the_command_reads_parquet_with_a_text_field_and_holds_out_validation(tmp_path: Path, capsys) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trainctl.cli import main

    pq.write_table(pa.table({"body": DOCS}), tmp_path / "d.parquet")
    argv = ["prepare-data", "--output", str(tmp_path / "out"), "--text-field", "body", str(tmp_path / "d.parquet")]
    assert main([*argv, "--validation-fraction", "0.25"]) == 0
    out = capsys.readouterr().out
    assert f"to {tmp_path / 'out' / 'train'}:" in out and "(seed 0)" in out
    assert main(["prepare-data", "--output", str(tmp_path / "o2"), str(tmp_path / "d.parquet")]) == 1
    assert "no column 'text' (its columns: body)" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="2"):  # argparse: one or the other
        main([*argv, "--separator", "x", "--no-separator"])
    assert "--no-separator: not allowed with argument --separator" in capsys.readouterr().err


def test_two_preparations_of_one_output_at_once_leave_one_complete_dataset(tmp_path: Path, monkeypatch) -> None:
    import threading
    import time

    import training.prepare

    real_replace = os.replace

    def slow_replace(src: object, dst: object) -> None:  # widen the window in which the two could interleave
        time.sleep(0.005)
        real_replace(src, dst)  # type: ignore[arg-type]

    real_lock = training.prepare._locked
    both_staged = threading.Barrier(2, timeout=60)

    @contextlib.contextmanager
    def lock_together(folder: Path) -> Iterator[None]:  # both runs reach the replacement at once
        both_staged.wait()
        with real_lock(folder):
            yield

    monkeypatch.setattr(training.prepare.os, "replace", slow_replace)
    monkeypatch.setattr(training.prepare, "_locked", lock_together)
    (tmp_path / "a.jsonl").write_bytes(_jsonl(DOCS))
    (tmp_path / "b.jsonl").write_bytes(_jsonl([d.upper() for d in DOCS[:30]]))
    errors: list[BaseException] = []

    def run(name: str) -> None:
        try:
            prepare_data(tmp_path / "out", [tmp_path / name], shard_tokens=100)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in ("a.jsonl", "b.jsonl")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert _documents(tmp_path / "out") in (DOCS, [d.upper() for d in DOCS[:30]])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert sorted(s["file"] for s in manifest["shards"]) == sorted(p.name for p in (tmp_path / "out").glob("*.bin"))


def _cut(data: bytes, keep: float) -> bytes:
    return data[: int(len(data) * keep)]


@pytest.mark.parametrize("suffix", [".gz", ".zst"])
@pytest.mark.parametrize("keep", [0.05, 0.5, 0.97])  # cut inside the sniffed head, mid-stream, before the trailer
def test_a_compressed_file_cut_short_is_refused_as_incomplete(tmp_path: Path, suffix: str, keep: float) -> None:
    """An interrupted download: the stream ends before its end marker (gzip's trailer, Zstandard's last block);
    read whole lines up to the cut, it would otherwise pass for a smaller corpus."""
    import zstandard

    many = [f"{d} {i}" * 20 for i, d in enumerate(DOCS * 20)]
    data = gzip.compress(_jsonl(many)) if suffix == ".gz" else zstandard.ZstdCompressor().compress(_jsonl(many))
    (tmp_path / f"c.jsonl{suffix}").write_bytes(_cut(data, keep))
    (tmp_path / f"d.txt{suffix}").write_bytes(_cut(data, keep))  # read as one plain-text document
    for name, split in ((f"c.jsonl{suffix}", {"validation_documents": 1}), (f"d.txt{suffix}", {})):
        with pytest.raises(DataError, match=rf"{name}: .*cut short.*download"):  # the JSONL's count reads it too
            prepare_data(tmp_path / "new" / "out", [tmp_path / name], **split)
        _nothing_written(tmp_path, tmp_path / "new")


def test_a_jsonl_file_with_a_byte_order_mark_and_crlf_lines(tmp_path: Path) -> None:
    """Windows tools (PowerShell's Out-File, Notepad) write a UTF-8 BOM and CRLF line ends; both are read, and
    the BOM is not part of the first document."""
    (tmp_path / "win.jsonl").write_bytes(b"\xef\xbb\xbf" + _jsonl(DOCS[:5]).replace(b"\n", b"\r\n"))
    prepare_data(tmp_path / "out", [tmp_path / "win.jsonl"])
    assert _documents(tmp_path / "out") == DOCS[:5]


def test_links_in_an_input_folder_are_followed_and_loops_dangling_links_and_twice_read_files_refused(
    tmp_path: Path,
) -> None:
    """A linked folder (a Hugging Face cache snapshot, a data volume linked in) was skipped without a word and
    its documents left out; now it is read in its sorted place. What cannot be read once and whole is refused
    naming the path, and nothing is written."""
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "b.jsonl").write_bytes(_jsonl(DOCS[10:20]))
    (tmp_path / "blob").write_bytes(_jsonl(DOCS[20:]))
    data = tmp_path / "data"
    data.mkdir()
    (data / "a.jsonl").write_bytes(_jsonl(DOCS[:10]))
    (data / "b-linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (data / "c.jsonl").symlink_to(tmp_path / "blob")
    prepare_data(tmp_path / "out", [data])
    assert _documents(tmp_path / "out") == DOCS

    cases = {
        "loop": (
            lambda: (data / "b-linked" / "up").symlink_to(data),
            r"data/b-linked/up is a link to .*data, a folder",
        ),
        "dangling": (lambda: (data / "d.jsonl").symlink_to(tmp_path / "gone"), r"data/d.jsonl is a link to .*gone, "),
        "twice": (lambda: (data / "e.jsonl").symlink_to(tmp_path / "blob"), r"data/e.jsonl and .*data/c.jsonl are one"),
        "fifo": (lambda: os.mkfifo(data / "f.jsonl"), r"data/f.jsonl is neither a regular file nor a folder"),
    }
    for name, (make, expected) in cases.items():
        make()
        with pytest.raises(DataError, match=expected):
            prepare_data(tmp_path / "new" / name, [data])
        _nothing_written(tmp_path, tmp_path / "new")
        for entry in [*data.iterdir(), *(tmp_path / "elsewhere").iterdir()]:
            if entry.name in ("up", "d.jsonl", "e.jsonl", "f.jsonl"):
                entry.unlink()
    with pytest.raises(DataError, match=r"input .*blob and .*data/c.jsonl are one file"):
        prepare_data(tmp_path / "new" / "given-twice", [data, tmp_path / "blob"])


def test_a_preparation_stopped_while_it_replaces_the_output_leaves_the_earlier_dataset_whole(
    tmp_path: Path, monkeypatch
) -> None:
    """Ctrl-C (or a SIGTERM's SystemExit) among the moves once left the earlier shards deleted and some new ones
    in place: a smaller dataset the trainer would read without a word, its manifest (moved first) listing
    shards that were not there."""
    import training.prepare

    def snapshot() -> dict[str, bytes]:
        return {str(p.relative_to(tmp_path)): p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}

    (tmp_path / "a.jsonl").write_bytes(_jsonl(DOCS))
    prepare_data(tmp_path / "out", [tmp_path / "a.jsonl"], shard_tokens=100)
    (tmp_path / "b.jsonl").write_bytes(_jsonl([d.upper() for d in DOCS]))
    before = snapshot()
    real_replace, staged_moves = os.replace, []

    def interrupted(src: object, dst: object) -> None:
        if ".prepare-data-" in str(src):
            staged_moves.append(src)
            if len(staged_moves) == 3:
                raise KeyboardInterrupt
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(training.prepare.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_data(tmp_path / "out", [tmp_path / "b.jsonl"], shard_tokens=100)
    assert snapshot() == before and _documents(tmp_path / "out") == DOCS
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging or set-aside folder
    monkeypatch.setattr(training.prepare.os, "replace", real_replace)
    prepare_data(tmp_path / "out", [tmp_path / "b.jsonl"], shard_tokens=100)
    assert _documents(tmp_path / "out") == [d.upper() for d in DOCS]
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert sorted(s["file"] for s in manifest["shards"]) == sorted(p.name for p in (tmp_path / "out").glob("*.bin"))


@pytest.mark.parametrize("split", [{}, {"validation_documents": 1}])
def test_a_preparation_killed_while_it_replaces_the_output_leaves_a_folder_the_trainer_refuses(
    tmp_path: Path, monkeypatch, split: dict[str, int]
) -> None:
    """SIGKILL among the moves (no except or finally runs) left some shards of each preparation and no manifest,
    which the trainer read without a word as a smaller dataset. The folder as the kill leaves it is copied at
    the third move of a new shard; the trainer refuses it, naming it, and a new preparation repairs it."""
    import shutil

    import training.prepare

    out, killed = tmp_path / "out", tmp_path / "killed"
    (tmp_path / "a.jsonl").write_bytes(_jsonl(DOCS))
    (tmp_path / "b.jsonl").write_bytes(_jsonl([d.upper() for d in DOCS]))
    prepare_data(out, [tmp_path / "a.jsonl"], shard_tokens=100, **split)
    real_replace, staged_moves = os.replace, []

    def killed_here(src: object, dst: object) -> None:
        if ".prepare-data-" in str(src):
            staged_moves.append(src)
            if len(staged_moves) == 3:
                shutil.copytree(out, killed)  # what SIGKILL would leave
                raise KeyboardInterrupt
        real_replace(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(training.prepare.os, "replace", killed_here)
    with pytest.raises(KeyboardInterrupt):
        prepare_data(out, [tmp_path / "b.jsonl"], shard_tokens=100, **split)
    monkeypatch.setattr(training.prepare.os, "replace", real_replace)
    channel = killed / "train" if split else killed
    with pytest.raises(DataError, match=rf"{channel} is half replaced: a `trainctl prepare-data` into it was"):
        TokenDataset(channel)
    prepare_data(killed, [tmp_path / "b.jsonl"], shard_tokens=100, **split)
    assert len(_documents(channel)) == len(DOCS) - (1 if split else 0)
    assert not list(killed.rglob(".prepare-data-*")) and not list(out.rglob(".prepare-data-*"))


def test_a_killed_preparations_staging_folder_is_removed_by_the_next_and_a_live_ones_kept(tmp_path: Path) -> None:
    """Regression: a preparation killed while it tokenized (SIGKILL) left its staging folder, up to a whole
    dataset, beside the output for good. A live preparation holds a lock on its own, which is left alone."""
    import fcntl

    (tmp_path / "a.jsonl").write_bytes(_jsonl(DOCS))
    dead, live, other = (
        tmp_path / f".{n}" for n in ("out.prepare-data-dead", "out.prepare-data-live", "x.prepare-data-1")
    )
    for folder in (dead, live, other):
        folder.mkdir()
        (folder / "shard-00000.bin").write_bytes(b"\0" * 64)
    fd = os.open(live, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        prepare_data(tmp_path / "out", [tmp_path / "a.jsonl"])
    finally:
        os.close(fd)
    assert not dead.exists() and live.is_dir() and other.is_dir()  # another output's staging is not ours
    assert _documents(tmp_path / "out") == DOCS


def test_a_bad_argument_is_refused_naming_its_flag_and_the_expected_value(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_bytes(_jsonl(DOCS))
    with pytest.raises(DataError, match=r"^--shard-tokens: got 1, expected an integer >= 2"):
        prepare_data(tmp_path / "out", [tmp_path / "a.jsonl"], shard_tokens=1)
    with pytest.raises(DataError, match=r"^--seed: got -1, expected an integer in \[0, 2\*\*32\)"):
        prepare_data(tmp_path / "out", [tmp_path / "a.jsonl"], seed=-1)
    _nothing_written(tmp_path, tmp_path / "out")
