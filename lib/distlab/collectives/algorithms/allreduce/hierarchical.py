"""``hierarchical``: reduce-scatter inside groups, allreduce across groups, allgather inside.

Ranks form ``p / group_size`` groups of consecutive ranks (think: the GPUs of one node). Each
group runs a ring reduce-scatter over the whole vector, so local rank ``j`` of every group owns
the same block; the ranks with equal local rank (one per group) ring-allreduce that block; each
group then ring-allgathers. Phases of different groups run in the same steps. With
``group_size == p`` it is a ring; with ``group_size == 1`` a ring across groups. ``pieces=k``
sends every ring block as ``k`` messages.
"""

from __future__ import annotations

import math
from typing import Any

from distlab._checks import check_int
from distlab.collectives.algorithms.allreduce.ring import ring_allgather, ring_reduce_scatter
from distlab.collectives.plan.ranges import block_bounds, check_pieces
from distlab.collectives.plan.schedule import (
    Schedule,
    Step,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["default_group_size", "hierarchical"]


def default_group_size(world_size: int) -> int:
    """The largest divisor of ``world_size`` that is ``<= sqrt(world_size)`` (1 for primes)."""
    return max(d for d in range(1, math.isqrt(world_size) + 1) if world_size % d == 0)


def _check_group_size(group_size: Any, p: int) -> int:
    group_size = check_int("group_size", group_size, minimum=1)
    if p % group_size:
        divisors = [d for d in range(1, p + 1) if p % d == 0]
        raise ValueError(f"group_size must divide world_size={p} (one of {divisors}), "
                         f"got {group_size}")
    return group_size


def _parallel(label: str, per_group: list[list[list[Transfer]]]) -> list[Step | None]:
    depth = max((len(g) for g in per_group), default=0)
    return [make_step([t for g in per_group if s < len(g) for t in g[s]],
                      f"{label} {s + 1}/{depth}")
            for s in range(depth)]


def hierarchical(world_size: int, count: int, group_size: int | None = None,
                 pieces: int = 1) -> Schedule:
    """Two-level allreduce; ``group_size`` ranks per group (default :func:`default_group_size`),
    ``pieces`` messages per ring block."""
    p, n, k = check_world_size(world_size), check_count(count), check_pieces(pieces)
    g = default_group_size(p) if group_size is None else _check_group_size(group_size, p)
    groups = [list(range(i, i + g)) for i in range(0, p, g)]
    blocks = block_bounds(n, g)
    owned = [blocks[(j + 1) % g] for j in range(g)]  # what local rank j owns after the RS
    steps: list[Step | None] = []
    steps += _parallel("intra-group reduce-scatter",
                       [ring_reduce_scatter(grp, 0, n, k) for grp in groups])
    across = [[grp[j] for grp in groups] for j in range(g)]
    steps += _parallel("inter-group reduce-scatter",
                       [ring_reduce_scatter(across[j], *owned[j], k) for j in range(g)])
    steps += _parallel("inter-group allgather",
                       [ring_allgather(across[j], *owned[j], k) for j in range(g)])
    steps += _parallel("intra-group allgather", [ring_allgather(grp, 0, n, k) for grp in groups])
    return Schedule("hierarchical", p, n, collect(steps), {"group_size": g, "pieces": k})
