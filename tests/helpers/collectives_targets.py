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


def compare_and_subgroup_worker(rank: int, world_size: int, cases: list[dict[str, Any]],
                                collective_cases: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`compare_worker` on every case, :func:`compare_collectives_worker` on the others,
    then a ring over the subgroup of even ranks (whose group ranks differ from their global
    ranks) and a broadcast from its group rank 1 (global rank 2); returns all results."""
    import torch
    import torch.distributed as dist

    from distlab.collectives import all_reduce, broadcast
    results = compare_worker_with_corruption(rank, world_size, cases)
    coll = compare_collectives_worker(rank, world_size, collective_cases)
    even = [r for r in range(world_size) if r % 2 == 0]
    group = dist.new_group(even)
    t = torch.full((10,), float(rank + 1))
    b = torch.full((5,), float(rank))
    if rank in even:
        all_reduce(t, algorithm="ring", group=group)
        broadcast(b, root=1, group=group)
    return {"results": results, "collectives": coll, "subgroup_value": t[0].item(),
            "subgroup_broadcast": b[0].item()}


def compare_worker_with_corruption(rank: int, world_size: int,
                                   cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`compare_worker` on ``cases`` whose ``"corrupt": True`` ones run through an
    all_reduce that adds 1 to the first element afterwards: the comparison must flag them."""
    from distlab.collectives.runtime import execute

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


def compare_worker(rank: int, world_size: int, cases: list[dict[str, Any]],
                   seed: int = 0) -> list[dict[str, Any]]:
    """Run every case with distlab and with ``torch.distributed.all_reduce``; report the gap.

    A case is ``{"algorithm", "dtype", "op", "count", "options": {...}}`` and optionally
    ``"batched": True`` (the NCCL-style ``batch_isend_irecv`` path, run on gloo). Inputs are random
    (seeded by ``seed``, case index and rank): integers in [-3, 3] for integer dtypes, normal
    floats otherwise (uniform in [0.5, 1.5] for prod). Returns per case ``max_abs_diff``,
    ``max_ref`` (largest |reference|) and ``equal`` (bitwise). distlab's call goes through the
    module attribute ``execute.all_reduce``, so a test may replace it.
    """
    import torch

    from distlab.collectives.runtime import execute
    from distlab.collectives.runtime.group import builtin_all_reduce, rank_device

    out = []
    for k, case in enumerate(cases):
        dtype = getattr(torch, case["dtype"])
        gen = torch.Generator().manual_seed(seed * 1_000_003 + k * 101 + rank)
        n = case["count"]
        if not dtype.is_floating_point:
            x = torch.randint(-3, 4, (n,), generator=gen).to(dtype)
        elif case["op"] == "prod":
            x = (0.5 + torch.rand(n, generator=gen, dtype=torch.float64)).to(dtype)
        else:
            x = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)
        dev = rank_device()
        mine, ref = x.to(dev, copy=True), x.to(dev, copy=True)
        execute.all_reduce(mine, op=case["op"], algorithm=case["algorithm"],
                           batched=case.get("batched"), **case.get("options", {}))
        builtin_all_reduce(ref, case["op"])
        mine, ref = mine.cpu(), ref.cpu()
        diff = (mine.double() - ref.double()).abs().max().item() if n else 0.0
        out.append({**case, "max_abs_diff": diff,
                    "max_ref": ref.double().abs().max().item() if n else 0.0,
                    "equal": bool(torch.equal(mine, ref))})
    return out


def peer_death_worker(rank: int, world_size: int, mode: str, timeout: float) -> dict[str, Any]:
    """Rank 1 fails mid-collective; the others report whether (and how fast) they raised.

    ``mode="leave"``: rank 1 runs the first step of a ring allreduce, then tears down its
    process group (its sockets close, as when a process dies). ``mode="hang"``: rank 1 never
    joins and sleeps ``3 * timeout`` s. Every other rank runs ``all_reduce(timeout=timeout)`` and
    returns ``{"raised": bool, "seconds": float, "error": str}``.
    """
    import torch
    import torch.distributed as dist

    from distlab.collectives.algorithms.registry import build
    from distlab.collectives.plan.schedule import Schedule
    from distlab.collectives.runtime.execute import all_reduce, run_schedule

    t = torch.ones(1 << 16)
    if rank == 1:
        error = ""
        if mode == "leave":
            full = build("ring", world_size, t.numel())
            first = Schedule("ring", world_size, t.numel(), full.steps[:1], full.options)
            try:
                run_schedule(first, t, "sum", timeout=timeout)
            except RuntimeError as exc:
                # on a loaded machine the others' 1 s wait can end before this rank's first step:
                # they fail fast (what is tested) and close their sockets under this one
                error = str(exc)[:500]
            dist.destroy_process_group()
        else:
            time.sleep(3 * timeout)
        return {"raised": None, "seconds": 0.0, "error": error}
    t0 = time.monotonic()
    try:
        all_reduce(t, algorithm="ring", timeout=timeout)
    except Exception as exc:  # what we test: it raises instead of hanging
        return {"raised": True, "seconds": time.monotonic() - t0, "error": str(exc)[:500]}
    return {"raised": False, "seconds": time.monotonic() - t0, "error": ""}


