"""``binomial`` broadcast: ``ceil(lg p)`` rounds of a binomial tree from the root.

In round ``k`` (distance ``d = 2**(ceil(lg p) - 1 - k)``, halving), every relative rank ``q``
that already holds the data and is a multiple of ``2 d`` sends the whole vector to ``q + d``
(MPICH's short-message broadcast, Thakur, Rabenseifner and Gropp 2005, sec. 4.1). Cost
``ceil(lg p) (alpha + n beta)``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.ranks import ceil_log2, check_root, real
from distlab.collectives.plan.schedule import (
    Schedule,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["binomial"]


def binomial(world_size: int, count: int, root: int = 0) -> Schedule:
    """Binomial-tree broadcast of ``count`` elements from ``root``."""
    p, n = check_world_size(world_size), check_count(count)
    root = check_root(root, p)
    steps = []
    for k in range(ceil_log2(p)):
        d = 1 << (ceil_log2(p) - 1 - k)
        steps.append(make_step((Transfer(real(q, root, p), real(q + d, root, p), 0, n, "copy")
                                for q in range(0, p, 2 * d) if q + d < p),
                               f"binomial broadcast (distance {d})"))
    return Schedule("binomial", p, n, collect(steps), {"root": root}, "broadcast")
