"""Panels and tables described once and drawn by rich.

A command describes what it shows as :class:`Panel` and :class:`Table` blocks (the layout's one home;
``trainctl plan``'s are :func:`trainctl.plans.plan_blocks`); :func:`print_blocks` draws them with
``rich.console.Console`` (:meth:`Panel.rich`, :meth:`Table.rich`), which decides colour and width. rich is
imported only when a block is drawn, so ``trainctl --help`` and ``trainctl plan --json`` start without it.
Drawing is rich's alone: a second renderer of its layout (tried for start-up time, issue 17) would be our own
copy of a well-kept library's algorithm, which the platform does not keep.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

    import rich.console
    import rich.panel
    import rich.table

__all__ = ["Column", "Panel", "Table", "print_blocks"]


class Column:
    """A table column: its header (markup), how its cells are justified (``"left"`` or ``"right"``), and whether
    they are never wrapped or cut (``no_wrap``: a name people copy, such as a training job's; the other columns
    give way first)."""

    __slots__ = ("header", "justify", "no_wrap")

    def __init__(self, header: str, *, justify: str = "left", no_wrap: bool = False) -> None:
        if justify not in ("left", "right"):
            raise ValueError(f"justify: got {justify!r}; expected left or right")
        self.header = header
        self.justify = justify
        self.no_wrap = no_wrap


class Table:
    """A table as ``rich.table.Table`` draws it with these arguments (header shown, ``HEAVY_HEAD`` box).

    Args:
        title: above the table, centred (markup).
        columns: left to right.
        caption: below the table, centred (markup), or ``None``.
        show_lines: a line between every two rows.
        header_style: the header row's style (terminals only).

    Rows are added with :meth:`add_row`, cells as markup.
    """

    __slots__ = ("caption", "columns", "header_style", "rows", "show_lines", "title")

    def __init__(
        self,
        title: str,
        columns: Sequence[Column],
        *,
        caption: str | None = None,
        show_lines: bool = False,
        header_style: str = "bold",
    ) -> None:
        self.title = title
        self.columns = tuple(columns)
        self.caption = caption
        self.show_lines = show_lines
        self.header_style = header_style
        self.rows: list[tuple[tuple[str, ...], bool]] = []

    def add_row(self, *cells: str, end_section: bool = False) -> None:
        """A row of one cell per column; ``end_section``: a line after it.

        Raises:
            ValueError: not one cell per column.
        """
        if len(cells) != len(self.columns):
            raise ValueError(f"cells: got {len(cells)}; expected {len(self.columns)} (one per column)")
        self.rows.append((cells, end_section))

    def rich(self) -> rich.table.Table:
        """This table as a ``rich.table.Table`` (imports rich)."""
        from rich.table import Table as RichTable

        table = RichTable(
            title=self.title, show_header=True, header_style=self.header_style, show_lines=self.show_lines
        )
        for index, column in enumerate(self.columns):
            widest = max([len(column.header)] + [len(cells[index].replace("\\[", "[")) for cells, _ in self.rows])
            table.add_column(
                column.header,
                justify=column.justify,  # type: ignore[arg-type]
                no_wrap=column.no_wrap,
                min_width=widest if column.no_wrap else None,
            )
        for cells, end_section in self.rows:
            table.add_row(*cells, end_section=end_section)
        table.caption = self.caption
        return table


class Panel:
    """Text in a box with a title, as ``rich.panel.Panel(text, title=title, expand=False)`` draws it: as wide as
    the text (or the title) allows, the text wrapped to the console, the title centred in the top edge."""

    __slots__ = ("text", "title")

    def __init__(self, text: str, *, title: str) -> None:
        self.text = text
        self.title = title

    def rich(self) -> rich.panel.Panel:
        """This panel as a ``rich.panel.Panel`` (imports rich)."""
        from rich.panel import Panel as RichPanel

        return RichPanel(self.text, title=self.title, expand=False)


def print_blocks(blocks: Sequence[Panel | Table], console: rich.console.Console | None = None) -> None:
    """Print ``blocks`` with ``console`` (default: a ``rich.console.Console`` on standard output, imported here,
    when there is a table to draw: ``--help`` and ``--json`` never import rich)."""
    if console is None:
        from rich.console import Console

        console = Console()
    for block in blocks:
        console.print(block.rich())
