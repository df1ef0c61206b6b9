"""The table and panel descriptions ``trainctl plan`` shows (:mod:`trainctl.tables`), drawn by rich."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from trainctl.tables import Column, Panel, Table


def _draw(*blocks: Panel | Table, width: int = 80) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None)
    for block in blocks:
        console.print(block.rich())
    return out.getvalue()


def test_a_table_is_drawn_by_rich_with_its_title_columns_rows_and_caption() -> None:
    table = Table("Memory per GPU (GB)", [Column("term"), Column("GB", justify="right")], caption="peak at backward")
    table.add_row("parameters", "4.02")
    table.add_row("[bold]total[/bold]", "22.46", end_section=True)
    text = _draw(table)
    assert "Memory per GPU (GB)" in text and "peak at backward" in text
    assert "parameters" in text and "total" in text and "[bold]" not in text  # markup is rich's to read
    rows = [line for line in text.splitlines() if "parameters" in line]
    assert rows[0].rstrip().endswith("4.02 │")  # right-justified column


def test_a_panel_is_drawn_by_rich_as_wide_as_its_text() -> None:
    text = _draw(Panel("fits: 22.5 of 81.6 GB", title="Verdict"), width=120)
    top = text.splitlines()[0]
    assert "Verdict" in top and len(top) < 60


def test_a_row_needs_one_cell_per_column_and_justify_is_left_or_right() -> None:
    table = Table("t", [Column("a"), Column("b")])
    with pytest.raises(ValueError, match="cells: got 1; expected 2"):
        table.add_row("only one")
    with pytest.raises(ValueError, match="justify: got 'center'"):
        Column("c", justify="center")
