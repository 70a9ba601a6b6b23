"""``gloo_ring``: the allreduce that ``torch.distributed.all_reduce`` runs on CPU tensors (gloo).

Read from the source, not guessed:

- PyTorch's ``ProcessGroupGloo::allreduce`` sends a dense CPU tensor to ``AsyncAllreduceWork``,
  which fills a ``gloo::AllreduceOptions`` (reduce function, tag, timeout, output) and calls
  ``gloo::allreduce(opts)`` without setting an algorithm or a segment size
  (pytorch/pytorch ``torch/csrc/distributed/c10d/ProcessGroupGloo.cpp`` and, since 2.8,
  ``ProcessGroupGlooDetail.hpp``, class ``AsyncAllreduceWork``).
- gloo's ``allreduce()`` (pytorch/gloo ``gloo/allreduce.cc``, commit 70dc360) runs ``ring()``
  for ``Algorithm::UNSPECIFIED`` (the default; ``BCUBE`` only when asked for), whatever the
  size; one process returns at once.
- ``ring()`` cuts the buffer into ``numSegments = roundUp(max(ceil(bytes / maxSegmentBytes),
  2 p), p)`` segments of ``ceil(bytes / numSegments)`` bytes rounded up to whole elements
  (``maxSegmentBytes`` is ``kMaxSegmentSize = 1 MiB``, ``gloo/allreduce.h``, rounded down to
  whole elements), ``S = numSegments / p`` segments per rank. Rank ``r`` sends to ``r - 1`` and
  receives from ``r + 1``. Reduce-scatter: ``(p - 1) S`` iterations; in iteration ``i`` rank
  ``r`` sends segment ``((r + 1) S + i) mod numSegments`` and reduces the segment
  ``((r + 2) S + i)`` it receives. All-gather: ``(p - 1) S`` iterations; rank ``r`` sends
  segment ``(r S + i)`` and stores segment ``((r + 1) S + i)``. Segments past the end of the
  buffer are shorter or empty and are skipped. Two iterations are in flight at a time: gloo
  waits for (and reduces) iteration ``i - 2`` after posting iteration ``i``, so the reduction of
  one segment overlaps the transfer of the next.

Here each iteration is one :class:`~distlab.collectives.plan.schedule.Step` of ``p`` transfers (``r
-> r - 1``), so the schedule has ``2 (p - 1) S`` steps of at most 1 MiB per message: 4 steps of 16
KiB for 64 KiB on 2 ranks, 96 steps of 1 MiB for 64 MiB on 4 ranks. ``options["in_flight"] = 2``
records the two-deep pipeline for the cost model (:func:`distlab.collectives.model.cost.step_costs`
then overlaps a step's fixed costs, bytes and reduction with the other step in flight), and
``options["phases"]`` the steps of its two loops (reduce-scatter, all-gather), each of which starts
with an empty pipeline and waits for its last two iterations before the next begins. distlab's own
executor runs the same schedule one step at a time (``all_reduce(t, algorithm="gloo_ring")``), so
its steps do not overlap there.
"""

from __future__ import annotations

from typing import Any

from distlab._checks import check_int
from distlab.collectives.plan.schedule import (
    Schedule,
    Step,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["GLOO_IN_FLIGHT", "GLOO_MAX_SEGMENT_BYTES", "gloo_ring", "gloo_segments"]

GLOO_MAX_SEGMENT_BYTES = 1024 * 1024
"""``AllreduceOptionsImpl::kMaxSegmentSize`` (pytorch/gloo ``gloo/allreduce.h``): the largest
send/receive of the ring, bytes."""

GLOO_IN_FLIGHT = 2
"""Iterations of gloo's ring in flight at once: it posts iteration ``i`` and then waits for
iteration ``i - 2`` ("we issue send/recv operations on iterations 0 and 1 and wait for them to
complete on iterations 2 and 3", ``gloo/allreduce.cc`` ``ring()``)."""


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def gloo_segments(world_size: int, count: int, itemsize: int = 4,
                  max_segment_bytes: int = GLOO_MAX_SEGMENT_BYTES) -> tuple[int, int]:
    """``(numSegments, elements per segment)`` of gloo's ring for ``count`` elements of
    ``itemsize`` bytes on ``world_size`` ranks (``gloo/allreduce.cc`` ``ring()``).

    ``ceil(roundUp(ceil(bytes / N), itemsize) / itemsize) == ceil(count / N)``, so the segment
    in elements needs no byte arithmetic once ``N`` is known.
    """
    p, n = check_world_size(world_size), check_count(count)
    size = check_int("itemsize (bytes per element)", itemsize, minimum=1)
    cap = check_int("max_segment_bytes", max_segment_bytes, minimum=1)
    max_bytes = size * max(1, cap // size)
    segments = _round_up(max(-(-(n * size) // max_bytes), 2 * p), p)
    return segments, -(-n // segments) if n else 0


def gloo_ring(world_size: int, count: int, itemsize: int = 4,
              max_segment_bytes: int = GLOO_MAX_SEGMENT_BYTES) -> Schedule:
    """gloo's ring allreduce as it runs for ``count`` elements of ``itemsize`` bytes (the
    segmentation depends on bytes); ``max_segment_bytes`` is gloo's ``maxSegmentSize``."""
    p, n = check_world_size(world_size), check_count(count)
    segments, seg = gloo_segments(p, n, itemsize, max_segment_bytes)
    options: dict[str, Any] = {"itemsize": itemsize, "max_segment_bytes": max_segment_bytes,
                               "segments": segments, "in_flight": GLOO_IN_FLIGHT}
    if p == 1 or n == 0:
        return Schedule("gloo_ring", p, n, (), options)
    per_rank = segments // p

    def bounds(k: int) -> tuple[int, int]:
        k %= segments
        return min(k * seg, n), min((k + 1) * seg, n)

    def step(i: int, first: int, kind: str, label: str) -> Step | None:
        return make_step((Transfer(r, (r - 1) % p, *bounds((r + first) * per_rank + i), kind)
                          for r in range(p)), label)

    iters = (p - 1) * per_rank
    scatter = collect(step(i, 1, "reduce", f"reduce-scatter {i + 1}/{iters}")
                      for i in range(iters))
    gather = collect(step(i, 0, "copy", f"allgather {i + 1}/{iters}") for i in range(iters))
    options["phases"] = (len(scatter), len(gather))
    return Schedule("gloo_ring", p, n, scatter + gather, options)
