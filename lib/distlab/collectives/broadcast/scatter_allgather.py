"""``scatter_allgather`` broadcast (van de Geijn): binomial scatter of ``p`` chunks, ring
all-gather.

The root's vector is cut into ``p`` chunks; a binomial scatter (:mod:`..scatter.binomial`'s
rounds) leaves relative rank ``q`` with chunk ``q``, then a ring all-gather over the relative
ranks passes the chunks round (``p - 1`` steps). MPICH's long-message broadcast (Thakur,
Rabenseifner and Gropp 2005, sec. 4.1; van de Geijn et al.). Cost for powers of two
``(lg p + p - 1) alpha + 2 (p-1)/p n beta``.
"""

from __future__ import annotations

from ..blocks import ceil_log2, check_root, real
from ..schedule import (Schedule, Transfer, check_count, check_world_size, chunk_bounds, collect,
                        make_step)

__all__ = ["scatter_allgather"]


def scatter_allgather(world_size: int, count: int, root: int = 0) -> Schedule:
    """Van de Geijn broadcast of ``count`` elements from ``root``."""
    p, n = check_world_size(world_size), check_count(count)
    root = check_root(root, p)
    chunks = chunk_bounds(n, p)  # chunk q ends on relative rank q

    def span(lo: int, hi: int) -> tuple[int, int]:
        return chunks[lo][0], chunks[hi - 1][1]

    steps = []
    for k in range(ceil_log2(p)):
        d = 1 << (ceil_log2(p) - 1 - k)
        steps.append(make_step((Transfer(real(q, root, p), real(q + d, root, p),
                                         *span(q + d, min(q + 2 * d, p)), "copy")
                                for q in range(0, p, 2 * d) if q + d < p),
                               f"scatter (distance {d})"))
    for s in range(p - 1):  # ring all-gather: relative q holds chunks q, q-1, ..., sends the newest
        steps.append(make_step((Transfer(real(q, root, p), real(q + 1, root, p),
                                         *chunks[(q - s) % p], "copy") for q in range(p)),
                               f"ring allgather {s + 1}/{p - 1}"))
    return Schedule("scatter_allgather", p, n, collect(steps), {"root": root}, "broadcast")
