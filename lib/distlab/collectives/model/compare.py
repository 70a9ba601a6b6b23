"""Compare algorithms under a cost model: predicted times over sizes or world sizes, winners,
and the crossover points where the winner changes ("who wins where")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distlab.collectives.algorithms.registry import PLANS, build, build_plan, plan_options
from distlab.collectives.model.choice import best_pieces, schedule_seconds
from distlab.collectives.model.cost import cost
from distlab.collectives.plan.semantics import count_for_bytes

__all__ = ["Crossover", "collective_times", "crossovers", "predict_sizes", "predict_world_sizes",
           "scale_times", "winners"]


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


def collective_times(preset: Any, collective: str, world_size: int, sizes_bytes: Sequence[int], *,
                     algorithms: Sequence[str] | None = None, itemsize: int = 4,
                     root: int = 0) -> dict[str, list[float]]:
    """Predicted seconds of each of ``collective``'s plans (default: all of them) at each size
    (bytes of nccl-tests' count, :func:`~distlab.collectives.plan.semantics.count_for_bytes`)
    on ``world_size`` ranks. ``preset``: anything with ``alpha``, ``beta``, ``gamma`` (and
    optionally ``duplex``); rooted plans are rooted at ``root % world_size``."""
    p = world_size
    duplex = getattr(preset, "duplex", "full")
    times: dict[str, list[float]] = {}
    for a in algorithms or PLANS[collective]:
        opts = {"root": root % p} if "root" in plan_options(collective, a) else {}
        times[a] = [cost(build_plan(collective, a, p,
                                    count_for_bytes(collective, s, itemsize, p), **opts),
                         preset.alpha, preset.beta, preset.gamma, itemsize, duplex=duplex)
                    for s in sizes_bytes]
    return times


def scale_times(preset: Any, nbytes: int, world_sizes: Sequence[int],
                itemsize: int = 4) -> dict[str, list[float]]:
    """Predicted seconds of an allreduce of ``nbytes`` at each world size by ``ring``, ``tree``,
    the step-synchronous ``double_binary_tree`` and the pipelined one (the ``pieces`` the model
    picks at each world size, :func:`~distlab.collectives.model.choice.best_pieces` with
    ``preset`` as the calibration)."""
    cal = {"alpha": preset.alpha, "beta": preset.beta, "gamma": preset.gamma,
           "duplex": getattr(preset, "duplex", "full")}
    count = nbytes // itemsize
    out: dict[str, list[float]] = {"ring": [], "tree": [], "double_binary_tree": [],
                                   "double_binary_tree, pipelined": []}
    for p in world_sizes:
        for a in ("ring", "tree", "double_binary_tree"):
            out[a].append(schedule_seconds(cal, build_plan("all_reduce", a, p, count), itemsize))
        k = best_pieces("double_binary_tree", p, count, itemsize, cal,
                        candidates=(1, 2, 4, 8, 16, 32, 64))
        out["double_binary_tree, pipelined"].append(schedule_seconds(
            cal, build_plan("all_reduce", "double_binary_tree", p, count, pieces=k), itemsize))
    return out


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
