"""``ring`` reduce-scatter: ``p - 1`` steps; each block travels the ring, reduced at every hop.

In step ``s`` rank ``i`` sends block ``(i - 1 - s) mod p`` to ``i + 1``, which reduces it into its
own; after ``p - 1`` steps rank ``i`` holds block ``i`` reduced over every rank. The first half of
the ring allreduce (:mod:`distlab.collectives.algorithms.allreduce.ring`) with the blocks named so
each rank ends with its own. Cost ``(p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma``. ``pieces=k``
sends every block as ``k`` messages (:mod:`distlab.collectives.plan.ranges`).
"""

from __future__ import annotations

from distlab.collectives.plan.ranges import check_blocked, check_pieces, split
from distlab.collectives.plan.schedule import Schedule, Transfer, collect, make_step

__all__ = ["ring"]


def ring(world_size: int, count: int, pieces: int = 1) -> Schedule:
    """Ring reduce-scatter of ``p`` blocks of ``count / p`` elements."""
    p, n, m = check_blocked(world_size, count, "reduce_scatter")
    k = check_pieces(pieces)
    steps = []
    for s in range(p - 1):
        ts = [Transfer(i, (i + 1) % p, ((i - 1 - s) % p) * m, ((i - 1 - s) % p + 1) * m,
                       "reduce") for i in range(p)]
        steps.append(make_step(split(ts, k), f"ring reduce-scatter {s + 1}/{p - 1}"))
    return Schedule("ring", p, n, collect(steps), {"pieces": k}, "reduce_scatter")
