"""Rank functions used only by tests/ddp (importable by spawned ranks)."""

from __future__ import annotations

from typing import Any

from distlab.ddp.measure import no_sync_worker, torch_buckets_worker  # noqa: F401 (re-export)


def make_model(layers: int, width: int, seed: int) -> Any:
    import torch
    torch.manual_seed(seed)
    mods: list[Any] = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods)


def train_compare_worker(rank: int, world_size: int, layers: int, width: int,
                         bucket_cap_mb: float | None, overlap: bool, naive: bool,
                         algorithm: str = "builtin") -> dict[str, Any]:
    """Train torch DDP and distlab DDP from the same rank-dependent initial weights (step 2 is a
    no_sync accumulation); return how the parameters compare and the allreduce counts."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from distlab.ddp import DDP

    ref = DistributedDataParallel(make_model(layers, width, 100 + rank), bucket_cap_mb=bucket_cap_mb)
    ours = DDP(make_model(layers, width, 100 + rank), bucket_cap_mb=bucket_cap_mb,
               overlap=overlap, naive=naive, algorithm=algorithm)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ref, ours)]
    counts = []
    g = torch.Generator().manual_seed(7 + rank)
    for step in range(5):
        x = torch.randn(8, width, generator=g)
        for m, opt in zip((ref, ours), opts, strict=True):
            if step == 2:
                with m.no_sync():
                    m(x).pow(2).mean().backward()
                continue
            m(x).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
        counts.append(ours.allreduce_count)
    pr = [p.detach() for p in ref.module.parameters()]
    po = [p.detach() for p in ours.module.parameters()]
    return {"equal": all(torch.equal(a, b) for a, b in zip(pr, po, strict=True)),
            "max_diff": max(float((a - b).abs().max()) for a, b in zip(pr, po, strict=True)),
            "counts": counts}
