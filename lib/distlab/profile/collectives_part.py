"""collectives part: allreduce on every usable backend, built-in next to distlab's algorithms.

gloo always runs (CPU tensors; world size 2, and 4 in a full profile); NCCL runs when torch sees
CUDA, with one rank per GPU (the torchrun world, or every local GPU). Rows follow nccl-tests
(size, count, type, redop, time, algbw, busbw, #wrong) plus the calibrated model's predicted time
and error% for distlab's algorithms (see :func:`distlab.bench.allreduce.run_benchmark`).
"""

from __future__ import annotations

from typing import Any

from distlab.bench.options import size_sweep

from .parts import PartContext, PartResult

__all__ = ["plan", "run"]

QUICK_ALGORITHMS = ["builtin", "ring", "tree", "recursive_doubling", "rabenseifner"]


def plan(ctx: PartContext) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The runs this machine supports (``backend``, ``world_size``, sizes, algorithms, iters) and
    the skipped ones with their reason."""
    import torch
    import torch.distributed as dist

    from distlab.collectives import ALGORITHMS

    runs: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    if ctx.quick:
        sizes, algos, iters, warmup = size_sweep(64 * 1024, 1024 * 1024, 4), QUICK_ALGORITHMS, 5, 2
    else:
        sizes, algos, iters, warmup = (size_sweep(1024, 64 * 2**20, 4), ["builtin", *ALGORITHMS],
                                       20, 5)
    if not dist.is_available() or not dist.is_gloo_available():
        skipped.append({"what": "collectives/gloo", "why": "torch.distributed has no gloo"})
    else:
        worlds = [ctx.world_size] if ctx.torchrun else ([2] if ctx.quick else [2, 4])
        for ws in worlds:
            if ws < 2:
                skipped.append({"what": f"collectives/gloo ws{ws}",
                                "why": "an allreduce needs at least 2 ranks"})
                continue
            runs.append({"backend": "gloo", "world_size": ws, "sizes": sizes,
                         "algorithms": list(algos), "iters": iters, "warmup": warmup})
    if not dist.is_available() or not dist.is_nccl_available():
        skipped.append({"what": "collectives/nccl",
                        "why": f"torch {torch.__version__} is built without NCCL"})
    elif not torch.cuda.is_available():
        skipped.append({"what": "collectives/nccl", "why": "no CUDA device visible to torch"})
    else:
        ws = ctx.world_size if ctx.torchrun else torch.cuda.device_count()
        gpu_sizes = size_sweep(1024, 16 * 2**20 if ctx.quick else 1024 * 2**20, 4)
        runs.append({"backend": "nccl", "world_size": ws, "sizes": gpu_sizes,
                     "algorithms": list(algos), "iters": iters, "warmup": warmup})
    return runs, skipped


def _add_rank_spans(ctx: PartContext, r: dict[str, Any], out: dict[str, Any]) -> None:
    """Every timed call of every rank on lane ``collectives/<backend> ws<n> rank<r>``, from the
    ranks on this host (spans of ranks on another host are on that host's clock: left out, and
    the trace says so)."""
    import socket

    here = socket.gethostname()
    elsewhere = []
    for rank, (spans, host) in enumerate(zip(out["spans"], out["hosts"], strict=True)):
        if host != here:
            elsewhere.append(rank)
            continue
        lane = f"collectives/{r['backend']} ws{r['world_size']} rank{rank}"
        ctx.timeline.extend({**s, "lane": lane} for s in spans)
    if elsewhere:
        ctx.timeline.add_note(f"collectives {r['backend']} ws{r['world_size']}: calls of ranks "
                              f"{elsewhere} left out of the trace (another host's clock)")


def run(ctx: PartContext) -> PartResult:
    """Run every planned sweep; each is one span on lane ``collectives/<backend>``, and every
    timed call of every rank on this host one span on ``collectives/<backend> ws<n> rank<r>``."""
    from distlab.bench.allreduce import run_benchmark

    runs, skipped = plan(ctx)
    results = []
    for r in runs:
        cal_kwargs = {"sizes": [4096, 65536, 1024 * 1024], "iters": 3, "warmup": 1,
                      "reduce_sizes": [65536, 1024 * 1024]} if ctx.quick else None
        with ctx.timed(f"collectives/{r['backend']}",
                       f"allreduce sweep ws{r['world_size']}", world_size=r["world_size"]):
            out = run_benchmark(r["world_size"], r["sizes"], r["algorithms"], iters=r["iters"],
                                warmup=r["warmup"], backend=r["backend"],
                                calibrate=r["world_size"] >= 2, calibrate_kwargs=cal_kwargs,
                                timeout=ctx.timeout, progress=ctx.progress)
        _add_rank_spans(ctx, r, out)
        results.append({**r, "calibration": out["calibration"], "rows": out["rows"]})
    status = "ok" if results else "skipped"
    reason = "" if results else "; ".join(s["why"] for s in skipped)
    return PartResult("collectives", status, {"runs": results}, skipped, reason)
