"""``recursive_doubling`` (butterfly): ``lg p`` exchanges of the whole vector.

In round ``k`` participant ``i`` exchanges with ``i XOR 2**k`` and both reduce, so after ``lg p``
rounds everyone holds the full reduction. Non-powers of two fold in MPICH's way
(:mod:`distlab.collectives.algorithms.fold`), adding one step before and one after. Cost for powers
of two: ``lg p (alpha + n beta + n gamma)``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.fold import Fold
from distlab.collectives.plan.schedule import (
    Schedule,
    Step,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["recursive_doubling"]


def recursive_doubling(world_size: int, count: int) -> Schedule:
    """Butterfly allreduce with MPICH folding for non-power-of-two ``world_size``."""
    p, n = check_world_size(world_size), check_count(count)
    f = Fold(p)
    steps: list[Step | None] = [f.pre(n)]
    mask = 1
    while mask < f.pof2:
        transfers = [Transfer(f.real(i), f.real(i ^ mask), 0, n, "reduce") for i in range(f.pof2)]
        steps.append(make_step(transfers, f"exchange (distance {mask})"))
        mask <<= 1
    steps.append(f.post(n))
    return Schedule("recursive_doubling", p, n, collect(steps), {})
