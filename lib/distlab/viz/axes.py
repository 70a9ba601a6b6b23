"""Axes as every distlab figure labels them: message sizes in binary units, bandwidths in plain
numbers, and log ranges wide enough that a small error looks small."""

from __future__ import annotations

import math
from typing import Any

from matplotlib.ticker import FuncFormatter, LogFormatter, LogLocator, NullFormatter

from distlab.vocabulary import size_label

__all__ = ["bytes_axis", "plain_log_axis", "widen_log_range"]


def _size_tick(value: float, _pos: Any) -> str:
    """A power of two as its binary size (``1 KiB``); anything else unlabelled."""
    n = int(round(value))
    if n < 1 or n & (n - 1) or abs(value - n) > 1e-6 * n:
        return ""
    return size_label(n)


def bytes_axis(ax: Any, which: str = "x", label: str = "message size", *,
               ticks: int = 8) -> None:
    """Make ``which`` (``"x"`` or ``"y"``) of ``ax`` a log-2 byte axis whose ticks read ``1 KiB``,
    ``1 MiB``, ``1 GiB`` (about ``ticks`` of them, on powers of two), the words the tables and
    the prose use, not ``2^20``."""
    if which not in ("x", "y"):
        raise ValueError(f"which must be 'x' or 'y', got {which!r}")
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log", base=2)
    axis.set_major_locator(LogLocator(base=2, subs=(1.0,), numticks=ticks))
    axis.set_major_formatter(FuncFormatter(_size_tick))
    axis.set_minor_formatter(NullFormatter())
    (ax.set_xlabel if which == "x" else ax.set_ylabel)(label)


def plain_log_axis(ax: Any, which: str = "y") -> None:
    """A log axis whose labels are plain numbers (``40``, ``460``), never ``4 x 10^1``; on a
    range of less than a decade some minor ticks are labelled too, so every panel has numbers."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1.0, 0.7)))


def widen_log_range(ax: Any, factor: float = 4.0, which: str = "y") -> None:
    """Widen a log axis's limits around their geometric middle until they span at least
    ``factor`` (> 1), so that a 1% difference is drawn as small as it is."""
    if not factor > 1:
        raise ValueError(f"factor must be > 1, got {factor!r}")
    lo, hi = ax.get_ylim() if which == "y" else ax.get_xlim()
    if lo <= 0 or hi / lo >= factor:
        return
    mid = math.sqrt(lo * hi)
    half = math.sqrt(factor)
    (ax.set_ylim if which == "y" else ax.set_xlim)(mid / half, mid * half)
