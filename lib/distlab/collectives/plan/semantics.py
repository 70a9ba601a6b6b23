"""What each rank holds before and after every collective: defined once per collective.

Every collective runs on a flat buffer whose elements have fixed identities (the same index means
the same datum on every rank), and a schedule moves elements between ranks at the same index.
``count`` is the call's element count as nccl-tests counts it (the vector of an allreduce,
broadcast or reduce; the whole gathered buffer of ``p`` blocks of ``m = count / p`` elements for
gather, scatter, all-gather and reduce-scatter; one rank's send buffer of ``p`` blocks for
all-to-all; the tokens of a barrier). The buffer (:attr:`CollectiveLayout.buffer` elements):

============== =========== ================================= ===================================
collective     buffer      rank r's input (before)           rank r's result (after)
============== =========== ================================= ===================================
all_reduce     n           all n (its own data)              all n: every rank's, reduced
broadcast      n           the root: all n                   all n: the root's
reduce         n           all n                             the root: all n, reduced
gather         p m         block r                           the root: block b from rank b
scatter        p m         the root: block b for rank b      block r (the root's)
all_gather     p m         block r                           block b from rank b, every b
reduce_scatter p m         all p blocks                      block r, reduced over all ranks
all_to_all     p p m       blocks (r, d), d = 0..p-1         blocks (s, r) from rank s, every s
barrier        n tokens    its own tokens                    every rank's (heard from all)
============== =========== ================================= ===================================

Block ``b`` is elements ``[b m, (b + 1) m)``; all-to-all block ``(s, d)`` (what rank ``s``
sends rank ``d``) is ``[(s p + d) m, (s p + d + 1) m)``. :meth:`CollectiveLayout.initial` and
:meth:`CollectiveLayout.expected` give the same table as bitmasks (bit ``r``: rank ``r``'s data),
:meth:`CollectiveLayout.inputs` / :meth:`CollectiveLayout.outputs` as buffer ranges;
:func:`distlab.collectives.check.verify.check` verifies a schedule against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from distlab._checks import check_choice, check_int
from distlab.collectives.plan.schedule import Schedule
from distlab.vocabulary import COLLECTIVES

__all__ = ["REDUCING", "ROOTED", "CollectiveLayout", "count_for_bytes", "layout",
           "layout_of"]


# The collectives' names and nccl-tests' bus bandwidth factors: distlab.vocabulary.
ROOTED = ("broadcast", "reduce", "gather", "scatter")
REDUCING = ("all_reduce", "reduce", "reduce_scatter", "barrier")  # combine (a barrier: OR)
BLOCKED = ("gather", "scatter", "all_gather", "reduce_scatter", "all_to_all")
MAX_RANKS = 64  # one bit per rank in a uint64 mask

Span = tuple[int, int]


@dataclass(frozen=True)
class CollectiveLayout:
    """The buffer of one collective call: ``p`` ranks, the call's ``count``, the ``root``."""

    collective: str
    world_size: int
    count: int
    root: int = 0

    @property
    def block(self) -> int:
        """Elements per block (``m``; the whole count for unblocked collectives)."""
        return self.count // self.world_size if self.collective in BLOCKED else self.count

    @property
    def buffer(self) -> int:
        """Elements of the flat buffer every rank's schedule indexes."""
        return self.world_size * self.count if self.collective == "all_to_all" else self.count

    def _block(self, b: int) -> Span:
        return (b * self.block, (b + 1) * self.block)

    def inputs(self, rank: int) -> list[Span]:
        """Buffer ranges holding ``rank``'s input, in the input tensor's order (empty: none)."""
        c, n = self.collective, self.count
        if c in ("all_reduce", "reduce", "reduce_scatter", "barrier"):
            return [(0, n)] if n else []
        if c in ("broadcast", "scatter"):
            return [(0, n)] if rank == self.root and n else []
        if c in ("gather", "all_gather"):
            return [self._block(rank)] if self.block else []
        return [(rank * n, (rank + 1) * n)] if n else []  # all_to_all: blocks (rank, *)

    def outputs(self, rank: int) -> list[Span]:
        """Buffer ranges holding ``rank``'s result, in the output tensor's order."""
        c, p, n, m = self.collective, self.world_size, self.count, self.block
        if not n:
            return []
        if c in ("all_reduce", "broadcast", "all_gather", "barrier"):
            return [(0, n)]
        if c in ("reduce", "gather"):
            return [(0, n)] if rank == self.root else []
        if c in ("scatter", "reduce_scatter"):
            return [self._block(rank)] if m else []
        return [((s * p + rank) * m, (s * p + rank + 1) * m) for s in range(p)] if m else []

    def initial(self) -> np.ndarray:
        """``(p, buffer)`` uint64 masks: bit ``r`` where the element holds rank ``r``'s data
        before the collective (0: nothing, the element is undefined there)."""
        p = self.world_size
        out = np.zeros((p, self.buffer), dtype=np.uint64)
        for r in range(p):
            owner = self.root if self.collective in ("broadcast", "scatter") else r
            for a, b in self.inputs(r):
                out[r, a:b] = np.uint64(1) << np.uint64(owner)
        return out

    def expected(self) -> tuple[np.ndarray, np.ndarray]:
        """``(masks, required)``: the masks every required element must end with, and the
        ``(p, buffer)`` bool array of required elements (the rest: don't care)."""
        p, c = self.world_size, self.collective
        masks = np.zeros((p, self.buffer), dtype=np.uint64)
        required = np.zeros((p, self.buffer), dtype=bool)
        full = np.uint64((1 << p) - 1) if p < MAX_RANKS else np.uint64(2**64 - 1)
        for r in range(p):
            spans = self.outputs(r)
            for i, (a, b) in enumerate(spans):
                required[r, a:b] = True
                if c in REDUCING:
                    masks[r, a:b] = full
                elif c == "broadcast" or c == "scatter":
                    masks[r, a:b] = np.uint64(1) << np.uint64(self.root)
                elif c == "all_to_all":
                    masks[r, a:b] = np.uint64(1) << np.uint64(i)  # block (i, r) from rank i
                else:  # gather, all_gather: block b from rank b
                    for blk in range(p):
                        lo, hi = self._block(blk)
                        masks[r, lo:hi] = np.uint64(1) << np.uint64(blk)
        return masks, required


