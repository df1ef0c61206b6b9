"""platform_spec.files: the one atomic write (replaces the copies in the checkpoint, the status record,
the sweep state, the emulator's env file, the GPU check and the README generator)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from platform_spec import files
from platform_spec.files import atomic_write_bytes, atomic_write_text


def _leftovers(folder: Path, name: str) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != name)


def test_writes_and_replaces_whole_leaving_nothing_beside(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    atomic_write_text(target, "first\n")
    assert target.read_text() == "first\n"
    atomic_write_text(target, "zweite \u00fcber\r\n")  # newlines as given, UTF-8
    assert target.read_bytes() == "zweite \u00fcber\r\n".encode()
    atomic_write_bytes(target, b"")
    assert target.read_bytes() == b""
    assert _leftovers(tmp_path, "state.json") == []


def test_keeps_the_replaced_files_mode_and_gives_a_new_file_the_umask(tmp_path: Path) -> None:
    kept = tmp_path / "README.md"
    kept.write_text("old")
    os.chmod(kept, 0o640)
    atomic_write_text(kept, "new")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o640 and kept.read_text() == "new"
    previous = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "fresh", "x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "fresh").stat().st_mode) == 0o640  # 0o666 & ~0o027, as open() gives


def test_a_failure_mid_write_leaves_the_old_content_and_no_temporary(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "trainer_state.json"
    target.write_text("old")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old" and _leftovers(tmp_path, target.name) == []


def test_an_interrupt_mid_write_leaves_the_old_content(tmp_path: Path, monkeypatch) -> None:
    """A SIGTERM handler that raises (the GPU check's cut-off, KeyboardInterrupt) lands between the write
    and the rename: the target is untouched and the temporary removed."""
    target = tmp_path / "results.json"
    target.write_text("old")
    real_replace = os.replace

    def interrupted(src: str, dst: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, "new")
    monkeypatch.setattr(files.os, "replace", real_replace)
    assert target.read_text() == "old" and _leftovers(tmp_path, target.name) == []


def test_the_file_and_its_folder_are_fsynced(tmp_path: Path, monkeypatch) -> None:
    synced: list[bool] = []
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", recording)
    atomic_write_text(tmp_path / "sweep.json", "{}")
    assert synced == [False, True]  # the data, then the folder holding the rename


def test_a_folder_that_cannot_be_fsynced_is_not_an_error(tmp_path: Path, monkeypatch) -> None:
    real_fsync = os.fsync

    def no_directory_fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(22, "Invalid argument")  # what some network and FUSE file systems answer
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", no_directory_fsync)
    atomic_write_text(tmp_path / "x", "done")
    assert (tmp_path / "x").read_text() == "done"


def test_a_folder_or_a_missing_parent_is_refused_with_nothing_written(tmp_path: Path) -> None:
    (tmp_path / "dir").mkdir()
    with pytest.raises(OSError):
        atomic_write_text(tmp_path / "dir", "x")
    assert (tmp_path / "dir").is_dir() and _leftovers(tmp_path, "dir") == []
    with pytest.raises(FileNotFoundError):
        atomic_write_text(tmp_path / "missing" / "x", "x")


def test_concurrent_writers_and_a_reader_only_ever_see_whole_files(tmp_path: Path) -> None:
    target = tmp_path / "sweep.json"
    payloads = [bytes([65 + i]) * (256 * 1024) for i in range(4)]  # 256 KiB each: many write() calls
    atomic_write_bytes(target, payloads[0])
    errors: list[BaseException] = []

    def writer(payload: bytes) -> None:
        try:
            for _ in range(25):
                atomic_write_bytes(target, payload)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for t in threads:
        t.start()
    seen = set()
    while any(t.is_alive() for t in threads):
        seen.add(target.read_bytes())
    for t in threads:
        t.join()
    assert errors == []
    assert seen <= set(payloads) and target.read_bytes() in payloads
    assert _leftovers(tmp_path, target.name) == []  # each writer had a temporary file of its own


_KILLED_WRITER = """
import sys
from platform_spec.files import atomic_write_bytes
target, i = sys.argv[1], 0
print("ready", flush=True)
while True:
    i += 1
    atomic_write_bytes(target, bytes([65 + i % 26]) * (1 << 20))
"""


def test_a_writer_killed_outright_leaves_a_whole_file_under_the_name(tmp_path: Path) -> None:
    target = tmp_path / "trainer-status.json"
    atomic_write_bytes(target, b"Z" * (1 << 20))
    repo = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(target)],
        cwd=repo,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(repo)},
    )
    assert child.stdout is not None and child.stdout.readline() == b"ready\n"
    for _ in range(20):  # reads racing the writer's renames
        data = target.read_bytes()
        assert len(data) == 1 << 20 and data == data[:1] * len(data)
    child.send_signal(signal.SIGKILL)
    child.wait()
    data = target.read_bytes()
    assert len(data) == 1 << 20 and data == data[:1] * len(data)
    # at most the one temporary the kill interrupted, hidden, never under the target's name
    assert all(
        name.startswith(f".{target.name}.") and name.endswith(".tmp") for name in _leftovers(tmp_path, target.name)
    )
