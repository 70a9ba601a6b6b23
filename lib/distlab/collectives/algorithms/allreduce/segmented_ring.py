"""``segmented_ring``: the ring pipelined over segments of ``segment_size`` elements.

The vector is cut into slices of ``p * segment_size`` elements (the last may be shorter); each slice
runs its own ring (blocks of at most ``segment_size`` elements), and slice ``k`` starts one step
after slice ``k - 1``. In global step ``t`` a rank therefore sends up to ``min(slices, 2 (p-1))``
segments to its right neighbour, and the executor reduces one arrived segment while the next is
still in flight. ``2 (p-1) + slices - 1`` steps in all; the same bytes as
:func:`distlab.collectives.algorithms.allreduce.ring.ring`, more messages, bounded temporary memory
and reduction overlapped with transfer. ``pieces=k`` further cuts every segment into ``k`` messages
(:mod:`distlab.collectives.plan.ranges`).
"""

from __future__ import annotations

from typing import Any

from distlab._checks import check_int
from distlab.collectives.algorithms.allreduce.ring import ring_allgather, ring_reduce_scatter
from distlab.collectives.plan.ranges import check_pieces
from distlab.collectives.plan.schedule import (
    Schedule,
    Step,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["DEFAULT_SEGMENT_SIZE", "segmented_ring"]

DEFAULT_SEGMENT_SIZE = 1 << 18  # elements (1 MiB of float32)


def check_segment_size(segment_size: Any) -> int:
    """Validate ``segment_size`` (elements, an int >= 1)."""
    return check_int("segment_size (elements)", segment_size, minimum=1)


def segmented_ring(world_size: int, count: int,
                   segment_size: int = DEFAULT_SEGMENT_SIZE, pieces: int = 1) -> Schedule:
    """Pipelined ring; ``segment_size`` is the largest segment in elements (>= 1), sent as
    ``pieces`` messages."""
    p, n = check_world_size(world_size), check_count(count)
    seg, k = check_segment_size(segment_size), check_pieces(pieces)
    ranks = list(range(p))
    width = p * seg
    slices = [(lo, min(lo + width, n)) for lo in range(0, n, width)]
    per_slice = [ring_reduce_scatter(ranks, a, b, k) + ring_allgather(ranks, a, b, k)
                 for a, b in slices]
    phases = 2 * (p - 1)
    steps: list[Step | None] = []
    for t in range(phases + len(slices) - 1 if p > 1 else 0):
        transfers: list[Transfer] = []
        for j in range(max(0, t - phases + 1), min(t, len(slices) - 1) + 1):
            transfers.extend(per_slice[j][t - j])
        steps.append(make_step(transfers, f"pipeline step {t + 1}"))
    return Schedule("segmented_ring", p, n, collect(steps), {"segment_size": seg, "pieces": k})
