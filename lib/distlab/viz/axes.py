"""Axes as every distlab figure labels them: message sizes in binary units, bandwidths in plain
numbers, log ranges wide enough that a small error looks small, and discrete axes (ranks,
positions, experts, stages, time steps) ticked on whole numbers only."""

from __future__ import annotations

import math
from typing import Any

from matplotlib.ticker import (
    FixedLocator,
    FuncFormatter,
    LogFormatter,
    LogLocator,
    NullFormatter,
    NullLocator,
)

from distlab.vocabulary import size_label

__all__ = ["bytes_axis", "integer_ticks", "plain_log_axis", "whole_ticks", "widen_log_range"]

#: The steps :func:`whole_ticks` may put between two ticks, times any power of ten.
_NICE_STEPS = (1, 2, 5)


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


def whole_ticks(start: int, count: int, max_ticks: int = 10) -> list[int]:
    """Tick positions for the ``count`` whole numbers from ``start``: every one when they fit in
    ``max_ticks``, else the multiples of 2, 5, 10, 20 ... among them (the smallest such step
    that fits); ``[]`` when ``count`` is 0.

    Raises:
        ValueError: ``count`` < 0 or ``max_ticks`` < 1.
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count!r}")
    if max_ticks < 1:
        raise ValueError(f"max_ticks must be >= 1, got {max_ticks!r}")
    scale = 1
    while True:
        for nice in _NICE_STEPS:
            step = nice * scale
            first = -(-start // step) * step
            ticks = list(range(first, start + count, step))
            if len(ticks) <= max_ticks:
                return ticks
        scale *= 10


def integer_ticks(ax: Any, which: str, count: int, *, start: int = 0, max_ticks: int = 10,
                  fmt: str = "{}", fontsize: Any = None) -> list[int]:
    """Tick ``which`` (``"x"`` or ``"y"``) of ``ax``, a discrete axis of ``count`` things
    numbered from ``start`` (ranks, positions, experts, stages, time steps), on whole numbers
    only (:func:`whole_ticks`), each labelled ``fmt.format(n)`` (``"rank {}"``); no minor
    ticks. The ticks are fixed, so a view of one thing shows the one tick ``0``, never the
    ``-0.4, -0.2 ... 0.4`` a number locator would put there. Returns the tick positions.

    Raises:
        ValueError: ``which`` is not ``"x"`` or ``"y"``, or as :func:`whole_ticks`.
    """
    if which not in ("x", "y"):
        raise ValueError(f"which must be 'x' or 'y', got {which!r}")
    ticks = whole_ticks(start, count, max_ticks)
    axis = ax.xaxis if which == "x" else ax.yaxis
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt.format(int(round(v)))))
    axis.set_minor_locator(NullLocator())
    if fontsize is not None:
        ax.tick_params(axis=which, labelsize=fontsize)
    return ticks
