"""``recursive_doubling`` all-gather: ``lg p`` exchanges, each doubling what a rank holds.

In round ``k`` participant ``i`` exchanges everything it holds (the blocks of participants ``i``
with the low ``k`` bits cleared .. set) with ``i XOR 2**k`` (MPICH's all-gather for powers of two,
Thakur, Rabenseifner and Gropp 2005, sec. 4.2). Other world sizes fold as
:mod:`distlab.collectives.algorithms.fold` does: each even rank below ``2 rem`` first gives its
block to the next odd rank, which then speaks for both blocks (so every window stays one range), and
at the end sends it everything else (two ranges: one packed message). Cost for powers of two ``lg p
alpha + (p-1)/p n beta``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.fold import Fold
from distlab.collectives.plan.ranges import check_blocked
from distlab.collectives.plan.schedule import Schedule, Step, Transfer, collect, make_step

__all__ = ["recursive_doubling"]


def recursive_doubling(world_size: int, count: int) -> Schedule:
    """Recursive-doubling all-gather of ``p`` blocks of ``count / p`` elements."""
    p, n, m = check_blocked(world_size, count, "all_gather")
    f = Fold(p)

    def lo(i: int) -> int:  # first real block of participant i
        return 2 * i if i < f.rem else i + f.rem

    def hi(i: int) -> int:  # one past its last real block
        return lo(i) + (2 if i < f.rem else 1)

    steps: list[Step | None] = [make_step(
        (Transfer(r, r + 1, r * m, (r + 1) * m, "copy") for r in range(0, 2 * f.rem, 2)),
        "fold extra ranks in")]
    mask = 1
    while mask < f.pof2:
        transfers = []
        for i in range(f.pof2):
            first = i & ~(mask - 1)
            transfers.append(Transfer(f.real(i), f.real(i ^ mask), lo(first) * m,
                                      hi(first + mask - 1) * m, "copy"))
        steps.append(make_step(transfers, f"exchange (distance {mask})"))
        mask <<= 1
    steps.append(make_step(
        (t for r in range(0, 2 * f.rem, 2)
         for t in (Transfer(r + 1, r, 0, r * m, "copy"), Transfer(r + 1, r, (r + 1) * m, n,
                                                                  "copy"))),
        "send the rest to folded ranks", packed=True))
    return Schedule("recursive_doubling", p, n, collect(steps), {}, "all_gather")
