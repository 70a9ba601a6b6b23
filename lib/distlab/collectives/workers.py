"""Rank functions for :func:`distlab.launch.run`: comparisons, benchmarks, calibration.

They live in the library (importable by spawned ranks) so tests, the benchmark and notebook 04
share them. Each takes ``(rank, world_size, ...)`` and returns something small and picklable.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from .calibrate import calibrate_worker  # re-exported: the rank function lives with calibrate

__all__ = ["bench_worker", "calibrate_worker", "compare_worker", "expected_result",
           "fill_pattern", "timeline_worker"]


def _torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def fill_pattern(rank: int, count: int, dtype: str, op: str) -> Any:
    """Rank ``rank``'s deterministic input: small integers, so sums and products are exact.

    ``prod`` uses values in {1, 2} (a product over 8 ranks stays <= 256); other ops values
    in 0..3 (a sum over 8 ranks stays <= 24, exact even in float16 and bfloat16).
    """
    import torch

    i = torch.arange(count, dtype=torch.int64)
    vals = 1 + (i + rank) % 2 if op == "prod" else (i * 7 + rank * 3) % 4
    return vals.to(_torch_dtype(dtype))


def expected_result(world_size: int, count: int, dtype: str, op: str) -> Any:
    """The exact allreduce of :func:`fill_pattern` over ``world_size`` ranks (float64)."""
    import torch

    stack = torch.stack([fill_pattern(r, count, "float64", op) for r in range(world_size)])
    if op in ("sum", "avg"):
        out = stack.sum(0)
        return out / world_size if op == "avg" else out
    if op == "prod":
        return stack.prod(0)
    return stack.amax(0) if op == "max" else stack.amin(0)


def _device() -> Any:
    """This rank's device: its CUDA device under NCCL, else the CPU."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized() and "nccl" in str(dist.get_backend()).lower() \
            and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _builtin(tensor: Any, op: str, group: Any = None) -> None:
    import torch.distributed as dist

    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
           "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    dist.all_reduce(tensor, op=ops[op], group=group)
    if op == "avg":
        tensor.div_(dist.get_world_size(group))


def compare_worker(rank: int, world_size: int, cases: Sequence[dict[str, Any]],
                   seed: int = 0) -> list[dict[str, Any]]:
    """Run every case with distlab and with ``torch.distributed.all_reduce``; report the gap.

    A case is ``{"algorithm", "dtype", "op", "count", "options": {...}}`` and optionally
    ``"batched": True`` (the NCCL-style ``batch_isend_irecv`` path, run on gloo). Inputs are random
    (seeded by ``seed``, case index and rank): integers in [-3, 3] for integer dtypes, normal
    floats otherwise (uniform in [0.5, 1.5] for prod). Returns per case ``max_abs_diff``,
    ``max_ref`` (largest |reference|) and ``equal`` (bitwise).
    """
    import torch

    from .execute import all_reduce

    out = []
    for k, case in enumerate(cases):
        dtype = _torch_dtype(case["dtype"])
        gen = torch.Generator().manual_seed(seed * 1_000_003 + k * 101 + rank)
        n = case["count"]
        if not dtype.is_floating_point:
            x = torch.randint(-3, 4, (n,), generator=gen).to(dtype)
        elif case["op"] == "prod":
            x = (0.5 + torch.rand(n, generator=gen, dtype=torch.float64)).to(dtype)
        else:
            x = torch.randn(n, generator=gen, dtype=torch.float64).to(dtype)
        dev = _device()
        mine, ref = x.to(dev, copy=True), x.to(dev, copy=True)
        all_reduce(mine, op=case["op"], algorithm=case["algorithm"],
                   batched=case.get("batched"), **case.get("options", {}))
        _builtin(ref, case["op"])
        mine, ref = mine.cpu(), ref.cpu()
        diff = (mine.double() - ref.double()).abs().max().item() if n else 0.0
        out.append({**case, "max_abs_diff": diff,
                    "max_ref": ref.double().abs().max().item() if n else 0.0,
                    "equal": bool(torch.equal(mine, ref))})
    return out


