"""HtmlTable: the same cells as the text table, escaped, in a scrolling box with a sticky header."""

from __future__ import annotations

import re

import pytest

from distlab.report.html import HtmlTable
from distlab.report.table import Column, format_table

COLUMNS = (Column("name", "name"), Column("time(us)", "t", ".1f", scale=1e6))
ROWS = [{"name": "ring", "t": 12.5e-6}, {"name": "<tree>", "t": None}]


def test_text_is_the_text_table() -> None:
    table = HtmlTable(ROWS, COLUMNS, title="t")
    assert table.text() == "# t\n" + format_table(ROWS, COLUMNS)
    assert repr(table) == table.text()


def test_html_has_every_cell_escaped_and_scrolls() -> None:
    page = HtmlTable(ROWS, COLUMNS, max_height_px=200)._repr_html_()
    cells = re.findall(r"<td[^>]*>(.*?)</td>", page)
    assert cells == ["ring", "12.5", "&lt;tree&gt;", "-"]
    assert re.findall(r"<th style=[^>]*>(.*?)</th>", page) == ["name", "time(us)"]
    assert "max-height:200px" in page and "overflow:auto" in page and "position:sticky" in page


def test_too_small_a_box_is_refused() -> None:
    with pytest.raises(ValueError, match="max_height_px"):
        HtmlTable(ROWS, COLUMNS, max_height_px=10)
