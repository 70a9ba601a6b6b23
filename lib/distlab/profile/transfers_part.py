"""transfers part: the transfer lab's copy sweep (host-only adapter on CPU, CUDA per GPU).

Without torchrun it measures in this process (GPU 0 in ``--quick``, every local GPU otherwise, or
the host-only paths when there is none); under torchrun every rank measures its own GPU
(``LOCAL_RANK``) and the per-rank results are gathered to every rank.
"""

from __future__ import annotations

import os
from typing import Any

from .parts import PartContext, PartResult

__all__ = ["bench_args", "run"]


def bench_args(quick: bool, progress: bool) -> list[str]:
    """Options for :func:`distlab.bench.transfers.parse_args` (quick: 4 KiB .. 4 MiB)."""
    args = (["-b", "4K", "-e", "4M", "-f", "4", "--repeats", "3", "--iters", "5",
             "--prefetch-batches", "3", "--batch-bytes", "1M", "--compute-ms", "2"]
            if quick else ["-b", "4K", "-e", "256M", "-f", "4"])
    return args + ([] if progress else ["--no-progress"])


def _measure(device: int | None, argv: list[str]) -> dict[str, Any]:
    from distlab.bench.transfers import parse_args, run_benchmark

    if device is not None:
        import torch

        torch.cuda.set_device(device)
    return {"device": device, **run_benchmark(parse_args(argv))}


def transfers_worker(rank: int, world_size: int, argv: list[str]) -> dict[str, Any]:
    """Under torchrun: measure this rank's GPU (``LOCAL_RANK``), or the host when there is none."""
    import torch

    local = int(os.environ.get("LOCAL_RANK", "0"))
    return {"rank": rank, **_measure(local if torch.cuda.is_available() else None, argv)}


def run(ctx: PartContext) -> PartResult:
    """One span per measured device on lane ``transfers/<device>``."""
    import torch

    argv = bench_args(ctx.quick, ctx.progress and ctx.rank == 0)
    skipped = []
    if not torch.cuda.is_available():
        skipped.append({"what": "transfers/gpu", "why": "no CUDA device: host-only copy paths "
                        "(pageable/pinned host memory), no h2d/d2h"})
    devices: list[dict[str, Any]] = []
    if ctx.torchrun:
        from distlab import launch

        with ctx.timed("transfers/all_ranks", "transfer sweep per rank"):
            devices = launch.run(transfers_worker, ctx.world_size, backend="gloo",
                                 args=(argv,), timeout=ctx.timeout)
    else:
        gpus = [None] if not torch.cuda.is_available() else \
            list(range(1 if ctx.quick else torch.cuda.device_count()))
        for gpu in gpus:
            name = "host" if gpu is None else f"cuda{gpu}"
            with ctx.timed(f"transfers/{name}", f"transfer sweep {name}"):
                devices.append({"rank": 0, **_measure(gpu, argv)})
    return PartResult("transfers", payload={"devices": devices, "options": argv},
                      skipped=skipped)
