"""``double_binary_tree``: two complementary binary trees, each reducing and broadcasting half.

NCCL 2.4's tree allreduce (Jeaugey, "Massively Scale Your Deep Learning Training with NCCL
2.4", NVIDIA blog, 2019): a binary tree in which a rank is an inner node or a leaf by the lowest
set bit of its position (positions ``1 .. p-1`` form an in-order tree, position 0 sits above its
top), and a second tree in which every leaf of the first is an inner node: the first mirrored
(``p - 1 - position``) for even ``p``, shifted by one rank for odd ``p``. The first half of the
vector is reduced up the first tree and broadcast down it, the second half on the second tree,
in the same steps, so every rank sends and receives about as much as in one tree of ``n / 2``.
A node reduces into its parent in the step after its subtree is done (leaves first); the
broadcast replays the levels from the top. About ``2 (lg p + 1)`` steps; cost per step that of
its busiest rank (two children reduced into it, or one message per tree).

``pieces=k`` pipelines the trees as NCCL does: each half is cut into ``k`` blocks, and block
``j`` moves one level per step, ``j`` steps behind block 0, so the levels of the tree work on
different blocks at once: ``up + down + k - 1`` steps of ``n / 2k``-element messages instead of
``up + down`` steps of ``n / 2``.
"""

from __future__ import annotations

from distlab.collectives.plan.ranges import block_bounds, check_pieces
from distlab.collectives.plan.schedule import (
    Schedule,
    Step,
    Transfer,
    check_count,
    check_world_size,
    collect,
    make_step,
)

__all__ = ["btree_parents", "double_binary_tree", "tree_ranks"]


def btree_parents(p: int) -> list[int]:
    """Parent position of every position ``0 .. p-1`` (``-1`` for the root, position 0).

    Position ``x > 0`` with lowest set bit ``b`` hangs under ``x + b`` when ``x / b = 1 mod 4``
    and ``x + b < p``, else under ``x - b`` (which for the top node, ``x = b``, is the root 0).
    """
    out = [-1] * p
    for x in range(1, p):
        b = x & -x
        up = x + b if (x // b) % 4 == 1 else x - b
        out[x] = up if up < p else x - b
    return out


def tree_ranks(p: int, second: bool) -> list[int]:
    """The rank at each position of the first tree (``second=False``: rank = position) or of
    the second (mirrored for even ``p``, shifted by one for odd ``p``)."""
    if not second:
        return list(range(p))
    return [p - 1 - x for x in range(p)] if p % 2 == 0 else [(x + 1) % p for x in range(p)]


def _levels(parents: list[int]) -> tuple[list[int], list[int]]:
    """Height (longest path down to a leaf) and depth (path up to the root) of each position."""
    p = len(parents)
    height, depth = [0] * p, [0] * p
    for x in range(1, p):  # depth: walk up
        y, d = x, 0
        while parents[y] >= 0:
            y, d = parents[y], d + 1
        depth[x] = d
    for x in sorted(range(p), key=lambda v: -depth[v]):  # deepest first
        if parents[x] >= 0:
            height[parents[x]] = max(height[parents[x]], height[x] + 1)
    return height, depth


def double_binary_tree(world_size: int, count: int, pieces: int = 1) -> Schedule:
    """Double-binary-tree allreduce (the halves of the vector on two complementary trees),
    each half pipelined in ``pieces`` blocks."""
    p, n, k = check_world_size(world_size), check_count(count), check_pieces(pieces)
    parents = btree_parents(p)
    height, depth = _levels(parents)
    trees = []
    for second, (lo, hi) in zip((False, True), block_bounds(n, 2), strict=True):
        blocks = [(lo + a, lo + b) for a, b in block_bounds(hi - lo, k)]
        trees.append((tree_ranks(p, second), blocks))
    up = height[0] if p > 1 else 0
    down = max((depth[x] for x in range(1, p)), default=0)
    steps: list[Step | None] = []
    for t in range(up + down + k - 1 if p > 1 else 0):
        transfers = []
        for ranks, blocks in trees:
            for j, (a, b) in enumerate(blocks):
                for x in range(1, p):
                    if height[x] + j == t:  # reduce: once x's subtree has block j reduced
                        transfers.append(Transfer(ranks[x], ranks[parents[x]], a, b, "reduce"))
                    if up + j + depth[x] - 1 == t:  # broadcast: one level per step from the root
                        transfers.append(Transfer(ranks[parents[x]], ranks[x], a, b, "copy"))
        steps.append(make_step(transfers, f"pipelined trees {t + 1}/{up + down + k - 1}"))
    return Schedule("double_binary_tree", p, n, collect(steps), {"pieces": k})
