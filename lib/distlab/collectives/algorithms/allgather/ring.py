"""``ring`` all-gather: ``p - 1`` steps; rank ``i`` passes the block it got last to ``i + 1``.

In step ``s`` rank ``i`` sends block ``(i - s) mod p`` to ``i + 1`` (MPICH's long-message
all-gather, Thakur, Rabenseifner and Gropp 2005, sec. 4.2). Cost
``(p-1) alpha + (p-1)/p n beta``. ``pieces=k`` sends every block as ``k`` messages
(:mod:`distlab.collectives.plan.ranges`).
"""

from __future__ import annotations

from distlab.collectives.plan.ranges import check_blocked, check_pieces, split
from distlab.collectives.plan.schedule import Schedule, Transfer, collect, make_step

__all__ = ["ring"]


def ring(world_size: int, count: int, pieces: int = 1) -> Schedule:
    """Ring all-gather of ``p`` blocks of ``count / p`` elements."""
    p, n, m = check_blocked(world_size, count, "all_gather")
    k = check_pieces(pieces)
    steps = []
    for s in range(p - 1):
        ts = [Transfer(i, (i + 1) % p, ((i - s) % p) * m, ((i - s) % p + 1) * m, "copy")
              for i in range(p)]
        steps.append(make_step(split(ts, k), f"ring allgather {s + 1}/{p - 1}"))
    return Schedule("ring", p, n, collect(steps), {"pieces": k}, "all_gather")
