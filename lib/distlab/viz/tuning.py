"""Predicted vs measured time over the number of pieces, from ``bench allreduce-tuning`` rows.

    from distlab.bench.allreduce_tuning import BENCHMARK, TuningConfig
    report = BENCHMARK.run(TuningConfig(world_size=2))
    pieces_figure(report.rows, report.tables[1].rows)

One panel per message size: the measured time of the pieces curve (``k=K`` rows: dots at the
median, bars from the 25th to the 75th percentile over rounds), the model's prediction (line), the
built-in's median time (dashed) and the ``k`` the default call used (the shipped model's choice,
dotted) next to the best ``k`` measured (star). Only draws: every number comes from the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from distlab.collectives.algorithms.registry import BUILTIN
from distlab.viz.figure import new_figure
from distlab.vocabulary import size_label

__all__ = ["pieces_figure"]


def pieces_figure(rows: Sequence[dict[str, Any]],
                  summary: Sequence[dict[str, Any]] | None = None, *,
                  fig: Figure | None = None) -> Figure:
    """Time (ms) over ``pieces`` per size: measured, predicted, built-in, chosen and best k."""
    sizes = list(dict.fromkeys(r["nbytes"] for r in rows))
    if not sizes:
        raise ValueError("rows is empty: pass the rows of a bench allreduce-tuning run")
    by_size = {s["nbytes"]: s for s in summary or []}
    fig = fig or new_figure(figsize=(min(9.4, 3.2 * len(sizes)), 3.4))
    axes = np.atleast_1d(fig.subplots(1, len(sizes)))
    for ax, nbytes in zip(axes, sizes, strict=False):
        curve = sorted((r for r in rows if r["nbytes"] == nbytes
                        and str(r["variant"]).startswith("k=")), key=lambda r: r["pieces"])
        ks = [r["pieces"] for r in curve]
        med = np.array([r["time_us"] for r in curve]) / 1e3
        lo = med - np.array([r["spread_us"][0] for r in curve]) / 1e3
        hi = np.array([r["spread_us"][1] for r in curve]) / 1e3 - med
        ax.errorbar(ks, med, yerr=[np.maximum(lo, 0), np.maximum(hi, 0)], fmt="o", ms=4,
                    color="C0", capsize=2, label="measured (median, p25-p75)")
        if curve and all(r.get("predicted_us") for r in curve):
            ax.plot(ks, [r["predicted_us"] / 1e3 for r in curve], "-", color="C1",
                    label="model")
        builtin = [r for r in rows if r["nbytes"] == nbytes and r["variant"] == BUILTIN]
        if builtin:
            ax.axhline(builtin[0]["time_us"] / 1e3, ls="--", color="grey", lw=1,
                       label=BUILTIN)
        s = by_size.get(nbytes)
        if s is not None:
            if s.get("default_k") is not None:
                ax.axvline(s["default_k"], ls=":", color="C2", lw=1.2,
                           label=f"default call's k = {s['default_k']}")
            if s.get("best_k") is not None and s["best_k"] in ks:
                ax.plot([s["best_k"]], [med[ks.index(s["best_k"])]], "*", ms=12, color="C3",
                        label=f"best k measured = {s['best_k']}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.set_xlabel("pieces per block (k)")
        ax.set_title(size_label(nbytes), fontsize=10)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=6)
    axes[0].set_ylabel("time per allreduce (ms)")
    return fig
