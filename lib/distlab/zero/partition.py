"""How ZeRO lays parameters out: buckets of whole tensors, each a flat buffer cut into equal shards.

Parameters are taken in reverse registration order (the order backward produces their
gradients) and packed into buckets of at most ``cap_bytes`` (a tensor larger than the cap gets a
bucket of its own). A bucket of ``n`` elements is padded to ``padded = N * ceil(n / N)`` so it
cuts into ``N`` equal shards; rank ``r`` owns elements ``[r * padded / N, (r + 1) * padded / N)``
of every bucket. One reduce-scatter and one all-gather per bucket then move exactly the shards.
Pure index arithmetic: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from distlab._checks import check_int

__all__ = ["Bucket", "plan_buckets", "plan_unit"]


@dataclass(frozen=True)
class Bucket:
    """Parameters ``indices`` (into the parameter list, in bucket order) at element ``offsets``
    of a flat buffer of ``padded`` elements (``numel`` of them used); ``shard`` elements per
    rank."""

    indices: tuple[int, ...]
    offsets: tuple[int, ...]
    numel: int
    padded: int
    world_size: int

    @property
    def shard(self) -> int:
        """Elements of one rank's shard."""
        return self.padded // self.world_size

    def shard_range(self, rank: int) -> tuple[int, int]:
        """``[start, stop)`` of rank ``rank``'s shard in the bucket's buffer."""
        rank = check_int("rank", rank, minimum=0, maximum=self.world_size - 1)
        return rank * self.shard, (rank + 1) * self.shard


def plan_buckets(numels: Sequence[int], itemsize: int, cap_bytes: int,
                 world_size: int) -> list[Bucket]:
    """Buckets for parameters of ``numels`` elements (see the module docstring).

    Raises:
        ValueError: a negative size, ``itemsize`` or ``cap_bytes`` < 1, ``world_size`` < 1.
    """
    itemsize = check_int("itemsize", itemsize, minimum=1)
    cap_bytes = check_int("cap_bytes", cap_bytes, minimum=1)
    world_size = check_int("world_size", world_size, minimum=1)
    groups: list[list[int]] = [[]]
    size = 0
    for i in reversed(range(len(numels))):
        n = check_int(f"numels[{i}]", numels[i], minimum=0)
        if groups[-1] and (size + n) * itemsize > cap_bytes:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += n
    out = []
    for g in groups:
        if not g:
            continue
        offsets, at = [], 0
        for i in g:
            offsets.append(at)
            at += numels[i]
        padded = world_size * -(-at // world_size)
        out.append(Bucket(tuple(g), tuple(offsets), at, padded, world_size))
    return out


def plan_unit(numels: Sequence[int], world_size: int) -> Bucket:
    """The flat layout of one ZeRO-3 unit: all its parameters, in the order given, in one buffer
    padded to a multiple of ``world_size`` (indices ``0..len(numels) - 1``).

    Raises:
        ValueError: a negative size or ``world_size`` < 1.
    """
    world_size = check_int("world_size", world_size, minimum=1)
    offsets, at = [], 0
    for i, n in enumerate(numels):
        offsets.append(at)
        at += check_int(f"numels[{i}]", n, minimum=0)
    return Bucket(tuple(range(len(numels))), tuple(offsets), at,
                  world_size * -(-at // world_size), world_size)
