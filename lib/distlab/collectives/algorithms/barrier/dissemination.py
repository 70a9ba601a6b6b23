"""``dissemination`` barrier: ``ceil(lg p)`` rounds; in round ``k`` rank ``i`` signals
``i + 2**k``.

After round ``k`` rank ``i`` has heard (through chains of signals) from ranks
``i - 2**(k+1) + 1 .. i``, so after ``ceil(lg p)`` rounds from every rank (Hensgen, Finkel and
Manber 1988; MPICH's barrier, Thakur, Rabenseifner and Gropp 2005). A signal is a ``count``-token
message (default 1) that the receiver folds into its own with a reduction; a rank may hear from
another twice, which a barrier does not mind. Cost ``ceil(lg p) alpha`` (plus the tokens'
bytes).
"""

from __future__ import annotations

from distlab.collectives.algorithms.ranks import ceil_log2
from distlab.collectives.plan.schedule import (
    Schedule,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["dissemination"]


def dissemination(world_size: int, count: int = 1) -> Schedule:
    """Dissemination barrier over ``count`` tokens (1 at run time)."""
    p, n = check_world_size(world_size), check_count(count)
    steps = [make_step((Transfer(i, (i + (1 << k)) % p, 0, n, "reduce") for i in range(p)),
                       f"signal (distance {1 << k})") for k in range(ceil_log2(p))]
    return Schedule("dissemination", p, n, collect(steps), {}, "barrier")
