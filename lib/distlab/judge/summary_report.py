"""Repeated allreduce runs summed up, as text (a report module).

:data:`SUMMARY_COLUMNS`: every world size's rows of :func:`~distlab.judge.summary.summarize_files`
in one table (what ``python -m distlab.judge summary`` prints); :func:`shown_table`: one world
size's rows of :func:`~distlab.judge.summary.shown_rows` (what notebook 04 shows). Printed by
:func:`distlab.report.table.format_table`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distlab.report.table import Column, format_table

__all__ = ["SHOWN_COLUMNS", "SUMMARY_COLUMNS", "shown_table"]


SUMMARY_COLUMNS = (Column("ws", "world_size"), Column("size(B)", "nbytes", width=11),
                   Column("algorithm", "algorithm", width=19),
                   Column("time(us)", "time_us", ".1f", width=11),
                   Column("busbw(GB/s)", "busbw_gbps", ".3f"),
                   Column("vs builtin(x)", "ratio_vs_builtin_paired_median", ".3f"),
                   Column("error%", "error_pct", "+.1f", width=8), Column("#wrong", "wrong"))


SHOWN_COLUMNS = (Column("size(B)", "nbytes", width=9), Column("algorithm", "algorithm"),
                 Column("time(us)", "time_us", ".1f", width=9),
                 Column("predicted(us)", "predicted_us", ".1f"),
                 Column("error%", "error_pct", "+.1f", width=7), Column("#wrong", "wrong"),
                 Column("busbw(GB/s)", "busbw_gbps", ".3f"),
                 Column("vs builtin(x)", "ratio_vs_builtin_paired_median", ".2f"))
"""The columns of :func:`shown_table`: the two medians and the error computed from them side by
side, then busbw and its ratio to the builtin's (the median over runs of the ratio within each
run)."""


def shown_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows of :func:`~distlab.judge.summary.shown_rows` under :data:`SHOWN_COLUMNS`, after a
    ``# dtype op`` line (the rows' element types and reductions, comma-joined when they differ):
    at most 90 characters wide, so a notebook shows each row on one line."""
    kinds = ", ".join(dict.fromkeys(f"{r.get('dtype', '?')} {r.get('op', '?')}" for r in rows))
    return f"# {kinds}\n" + format_table(list(rows), SHOWN_COLUMNS)
