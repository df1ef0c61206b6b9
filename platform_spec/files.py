"""Replacing a file whole: the one atomic, durable write of the platform.

Every record that another process (or a later run) reads while it may be rewritten goes through
:func:`atomic_write_bytes` / :func:`atomic_write_text`: the trainer's checkpoint state and
``.complete`` marker (``training.checkpoint``), its status record (``training.supervision``), a
sweep's ``sweep.json`` (``trainctl.sweeps.state``), the emulator's environment file
(``devtools.local_aws``), the GPU check's results (``benchmarks/gpu_check.py``) and the README's
generated request table.

How: the bytes go to a new temporary file in the target's folder (a name of its own per write:
``.<name>.<pid>.<random>.tmp``, so two writers never share one), which is flushed and ``fsync``-ed,
renamed over the target with :func:`os.replace` (atomic within one file system, POSIX
``rename(2)``), and then the folder itself is ``fsync``-ed so that the rename outlives a power
loss ("Calling fsync() does not necessarily ensure that the entry in the directory containing the
file has also reached disk. For that an explicit fsync() on a file descriptor for the directory is
also needed", fsync(2), Linux man-pages).

Guarantees: a reader sees the old content or the new, never a mix or a prefix; an exception or
signal during the write (``KeyboardInterrupt``, a ``SystemExit`` raised by a SIGTERM handler)
leaves the target as it was and removes the temporary file; a process killed outright (SIGKILL,
power loss) leaves the target as it was, old or new, and at worst a ``.<name>.*.tmp`` file beside
it, never a partial file under the target's name. Concurrent writers of one path: the last rename
wins, whole.

Pure Python, standard library only.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path

__all__ = ["atomic_write_bytes", "atomic_write_text", "temporary_name"]

_DIRECTORY_FSYNC_UNSUPPORTED = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EBADF})
"""``fsync`` on a folder fails with these on file systems that do not support it (some network
and FUSE mounts); the rename has still happened, so they are not errors of the write."""


def temporary_name(path: Path) -> Path:
    """A new temporary file name beside ``path``: ``.<name>.<pid>.<16 hex digits>.tmp`` (hidden, never
    ``path``'s own name, distinct per process and per call)."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace ``path`` with ``data``, atomically and durably (see the module docstring).

    The new file keeps the permission bits of the file it replaces; a new file gets ``0o666`` less
    the process's umask, as :func:`open` gives. The parent folder must exist.

    Args:
        path: the file to write (created or replaced whole).
        data: its new content.

    Raises:
        OSError: the folder is missing or not writable, the disk is full, ...; ``path`` is then as
            it was and no temporary file is left.
        IsADirectoryError: ``path`` is a folder (nothing is written).
    """
    target = Path(path)
    try:
        mode: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        mode = None
    temporary = temporary_name(target)
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    _fsync_directory(target.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str, *, encoding: str = "utf-8") -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded with ``encoding`` (UTF-8 by default; newlines are
    written as given, never translated).

    Raises:
        UnicodeEncodeError: ``text`` cannot be encoded (nothing is written).
        OSError: as :func:`atomic_write_bytes`.
    """
    atomic_write_bytes(path, text.encode(encoding))


def _fsync_directory(directory: Path) -> None:
    """``fsync`` the folder, so that a rename in it is on disk (tolerating file systems without it)."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError as exc:
        if exc.errno in _DIRECTORY_FSYNC_UNSUPPORTED or exc.errno == errno.EACCES:
            return
        raise
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _DIRECTORY_FSYNC_UNSUPPORTED:
            raise
    finally:
        os.close(fd)
