"""``pairwise`` reduce-scatter: in step ``s`` every rank sends rank ``i + s`` its block.

Rank ``i`` sends block ``(i + s) mod p`` to rank ``(i + s) mod p`` and reduces the block ``i``
it gets from ``i - s``; after ``p - 1`` steps block ``i`` holds every rank's contribution
(MPICH's long-message reduce-scatter for commutative operations, Thakur, Rabenseifner and Gropp
2005, sec. 4.4). Cost ``(p-1) alpha + (p-1)/p n beta + (p-1)/p n gamma``.
"""

from __future__ import annotations

from distlab.collectives.plan.ranges import check_blocked
from distlab.collectives.plan.schedule import Schedule, Transfer, collect, make_step

__all__ = ["pairwise"]


def pairwise(world_size: int, count: int) -> Schedule:
    """Pairwise-exchange reduce-scatter of ``p`` blocks of ``count / p`` elements."""
    p, n, m = check_blocked(world_size, count, "reduce_scatter")
    steps = [make_step((Transfer(i, (i + s) % p, ((i + s) % p) * m, ((i + s) % p + 1) * m,
                                 "reduce") for i in range(p)), f"pairwise {s}/{p - 1}")
             for s in range(1, p)]
    return Schedule("pairwise", p, n, collect(steps), {}, "reduce_scatter")
