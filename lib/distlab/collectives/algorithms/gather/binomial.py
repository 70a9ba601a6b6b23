"""``binomial`` gather: ``ceil(lg p)`` rounds of a binomial tree onto the root.

In round ``k`` (distance ``d = 2**k``), relative rank ``q`` with ``q mod 2d == d`` sends the
blocks of its subtree (relative ranks ``q .. q + d - 1``) to ``q - d``. Blocks sit at their
owner's place in the buffer, so a subtree that wraps round the root is two ranges: the step is
packed (one message, as MPICH's temporary buffer in relative order makes it). MPICH's gather
(Thakur, Rabenseifner and Gropp 2005, sec. 4.3). Cost for powers of two
``lg p alpha + (p-1)/p n beta``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.ranks import ceil_log2, check_root, real
from distlab.collectives.plan.ranges import block_transfers, check_blocked
from distlab.collectives.plan.schedule import Schedule, collect, make_step

__all__ = ["binomial"]


def binomial(world_size: int, count: int, root: int = 0) -> Schedule:
    """Binomial-tree gather of ``p`` blocks of ``count / p`` elements onto ``root``."""
    p, n, m = check_blocked(world_size, count, "gather")
    root = check_root(root, p)
    steps = []
    for k in range(ceil_log2(p)):
        d = 1 << k
        transfers = []
        for q in range(d, p, 2 * d):
            blocks = [real(x, root, p) for x in range(q, min(q + d, p))]
            transfers += block_transfers(real(q, root, p), real(q - d, root, p), blocks, m,
                                         "copy")
        steps.append(make_step(transfers, f"binomial gather (distance {d})", packed=True))
    return Schedule("binomial", p, n, collect(steps), {"root": root}, "gather")
