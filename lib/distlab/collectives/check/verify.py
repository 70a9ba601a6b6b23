"""Check a schedule against its collective's semantics: nothing lost, nothing extra, nothing twice.

:func:`check` verifies a schedule against
:meth:`~distlab.collectives.plan.semantics.CollectiveLayout.expected`: every required element
ends with exactly the expected ranks' data (the holdings of
:mod:`distlab.collectives.check.holdings`), and,
for the reductions, each rank's data exactly once (an exact-integer simulation with
:func:`distlab.collectives.check.simulate.simulate`; a barrier only needs every rank heard from).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distlab.collectives.check.holdings import final_masks
from distlab.collectives.check.simulate import simulate
from distlab.collectives.plan.schedule import Schedule
from distlab.collectives.plan.semantics import MAX_RANKS, CollectiveLayout, layout_of

__all__ = ["check"]


def _digits(masks: np.ndarray, p: int, base: int, *, highest_only: bool) -> np.ndarray:
    """Each element's rank mask (bits ``< p``) as the object integer ``sum(base**bit)`` over its
    set bits (``highest_only``: ``base**`` its highest set bit), computed once per distinct mask."""
    uniq, inverse = np.unique(masks, return_inverse=True)
    table = np.zeros(len(uniq), dtype=object)
    for i, u in enumerate(uniq.tolist()):
        bits = [bit for bit in range(p) if (u >> bit) & 1]
        if highest_only:
            table[i] = base ** bits[-1] if bits else 0
        else:
            table[i] = sum(base ** b for b in bits)
    return table[inverse.reshape(masks.shape)]


def _multiplicities(schedule: Schedule,
                    lay: CollectiveLayout) -> tuple[list[np.ndarray], np.ndarray]:
    """Simulate with exact integers: rank ``r``'s data is ``B**r`` (``B = p + 1``), so a sum
    of data reads back, digit by digit in base ``B``, how many times each rank's data went in."""
    p, base = lay.world_size, lay.world_size + 1
    init = lay.initial()
    inputs = [_digits(init[r], p, base, highest_only=True) for r in range(p)]
    outs = simulate(schedule, inputs, "sum")
    masks, _ = lay.expected()
    want = np.zeros((p, lay.buffer), dtype=object)
    for r in range(p):
        want[r] = _digits(masks[r], p, base, highest_only=False)
    return outs, want


def check(schedule: Schedule, *, values: bool = True) -> list[str]:
    """What is wrong with ``schedule`` as its collective (empty list: nothing).

    Holdings: every required element (:meth:`CollectiveLayout.expected`) ends with exactly the
    expected ranks' data. ``values`` (default on; off for a barrier, whose tokens may arrive
    twice): the same with multiplicities, by simulating exact integers (each rank's data
    exactly once).
    """
    lay = layout_of(schedule)
    if lay.world_size > MAX_RANKS:
        raise ValueError(f"check tracks one bit per rank: world_size <= {MAX_RANKS}, got "
                         f"{lay.world_size}")
    masks, required = lay.expected()
    got = final_masks(schedule, lay.initial())
    problems = []
    bad = required & (got != masks)
    if bad.any():
        r, e = map(int, np.argwhere(bad)[0])
        problems.append(f"{schedule.collective}/{schedule.algorithm} p={lay.world_size} "
                        f"count={lay.count}: rank {r} element {e} holds ranks "
                        f"{_bits(int(got[r, e]))}, expected {_bits(int(masks[r, e]))} "
                        f"({int(bad.sum())} elements wrong)")
    if values and lay.collective != "barrier" and not problems:
        outs, want = _multiplicities(schedule, lay)
        for r in range(lay.world_size):
            diff = required[r] & (outs[r] != want[r])
            if diff.any():
                e = int(np.argwhere(diff)[0][0])
                problems.append(f"{schedule.collective}/{schedule.algorithm} "
                                f"p={lay.world_size}: rank {r} element {e} holds some rank's "
                                "data more than once")
                break
    return problems


def _bits(mask: int) -> Sequence[int]:
    return [b for b in range(MAX_RANKS) if mask >> b & 1]
