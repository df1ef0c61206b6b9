"""Progress of a sweep on stderr: a rich progress display that stays off when stderr is no terminal."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.progress import Progress


def make_progress(enabled: bool | None = None) -> Progress:
    """A rich progress display on stderr (disabled when ``enabled`` is False, or None and stderr is no terminal)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    disable = (not console.is_terminal) if enabled is None else not enabled
    return Progress(
        SpinnerColumn(),
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=disable,
        transient=False,
    )


__all__ = ["make_progress"]
