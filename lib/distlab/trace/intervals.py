"""Interval arithmetic on NumPy arrays of ``[start, end)`` (microseconds): merge, length, overlap.

All functions take and return float or int arrays; none loops in Python over intervals.
"""

from __future__ import annotations

import numpy as np

__all__ = ["covered", "intersection_length", "merge", "union_length"]


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of ``[starts[i], ends[i])`` as sorted disjoint intervals. Intervals that touch
    (one starts where another ends) join, as HTA's ``merge_kernel_intervals`` joins them."""
    starts = np.asarray(starts)
    ends = np.asarray(ends)
    if len(starts) == 0:
        return starts[:0], ends[:0]
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    group = np.cumsum(new) - 1
    ms = s[new]
    me = np.zeros(len(ms), dtype=run_end.dtype)
    np.maximum.at(me, group, e)
    me = np.maximum(me, ms)
    return ms, me


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Length of the union of the intervals."""
    ms, me = merge(starts, ends)
    return float(np.sum(me - ms)) if len(ms) else 0.0


def covered(ms: np.ndarray, me: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per query ``[a[i], b[i])``: its overlap with the merged (sorted, disjoint) ``[ms, me)``."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if len(ms) == 0:
        return np.zeros(len(a))
    ms = np.asarray(ms, dtype=np.float64)
    me = np.asarray(me, dtype=np.float64)
    cum = np.concatenate([[0.0], np.cumsum(me - ms)])

    def upto(x: np.ndarray) -> np.ndarray:
        k = np.searchsorted(ms, x, side="right") - 1
        kk = np.maximum(k, 0)
        part = np.clip(x - ms[kk], 0.0, me[kk] - ms[kk])
        return np.where(k >= 0, cum[kk] + part, 0.0)

    return np.maximum(upto(b) - upto(a), 0.0)


def intersection_length(a: tuple[np.ndarray, np.ndarray],
                        b: tuple[np.ndarray, np.ndarray]) -> float:
    """Length of (union of ``a``) intersected with (union of ``b``); each a (starts, ends) pair."""
    ams, ame = merge(*a)
    bms, bme = merge(*b)
    return float(np.sum(covered(bms, bme, ams, ame)))
