"""``naive``: every rank sends its whole vector to rank 0, which reduces and sends the result back.

The parameter-server shape: 2 steps, but rank 0 receives and then sends ``p - 1`` full vectors,
so its link carries ``2 (p - 1) n`` bytes. Cost ``2 (p-1) (alpha + n beta) + (p-1) n gamma``.
"""

from __future__ import annotations

from distlab.collectives.plan.schedule import (
    Schedule,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["naive"]


def naive(world_size: int, count: int) -> Schedule:
    """Reduce to rank 0 in one step (``p - 1`` messages into rank 0), then broadcast in one step."""
    p, n = check_world_size(world_size), check_count(count)
    steps = collect([
        make_step((Transfer(r, 0, 0, n, "reduce") for r in range(1, p)), "reduce to rank 0"),
        make_step((Transfer(0, r, 0, n, "copy") for r in range(1, p)), "broadcast from rank 0"),
    ])
    return Schedule("naive", p, n, steps, {})
