"""``bruck`` all-gather: ``ceil(lg p)`` steps for any ``p``.

After step ``k`` rank ``i`` holds the blocks of ranks ``i .. i + 2**(k+1) - 1`` (mod ``p``): in
step ``k`` it sends the ``min(2**k, p - 2**k)`` blocks ``i, i + 1, ...`` it holds to rank
``i - 2**k`` (Bruck et al. 1997; MPICH's all-gather for non-powers of two, Thakur, Rabenseifner
and Gropp 2005, sec. 4.2). Blocks stay at their owner's place, so a run that wraps past block
``p - 1`` is two ranges, sent as one message (packed step; MPICH rotates a temporary buffer
instead). Cost ``ceil(lg p) alpha + (p-1)/p n beta``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.ranks import ceil_log2
from distlab.collectives.plan.ranges import block_transfers, check_blocked
from distlab.collectives.plan.schedule import Schedule, collect, make_step

__all__ = ["bruck"]


def bruck(world_size: int, count: int) -> Schedule:
    """Bruck all-gather of ``p`` blocks of ``count / p`` elements."""
    p, n, m = check_blocked(world_size, count, "all_gather")
    steps = []
    for k in range(ceil_log2(p)):
        d = 1 << k
        sent = min(d, p - d)
        transfers = []
        for i in range(p):
            transfers += block_transfers(i, (i - d) % p, [(i + j) % p for j in range(sent)], m,
                                         "copy")
        steps.append(make_step(transfers, f"bruck (distance {d})", packed=True))
    return Schedule("bruck", p, n, collect(steps), {}, "all_gather")
