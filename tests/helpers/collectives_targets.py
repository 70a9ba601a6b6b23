"""Rank functions used only by tests/collectives (importable by spawned ranks)."""

from __future__ import annotations

import time
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
    results = compare_worker_with_corruption(rank, world_size, cases)
    even = [r for r in range(world_size) if r % 2 == 0]
    group = dist.new_group(even)
    t = torch.full((10,), float(rank + 1))
    if rank in even:
        all_reduce(t, algorithm="ring", group=group)
    return {"results": results, "subgroup_value": t[0].item()}


def compare_worker_with_corruption(rank: int, world_size: int,
                                   cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`compare_worker` on ``cases`` whose ``"corrupt": True`` ones run through an
    all_reduce that adds 1 to the first element afterwards: the comparison must flag them."""
    from distlab.collectives import execute
    from distlab.collectives.workers import compare_worker

    real = execute.all_reduce

    def corrupting(tensor: Any, *a: Any, **kw: Any) -> Any:
        out = real(tensor, *a, **kw)
        if tensor.numel():
            tensor.view(-1)[:1] += 1
        return out

    results = []
    for k, case in enumerate(cases):  # one call per case: seed k keeps inputs distinct per case
        if case.get("corrupt"):
            clean = {k: v for k, v in case.items() if k != "corrupt"}
            execute.all_reduce = corrupting
            try:
                done = compare_worker(rank, world_size, [clean], seed=k)
                results += [{**r, "corrupt": True} for r in done]
            finally:
                execute.all_reduce = real
        else:
            results += compare_worker(rank, world_size, [case], seed=k)
    return results


def peer_death_worker(rank: int, world_size: int, mode: str, timeout: float) -> dict[str, Any]:
    """Rank 1 fails mid-collective; the others report whether (and how fast) they raised.

    ``mode="leave"``: rank 1 runs the first step of a ring allreduce, then tears down its
    process group (its sockets close, as when a process dies). ``mode="hang"``: rank 1 never
    joins and sleeps ``3 * timeout`` s. Every other rank runs ``all_reduce(timeout=timeout)`` and
    returns ``{"raised": bool, "seconds": float, "error": str}``.
    """
    import torch
    import torch.distributed as dist

    from distlab.collectives.algorithms import build
    from distlab.collectives.execute import all_reduce, run_schedule
    from distlab.collectives.schedule import Schedule

    t = torch.ones(1 << 16)
    if rank == 1:
        if mode == "leave":
            full = build("ring", world_size, t.numel())
            first = Schedule("ring", world_size, t.numel(), full.steps[:1], {})
            run_schedule(first, t, "sum", timeout=timeout)
            dist.destroy_process_group()
        else:
            time.sleep(3 * timeout)
        return {"raised": None, "seconds": 0.0, "error": ""}
    t0 = time.monotonic()
    try:
        all_reduce(t, algorithm="ring", timeout=timeout)
    except Exception as exc:  # what we test: it raises instead of hanging
        return {"raised": True, "seconds": time.monotonic() - t0, "error": str(exc)[:500]}
    return {"raised": False, "seconds": time.monotonic() - t0, "error": ""}


def mismatch_worker(rank: int, world_size: int, case: str) -> dict[str, Any]:
    """Rank 1 calls all_reduce differently from the others (``case`` says how); every rank
    returns ``{"error": type and text or "", "seconds": float}``. The timeout is long (20 s), so a
    quick error can only come from the start-of-collective check."""
    import torch

    from distlab.collectives import all_reduce

    kwargs: dict[str, Any] = {"algorithm": "ring", "op": "sum"}
    count, dtype = 4096, torch.float32
    if rank == 1:
        if case == "algorithm":
            kwargs["algorithm"] = "tree"
        elif case == "op":
            kwargs["op"] = "max"
        elif case == "count":
            count = 4097
        elif case == "dtype":
            dtype = torch.float64
        elif case == "options":
            kwargs = {"algorithm": "segmented_ring", "segment_size": 64}
    if rank != 1 and case == "options":
        kwargs = {"algorithm": "segmented_ring", "segment_size": 128}
    t = torch.ones(count, dtype=dtype)
    t0 = time.monotonic()
    try:
        all_reduce(t, timeout=20.0, **kwargs)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}", "seconds": time.monotonic() - t0}
    return {"error": "", "seconds": time.monotonic() - t0, "value": t[0].item()}


def round_calibration_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Two recorded rounds of :class:`RoundCalibrator` on small sizes, then its fit."""
    import torch

    from distlab.collectives.rounds import RoundCalibrator

    rc = RoundCalibrator([4096, 65536, 262144], torch.float32, chain=2)
    rc.run_round(record=False)
    rc.run_round()
    rc.run_round()
    return {"rounds": len(rc.rounds), "points": len(rc.rounds[0]), "cal": rc.fit().to_dict()}
