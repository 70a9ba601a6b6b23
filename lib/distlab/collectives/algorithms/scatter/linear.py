"""``linear`` scatter: the root sends every rank its block in one step.

The root sends ``p - 1`` messages at once (Thakur, Rabenseifner and Gropp 2005, sec. 4.3). Cost
``(p-1) alpha + (p-1)/p n beta``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.ranks import check_root
from distlab.collectives.plan.ranges import check_blocked
from distlab.collectives.plan.schedule import Schedule, Transfer, collect, make_step

__all__ = ["linear"]


def linear(world_size: int, count: int, root: int = 0) -> Schedule:
    """The root's block ``r`` (``count / p`` elements) straight to each rank ``r``."""
    p, n, m = check_blocked(world_size, count, "scatter")
    root = check_root(root, p)
    step = make_step((Transfer(root, r, r * m, (r + 1) * m, "copy") for r in range(p)
                      if r != root), "the root to every rank")
    return Schedule("linear", p, n, collect([step]), {"root": root}, "scatter")