def mismatch_worker(rank: int, world_size: int, cases: list[str],
                    check: str = "inline") -> list[dict[str, Any]]:
    """For each of ``cases``, rank 1 calls all_reduce differently from the others (the case says
    how), then every rank makes one matching call (the group must still work, and no message of
    the failed call may leak into it). Per case: ``{"error": type and text or "", "seconds":
    float, "after": the matching call's first element}``. The wait timeout is long (20 s), so a
    quick error can only come from the peer check."""
    import torch

    from distlab.collectives import all_gather, all_reduce, broadcast

    out = []
    for case in cases:
        if case in ("all_gather", "root"):  # the other collectives run the same check
            t, t0, error = torch.ones(4), time.monotonic(), ""
            try:
                if case == "all_gather":
                    algo = "bruck" if rank == 1 else "ring"
                    all_gather(torch.empty(4 * world_size), t, algorithm=algo, timeout=20.0,
                               check=check)
                else:
                    broadcast(t, root=1 if rank == 1 else 0, timeout=20.0, check=check)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
            seconds = time.monotonic() - t0
            after = torch.full((1000,), float(rank + 1))
            all_reduce(after, algorithm="ring", timeout=20.0, check=check)
            out.append({"error": error, "seconds": seconds, "after": after[0].item(),
                        "value": t[0].item()})
            continue
        kwargs: dict[str, Any] = {"algorithm": "ring", "op": "sum", "pieces": 1}
        count, dtype = 4096, torch.float32
        if case == "options":
            kwargs = {"algorithm": "segmented_ring", "segment_size": 128, "pieces": 1}
        if rank == 1:
            if case == "algorithm":
                kwargs = {"algorithm": "tree"}
            elif case == "op":
                kwargs["op"] = "max"
            elif case == "count":
                count = 4097
            elif case == "dtype":
                dtype = torch.float64
            elif case == "options":
                kwargs["segment_size"] = 64
            elif case == "pieces":
                kwargs["pieces"] = 2
        t = torch.ones(count, dtype=dtype)
        t0 = time.monotonic()
        try:
            all_reduce(t, timeout=20.0, check=check, **kwargs)
            error = ""
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
        seconds = time.monotonic() - t0
        after = torch.full((1000,), float(rank + 1))
        all_reduce(after, algorithm="ring", timeout=20.0, check=check)
        out.append({"error": error, "seconds": seconds, "after": after[0].item(),
                    "value": t[0].item()})
    return out


def round_calibration_worker(rank: int, world_size: int) -> dict[str, Any]:
    """Two recorded rounds of :class:`RoundCalibrator` on small sizes, then its fit."""
    import torch

    from distlab.collectives.runtime.rounds import RoundCalibrator

    rc = RoundCalibrator([4096, 65536, 262144], torch.float32, chain=2)
    rc.run_round(record=False)
    rc.run_round()
    rc.run_round()
    return {"rounds": len(rc.rounds), "points": len(rc.rounds[0]), "cal": rc.fit().to_dict()}


