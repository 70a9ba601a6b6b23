"""The rank function that recorded the committed gloo traces (``results/traces/gloo_ddp_*``).

A small DDP model trained on CPU ranks over gloo, profiled with :func:`distlab.trace.record`:
every ``stall_every``-th batch the DataLoader's ``__getitem__`` sleeps ``stall_s`` (a loader the
step waits for), and rank ``straggler`` sleeps ``straggler_s`` before each backward (a rank the
others wait for at the gradient allreduce).

    from distlab import launch
    from distlab.trace.demo import ddp_demo_rank
    launch.run(ddp_demo_rank, 3, args=("results/traces/gloo_ddp_3ranks",), timeout=120)
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["ddp_demo_rank"]


class _StallingDataset:
    """``n`` random (x, y) pairs; item ``i`` sleeps ``stall_s`` when ``i % stall_every == 0``."""

    def __init__(self, n: int, width: int, stall_every: int, stall_s: float, seed: int) -> None:
        import torch
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, width, generator=g)
        self.y = torch.randn(n, 1, generator=g)
        self.stall_every, self.stall_s = stall_every, stall_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> Any:
        if self.stall_every and i % self.stall_every == 0:
            time.sleep(self.stall_s)
        return self.x[i], self.y[i]


def ddp_demo_rank(rank: int, world_size: int, out_dir: str, *, steps: int = 3,
                  straggler: int = 1, straggler_s: float = 0.03, stall_every: int = 32,
                  stall_s: float = 0.02, width: int = 256, batch: int = 16,
                  seed: int = 0) -> str:
    """Train ``wait + warmup + steps`` DDP steps, profiling the last ``steps``; returns the
    folder the trace was written to."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader

    from distlab.trace.record import record

    torch.manual_seed(seed)
    torch.set_num_threads(1)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(),
                                    torch.nn.Linear(width, 1)), bucket_cap_mb=1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = _StallingDataset(batch * (steps + 3), width, stall_every, stall_s, seed + rank)
    loader = DataLoader(data, batch_size=batch, shuffle=False, num_workers=0)
    with record(out_dir, steps=steps, wait=1, warmup=1, rank=rank) as prof:
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            if rank == straggler:
                time.sleep(straggler_s)
            opt.zero_grad()
            loss.backward()
            opt.step()
            prof.step()
    return out_dir
