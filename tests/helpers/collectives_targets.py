"""Rank functions used only by tests/collectives (importable by spawned ranks)."""

from __future__ import annotations

from typing import Any


def group_errors_worker(rank: int, world_size: int) -> list[str]:
    """Call all_reduce / run_schedule wrongly inside a live group; return the error texts."""
    import torch

    from distlab.collectives import all_reduce, build, run_schedule

    out = []
    calls = [
        lambda: run_schedule(build("ring", world_size + 1, 4), torch.ones(4)),
        lambda: run_schedule(build("ring", world_size, 5), torch.ones(4)),
        lambda: all_reduce(torch.ones(4, device="meta")),
        lambda: all_reduce(torch.ones(4), algorithm="hierarchical", group_size=world_size + 1),
        lambda: all_reduce(torch.ones(4), timeout=-1.0),
    ]
    for call in calls:
        try:
            call()
            out.append("no error")
        except (TypeError, ValueError) as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def compare_and_subgroup_worker(rank: int, world_size: int,
                                cases: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`compare_worker` on every case, then a ring over the subgroup of even ranks
    (whose group ranks differ from their global ranks); returns both results."""
    import torch
    import torch.distributed as dist

    from distlab.collectives import all_reduce
    from distlab.collectives.workers import compare_worker

    results = compare_worker(rank, world_size, cases)
    even = [r for r in range(world_size) if r % 2 == 0]
    group = dist.new_group(even)
    t = torch.full((10,), float(rank + 1))
    if rank in even:
        all_reduce(t, algorithm="ring", group=group)
    return {"results": results, "subgroup_value": t[0].item()}
