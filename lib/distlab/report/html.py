"""A table a notebook shows as HTML: a scrolling box with a header that stays in view.

A text table wider or longer than a notebook's output area wraps line by line until a reader has
to reassemble it by eye. :class:`HtmlTable` holds the same rows and :class:`~distlab.report.table.
Column` list as :func:`~distlab.report.table.format_table`; JupyterLab renders its
``_repr_html_`` (a box at most ``max_height_px`` tall that scrolls both ways, numbers right
aligned, the header sticky), and anything that reads ``text/plain`` gets the text table.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from distlab.report.table import Column, format_table

__all__ = ["HtmlTable"]

_STYLE = ("border-collapse:collapse;font-family:var(--jp-code-font-family,monospace);"
          "font-size:12px;white-space:nowrap")
_CELL = "padding:1px 8px;text-align:right;border-bottom:1px solid #ddd"
_HEAD = ("padding:2px 8px;text-align:right;position:sticky;top:0;"
         "background:var(--jp-layout-color0,#fff);border-bottom:2px solid #888")


@dataclass
class HtmlTable:
    """``rows`` under ``columns``, with an optional ``title`` above (one line, bold)."""

    rows: Sequence[dict[str, Any]]
    columns: Sequence[Column]
    title: str = ""
    max_height_px: int = 360
    _cells: list[list[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_height_px < 40:
            raise ValueError(f"max_height_px must be >= 40, got {self.max_height_px}")
        self._cells = [[c.cell(r) for c in self.columns] for r in self.rows]

    def text(self) -> str:
        """The same table as :func:`~distlab.report.table.format_table` prints it."""
        body = format_table(list(self.rows), list(self.columns))
        return f"# {self.title}\n{body}" if self.title else body

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        head = "".join(f'<th style="{_HEAD}">{html.escape(c.header)}</th>' for c in self.columns)
        body = "".join("<tr>" + "".join(f'<td style="{_CELL}">{html.escape(v)}</td>' for v in row)
                       + "</tr>" for row in self._cells)
        title = f"<div><b>{html.escape(self.title)}</b></div>" if self.title else ""
        return (f'{title}<div class="distlab-table" style="max-height:{self.max_height_px}px;'
                f'overflow:auto;max-width:100%">'
                f'<table style="{_STYLE}"><thead><tr>{head}</tr></thead>'
                f"<tbody>{body}</tbody></table></div>")
