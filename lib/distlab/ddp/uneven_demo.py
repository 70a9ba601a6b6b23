"""Uneven inputs, live: the exact-evaluation sampler's batches trained with distlab's DDP, without
Join (an error within the bounded wait, where torch's DDP would hang) and with it (the joined
rank's shadow allreduces). Notebook 06 runs :func:`uneven_rank` through :func:`distlab.launch.run`.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms import Join

from distlab._checks import check_bool, check_int
from distlab.ddp.wrapper import DDP
from distlab.nets import mlp
from distlab.samplers import DistributedEvalSampler
from distlab.timeline import Timeline
from distlab.uneven import DEFAULT_TIMEOUT_S, check_timeout

__all__ = ["batches_per_rank", "uneven_rank"]


def batches_per_rank(num_samples: int, world_size: int, batch_size: int) -> list[int]:
    """Batches each rank gets from :class:`~distlab.samplers.DistributedEvalSampler` (every
    sample exactly once, no padding), ``ceil(samples on the rank / batch_size)``."""
    num_samples = check_int("num_samples", num_samples, minimum=0)
    world_size = check_int("world_size", world_size, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    return [-(-len(DistributedEvalSampler(num_samples, world_size, r)) // batch_size)
            for r in range(world_size)]


def uneven_rank(rank: int, world_size: int, num_samples: int, batch_size: int, *,
                join: bool, timeout: float | None = DEFAULT_TIMEOUT_S, width: int = 64,
                layers: int = 4, bucket_cap_mb: float = 0.02) -> dict[str, Any]:
    """One rank: train distlab's DDP (SGD) on this rank's batches of ``num_samples`` random
    rows read through ``DistributedEvalSampler``, inside ``Join`` when ``join``, then
    ``dist.barrier()`` as at the end of an epoch. Never raises for a failed collective: returns
    what happened, then tears the process groups down (as a process that ends would, so the
    other ranks' connections close).

    Returns ``rank``, ``batches``, ``error`` (exception class name or ``None``), ``message``,
    ``seconds`` (loop start to the error or the barrier's end), ``shadowed`` (iterations this
    rank shadowed under Join), ``checksum`` (sum of the final parameters, float64), ``bucket_bytes``
    (per bucket) and ``spans`` (the DDP timeline, microseconds)."""
    join = check_bool("join", join)
    timeout = check_timeout(timeout)
    g = torch.Generator().manual_seed(0)
    data = torch.randn(num_samples, width, generator=g)
    sampler = DistributedEvalSampler(num_samples, world_size, rank)
    loader = torch.utils.data.DataLoader(data, batch_size=batch_size, sampler=sampler)
    timeline = Timeline()
    model = DDP(mlp(layers, width, 100 + rank), bucket_cap_mb=bucket_cap_mb, timeout=timeout,
                timeline=timeline)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    out: dict[str, Any] = {"rank": rank, "batches": len(loader), "error": None, "message": "",
                           "shadowed": 0}
    context = Join([model]) if join else None
    t0 = time.monotonic()
    try:
        if context is not None:
            with context:
                _train(model, opt, loader)
            out["shadowed"] = context._join_hooks[0].iterations  # type: ignore[attr-defined]
        else:
            _train(model, opt, loader)
        dist.barrier()
    except RuntimeError as exc:  # what this rank would see; reported, not raised
        out["error"], out["message"] = type(exc).__name__, str(exc)
    out["seconds"] = time.monotonic() - t0
    out["checksum"] = float(sum(p.detach().double().sum() for p in model.module.parameters()))
    out["bucket_bytes"] = [lay.nbytes for lay in model.reducer.layouts]
    out["spans"] = timeline.to_dicts()
    dist.destroy_process_group()
    return out


def _train(model: DDP, opt: torch.optim.Optimizer, loader: Any) -> None:
    for x in loader:
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
