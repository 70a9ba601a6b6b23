"""``ring``: ring reduce-scatter then ring allgather, ``2 (p-1)`` steps of ``n / p`` elements.

Rank ``i`` always sends to ``i + 1`` (mod p). In reduce-scatter step ``s`` it sends block ``(i - s)
mod p``, which the receiver reduces; after ``p - 1`` steps rank ``i`` owns the reduced block ``(i +
1) mod p``. The allgather then passes reduced blocks around (copy). Cost ``2 (p-1) alpha + 2 (p-1)/p
n beta + (p-1)/p n gamma``. The building blocks over any ordered list of ranks and any element range
are reused by :mod:`distlab.collectives.algorithms.allreduce.hierarchical` and the ring all-gather
and reduce-scatter collectives. ``pieces=k`` cuts every step's block into ``k`` messages
(:mod:`distlab.collectives.plan.ranges`): the same bytes, ``k`` times the messages, each piece
reduced as it lands while the next is in flight.
"""

from __future__ import annotations

from collections.abc import Sequence

from distlab.collectives.plan.ranges import block_bounds, check_pieces, split
from distlab.collectives.plan.schedule import (
    Schedule,
    Step,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["ring", "ring_allgather", "ring_reduce_scatter"]


def ring_reduce_scatter(ranks: Sequence[int], start: int, stop: int,
                        pieces: int = 1) -> list[list[Transfer]]:
    """Transfers of each reduce-scatter step over ``ranks`` (a ring) for elements ``[start, stop)``.

    Afterwards ``ranks[i]`` owns the reduced block ``(i + 1) % len(ranks)`` of the range. Each
    block travels as ``pieces`` messages.
    """
    m = len(ranks)
    blocks = [(start + a, start + b) for a, b in block_bounds(stop - start, m)]
    return [split([Transfer(ranks[i], ranks[(i + 1) % m], *blocks[(i - s) % m], "reduce")
                   for i in range(m)], pieces) for s in range(m - 1)]


def ring_allgather(ranks: Sequence[int], start: int, stop: int,
                   pieces: int = 1) -> list[list[Transfer]]:
    """Transfers of each allgather step, starting from the ownership :func:`ring_reduce_scatter`
    leaves (``ranks[i]`` holds block ``(i + 1) % len(ranks)``); ``pieces`` messages per block."""
    m = len(ranks)
    blocks = [(start + a, start + b) for a, b in block_bounds(stop - start, m)]
    return [split([Transfer(ranks[i], ranks[(i + 1) % m], *blocks[(i + 1 - s) % m], "copy")
                   for i in range(m)], pieces) for s in range(m - 1)]


def ring(world_size: int, count: int, pieces: int = 1) -> Schedule:
    """Ring allreduce over ranks ``0 -> 1 -> ... -> p-1 -> 0``; ``pieces`` messages per block."""
    p, n, k = check_world_size(world_size), check_count(count), check_pieces(pieces)
    ranks = list(range(p))
    steps: list[Step | None] = []
    for s, ts in enumerate(ring_reduce_scatter(ranks, 0, n, k)):
        steps.append(make_step(ts, f"reduce-scatter {s + 1}/{p - 1}"))
    for s, ts in enumerate(ring_allgather(ranks, 0, n, k)):
        steps.append(make_step(ts, f"allgather {s + 1}/{p - 1}"))
    return Schedule("ring", p, n, collect(steps), {"pieces": k})
