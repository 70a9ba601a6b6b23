"""``rabenseifner`` reduce: recursive-halving reduce-scatter, then a binomial gather to the root.

The reduce-scatter is :mod:`distlab.collectives.algorithms.allreduce.rabenseifner`'s (block windows
halved at distances 1, 2, 4, ...; MPICH folding for non-powers of two,
:mod:`distlab.collectives.algorithms.fold`). The gather replays its rounds in reverse, but only
towards the root: at distance ``d`` the participants that still hold data and differ from the root's
participant in bit ``d`` send their window to their partner, which grows its window to the union. If
the root was folded out, its partner gathers and hands it the result in a last step. MPICH's
long-message reduce (Thakur, Rabenseifner and Gropp 2005, sec. 4.5). Cost for powers of two ``2 lg p
alpha + 2 (p-1)/p n beta + (p-1)/p n gamma``.
"""

from __future__ import annotations

from distlab.collectives.algorithms.fold import Fold
from distlab.collectives.algorithms.ranks import check_root
from distlab.collectives.plan.ranges import block_bounds
from distlab.collectives.plan.schedule import (
    Schedule,
    Step,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["rabenseifner"]


def rabenseifner(world_size: int, count: int, root: int = 0) -> Schedule:
    """Reduce-scatter by recursive halving, gather to ``root`` (MPICH folding)."""
    p, n = check_world_size(world_size), check_count(count)
    root = check_root(root, p)
    f = Fold(p)
    bounds = block_bounds(n, f.pof2)

    def span(lo: int, hi: int) -> tuple[int, int]:
        return bounds[lo][0], bounds[hi - 1][1]

    windows = [(0, f.pof2)] * f.pof2
    history: list[tuple[int, list[tuple[int, int]]]] = []
    steps: list[Step | None] = [f.pre(n)]
    mask = 1
    while mask < f.pof2:
        kept, transfers = [], []
        for i in range(f.pof2):
            lo, hi = windows[i]
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if not i & mask else ((mid, hi), (lo, mid))
            transfers.append(Transfer(f.real(i), f.real(i ^ mask), *span(*give), "reduce"))
            kept.append(keep)
        history.append((mask, kept))
        steps.append(make_step(transfers, f"reduce-scatter (distance {mask})"))
        windows = kept
        mask <<= 1
    folded_out = root < 2 * f.rem and root % 2 == 0
    target = f.newrank(root + 1 if folded_out else root)
    alive = set(range(f.pof2))
    for mask, held in reversed(history):
        senders = [i for i in sorted(alive) if (i ^ target) & mask]
        steps.append(make_step((Transfer(f.real(i), f.real(i ^ mask), *span(*held[i]), "copy")
                                for i in senders), f"gather to the root (distance {mask})"))
        alive -= set(senders)
    if folded_out:
        steps.append(make_step([Transfer(root + 1, root, 0, n, "copy")], "hand to the root"))
    return Schedule("rabenseifner", p, n, collect(steps), {"root": root}, "reduce")
