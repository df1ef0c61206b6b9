"""A pickle that acts when it is loaded, for the tests that every checkpoint reader refuses one."""

from __future__ import annotations

from pathlib import Path


class Touch:
    """Unpickling it creates ``path``: what a pickle planted in a checkpoint could do with any callable. A test
    asserts the file does not exist after the load it expects to refuse the pickle."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.path,))
