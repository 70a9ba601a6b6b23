"""Small rank functions that show :func:`distlab.launch.run` at work (start-here notebook).

They live in a module, so spawned ranks import them by reference; a function defined in a notebook
cell works too (launch.run ships it by value), as notebook 00 shows.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["allreduce_demo", "expected_allreduce_demo", "fail_on_rank"]


def allreduce_demo(rank: int, world_size: int) -> list[float]:
    """Each rank contributes ``[rank + 1, 10 (rank + 1)]``; returns the summed vector it holds."""

    t = torch.tensor([rank + 1.0, 10.0 * (rank + 1)])
    dist.all_reduce(t)
    return t.tolist()


def expected_allreduce_demo(world_size: int) -> list[float]:
    """What :func:`allreduce_demo` returns on every rank: ``[S, 10 S]``, ``S = p (p + 1) / 2``."""
    s = world_size * (world_size + 1) / 2
    return [s, 10.0 * s]


def fail_on_rank(rank: int, world_size: int, bad_rank: int) -> int:
    """Rank ``bad_rank`` raises ``ValueError``; the others wait in a barrier it never reaches."""

    if rank == bad_rank:
        raise ValueError(f"rank {rank} could not read its shard (a deliberate failure)")
    dist.barrier()
    return rank
