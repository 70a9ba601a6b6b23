"""Rank functions that hold distlab's DDP against torch's (run them with
:func:`distlab.launch.run`): which parameters torch's DDP puts in each bucket, and what ``no_sync``
accumulates."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from distlab.ddp.buckets import torch_ddp_buckets
from distlab.ddp.wrapper import DDP
from distlab.nets import mlp

__all__ = ["no_sync_rank", "torch_buckets_rank"]


def torch_buckets_rank(rank: int, world_size: int, layers: int, width: int,
                       bucket_cap_mb: float | None, iters: int = 3) -> dict[str, Any]:
    """Record ``GradBucket.parameters()`` (names) of a real torch DDP for ``iters`` iterations
    through a comm hook (which allreduces as the built-in does); also distlab's prediction
    (:func:`torch_ddp_buckets`) and :class:`DDP`'s ``buckets`` after each iteration."""
    model = mlp(layers, width, 0)
    names = {id(p): n for n, p in model.named_parameters()}
    x = torch.randn(4, width)
    predicted = torch_ddp_buckets(model, bucket_cap_mb, example_input=x)
    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    seen: list[list[list[str]]] = []

    def hook(state: Any, bucket: Any) -> Any:
        if bucket.index() == 0:
            seen.append([])
        seen[-1].append([names[id(p)] for p in bucket.parameters()])
        buf = bucket.buffer().div_(dist.get_world_size())
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])

    hook.__annotations__ = {"state": object, "bucket": dist.GradBucket,
                            "return": torch.futures.Future[torch.Tensor]}
    ddp.register_comm_hook(None, hook)
    for _ in range(iters):
        ddp(x).sum().backward()
    ours = DDP(mlp(layers, width, 0), bucket_cap_mb=bucket_cap_mb)
    ours_seen = []
    for _ in range(iters):
        ours(x).sum().backward()
        ours_seen.append([list(b) for b in ours.buckets])
    return {"torch": seen, "predicted": predicted, "ours": ours_seen}


def no_sync_rank(rank: int, world_size: int, layers: int, width: int,
                 accumulate: int) -> dict[str, Any]:
    """``accumulate`` micro-batches under ``no_sync`` then one synced, against one synced step on
    the summed loss: allreduce counts and whether the gradients are equal (allclose, 1e-6)."""
    g = torch.Generator().manual_seed(5 + rank)
    xs = [torch.randn(4, width, generator=g) for _ in range(accumulate + 1)]
    a = DDP(mlp(layers, width, 3))
    b = DDP(mlp(layers, width, 3))
    for x in xs[:-1]:
        with a.no_sync():
            a(x).pow(2).mean().backward()
    after_no_sync = a.allreduce_count
    a(xs[-1]).pow(2).mean().backward()
    sum(b(x).pow(2).mean() for x in xs).backward()
    same = all(torch.allclose(p.grad, q.grad, rtol=1e-6, atol=1e-7)
               for p, q in zip(a.parameters(), b.parameters(), strict=True))
    return {"allreduces_during_no_sync": after_no_sync, "allreduces_total": a.allreduce_count,
            "reference_allreduces": b.allreduce_count, "same_grads": same}
