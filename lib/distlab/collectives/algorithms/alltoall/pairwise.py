"""``pairwise`` all-to-all: in step ``s`` rank ``i`` sends its block for ``i + s`` to ``i + s``.

``p - 1`` steps, one message out and one in per rank per step (MPICH's long-message all-to-all,
Thakur, Rabenseifner and Gropp 2005, sec. 4.6; the ``i + s`` / ``i - s`` pairing works for any
``p``). Block ``(s, d)`` is ``[(s p + d) m, (s p + d + 1) m)``. Cost
``(p-1) alpha + (p-1)/p n beta`` with ``n`` a rank's bytes (``p`` blocks).
"""

from __future__ import annotations

from distlab.collectives.plan.ranges import check_blocked
from distlab.collectives.plan.schedule import Schedule, Transfer, collect, make_step

__all__ = ["pairwise"]


def pairwise(world_size: int, count: int) -> Schedule:
    """Pairwise-exchange all-to-all; ``count`` is one rank's buffer (``p`` blocks)."""
    p, n, m = check_blocked(world_size, count, "all_to_all")

    def block(s: int, d: int) -> tuple[int, int]:
        return (s * p + d) * m, (s * p + d + 1) * m

    steps = [make_step((Transfer(i, (i + s) % p, *block(i, (i + s) % p), "copy")
                        for i in range(p)), f"pairwise {s}/{p - 1}") for s in range(1, p)]
    return Schedule("pairwise", p, p * n, collect(steps), {}, "all_to_all")
