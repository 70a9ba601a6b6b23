"""distlab against the built-in over the whole size curve: one table and one line per algorithm.

A benchmark row says how one algorithm did at one size; whether distlab keeps up with torch's
built-in is a question about the whole curve. :func:`versus_table` puts, for every size, each
algorithm's busbw over the built-in's at that size (measured in the same run) in one row, and
:func:`versus_lines` sums each algorithm's curve up (lowest and highest ratio and where, the
median). Pure: benchmark rows in (``nbytes``, ``algorithm``, ``busbw_gbps``), text and rows out;
the allreduce benchmark prints both, the profile summary prints the lines.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from distlab.collectives.algorithms.registry import BUILTIN
from distlab.report.table import Column, Table
from distlab.vocabulary import size_label

__all__ = ["executors_of", "ratios", "versus_lines", "versus_table"]



def executors_of(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The executors that ran the rows' distlab algorithms (``compiled``, ``python``), in order
    of first appearance; the built-in's rows and rows that name none are left out."""
    return list(dict.fromkeys(str(r["executor"]) for r in rows
                              if r.get("executor") and r["algorithm"] != BUILTIN))


def ratios(rows: Sequence[dict[str, Any]]) -> dict[str, dict[int, float]]:
    """Per distlab algorithm, per size: its busbw over the built-in's at that size (sizes
    without a built-in row, or where the built-in's busbw is 0, are left out). Where the rows
    ran distlab's algorithms on more than one executor, each is its own curve, named
    ``"<algorithm> (<executor>)"``."""
    builtin = {r["nbytes"]: r["busbw_gbps"] for r in rows if r["algorithm"] == BUILTIN}
    several = len(executors_of(rows)) > 1
    out: dict[str, dict[int, float]] = {}
    for r in rows:
        b = builtin.get(r["nbytes"])
        if r["algorithm"] != BUILTIN and b:
            name = f"{r['algorithm']} ({r.get('executor')})" if several else r["algorithm"]
            out.setdefault(name, {})[r["nbytes"]] = r["busbw_gbps"] / b
    return out


def versus_table(rows: Sequence[dict[str, Any]]) -> Table | None:
    """One row per size: the built-in's busbw and every algorithm's busbw over it (``None``
    when the rows have no built-in)."""
    curve = ratios(rows)
    if not curve:
        return None
    builtin = {r["nbytes"]: r["busbw_gbps"] for r in rows if r["algorithm"] == BUILTIN}
    algos = list(curve)
    out = []
    for nbytes in sorted(builtin):
        row: dict[str, Any] = {"nbytes": nbytes, "builtin_busbw_gbps": builtin[nbytes]}
        row.update({a: curve[a].get(nbytes) for a in algos})
        out.append(row)
    columns = (Column("size(B)", "nbytes", width=11),
               Column("builtin busbw(GB/s)", "builtin_busbw_gbps", ".3f"),
               *(Column(a, a, ".2f") for a in algos))
    return Table(out, columns, "distlab busbw / builtin busbw at each size (x; same run)",
                 "vs_builtin")


def versus_lines(rows: Sequence[dict[str, Any]], prefix: str = "") -> list[str]:
    """One line per algorithm: the lowest and highest ratio to the built-in (and at which
    size), the median, over every size measured."""
    lines = []
    for algo, by_size in ratios(rows).items():
        lo = min(by_size, key=by_size.__getitem__)
        hi = max(by_size, key=by_size.__getitem__)
        lines.append(f"{prefix}{algo} busbw / builtin over {len(by_size)} sizes "
                     f"({size_label(min(by_size), 'compact')}-"
                     f"{size_label(max(by_size), 'compact')}): lowest "
                     f"{by_size[lo]:.2f}x at {size_label(lo, 'compact')}, median "
                     f"{statistics.median(by_size.values()):.2f}x, highest "
                     f"{by_size[hi]:.2f}x at {size_label(hi, 'compact')}")
    return lines
