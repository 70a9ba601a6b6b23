"""Rank functions of the gradient-accumulation tests (``tests/zero/test_zero_accumulation.py``):
ZeRO stages 0-2 accumulating microbatches under ``no_sync`` beside torch DDP's ``no_sync``."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from distlab.nets import mlp
from distlab.zero.optimizer import ZeroDataParallel

LR = 1e-2
#: How a step's last microbatch is reduced: by its own backward with sync on ("synced
#: backward"), or by ``finish_gradient_sync`` after every backward ran under ``no_sync``.
ENDINGS = ("synced backward", "finish_gradient_sync")


def _microbatches(rank: int, steps: int, micro: int, width: int) -> list[list[torch.Tensor]]:
    g = torch.Generator().manual_seed(5 + rank)
    return [[torch.randn(4, width, generator=g) for _ in range(micro)] for _ in range(steps)]


def _torch_ddp(batches: list[list[torch.Tensor]], layers: int, width: int) -> list[torch.Tensor]:
    """torch DDP + Adam, every microbatch but the last of a step under ``no_sync``."""
    m = DistributedDataParallel(mlp(layers, width, 0))
    opt = torch.optim.Adam(m.parameters(), lr=LR)
    for step in batches:
        for k, x in enumerate(step):
            with m.no_sync() if k < len(step) - 1 else nullcontext():
                m(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    return [p.detach().clone() for p in m.module.parameters()]


def _zero(batches: list[list[torch.Tensor]], layers: int, width: int, stage: int,
          ending: str, algorithm: str | None) -> list[torch.Tensor]:
    z = ZeroDataParallel(mlp(layers, width, 0), stage, lr=LR, bucket_cap_mb=0.002,
                         algorithm=algorithm)
    for step in batches:
        for k, x in enumerate(step):
            last = k == len(step) - 1
            with nullcontext() if last and ending == "synced backward" else z.no_sync():
                z(x).pow(2).mean().backward()
        if ending == "finish_gradient_sync":
            z.finish_gradient_sync()
        z.step()
    out = [p.detach().clone() for p in z.module.parameters()]
    z.close()
    return out


def accumulation_rank(rank: int, world_size: int, steps: int = 2, micro: int = 3,
                      layers: int = 3, width: int = 16) -> dict[str, Any]:
    """``{"stage S <ending> <algorithm>": {"equal", "max_abs"}}`` of the parameters after
    ``steps`` steps of ``micro`` microbatches each, against torch DDP's ``no_sync``."""
    torch.set_num_threads(1)
    batches = _microbatches(rank, steps, micro, width)
    ref = _torch_ddp(batches, layers, width)
    out: dict[str, Any] = {}
    for stage in (0, 1, 2):
        for ending in ENDINGS:
            for algorithm in (None, "builtin"):
                ours = _zero(batches, layers, width, stage, ending, algorithm)
                out[f"stage {stage} {ending} {algorithm or 'plans'}"] = {
                    "equal": all(torch.equal(a, b) for a, b in zip(ours, ref, strict=True)),
                    "max_abs": max(float((a - b).abs().max())
                                   for a, b in zip(ours, ref, strict=True))}
    return out
