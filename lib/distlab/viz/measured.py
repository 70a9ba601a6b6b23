"""Measured benchmark rows beside the model's prediction: one colour per algorithm.

    from distlab.viz.measured import measured_vs_model_figure
    measured_vs_model_figure(report.rows, title="all_gather on 2 gloo ranks")

Rows are those of a collective benchmark (``python -m distlab.bench collective`` or
``allreduce``): ``algorithm``, ``nbytes`` (bytes of nccl-tests' count), ``time_us`` (the median
of the rounds, microseconds), optionally ``mean_us`` (their mean) and ``predicted_us`` (the
calibrated model's price of the call; None where the model has none, e.g. the backend's own
call under NCCL). Each algorithm gets one colour (:data:`ALGO_COLORS`, the same in every figure
of distlab), used by its dots (measured) and its solid line (model); an algorithm without a
prediction at every size has its dots joined by a dashed line instead. The legend names every
algorithm once in its colour, then says what dots, solid and dashed lines are. Rows that raced
two executors (``executor``: ``compiled`` and ``python``, ``bench allreduce --executor
compiled,python``) draw the Python executor's as open dots beside the filled ones, under the
same model line. This is the one measured-versus-model figure: notebooks 04 (allreduce) and 08
(the collective family) draw it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogFormatter, NullFormatter

from distlab._checks import check_choice
from distlab.bench.versus import executors_of
from distlab.collectives.algorithms.registry import BUILTIN
from distlab.viz.figure import new_figure
from distlab.viz.palette import ALGORITHM_COLOURS, colours
from distlab.vocabulary import size_label

__all__ = ["ALGO_COLORS", "KEY_COLOR", "algorithm_colors", "measured_vs_model_figure",
           "same_model_lines"]

#: One colour per algorithm in every figure of distlab: :mod:`distlab.viz.palette`'s.
ALGO_COLORS = dict(ALGORITHM_COLOURS)
#: The colour of the legend's entries that explain the marks (not an algorithm).
KEY_COLOR = "0.45"


def algorithm_colors(algorithms: Sequence[str]) -> dict[str, str]:
    """A colour for each of ``algorithms`` (one figure's): the palette's
    (:func:`distlab.viz.palette.colours`), the same in every figure."""
    return colours(algorithms)


def _second_executor(executors: Sequence[str]) -> str | None:
    """The executor drawn as open dots when the rows raced two (``"python"`` where it is one of
    them, else the second seen); ``None`` for one executor."""
    if len(executors) < 2:
        return None
    return "python" if "python" in executors else executors[1]


def same_model_lines(rows: Sequence[Mapping[str, Any]], *,
                     rel: float = 1e-9) -> list[list[str]]:
    """Groups of two or more algorithms whose predictions agree (within ``rel``) at every size
    of ``rows``: their model lines are drawn on top of each other (on 2 ranks a ring, recursive
    doubling and Bruck are all one exchange of the same bytes)."""
    curves: dict[str, dict[int, float]] = {}
    for r in rows:
        if r["algorithm"] != BUILTIN:
            curves.setdefault(str(r["algorithm"]), {})[int(r["nbytes"])] = r.get("predicted_us")
    full = {a: c for a, c in curves.items() if all(v for v in c.values())}
    groups: list[list[str]] = []
    for a, c in full.items():
        for g in groups:
            ref = full[g[0]]
            if set(ref) == set(c) and all(np.isclose(c[k], ref[k], rtol=rel, atol=0.0)
                                          for k in c):
                g.append(a)
                break
        else:
            groups.append([a])
    return [g for g in groups if len(g) > 1]


def measured_vs_model_figure(rows: Sequence[Mapping[str, Any]], *, title: str = "",
                             statistic: str = "mean",
                             colors: Mapping[str, str] | None = None,
                             fig: Figure | None = None) -> Figure:
    """Time against size (both log) per algorithm: measured dots, model line, one colour each.

    Args:
        rows: benchmark rows (see the module docstring).
        title: the axes title (e.g. the collective, world size and backend).
        statistic: what the dots are: ``"mean"`` (``mean_us``, the statistic the model is
            judged by, when every row kept it; else the median) or ``"median"`` (``time_us``).
        colors: algorithm -> colour (default :func:`algorithm_colors` of the rows' algorithms).
        fig: draw into this figure (default: a new 9 x 4 in one).

    The artists carry labels ``"<algorithm> measured"`` (dots), ``"<algorithm> model"`` (solid
    line, when every row of the algorithm has a ``predicted_us``) or ``"<algorithm> measured,
    joined"`` (a dashed line through the dots, when one has none).

    Raises:
        ValueError: ``rows`` is empty, or ``statistic`` is neither ``"mean"`` nor ``"median"``.
    """
    check_choice("statistic", statistic, ("mean", "median"))
    if not rows:
        raise ValueError("rows must hold at least one benchmark row, got none")
    key = "mean_us" if statistic == "mean" and all("mean_us" in r for r in rows) else "time_us"
    what = "mean" if key == "mean_us" else "median"
    algos = list(dict.fromkeys(str(r["algorithm"]) for r in rows))
    palette = {**algorithm_colors(algos), **dict(colors or {})}
    executors = executors_of(rows)
    second = _second_executor(executors)
    fig = fig or new_figure(figsize=(9.0, 4.0))
    ax = fig.add_subplot(1, 1, 1)
    handles: list[Line2D] = []
    joined = False
    for a in algos:
        both = sorted((r for r in rows if r["algorithm"] == a), key=lambda r: r["nbytes"])
        other = [r for r in both if second is not None and r.get("executor") == second]
        mine = [r for r in both if second is None or r.get("executor") != second]
        xs = [r["nbytes"] for r in mine]
        color = palette[a]
        if other:
            ax.loglog([r["nbytes"] for r in other], [r[key] for r in other], "o", color=color,
                      ms=5, mfc="none", label=f"{a} measured ({second} executor)")
        ax.loglog(xs, [r[key] for r in mine], "o", color=color, ms=4, label=f"{a} measured")
        if all(r.get("predicted_us") for r in mine):
            style = "-"
            ax.loglog(xs, [r["predicted_us"] for r in mine], style, color=color, lw=1.2,
                      label=f"{a} model")
        else:
            style, joined = "--", True
            ax.loglog(xs, [r[key] for r in mine], style, color=color, lw=1,
                      label=f"{a} measured, joined")
        handles.append(Line2D([], [], color=color, marker="o", ms=4, ls=style, lw=1.2, label=a))
    key_handles = [Line2D([], [], color=KEY_COLOR, marker="o", ms=4, ls="none",
                          label=f"dots: measured ({what} of rounds)"),
                   Line2D([], [], color=KEY_COLOR, ls="-", lw=1.2, label="lines: the model")]
    if second is not None:
        key_handles[0] = Line2D([], [], color=KEY_COLOR, marker="o", ms=4, ls="none",
                                label=f"dots: measured ({what} of rounds), "
                                      f"{next(e for e in executors if e != second)} executor")
        key_handles.insert(1, Line2D([], [], color=KEY_COLOR, marker="o", ms=5, mfc="none",
                                     ls="none", label=f"open dots: the {second} executor"))
    if joined:
        key_handles.append(Line2D([], [], color=KEY_COLOR, ls="--", lw=1,
                                  label="dashed: measured, joined (no model)"))
    for group in same_model_lines(rows):
        key_handles.append(Line2D([], [], ls="none", label="the model lines of "
                                  + ",\n".join(group[:-1]) + f"\nand {group[-1]} coincide"))
    ax.legend(handles=[*handles, *key_handles], fontsize=8, loc="upper left",
              bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    sizes = sorted({int(r["nbytes"]) for r in rows})
    if len(sizes) <= 12:
        ax.set_xticks(sizes, [size_label(s) for s in sizes])
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))  # labels few decades only
    ax.set_xlabel("size (bytes of the whole buffer)")
    ax.set_ylabel(f"time per call (us), {what} of rounds")
    if title:
        ax.set_title(title, fontsize=10)
    return fig
