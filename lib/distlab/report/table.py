"""Text tables: one :class:`Column` type and :func:`format_table`, the one table printer of
distlab (benchmarks, the profile, the model's judgement and the notebooks all print through it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Column", "Table", "format_table"]


@dataclass(frozen=True)
class Column:
    """One table column: ``header``, the row key it shows, a format spec (``".2f"``; "" for
    ``str``), a factor applied to numbers first (``1e3``: seconds shown as ms) and the width
    (0: as wide as the header or widest cell), and how header and cells align in it
    (``">"``: right, the default; ``"<"``: left, for names and labels). Missing, None and
    non-finite values print ``missing`` (default ``-``; a notes column uses "")."""

    header: str
    key: str
    spec: str = ""
    scale: float = 1.0
    width: int = 0
    missing: str = "-"
    align: str = ">"

    def cell(self, row: dict[str, Any]) -> str:
        """This column's text for ``row``."""
        value = row.get(self.key)
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return self.missing
        if isinstance(value, (int, float)) and not isinstance(value, bool) and self.spec:
            return format(value * self.scale, self.spec)
        return str(value)


def format_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> str:
    """Aligned columns (each as its :attr:`Column.align` says, right by default) with a header
    line, one space between columns: the one table printer of distlab. A left-aligned last
    column is not padded, so no line ends in spaces."""
    cells = [[c.cell(r) for c in columns] for r in rows]
    widths = [max([c.width, len(c.header)] + [len(row[i]) for row in cells])
              for i, c in enumerate(columns)]
    strip = bool(columns) and columns[-1].align == "<"

    def line(texts: Sequence[str]) -> str:
        text = " ".join(format(t, f"{c.align}{w}")
                        for t, c, w in zip(texts, columns, widths, strict=True))
        return text.rstrip() if strip else text

    return "\n".join([line([c.header for c in columns]), *(line(row) for row in cells)])


@dataclass
class Table:
    """Rows under one set of columns, with an optional ``# title`` line above them; ``key``
    names the table's rows in the JSON (the main table's are always ``rows``)."""

    rows: list[dict[str, Any]]
    columns: tuple[Column, ...]
    title: str = ""
    key: str = ""

    def text(self) -> str:
        """The title comment (if any) and the formatted table."""
        body = format_table(self.rows, self.columns)
        return f"# {self.title}\n{body}" if self.title else body
