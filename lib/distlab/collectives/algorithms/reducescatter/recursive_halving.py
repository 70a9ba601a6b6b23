"""``recursive_halving`` reduce-scatter: ``lg p`` exchanges, each halving what a rank reduces.

Every participant starts with the window of all blocks. At distance ``d = p/2, p/4, ..., 1``
participant ``i`` keeps the half of its window that holds its own blocks and sends the other half to
``i XOR d``, which reduces it; at the end ``i`` holds its blocks reduced over every rank (MPICH's
short-message reduce-scatter for commutative operations, Thakur, Rabenseifner and Gropp 2005, sec.
4.4). Other world sizes fold as :mod:`distlab.collectives.algorithms.fold` does: each even rank
below ``2 rem`` first reduces its whole buffer into the next odd rank, which then speaks for both
blocks, and at the end hands it its block. Cost for powers of two ``lg p alpha + (p-1)/p n beta +
(p-1)/p n gamma``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.fold import Fold
from distlab.collectives.plan.ranges import check_blocked
from distlab.collectives.plan.schedule import Schedule, Step, Transfer, collect, make_step

__all__ = ["recursive_halving"]


def recursive_halving(world_size: int, count: int) -> Schedule:
    """Recursive-halving reduce-scatter of ``p`` blocks of ``count / p`` elements."""
    p, n, m = check_blocked(world_size, count, "reduce_scatter")
    f = Fold(p)

    def lo(i: int) -> int:  # first real block of participant i
        return 2 * i if i < f.rem else i + f.rem

    steps: list[Step | None] = [f.pre(n)]
    windows = [(0, f.pof2)] * f.pof2  # participants whose blocks a participant still reduces
    d = f.pof2 // 2
    while d >= 1:
        kept, transfers = [], []
        for i in range(f.pof2):
            a, b = windows[i]
            mid = (a + b) // 2
            keep, give = ((a, mid), (mid, b)) if i < mid else ((mid, b), (a, mid))
            end = lo(give[1]) if give[1] < f.pof2 else p
            transfers.append(Transfer(f.real(i), f.real(i ^ d), lo(give[0]) * m, end * m,
                                      "reduce"))
            kept.append(keep)
        steps.append(make_step(transfers, f"recursive halving (distance {d})"))
        windows = kept
        d //= 2
    steps.append(make_step((Transfer(r + 1, r, r * m, (r + 1) * m, "copy")
                            for r in range(0, 2 * f.rem, 2)), "hand folded ranks their block"))
    return Schedule("recursive_halving", p, n, collect(steps), {}, "reduce_scatter")
