"""Copy model: ``t(n) = latency + n / bandwidth`` per path, chain and overlap bounds.

The fit is :func:`distlab.fit.fit_line`; link peaks live in :mod:`distlab.links`.
Units: bytes, seconds, GB/s = 1e9 B/s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from distlab import fit as _fit
from distlab._checks import check_float, check_int
from distlab.vocabulary import gb_per_s

__all__ = ["Fit", "chain_bound", "fit_copy_times", "overlap_bounds"]


@dataclass(frozen=True)
class Fit:
    """Least-squares fit of seconds against bytes: ``latency_s + nbytes / bandwidth_Bps``."""

    latency_s: float
    bandwidth_Bps: float
    r2: float

    def seconds(self, nbytes: float) -> float:
        """Predicted seconds for ``nbytes`` bytes."""
        return self.latency_s + nbytes / self.bandwidth_Bps

    def gbps(self, nbytes: float) -> float:
        """Predicted effective GB/s (1e9 B/s) at ``nbytes``."""
        return gb_per_s(nbytes, self.seconds(nbytes))


def fit_copy_times(nbytes: Sequence[float], seconds: Sequence[float]) -> Fit:
    """The copy path's :class:`Fit` from measured (bytes, seconds) points: the one
    latency + bandwidth fit (:func:`distlab.fit.fit_line`, relative error, latency >= 0).

    Raises:
        ValueError: fewer than 2 distinct sizes, non-finite or non-positive values, or times that
            do not grow with size (no positive bandwidth).
    """
    n = np.asarray(nbytes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if n.shape != t.shape or n.size < 2 or np.unique(n).size < 2:
        raise ValueError("need >= 2 distinct sizes with one time each")
    if not (np.all(np.isfinite(t)) and np.all(t > 0) and np.all(n > 0)):
        raise ValueError("sizes and times must be finite and > 0")
    line = _fit.fit_line(n, t)
    if line.slope_s_per_unit <= 0:
        raise ValueError("fitted bandwidth is not positive: times do not grow with size")
    return Fit(line.intercept_s, 1.0 / line.slope_s_per_unit, line.r2)


def chain_bound(stage_gbps: Mapping[str, float]) -> tuple[str, float]:
    """The slowest stage of a chain (disk -> pageable -> pinned -> GPU) and its GB/s: a
    pipelined chain cannot move bytes faster than that."""
    if not stage_gbps:
        raise ValueError("need at least one stage")
    name = min(stage_gbps, key=lambda k: stage_gbps[k])
    return name, stage_gbps[name]


def overlap_bounds(copy_s: float, compute_s: float, batches: int) -> dict[str, float]:
    """Seconds for ``batches`` batches: ``sequential = n (copy + compute)``; double-buffered
    ``overlapped = copy + compute + (n - 1) max(copy, compute)``."""
    copy_s = check_float("copy_s (seconds)", copy_s, minimum=0)
    compute_s = check_float("compute_s (seconds)", compute_s, minimum=0)
    batches = check_int("batches", batches, minimum=1)
    return {"sequential_s": batches * (copy_s + compute_s),
            "overlapped_s": copy_s + compute_s + (batches - 1) * max(copy_s, compute_s)}
