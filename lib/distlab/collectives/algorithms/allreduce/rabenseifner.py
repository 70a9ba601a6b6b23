"""``rabenseifner``: recursive-halving reduce-scatter, then recursive-doubling allgather.

The vector is cut into ``pof2`` blocks. In halving round ``k`` (distance ``2**k``, k = 0, 1, ...)
each participant keeps half of its current window of blocks (the lower half if its bit ``k`` is 0)
and sends the other half to its partner ``i XOR 2**k``, which reduces it. After ``lg p`` rounds each
participant owns one fully reduced block; the allgather replays the rounds in reverse, each
exchanging (copying) its whole window. Non-powers of two fold in MPICH's way
(:mod:`distlab.collectives.algorithms.fold`). Cost for powers of two: ``2 lg p alpha + 2 (p-1)/p n
beta + (p-1)/p n gamma``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.fold import Fold
from distlab.collectives.plan.ranges import block_bounds
from distlab.collectives.plan.schedule import (
    Schedule,
    Step,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["rabenseifner"]


def rabenseifner(world_size: int, count: int) -> Schedule:
    """Reduce-scatter by recursive halving, allgather by recursive doubling (MPICH folding)."""
    p, n = check_world_size(world_size), check_count(count)
    f = Fold(p)
    bounds = block_bounds(n, f.pof2)

    def span(lo: int, hi: int) -> tuple[int, int]:  # block window -> element range
        return (bounds[lo][0], bounds[hi - 1][1])

    windows = [(0, f.pof2)] * f.pof2  # per participant: block window [lo, hi) it still holds
    history: list[tuple[int, list[tuple[int, int]]]] = []
    steps: list[Step | None] = [f.pre(n)]
    mask = 1
    while mask < f.pof2:
        new_windows = []
        transfers = []
        for i in range(f.pof2):
            lo, hi = windows[i]
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if not i & mask else ((mid, hi), (lo, mid))
            start, stop = span(*give)
            transfers.append(Transfer(f.real(i), f.real(i ^ mask), start, stop, "reduce"))
            new_windows.append(keep)
        history.append((mask, new_windows))
        steps.append(make_step(transfers, f"reduce-scatter (distance {mask})"))
        windows = new_windows
        mask <<= 1
    for mask, held in reversed(history):
        transfers = [Transfer(f.real(i), f.real(i ^ mask), *span(*held[i]), "copy")
                     for i in range(f.pof2)]
        steps.append(make_step(transfers, f"allgather (distance {mask})"))
    steps.append(f.post(n))
    return Schedule("rabenseifner", p, n, collect(steps), {})