def _builtin_collective(case: dict[str, Any], x: Any, world_size: int, rank: int) -> Any:
    """torch.distributed's built-in for one case; returns this rank's result (or None)."""
    import torch
    import torch.distributed as dist

    from distlab.collectives.runtime.group import builtin_all_gather, builtin_reduce_scatter

    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
           "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    c, root, op = case["collective"], case.get("root", 0), case.get("op", "sum")
    if c == "broadcast":
        t = x.clone()
        dist.broadcast(t, src=root)
        return t
    if c == "reduce":
        t = x.clone()
        dist.reduce(t, dst=root, op=ops[op])
        return (t / world_size if op == "avg" else t) if rank == root else None
    if c == "gather":
        parts = [torch.empty_like(x) for _ in range(world_size)] if rank == root else None
        dist.gather(x.clone(), gather_list=parts, dst=root)
        return torch.cat(parts) if rank == root else None
    if c == "scatter":
        out = torch.empty(x.numel() // world_size, dtype=x.dtype)
        dist.scatter(out, scatter_list=list(x.chunk(world_size)) if rank == root else None,
                     src=root)
        return out
    if c == "all_gather":
        out = torch.empty(world_size * x.numel(), dtype=x.dtype)
        builtin_all_gather(out, x.clone())
        return out
    if c == "reduce_scatter":
        out = torch.empty(x.numel() // world_size, dtype=x.dtype)
        builtin_reduce_scatter(out, x.clone(), op=ops[op])
        return out / world_size if op == "avg" else out
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x.clone())
    return out


def _distlab_collective(case: dict[str, Any], x: Any, world_size: int, rank: int) -> Any:
    import torch

    import distlab.collectives as C

    c, root, op = case["collective"], case.get("root", 0), case.get("op", "sum")
    kw = {"algorithm": case["algorithm"], **case.get("options", {})}
    pristine = x.clone()
    if c == "broadcast":
        t = x.clone()
        C.broadcast(t, root=root, **kw)
        return t
    if c == "reduce":
        t = x.clone()
        C.reduce(t, root=root, op=op, **kw)
        return t if rank == root else None
    if c == "gather":
        out = torch.full((world_size * x.numel(),), -7, dtype=x.dtype) if rank == root else None
        got = C.gather(x, out, root=root, **kw)
        assert (got is None) == (rank != root)
        result = got
    elif c == "scatter":
        out = torch.full((x.numel() // world_size,), -7, dtype=x.dtype)
        result = C.scatter(out, x if rank == root else None, root=root, **kw)
    elif c == "all_gather":
        out = torch.full((world_size * x.numel(),), -7, dtype=x.dtype)
        result = C.all_gather(out, x, **kw)
    elif c == "reduce_scatter":
        out = torch.full((x.numel() // world_size,), -7, dtype=x.dtype)
        result = C.reduce_scatter(out, x, op=op, **kw)
    else:
        out = torch.full_like(x, -7)
        result = C.all_to_all(out, x, **kw)
    assert torch.equal(x, pristine), f"{c} modified its input"
    return result


def compare_collectives_worker(rank: int, world_size: int,
                               cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every case with distlab and with torch's built-in; per case the gap (as
    :func:`compare_worker`), then a barrier check: every rank bumps a store counter before
    distlab's barrier and reads it after (it must read ``world_size``).

    A case: ``{"collective", "algorithm", "dtype", "op", "m", "root", "options"}``; ``m`` is the
    elements per block (the whole vector for broadcast and reduce). Inputs are random integers
    in [-3, 3] (cast), or in [0.5, 1.5] for prod, seeded by case index and rank.
    """
    import torch
    import torch.distributed as dist

    import distlab.collectives as C

    out = []
    for k, case in enumerate(cases):
        dtype = getattr(torch, case["dtype"])
        gen = torch.Generator().manual_seed(k * 101 + rank)
        c, m = case["collective"], case["m"]
        n = m if c in ("broadcast", "reduce", "gather", "all_gather") else m * world_size
        if case.get("op") == "prod":
            x = (0.5 + torch.rand(n, generator=gen, dtype=torch.float64)).to(dtype)
        else:
            x = torch.randint(-3, 4, (n,), generator=gen).to(dtype)
        mine = _distlab_collective(case, x, world_size, rank)
        ref = _builtin_collective(case, x, world_size, rank)
        if ref is None:
            out.append({**case, "equal": mine is None, "max_abs_diff": 0.0, "max_ref": 0.0})
            continue
        diff = (mine.double() - ref.double()).abs().max().item() if ref.numel() else 0.0
        out.append({**case, "equal": bool(torch.equal(mine, ref)), "max_abs_diff": diff,
                    "max_ref": ref.double().abs().max().item() if ref.numel() else 0.0})
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        time.sleep(0.5)  # the last to arrive: nobody may leave before it bumps the counter
    store.add("distlab-barrier-test", 1)
    C.barrier()
    out.append({"collective": "barrier", "arrived": store.add("distlab-barrier-test", 0)})
    return out


def compare_all_worker(rank: int, world_size: int, allreduce_cases: list[dict[str, Any]],
                       collective_cases: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`compare_worker_with_corruption` and :func:`compare_collectives_worker` in one
    launch (one process group start for both)."""
    return {"allreduce": compare_worker_with_corruption(rank, world_size, allreduce_cases),
            "collectives": compare_collectives_worker(rank, world_size, collective_cases)}


def _executor_input(case: dict[str, Any], n: int, seed: int) -> Any:
    """A case's input of ``n`` elements: normal floats (sums that round, so the order of the
    reductions shows in the last bits), [0.5, 1.5) for prod, integers in [-50, 50] otherwise."""
    import torch

    dtype = getattr(torch, case["dtype"])
    gen = torch.Generator().manual_seed(seed)
    if case["op"] == "prod":
        return (0.5 + torch.rand(n, generator=gen, dtype=torch.float64)).to(dtype)
    if dtype.is_floating_point:
        return torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)
    return torch.randint(-50, 51, (n,), generator=gen).to(dtype)


def _run_on_executor(case: dict[str, Any], x: Any, p: int, grank: int, group: Any,
                     executor: str) -> Any:
    """One case on one executor; the whole buffer each call leaves (a reduce's partial results
    on every rank too), or the error it raised as ``"Type: message"``."""
    import torch

    import distlab.collectives as C

    c, root, op = case["collective"], case.get("root", 0), case["op"]
    kw = {"algorithm": case["algorithm"], "group": group, "executor": executor,
          "batched": case.get("batched", False), **case.get("options", {})}
    try:
        if c == "all_reduce":
            t = x.clone()
            C.all_reduce(t, op=op, **kw)
            return t
        if c == "barrier":
            C.barrier(group=group, algorithm=case["algorithm"], executor=executor)
            return torch.zeros(0)
        if c in ("broadcast", "reduce"):
            t = x.clone()
            if c == "broadcast":
                C.broadcast(t, root=root, **kw)
            else:
                C.reduce(t, root=root, op=op, **kw)
            return t
        if c == "gather":
            out = torch.full((p * x.numel(),), -7, dtype=x.dtype) if grank == root else None
            got = C.gather(x, out, root=root, **kw)
            return torch.zeros(0) if got is None else got
        if c == "scatter":
            out = torch.full((x.numel() // p,), -7, dtype=x.dtype)
            return C.scatter(out, x if grank == root else None, root=root, **kw)
        if c == "all_gather":
            return C.all_gather(torch.full((p * x.numel(),), -7, dtype=x.dtype), x, **kw)
        if c == "reduce_scatter":
            out = torch.full((x.numel() // p,), -7, dtype=x.dtype)
            return C.reduce_scatter(out, x, op=op, **kw)
        return C.all_to_all(torch.full_like(x, -7), x, **kw)
    except Exception as exc:  # the same error from both executors also agrees
        return f"{type(exc).__name__}: {exc}"


def _bitwise_equal(a: Any, b: Any) -> bool:
    import torch

    if isinstance(a, str) or isinstance(b, str):
        return a == b
    return a.dtype == b.dtype and torch.equal(a.reshape(-1).view(torch.uint8),
                                              b.reshape(-1).view(torch.uint8))


def executors_agree_worker(rank: int, world_size: int, groups: list[list[int]],
                           cases: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Every case of ``cases[i]`` on group ``groups[i]`` (every rank creates every group; the
    members run its cases) on the Python and on the compiled executor, from the same input;
    returns the cases whose results differ in any bit (with what each gave), how many ran, and
    whether the comparison sees a one-bit difference (it must)."""
    import torch
    import torch.distributed as dist

    from distlab.collectives.runtime import compiled

    handles = [dist.new_group(g) for g in groups]
    out: dict[str, Any] = {"status": compiled.status(), "ran": 0, "differ": [], "errors": 0}
    probe = torch.randn(5, dtype=torch.float32)
    flipped = probe.clone()
    flipped.view(torch.int32)[3] ^= 1
    out["sees_one_bit"] = not _bitwise_equal(probe, flipped)
    for g, handle, group_cases in zip(groups, handles, cases, strict=True):
        if rank not in g:
            continue
        p, grank = len(g), g.index(rank)
        for k, case in enumerate(group_cases):
            c, m = case["collective"], case["m"]
            n = m if c in ("all_reduce", "broadcast", "reduce", "gather", "all_gather") else m * p
            got = [_run_on_executor(case, _executor_input(case, n, 7919 * k + grank), p, grank,
                                    handle, ex) for ex in ("python", "compiled")]
            out["ran"] += 1
            out["errors"] += isinstance(got[0], str)
            if not _bitwise_equal(*got):
                out["differ"].append({**case, "group": g, "got": [str(x)[:200] for x in got]})
    return out
