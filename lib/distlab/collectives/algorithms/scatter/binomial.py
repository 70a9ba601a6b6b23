"""``binomial`` scatter: ``ceil(lg p)`` rounds of a binomial tree from the root.

In round ``k`` (distance ``d = 2**(ceil(lg p) - 1 - k)``, halving), relative rank ``q``, a
multiple of ``2 d``, sends the blocks of relative ranks ``q + d .. q + 2d - 1`` to ``q + d``;
a set of blocks that wraps round the root is two ranges, sent as one message (packed step).
MPICH's scatter (Thakur, Rabenseifner and Gropp 2005, sec. 4.3). Cost for powers of two
``lg p alpha + (p-1)/p n beta``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.ranks import ceil_log2, check_root, real
from distlab.collectives.plan.ranges import block_transfers, check_blocked
from distlab.collectives.plan.schedule import Schedule, collect, make_step

__all__ = ["binomial"]


def binomial(world_size: int, count: int, root: int = 0) -> Schedule:
    """Binomial-tree scatter of ``p`` blocks of ``count / p`` elements from ``root``."""
    p, n, m = check_blocked(world_size, count, "scatter")
    root = check_root(root, p)
    steps = []
    for k in range(ceil_log2(p)):
        d = 1 << (ceil_log2(p) - 1 - k)
        transfers = []
        for q in range(0, p, 2 * d):
            if q + d < p:
                blocks = [real(x, root, p) for x in range(q + d, min(q + 2 * d, p))]
                transfers += block_transfers(real(q, root, p), real(q + d, root, p), blocks, m,
                                             "copy")
        steps.append(make_step(transfers, f"binomial scatter (distance {d})", packed=True))
    return Schedule("binomial", p, n, collect(steps), {"root": root}, "scatter")
