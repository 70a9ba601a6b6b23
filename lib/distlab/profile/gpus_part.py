"""gpus part: the GPU-to-GPU matrix and every GPU fed at once (:mod:`distlab.bench.gpu_paths`).

One process drives every GPU of the host: without torchrun this one, under torchrun rank 0 (the
other ranks wait for it at the part's end, so nothing else runs on the GPUs meanwhile). Sizes:
latency at 4 B, bandwidth at 256 MiB (4 MiB with ``--quick``). Without a GPU the part is skipped
with one line per path; on one GPU the matrix and host-to-all are one line each. Under
``--rehearse BOX`` it measures the fake box, every row labelled rehearsal, and stores the PCIe
link the box pretends each GPU has, so the verdict runs on the same code path (and says
``rehearsal`` instead of judging).
"""

from __future__ import annotations

from typing import Any

from distlab.bench.gpu_paths import GPU_PATHS, measure_gpu_paths
from distlab.envinfo import pcie_links
from distlab.profile.parts import PartContext, PartResult
from distlab.transfers.gpu_box import rehearsal_pcie_link

__all__ = ["sizes_for", "run"]


def sizes_for(quick: bool) -> tuple[int, int]:
    """(latency bytes, bandwidth bytes) of the matrix; host-to-all copies the second."""
    return (4, 4 * 2**20) if quick else (4, 256 * 2**20)


def run(ctx: PartContext) -> PartResult:
    """One span on lane ``gpus/box``; measured by rank 0 only under torchrun."""
    if ctx.torchrun and ctx.rank != 0:
        return PartResult("gpus", payload={"measured_by_rank": 0})
    small, big = sizes_for(ctx.quick)
    with ctx.timed("gpus/box", "GPU-to-GPU matrix and host-to-all"):
        result = measure_gpu_paths(GPU_PATHS, minbytes=small, maxbytes=big,
                                   repeats=3 if ctx.quick else 5, iters=3 if ctx.quick else 10,
                                   warmup=1 if ctx.quick else 2, rehearse=ctx.rehearse,
                                   progress=ctx.progress)
    payload: dict[str, Any] = dict(result.payload)
    skipped = [{"what": f"gpus/{s['what']}", "why": s["why"]} for s in payload.pop("skipped")]
    if payload.get("box") is None:
        why = "; ".join(dict.fromkeys(s["why"] for s in skipped))  # each reason once
        return PartResult("gpus", "skipped", skipped=skipped, reason=why)
    payload["pcie_links"] = rehearsal_pcie_link(ctx.rehearse, payload["box"]["gpus"]) \
        if ctx.rehearse else pcie_links()
    payload["matrix_lines"] = [ln for ln in result.lines if not ln.startswith("skipped ")]
    payload["wrong"] = result.wrong
    return PartResult("gpus", payload=payload, skipped=skipped)
