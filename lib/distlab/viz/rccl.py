"""RCCL as it measures: the execution model of :mod:`distlab.rccl.execution` beside the
published rccl-tests tables.

:func:`rccl_tables_figure`: one panel per 8 x MI300X table (one node, two nodes) and one for the
MI325X tables of 1-8 nodes (or the panels asked for: :data:`MI355X_TWO_NODE_PANELS`, the two
2 x 8 MI355X clusters whose tree sizes fit the tree across nodes): the published bus bandwidth
(hollow black) against the model's, each size's dot in the colour of what RCCL runs there
(MSCCL's allpairs, or the cost model's algorithm and protocol); sizes the model does not price
(none in the published tables now) are grey crosses at the published value. Each title gives the
split (and "tree left out" where the tree is priced with its term fitted without the table) and
the median |error| as :func:`~distlab.evidence.rccl.judged.judge` gives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distlab.evidence.rccl.judged import JudgedTable, judge, published_tables, table_choices
from distlab.viz.axes import bytes_axis, plain_log_axis, widen_log_range
from distlab.viz.figure import new_figure
from distlab.viz.palette import colours
from distlab.vocabulary import ErrorSummary, busbw_factor, gb_per_s

__all__ = ["MI355X_TWO_NODE_PANELS", "rccl_tables_figure"]

_PANELS = (("aac8_mi300x_1node", "8 x MI300X"),
           ("aac10_mi300x_2node", "2 x 8 MI300X, RCCL 2.22.3, tree: MI355X fit"),
           ("aac11_mi325x", "MI325X ring: 1 node (low), 2-8 (high)"))
"""(table id or id prefix, panel title)."""
MI355X_TWO_NODE_PANELS = (("aac14_mi355x_2node", "2 x 8 MI355X, RCCL 2.26.6, ANP"),
                          ("alib_mi355x_2node", "2 x 8 MI355X, RCCL 2.27.7"))
"""The two MI355X clusters whose tree sizes fit the tree across nodes."""


def _busbw(nbytes: int, us: float, gpus: int) -> float:
    factor = busbw_factor("all_reduce", gpus)
    assert factor is not None   # an allreduce moves data
    return float(gb_per_s(nbytes * factor, us * 1e-6))


def _label(path: str, algorithm: str, protocol: str) -> str:
    return f"MSCCL allpairs/{protocol}" if path == "msccl" else f"{algorithm}/{protocol}"


def rccl_tables_figure(panels: Sequence[tuple[str, str]] = _PANELS) -> Any:
    """The published tables of ``panels`` ((table id or id prefix, title) each; default the
    gfx942 ones) against the execution model (module doc).

    Raises:
        ValueError: a panel that names no published table.
    """
    tables = {t["id"]: t for t in published_tables() if t["split"] != "not_modelled"}
    judged: dict[str, JudgedTable] = {j.id: j for j in judge()}
    drawn = {key: [t for tid, t in tables.items() if tid == key or tid.startswith(key + "_")]
             for key, _ in panels}
    empty = [key for key, mine in drawn.items() if not mine]
    if empty:
        raise ValueError(f"no published table is named {', '.join(empty)}")
    fig = new_figure(figsize=(3.1 * len(panels) + 0.1, 3.6))
    axes = fig.subplots(1, len(panels), squeeze=False).ravel()
    choices_of = {t["id"]: {c.nbytes: c for c in table_choices(t)}
                  for mine in drawn.values() for t in mine}
    palette = colours(sorted({_label(c.path, c.algorithm, c.protocol)
                              for by_size in choices_of.values() for c in by_size.values()}))
    for ax, (key, title) in zip(axes, panels, strict=True):
        mine = drawn[key]
        errors, seen, split = [], set(), mine[0]["split"]
        for t in mine:
            gpus = t["nodes"] * 8
            rows = {r[0]: r for r in judged[t["id"]].rows}
            errors += [r[3] for r in rows.values()]
            pts = [p for p in t["points"] if p["bytes"] >= 65536]
            xs = [p["bytes"] for p in pts]
            ax.plot(xs, [_busbw(p["bytes"], p["time_us"], gpus) for p in pts], "o", ms=6,
                    mfc="none", mec="k", label="published" if "published" not in seen else None)
            seen.add("published")
            choices = choices_of[t["id"]]
            priced = [p for p in pts if p["bytes"] in rows]
            if priced:
                ax.plot([p["bytes"] for p in priced],
                        [_busbw(p["bytes"], rows[p["bytes"]][2], gpus) for p in priced],
                        "-", color="k", lw=0.7)
            for p in priced:
                c = choices[p["bytes"]]
                name = _label(c.path, c.algorithm, c.protocol)
                ax.plot([p["bytes"]], [_busbw(p["bytes"], rows[p["bytes"]][2], gpus)], "o",
                        ms=4.5, color=palette[name], label=name if name not in seen else None)
                seen.add(name)
            unpriced = [p for p in pts if p["bytes"] in judged[t["id"]].unpriced]
            if unpriced:
                ax.plot([p["bytes"] for p in unpriced],
                        [_busbw(p["bytes"], p["time_us"], gpus) for p in unpriced], "x", ms=5,
                        color="0.55", label="not priced" if "not priced" not in seen else None)
                seen.add("not priced")
        med = ErrorSummary.of(errors).median
        left = ", tree left out" if any(judged[t["id"]].tree_left_out for t in mine) else ""
        ax.set_title(f"{title}\n{split.replace('_', '-')}{left}: |error| median {med:.1f}%",
                     fontsize=8)
        bytes_axis(ax, "x", ticks=4)
        plain_log_axis(ax, "y")
        widen_log_range(ax, 4.0, "y")
        ax.set_ylabel("busbw GB/s")
        ax.legend(fontsize=6.5, loc="lower right")
    return fig
