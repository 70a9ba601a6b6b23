"""Compare algorithms under a cost model: predicted times over sizes or world sizes, winners,
and the crossover points where the winner changes ("who wins where")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from distlab.collectives.algorithms.registry import build
from distlab.collectives.model.cost import cost

__all__ = ["Crossover", "crossovers", "predict_sizes", "predict_world_sizes", "winners"]


@dataclass(frozen=True)
class Crossover:
    """Between grid points ``x_before`` and ``x_after`` the fastest algorithm changes."""

    x_before: float
    x_after: float
    before: str
    after: str


def predict_sizes(algorithms: Sequence[str], world_size: int, sizes_bytes: Sequence[int],
                  alpha: float, beta: float, gamma: float, itemsize: int = 4, *,
                  duplex: str = "full") -> dict[str, list[float]]:
    """Predicted seconds of each algorithm at each message size (bytes)."""
    return {a: [cost(build(a, world_size, max(0, s // itemsize)), alpha, beta, gamma, itemsize,
                     duplex=duplex) for s in sizes_bytes] for a in algorithms}


def predict_world_sizes(algorithms: Sequence[str], world_sizes: Sequence[int], nbytes: int,
                        alpha: float, beta: float, gamma: float, itemsize: int = 4, *,
                        duplex: str = "full") -> dict[str, list[float]]:
    """Predicted seconds of each algorithm at each world size, for one message of ``nbytes``."""
    return {a: [cost(build(a, p, nbytes // itemsize), alpha, beta, gamma, itemsize,
                     duplex=duplex) for p in world_sizes] for a in algorithms}


def winners(times: dict[str, list[float]]) -> list[str]:
    """The fastest algorithm at each grid point (ties go to the first in ``times``' order)."""
    names = list(times)
    npts = len(next(iter(times.values()))) if times else 0
    return [min(names, key=lambda a: (times[a][i], names.index(a))) for i in range(npts)]


def crossovers(xs: Sequence[float], times: dict[str, list[float]]) -> list[Crossover]:
    """Where along ``xs`` the fastest algorithm changes."""
    win = winners(times)
    return [Crossover(xs[i - 1], xs[i], win[i - 1], win[i])
            for i in range(1, len(win)) if win[i] != win[i - 1]]
