"""``binomial`` reduce: ``ceil(lg p)`` rounds of a binomial tree onto the root.

In round ``k`` (distance ``d = 2**k``), relative rank ``q`` with ``q mod 2d == d`` sends its
partial result (the whole vector) to ``q - d``, which reduces it (MPICH's short-message reduce
for commutative operations, Thakur, Rabenseifner and Gropp 2005, sec. 4.5). Cost
``ceil(lg p) (alpha + n beta + n gamma)``.
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
    """Binomial-tree reduce of ``count`` elements onto ``root``."""
    p, n = check_world_size(world_size), check_count(count)
    root = check_root(root, p)
    steps = []
    for k in range(ceil_log2(p)):
        d = 1 << k
        steps.append(make_step((Transfer(real(q, root, p), real(q - d, root, p), 0, n, "reduce")
                                for q in range(d, p, 2 * d)),
                               f"binomial reduce (distance {d})"))
    return Schedule("binomial", p, n, collect(steps), {"root": root}, "reduce")