def timeline_worker(rank: int, world_size: int, algorithm: str, count: int,
                    options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Run one allreduce recording into a Timeline; return the spans as dicts."""
    import torch

    from distlab.timeline import Timeline

    from .execute import all_reduce

    tl = Timeline()
    all_reduce(torch.ones(count), algorithm=algorithm, timeline=tl, **(options or {}))
    return tl.to_dicts()


def _tolerance(dtype: str, op: str) -> float:
    if op != "avg":
        return 0.0
    return {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-6}.get(dtype, 1e-12)


def bench_worker(rank: int, world_size: int, sizes: Sequence[int], algorithms: Sequence[str],
                 dtype: str = "float32", op: str = "sum", iters: int = 20, warmup: int = 5,
                 options: dict[str, Any] | None = None,
                 calibration: dict[str, Any] | None = None,
                 progress: bool = True, calibrate_in_rounds: bool = True) -> dict[str, Any]:
    """Time each algorithm (``"builtin"`` = ``torch.distributed.all_reduce``) at each size.

    Per size: one checked run per algorithm on :func:`fill_pattern` data (``wrong`` = elements
    differing from :func:`expected_result` on this rank). Then ``warmup`` untimed and ``iters``
    timed rounds (the timed runs skip the per-call peer check of :mod:`.peercheck`, which the
    checked run did: the ranks run this same loop, and builtin pays no such check); a round runs
    every size and every algorithm once, each after a barrier and on
    a buffer refilled with the pattern (outside the timed region), and, when ``calibration`` is
    given and ``calibrate_in_rounds``, the calibration exchanges of
    :class:`.rounds.RoundCalibrator` (``calibration`` may set its ``sizes`` and ``chain``; other
    keys are ignored), fitted on the same rounds at the end. Interleaving sizes, algorithms and
    calibration makes a burst of load on a shared machine hit all of them alike. With
    ``calibrate_in_rounds=False``, ``calibration`` (kwargs of :func:`.calibrate.calibrate`) runs
    once before the rounds instead. Under NCCL the buffers live on this rank's GPU and each
    timed run ends with a device synchronize. Returns ``{"calibration": dict | None, "rows":
    [...]}`` with this rank's per-round seconds; the caller takes the max over ranks, then the
    median. ``"spans"``: one dict per timed call (and per recorded calibration round) as
    :meth:`distlab.timeline.Timeline.extend` takes them, ``start_us``/``duration_us`` on this
    host's :func:`~distlab.timeline.now_us` clock (the clock the seconds are read from), lane
    ``"rank<r>/allreduce"``; ``"host"``: this rank's host name (spans of ranks on other hosts
    are on another clock).
    """
    import socket

    import torch
    import torch.distributed as dist

    from distlab.timeline import now_us

    from .execute import all_reduce
    from .rounds import RoundCalibrator, calibration_sizes

    device = _device()
    tdtype = _torch_dtype(dtype)
    itemsize = torch.empty(0, dtype=tdtype).element_size()
    cal = None
    calibrator = None
    if calibration is not None and not calibrate_in_rounds:
        cal = calibrate_worker(rank, world_size, **calibration)
    elif calibration is not None and world_size >= 2:
        cal_sizes = calibration.get("sizes") or calibration_sizes(sizes, world_size, itemsize)
        calibrator = RoundCalibrator(cal_sizes, tdtype, calibration.get("op", "sum"),
                                     chain=calibration.get("chain", 4), device=device)
    cases = []
    for nbytes in sizes:
        count = nbytes // itemsize
        pristine = fill_pattern(rank, count, dtype, op).to(device)
        expected = expected_result(world_size, count, dtype, op)
        tol = _tolerance(dtype, op)
        t = pristine.clone()
        for algo in algorithms:
            opts = {} if algo == "builtin" else {
                k: v for k, v in (options or {}).items()
                if k in _algo_options(algo) and v is not None}

            def run(t: Any, algo: str = algo, opts: dict[str, Any] = opts,
                    check: bool = False) -> None:
                if algo == "builtin":
                    _builtin(t, op)
                else:
                    all_reduce(t, op=op, algorithm=algo, check=check, **opts)
            t.copy_(pristine)
            run(t, check=True)  # the checked run also verifies every rank agrees on the call
            got = t.double().cpu()
            wrong = int((~torch.isclose(got, expected, rtol=tol, atol=0.0)).sum())
            cases.append({"algorithm": algo, "nbytes": count * itemsize, "count": count,
                          "run": run, "t": t, "pristine": pristine, "seconds": [],
                          "wrong": wrong})
    lane = f"rank{rank}/allreduce"
    spans: list[dict[str, Any]] = []
    for i in range(warmup + iters):
        if progress and rank == 0:
            print(f"[allreduce] round {i + 1}/{warmup + iters}"
                  f"{' (warmup)' if i < warmup else ''}: {len(sizes)} sizes x "
                  f"{len(algorithms)} algorithms", file=sys.stderr, flush=True)
        if calibrator is not None:
            c0 = now_us()
            calibrator.run_round(record=i >= warmup)
            if i >= warmup:
                spans.append({"name": "calibration exchanges", "category": "calibration",
                              "lane": lane, "start_us": c0, "duration_us": now_us() - c0,
                              "args": {"round": i - warmup}})
        for case in cases:
            t = case["t"]
            t.copy_(case["pristine"])  # repeated sums/products would overflow to inf at large p
            _sync(device)
            dist.barrier()
            t0 = now_us()
            case["run"](t)
            _sync(device)
            t1 = now_us()
            if i >= warmup:
                case["seconds"].append((t1 - t0) / 1e6)
                spans.append({"name": f"{case['algorithm']} {_size_label(case['nbytes'])}",
                              "category": "allreduce", "lane": lane, "start_us": t0,
                              "duration_us": t1 - t0,
                              "args": {"algorithm": case["algorithm"], "bytes": case["nbytes"],
                                       "round": i - warmup}})
    if calibrator is not None:
        cal = calibrator.fit().to_dict()
    rows = [{k: c[k] for k in ("algorithm", "nbytes", "count", "seconds", "wrong")}
            for c in cases]
    return {"calibration": cal, "rows": rows, "spans": spans, "host": socket.gethostname()}


def _size_label(nbytes: int) -> str:
    """``1024 -> '1 KiB'``, ``1536 -> '1536 B'``: the binary unit that divides exactly."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def _algo_options(algo: str) -> list[str]:
    from .algorithms import options_of

    return options_of(algo)


def summarize_times(per_rank: Sequence[Sequence[float]]) -> float:
    """Median over iterations of the slowest rank's time (seconds)."""
    arr = np.asarray(per_rank, dtype=float)
    return float(np.median(arr.max(axis=0)))
