"""transfers part: the transfer lab's copy sweep (host-only adapter on CPU, CUDA per GPU).

Without torchrun it measures in this process (GPU 0 in ``--quick``, every local GPU otherwise, or
the host-only paths when there is none); under torchrun every rank measures its own GPU
(``LOCAL_RANK``) and the per-rank results are gathered to every rank.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from distlab import launch
from distlab.bench.transfers import BENCHMARK, TransfersConfig
from distlab.devices import gpu_sharing_problem, rank_gpu
from distlab.envinfo import gpu_count
from distlab.profile.parts import PartContext, PartResult

__all__ = ["config_for", "run", "transfers_rank"]


def config_for(quick: bool, progress: bool) -> TransfersConfig:
    """The transfer benchmark's config (quick: 4 KiB .. 4 MiB, few repeats)."""
    if quick:
        return TransfersConfig(minbytes=4096, maxbytes=4 * 2**20, stepfactor=4, repeats=3,
                               iters=5, prefetch_batches=3, batch_bytes=2**20, compute_ms=2.0,
                               no_progress=not progress)
    return TransfersConfig(minbytes=4096, maxbytes=256 * 2**20, stepfactor=4,
                           no_progress=not progress)


def _measure(device: int | None, config: TransfersConfig) -> dict[str, Any]:
    if device is not None:
        torch.cuda.set_device(device)
    report = BENCHMARK.run(config)
    pins = report.tables[1].rows if len(report.tables) > 1 else []
    return {"device": device, "rows": report.rows, "pin_costs": pins, **report.data}


def transfers_rank(rank: int, world_size: int, config: TransfersConfig) -> dict[str, Any]:
    """Under torchrun: measure this rank's GPU (``LOCAL_RANK``), or the host when it owns none
    (no GPU, or more ranks on the host than GPUs: :func:`distlab.devices.rank_gpu`)."""
    gpu = rank_gpu(gpu_count(), _local_world(), int(os.environ.get("LOCAL_RANK", "0")))
    return {"rank": rank, **_measure(gpu, config)}



def _local_world() -> int:
    return int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def run(ctx: PartContext) -> PartResult:
    """One span per measured device on lane ``transfers/<device>``."""
    config = config_for(ctx.quick, ctx.progress and ctx.rank == 0)
    skipped = []
    sharing = gpu_sharing_problem(gpu_count(), _local_world()) if ctx.torchrun else ""
    if not torch.cuda.is_available():
        skipped.append({"what": "transfers/gpu", "why": "no CUDA device: host-only copy paths "
                        "(pageable/pinned host memory), no h2d/d2h"})
    elif sharing:
        skipped.append({"what": "transfers/gpu", "why": f"{sharing}: every rank measures the "
                        "host-only copy paths"})
    devices: list[dict[str, Any]] = []
    if ctx.torchrun:
        with ctx.timed("transfers/all_ranks", "transfer sweep per rank"):
            devices = launch.run(transfers_rank, ctx.world_size, backend="gloo",
                                 args=(config,), timeout=ctx.timeout)
    else:
        gpus = [None] if not torch.cuda.is_available() else \
            list(range(1 if ctx.quick else torch.cuda.device_count()))
        for gpu in gpus:
            name = "host" if gpu is None else f"cuda{gpu}"
            with ctx.timed(f"transfers/{name}", f"transfer sweep {name}"):
                devices.append({"rank": 0, **_measure(gpu, config)})
    return PartResult("transfers", payload={"devices": devices, "config": config.to_dict()},
                      skipped=skipped)
