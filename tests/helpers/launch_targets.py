"""Rank functions for tests/test_launch.py; importable by spawned ranks as
helpers.launch_targets."""

from __future__ import annotations

import ctypes
import os
import time
from typing import Any

import torch
import torch.distributed as dist


def describe(rank: int, world_size: int, tag: str = "", *, scale: float = 1.0) -> dict[str, Any]:
    """What the rank sees of its process group, plus a real allreduce of (rank + 1) * scale."""
    t = torch.tensor([(rank + 1) * scale])
    dist.all_reduce(t)
    return {
        "rank": rank,
        "world_size": world_size,
        "pg_rank": dist.get_rank(),
        "pg_world_size": dist.get_world_size(),
        "backend": str(dist.get_backend()),
        "tag": tag,
        "sum": t.item(),
        "pid": os.getpid(),
        "store_port": dist.distributed_c10d._get_default_store().port
        if hasattr(dist.distributed_c10d._get_default_store(), "port") else None,
    }


def raise_on(rank: int, world_size: int, bad_rank: int) -> int:
    """``bad_rank`` raises; the others wait in a barrier the bad rank never reaches."""
    if rank == bad_rank:
        raise ValueError(f"deliberate failure on rank {rank}")
    dist.barrier()
    return rank


def exit_on(rank: int, world_size: int, bad_rank: int) -> int:
    """``bad_rank`` leaves with os._exit(3), skipping every cleanup; the others wait."""
    if rank == bad_rank:
        os._exit(3)
    time.sleep(600)
    return rank


def segfault_on(rank: int, world_size: int, bad_rank: int) -> int:
    """``bad_rank`` dereferences NULL (SIGSEGV); the others wait."""
    if rank == bad_rank:
        ctypes.string_at(0)
    time.sleep(600)
    return rank


def hang(rank: int, world_size: int) -> int:
    """Never returns in any reasonable time."""
    time.sleep(600)
    return rank


def unpicklable_result(rank: int, world_size: int) -> Any:
    """Returns something that cannot be sent back to the parent."""
    return lambda: rank


def fork_a_child(rank: int, world_size: int) -> int:
    """Fork a child of this rank (as a DataLoader worker would) and return its exit status."""
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)
