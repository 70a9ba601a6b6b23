"""``tree``: binomial-tree reduce to rank 0, then binomial-tree broadcast from rank 0.

``ceil(lg p)`` rounds each way; in round ``k`` (mask ``2**k``) rank ``r`` with
``r % 2**(k+1) == 2**k`` sends its whole partial vector to ``r - 2**k``. The broadcast replays the
rounds in reverse. Works for any ``p`` (missing partners just skip a round).
Cost ``ceil(lg p) (2 alpha + 2 n beta + n gamma)``.
"""

from __future__ import annotations

from distlab.collectives.plan.schedule import (
    Schedule,
    Step,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["tree"]


def _masks(p: int) -> list[int]:
    out, mask = [], 1
    while mask < p:
        out.append(mask)
        mask <<= 1
    return out


def tree(world_size: int, count: int) -> Schedule:
    """Binomial-tree reduce then broadcast, rooted at rank 0."""
    p, n = check_world_size(world_size), check_count(count)
    steps: list[Step | None] = []
    for mask in _masks(p):
        steps.append(make_step((Transfer(r, r - mask, 0, n, "reduce")
                                for r in range(p) if r % (2 * mask) == mask),
                               f"tree reduce (distance {mask})"))
    for mask in reversed(_masks(p)):
        steps.append(make_step((Transfer(r, r + mask, 0, n, "copy")
                                for r in range(0, p, 2 * mask) if r + mask < p),
                               f"tree broadcast (distance {mask})"))
    return Schedule("tree", p, n, collect(steps), {})
