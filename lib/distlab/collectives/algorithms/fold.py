"""MPICH's handling of non-power-of-two world sizes for butterfly algorithms.

With ``pof2`` the largest power of two ``<= p`` and ``rem = p - pof2``: among the first
``2 rem`` ranks, each even rank sends its vector to the next odd rank, which reduces it and takes
part in the power-of-two algorithm; the even rank sits out and gets the result back from its odd
partner at the end. Ranks ``>= 2 rem`` take part unchanged. Participants are renumbered
``0 .. pof2-1`` ("new ranks"): odd rank ``r < 2 rem`` -> ``r // 2``, rank ``r >= 2 rem`` ->
``r - rem``.
"""

from __future__ import annotations

from distlab.collectives.plan.schedule import Step, Transfer, make_step

__all__ = ["Fold", "fold"]


class Fold:
    """The renumbering of a folded world: ``pof2``, ``rem``, and new-rank <-> real-rank maps."""

    def __init__(self, world_size: int) -> None:
        pof2 = 1
        while pof2 * 2 <= world_size:
            pof2 *= 2
        self.world_size = world_size
        self.pof2 = pof2
        self.rem = world_size - pof2

    def real(self, newrank: int) -> int:
        """Real rank of participant ``newrank``."""
        return 2 * newrank + 1 if newrank < self.rem else newrank + self.rem

    def newrank(self, rank: int) -> int:
        """Participant number of real ``rank`` (``ValueError`` for a folded-out even rank)."""
        if rank < 2 * self.rem:
            if rank % 2 == 0:
                raise ValueError(f"rank {rank} is folded out (it sits out the butterfly)")
            return rank // 2
        return rank - self.rem

    def pre(self, count: int) -> Step | None:
        """Even ranks below ``2 rem`` send everything to the next odd rank (reduce)."""
        return make_step((Transfer(r, r + 1, 0, count, "reduce")
                          for r in range(0, 2 * self.rem, 2)), "fold extra ranks in")

    def post(self, count: int) -> Step | None:
        """Odd ranks below ``2 rem`` send the result back to their even partner (copy)."""
        return make_step((Transfer(r + 1, r, 0, count, "copy") for r in range(0, 2 * self.rem, 2)),
                         "send result to folded ranks")


def fold(world_size: int) -> Fold:
    """The :class:`Fold` of ``world_size`` ranks."""
    return Fold(world_size)
