"""Figures of the allreduce cost model judged on profiles (:mod:`distlab.judge`).

Every function takes profile folders (or the :class:`~distlab.judge.refit.RefitRun` list of
:func:`~distlab.judge.refit.refit_profile`) and draws ``measured / predicted``: which machine
calibrated (the profile whose stored calibration priced the rows) and which machine measured.

- :func:`refit_figure`: one panel per (measured profile, world size), measured / predicted
  against buffer size per algorithm, the target band shaded.
- :func:`windows_figure`: a long profile cut into windows of consecutive rounds, each priced
  with the calibration of its own rounds: how many rounds the target needs.

The tables of the same numbers are in :mod:`distlab.judge.tables`; each judged row's error
beside its own noise is :func:`distlab.viz.noise.noise_figure`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from matplotlib.ticker import NullFormatter

from distlab.judge.refit import (
    JUDGEABLE,
    TARGET_ALGORITHMS,
    TARGET_MEDIAN_PCT,
    TARGET_MIN_BYTES,
    TARGET_P90_PCT,
    RefitRun,
    algorithms_in,
    meets_target,
    refit_runs,
)
from distlab.judge.windows import window_runs
from distlab.viz.figure import new_figure
from distlab.viz.palette import colour

__all__ = ["refit_figure", "windows_figure"]

_MARKERS = "os^vDx+*hp"


#: The ratios a refit panel may label, finest first dropped when the panel spans a wide range.
_RATIOS = ((0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0),
           (0.67, 0.8, 1.25, 1.5, 3.0),
           (0.9, 1.1))


def _ratio_ticks(lo: float, hi: float) -> list[float]:
    """The measured / predicted ratios to label on a log axis from ``lo`` to ``hi``: powers of
    two, with 0.67-3 between them when the panel spans at most 16x, and 0.9, 1.1 when it spans
    at most 3x, so every panel shows at least three labelled ticks (the band around 1 is always
    in view)."""
    span = hi / lo
    levels = _RATIOS[:1 + (span <= 16) + (span <= 3)]
    return sorted(t for level in levels for t in level if lo <= t <= hi)


def _style(algorithm: str) -> str:
    """A line style per algorithm: a marker by its place among the judgeable ones, solid for
    the judged ones, dotted for the others."""
    order = list(dict.fromkeys((*TARGET_ALGORITHMS, *JUDGEABLE)))
    marker = _MARKERS[order.index(algorithm) % len(_MARKERS)] if algorithm in order else "."
    return marker + ("-" if algorithm in TARGET_ALGORITHMS else ":")

PathLike = str | os.PathLike[str]


def refit_figure(profiles: Iterable[PathLike | RefitRun], *,
                 algorithms: Iterable[str] | None = TARGET_ALGORITHMS,
                 calibration_from: PathLike | None = None) -> Any:
    """measured / predicted against buffer size (both log), one panel per (measured profile,
    world size), one line per algorithm; the band |error| <= 15% shaded, sizes below 64 KiB
    (not judged by the target) greyed.

    Args:
        profiles: profile folders or :class:`RefitRun` objects.
        algorithms: the lines (None: every algorithm in the rows).
        calibration_from: price every profile with this profile's calibration.
    """
    runs = refit_runs(profiles, calibration_from=calibration_from)
    algos = algorithms_in(runs, algorithms)
    cols = 2 if len(runs) > 1 else 1
    nrows = math.ceil(len(runs) / cols)
    fig = new_figure(figsize=(4.7 * cols, 3.3 * nrows))
    axes = fig.subplots(nrows, cols, squeeze=False).ravel()
    for ax, run in zip(axes, runs, strict=False):
        for a in algos:
            mine = sorted((r for r in run.rows if r["algorithm"] == a and
                           r.get("predicted_us")), key=lambda r: r["nbytes"])
            if mine:
                ax.plot([r["nbytes"] for r in mine],
                        [r["judged_us"] / r["predicted_us"] for r in mine],
                        _style(a), ms=4, lw=1, color=colour(a), label=a)
        band = TARGET_MEDIAN_PCT / 100
        ax.axhspan(1 - band, 1 + band, color="tab:green", alpha=0.15)
        ax.axvspan(min(r["nbytes"] for r in run.rows) / 1.5, TARGET_MIN_BYTES / 1.4,
                   color="0.85", alpha=0.5)
        ax.axhline(1, color="k", lw=0.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        # ratios as numbers at 1, 1.5, 2, 3, ... (and 0.75, 0.5, ...): a panel whose ratios
        # stay within one power of two still shows a scale
        ticks = _ratio_ticks(*ax.get_ylim())
        ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
        ax.yaxis.set_minor_formatter(NullFormatter())
        s = run.stats()
        source = ("own calibration" if run.calibrated_on == run.profile
                  else f"calibrated {run.calibrated_on}")
        ax.set_title(f"{run.profile}, ws {run.world_size}, {source}\n>= 64 KiB, by the "
                     f"{run.statistic}: median |error| {s.median:.0f}%, p90 {s.p90:.0f}%",
                     fontsize=8)
        ax.set_xlabel("buffer bytes")
        ax.set_ylabel("measured / predicted")
    for ax in axes[len(runs):]:
        ax.set_visible(False)
    fig.legend(handles=axes[0].get_legend_handles_labels()[0], fontsize=7,
               loc="outside lower center", ncols=min(5, len(algos)))   # off every panel's data
    return fig


def windows_figure(profile: PathLike, lengths: Sequence[int], *,
                   statistic: str = "mean") -> Any:
    """How many rounds the model needs (:mod:`distlab.judge.windows`): the profile cut
    into windows of each length of ``lengths`` rounds, each priced with the calibration of its
    own rounds; one panel per world size, each window's median and p90 ``|error%|`` (dots)
    against its length (log), the targets as dashed lines. Windows whose dots sit below both
    lines meet the target."""
    per_length = {n: window_runs(profile, n, statistic=statistic) for n in lengths}
    worlds = list(dict.fromkeys(w.run.world_size for ws in per_length.values() for w in ws))
    fig = new_figure(figsize=(min(9.4, 4.4 * len(worlds)), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(worlds), sharey=True))
    for ax, ws in zip(axes, worlds, strict=False):
        counts: list[str] = []
        for i, (n, windows) in enumerate(per_length.items()):
            stats = [w.stats() for w in windows if w.run.world_size == ws]
            jitter = n * (1 + 0.3 * (np.arange(len(stats)) - (len(stats) - 1) / 2)
                          / max(1, len(stats) - 1))
            met = sum(meets_target(s) for s in stats)
            ax.scatter(jitter, [s.p90 for s in stats], marker="^", color="tab:red", s=18,
                       label="p90 of a window" if i == 0 else None, gid="p90")
            ax.scatter(jitter, [s.median for s in stats], marker="o", color="tab:blue", s=18,
                       label="median of a window" if i == 0 else None, gid="median")
            counts.append(f"{n}\n{met}/{len(stats)} met")
        ax.axhline(TARGET_P90_PCT, color="tab:red", ls="--", lw=0.8, label="p90 target")
        ax.axhline(TARGET_MEDIAN_PCT, color="tab:blue", ls="--", lw=0.8, label="median target")
        ax.set_xscale("log")
        ax.set_xticks(list(per_length), counts)   # under each length: the windows that meet it
        ax.minorticks_off()
        ax.set_xlabel("rounds per window")
        ax.set_title(f"{ws} ranks (under each length: its windows\nthat meet the target)",
                     fontsize=9)
    axes[0].set_ylabel(f"|error%| ({statistic} of the window's rounds)")
    axes[0].set_ylim(bottom=0)
    fig.legend(handles=axes[-1].get_legend_handles_labels()[0], fontsize=7, ncols=4,
               loc="outside lower center")
    name = os.path.basename(os.path.normpath(os.fspath(profile)))
    fig.suptitle(f"{name}: the same rounds cut into shorter profiles", fontsize=10)
    return fig


