"""Where a command writes, checked before it does any work: one rule for every ``trainctl`` output argument.

A command that writes into a folder (``trainctl train --base-dir``, ``prepare-data --output``, ``report --out``,
``sweep --dir``) or a file (``dashboard --out``) asks :func:`folder_problem` / :func:`file_problem` first and,
on a problem, refuses in one line naming the argument (:func:`output_error`, a
:class:`platform_spec.errors.FieldError`) before it writes anything or starts a long step (a synth, a training
run): a file where a folder is expected, a folder where a file is expected, a file among the parents. The
check creates nothing, so a refused command leaves no empty folder behind. What only the write itself can tell
(no permission, a full disk) is an ``OSError`` then, which the commands also report in one line
(:func:`os_error_text`).
"""

from __future__ import annotations

import os
from pathlib import Path

from platform_spec.errors import FieldError

__all__ = ["file_problem", "folder_problem", "os_error_text", "output_error"]


def folder_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be a folder to write into (created with its parents where missing), or None.

    Returns:
        ``"<path> is a file"`` for ``path`` or the nearest of its parents that exists, when that is not a folder;
        None when ``path`` is a folder or the nearest existing parent is.
    """
    target = Path(path)
    for candidate in (target, *target.parents):
        if candidate.exists():
            return None if candidate.is_dir() else f"{candidate} is a file"
    return None


def file_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` cannot be a file to write (its folder created where missing), or None:
    ``"<path> is a folder"``, or :func:`folder_problem` of its folder."""
    target = Path(path)
    if target.is_dir():
        return f"{target} is a folder"
    return folder_problem(target.parent)


def output_error(argument: str, path: str | os.PathLike[str], problem: str, *, folder: bool = True) -> FieldError:
    """The refusal of an output ``argument`` (e.g. ``"--out"``): ``"<argument>: got '<path>'; expected a folder
    path (<problem>)"`` (``a file path`` with ``folder=False``)."""
    expected = "a folder path (created if missing)" if folder else "a file path (its folder created if missing)"
    return FieldError(argument, str(path), expected, detail=problem)


def os_error_text(exc: OSError) -> str:
    """An ``OSError`` in one line: ``"<strerror>: <filename>"`` (``str(exc)`` when it has no file name)."""
    if exc.filename is None or not exc.strerror:
        return str(exc)
    return f"{exc.strerror}: {exc.filename}"
