"""``linear`` gather: every rank sends its block to the root in one step.

The root receives ``p - 1`` messages at once (MPICH's gather for very small communicators;
Thakur, Rabenseifner and Gropp 2005, sec. 4.3). Cost ``(p-1) alpha + (p-1)/p n beta``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.ranks import check_root
from distlab.collectives.plan.ranges import check_blocked
from distlab.collectives.plan.schedule import Schedule, Transfer, collect, make_step

__all__ = ["linear"]


def linear(world_size: int, count: int, root: int = 0) -> Schedule:
    """Each rank's block of ``count / p`` elements straight to ``root``."""
    p, n, m = check_blocked(world_size, count, "gather")
    root = check_root(root, p)
    step = make_step((Transfer(r, root, r * m, (r + 1) * m, "copy") for r in range(p)
                      if r != root), "every rank to the root")
    return Schedule("linear", p, n, collect([step]), {"root": root}, "gather")
