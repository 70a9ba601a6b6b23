"""Gradient memory of a DDP, counted from the live tensors: what ``gradient_as_bucket_view`` saves.

:func:`gradient_memory` looks at one :class:`distlab.ddp.DDP` as it is now: the bytes of its
bucket buffers and the bytes of every distinct storage behind a parameter's ``.grad`` that is not
one of those buffers. Without bucket views a parameter's gradient has its own storage beside its
slot in a bucket, so gradients take twice the parameter bytes; with them each ``.grad`` is a view
into its bucket and the separate bytes drop to zero. :func:`measure_gradient_memory` trains both
on live ranks and returns the two counts and the bytes saved.

    from distlab.ddp.memory import measure_gradient_memory
    m = measure_gradient_memory(layers=8, width=1024)
    print(m["saved_bytes"] / 2**20, "MiB saved per rank")
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from distlab import launch
from distlab._checks import check_int
from distlab.ddp.wrapper import DDP
from distlab.nets import mlp

__all__ = ["GradientMemory", "gradient_memory", "gradient_memory_worker",
           "measure_gradient_memory"]


@dataclass(frozen=True)
class GradientMemory:
    """Bytes, counted from live tensors. ``param_bytes``: parameters DDP reduces;
    ``bucket_bytes``: DDP's flat bucket buffers; ``separate_grad_bytes``: distinct ``.grad``
    storages outside the buckets; ``grads_in_buckets``: parameters whose ``.grad`` is a view into
    a bucket, of ``params``."""

    param_bytes: int
    bucket_bytes: int
    separate_grad_bytes: int
    grads_in_buckets: int
    params: int

    @property
    def total_bytes(self) -> int:
        """Gradient bytes held in all: bucket buffers plus separate ``.grad`` storages."""
        return self.bucket_bytes + self.separate_grad_bytes


def gradient_memory(ddp: Any) -> GradientMemory:
    """Count ``ddp``'s gradient memory now (see the module docstring).

    Raises:
        TypeError: ``ddp`` is not a :class:`distlab.ddp.DDP`.
    """
    if not isinstance(ddp, DDP):
        raise TypeError(f"ddp must be a distlab.ddp.DDP, got {type(ddp).__name__}")
    flats = [lay.flat for lay in ddp.reducer.layouts]
    bucket_ptrs = {f.untyped_storage().data_ptr() for f in flats}
    separate: dict[int, int] = {}
    in_buckets = 0
    for p in ddp.reducer.params:
        g = p.grad
        if g is None:
            continue
        st = g.untyped_storage()
        if st.data_ptr() in bucket_ptrs:
            in_buckets += 1
        else:
            separate[st.data_ptr()] = st.nbytes()
    return GradientMemory(
        param_bytes=sum(p.numel() * p.element_size() for p in ddp.reducer.params),
        bucket_bytes=sum(f.untyped_storage().nbytes() for f in flats),
        separate_grad_bytes=sum(separate.values()), grads_in_buckets=in_buckets,
        params=len(ddp.reducer.params))


def gradient_memory_worker(rank: int, world_size: int, layers: int, width: int, batch: int,
                           steps: int) -> dict[str, Any]:
    """Rank function: train a DDP without and with ``gradient_as_bucket_view`` for ``steps``
    steps (``zero_grad`` first in each step, so the gradients of the last step are counted) and
    return both :class:`GradientMemory` counts as dicts."""

    out: dict[str, Any] = {"rank": rank}
    for key, view in (("copy", False), ("view", True)):
        ddp = DDP(mlp(layers, width, 0), gradient_as_bucket_view=view)
        opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(rank)
        for _ in range(steps):
            opt.zero_grad()
            ddp(torch.randn(batch, width, generator=g)).pow(2).mean().backward()
            opt.step()
        out[key] = asdict(gradient_memory(ddp))
        del ddp, opt
    return out


def measure_gradient_memory(layers: int = 8, width: int = 1024, *, batch: int = 8,
                            world_size: int = 2, steps: int = 3,
                            timeout: float = 300.0) -> dict[str, Any]:
    """Train ``layers`` x Linear(``width``) with and without bucket views on ``world_size`` gloo
    ranks and return ``{"copy": GradientMemory, "view": GradientMemory, "saved_bytes": int}``
    for rank 0 (every rank holds the same model, so the same bytes): ``saved_bytes`` is
    ``copy.total_bytes - view.total_bytes``.

    Raises:
        RuntimeError: the ranks counted different bytes.
    """
    for name, v, lo in (("layers", layers, 1), ("width", width, 1), ("batch", batch, 1),
                        ("world_size", world_size, 1), ("steps", steps, 1)):
        check_int(name, v, minimum=lo)
    res = launch.run(gradient_memory_worker, world_size, args=(layers, width, batch, steps),
                     timeout=timeout)
    if any(r["copy"] != res[0]["copy"] or r["view"] != res[0]["view"] for r in res):
        raise RuntimeError(f"ranks counted different gradient bytes: {res}")
    copy, view = GradientMemory(**res[0]["copy"]), GradientMemory(**res[0]["view"])
    return {"copy": copy, "view": view, "saved_bytes": copy.total_bytes - view.total_bytes}
