"""Rank function for tests/test_kineto.py: a profiled step inside a distlab span."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from distlab.timeline import Timeline


def profiled_step(rank: int, world_size: int, outdir: str) -> dict[str, Any]:
    """Profile 3 matmuls and a gloo allreduce inside a distlab span ``rank{r}/step``; write the
    Kineto trace to ``outdir/kineto{r}.json``; return the path and the span's dicts."""
    x = torch.randn(192, 192)
    tl = Timeline()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with tl.span("step", "distlab", f"rank{rank}/step"):
            for _ in range(3):
                y = x @ x
            dist.all_reduce(y)
    path = f"{outdir}/kineto{rank}.json"
    prof.export_chrome_trace(path)
    return {"path": path, "spans": tl.to_dicts()}
