"""When a hop is a fixed cost and when it is a copy: the latency + bandwidth line of a hop path.

A hop path's fit (:func:`distlab.transfers.sweep.fit_rows`, the one fit of :mod:`distlab.fit`)
is ``t(n) = latency + n / bandwidth``. Below the *crossover* ``n* = latency x bandwidth`` the
fixed part (making a segment, sending a handle, waking the other process) is most of the time:
the hop is a fixed cost, and sending fewer, larger batches is what helps. Above it the bytes
dominate: the hop is a copy (into shared memory, through a pipe, into a slot), and only a path
that copies less helps. A path that never copies (``hop_cuda_ipc``; a ring slot read in place
once written) has a flat line: all fixed cost. Units: bytes, seconds.
"""

from __future__ import annotations

import math

from distlab._checks import check_float
from distlab.transfers.copy_model import Fit

__all__ = ["crossover_bytes", "fixed_share", "regime"]


def crossover_bytes(fit: Fit) -> float:
    """``latency x bandwidth`` in bytes: the size at which a hop's fixed part equals its
    per-byte part (0 when the fit has no fixed part)."""
    return fit.latency_s * fit.bandwidth_Bps


def fixed_share(fit: Fit, nbytes: float) -> float:
    """The fixed part's share of the predicted time at ``nbytes`` (1.0: all fixed cost)."""
    nbytes = check_float("nbytes", nbytes, minimum=0)
    total = fit.seconds(nbytes)
    return fit.latency_s / total if total > 0 else math.nan


def regime(fit: Fit, nbytes: float) -> str:
    """``"fixed cost"`` when the fixed part is at least half the predicted time at ``nbytes``,
    else ``"copy"``."""
    return "fixed cost" if fixed_share(fit, nbytes) >= 0.5 else "copy"
