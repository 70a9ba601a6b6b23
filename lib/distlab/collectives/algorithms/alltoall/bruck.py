"""``bruck`` all-to-all: ``ceil(lg p)`` steps, each block hopping by the bits of its distance.

Block ``(s, d)`` has to travel ``(d - s) mod p`` ranks forward; in step ``k`` every rank sends
rank ``+ 2**k`` all the blocks it holds whose distance has bit ``k`` set, so each block arrives
after the hops of its distance's bits (Bruck et al. 1997; MPICH's short-message all-to-all,
Thakur, Rabenseifner and Gropp 2005, sec. 4.6). The blocks a rank sends in a step are scattered
over the buffer: they travel as one message (packed step; MPICH packs them into a temporary
buffer). Cost for powers of two ``lg p alpha + (n/2) lg p beta`` with ``n`` a rank's bytes.
"""

from __future__ import annotations

from distlab.collectives.algorithms.ranks import ceil_log2
from distlab.collectives.plan.ranges import check_blocked
from distlab.collectives.plan.schedule import Schedule, Transfer, collect, make_step

__all__ = ["bruck"]


def bruck(world_size: int, count: int) -> Schedule:
    """Bruck all-to-all; ``count`` is one rank's buffer (``p`` blocks)."""
    p, n, m = check_blocked(world_size, count, "all_to_all")
    steps = []
    for k in range(ceil_log2(p)):
        bit = 1 << k
        transfers = []
        for s in range(p):
            for d in range(p):
                dist = (d - s) % p
                if dist & bit:
                    holder = (s + (dist & (bit - 1))) % p
                    start = (s * p + d) * m
                    transfers.append(Transfer(holder, (holder + bit) % p, start, start + m,
                                              "copy"))
        transfers.sort(key=lambda t: (t.src, t.start))
        steps.append(make_step(transfers, f"bruck (distance {bit})", packed=True))
    return Schedule("bruck", p, p * n, collect(steps), {}, "all_to_all")