def check_collective(collective: Any) -> str:
    """Return ``collective`` if it is one of :data:`COLLECTIVES`, else raise listing them."""
    return check_choice("collective", collective, COLLECTIVES)


def layout(collective: str, world_size: int, count: int, root: int = 0) -> CollectiveLayout:
    """The validated :class:`CollectiveLayout` of a call (``count`` divisible by ``world_size``
    for the blocked collectives, ``root`` in ``[0, world_size)``)."""
    c = check_collective(collective)
    p = check_int("world_size", world_size, minimum=1)
    n = check_int("count (elements)", count, minimum=0)
    if c in BLOCKED and n % p:
        raise ValueError(f"count (elements) must be a multiple of world_size={p} for {c} "
                         f"(p blocks of count / p elements), got {n}")
    root = check_int("root", root, minimum=0, maximum=p - 1)
    return CollectiveLayout(c, p, n, root)


def layout_of(schedule: Schedule) -> CollectiveLayout:
    """The :class:`CollectiveLayout` a schedule was built for (its collective, size and root
    option)."""
    p, c = schedule.world_size, schedule.collective
    count = schedule.count // p if c == "all_to_all" else schedule.count
    return layout(c, p, count, int(schedule.options.get("root", 0)))


def count_for_bytes(collective: str, nbytes: int, itemsize: int, world_size: int) -> int:
    """The call's ``count`` for a message of about ``nbytes`` bytes of ``itemsize``-byte
    elements: ``nbytes // itemsize`` (at least 1), and for the blocked collectives rounded down
    to a multiple of ``world_size`` (at least ``world_size``: one element per block)."""
    c = check_collective(collective)
    p = check_int("world_size", world_size, minimum=1)
    n = max(1, check_int("nbytes", nbytes, minimum=0) // check_int("itemsize", itemsize,
                                                                    minimum=1))
    return max(p, n - n % p) if c in BLOCKED else n
