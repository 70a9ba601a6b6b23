"""``scatter_allgather`` broadcast (van de Geijn): binomial scatter of ``p`` blocks, ring
all-gather.

The root's vector is cut into ``p`` blocks; a binomial scatter
(:mod:`distlab.collectives.algorithms.scatter.binomial`'s rounds) leaves relative rank ``q`` with
block ``q``, then a ring all-gather over the relative ranks passes the blocks round (``p - 1``
steps). MPICH's long-message broadcast (Thakur, Rabenseifner and Gropp 2005, sec. 4.1; van de Geijn
et al.). Cost for powers of two ``(lg p + p - 1) alpha + 2 (p-1)/p n beta``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.ranks import ceil_log2, check_root, real
from distlab.collectives.plan.ranges import block_bounds
from distlab.collectives.plan.schedule import (
    Schedule,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["scatter_allgather"]


def scatter_allgather(world_size: int, count: int, root: int = 0) -> Schedule:
    """Van de Geijn broadcast of ``count`` elements from ``root``."""
    p, n = check_world_size(world_size), check_count(count)
    root = check_root(root, p)
    blocks = block_bounds(n, p)  # block q ends on relative rank q

    def span(lo: int, hi: int) -> tuple[int, int]:
        return blocks[lo][0], blocks[hi - 1][1]

    steps = []
    for k in range(ceil_log2(p)):
        d = 1 << (ceil_log2(p) - 1 - k)
        steps.append(make_step((Transfer(real(q, root, p), real(q + d, root, p),
                                         *span(q + d, min(q + 2 * d, p)), "copy")
                                for q in range(0, p, 2 * d) if q + d < p),
                               f"scatter (distance {d})"))
    for s in range(p - 1):  # ring all-gather: relative q holds blocks q, q-1, ..., sends the newest
        steps.append(make_step((Transfer(real(q, root, p), real(q + 1, root, p),
                                         *blocks[(q - s) % p], "copy") for q in range(p)),
                               f"ring allgather {s + 1}/{p - 1}"))
    return Schedule("scatter_allgather", p, n, collect(steps), {"root": root}, "broadcast")
