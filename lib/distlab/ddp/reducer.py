"""distlab's own DistributedDataParallel: torch's buckets, reduced while backward still runs.

``DDP(module)`` broadcasts parameters and buffers from rank 0, then on every synced backward:
each parameter's post-accumulate-grad hook copies its gradient (times ``1/world``, as torch does)
into its bucket's flat buffer; once a bucket is full and every earlier bucket has been launched,
its allreduce starts (async with the built-in allreduce; ``overlap=False`` launches all buckets
after backward). A callback queued on the autograd engine waits for all of them at the end of
backward and copies the sums back into ``.grad``. Iteration 0 uses one bucket per dtype; the first
synced backward records the gradient-ready order and the buckets are rebuilt from it exactly as
torch rebuilds them (:func:`distlab.ddp.buckets.rebuilt_buckets`).

With ``algorithm`` other than ``"builtin"`` each bucket goes through
:func:`distlab.collectives.all_reduce` (synchronous p2p schedules), so it blocks backward at the
moment the bucket is launched. ``naive=True`` reduces every parameter on its own after backward.
Timeline lanes: ``rank{r}/backward`` (one span per module owning parameters, from the previous
module's last ready gradient -- or the end of forward -- to its own; "bucket ready" marks)
and ``rank{r}/allreduce`` (launch to completion of each bucket's allreduce). Times are in us.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from distlab._checks import check_bool, check_float
from distlab.ddp.buckets import initial_buckets, rebuilt_buckets
from distlab.timeline import now_us


class DDP(nn.Module):
    """Data-parallel wrapper; see the module docstring. ``buckets``: parameter names per bucket
    of the latest synced iteration, in reduction order. ``allreduce_count``: collectives issued
    so far (for the no_sync demonstration)."""

    def __init__(self, module: nn.Module, *, bucket_cap_mb: float | None = None,
                 process_group: Any = None, overlap: bool = True, algorithm: str = "builtin",
                 timeline: Any = None, naive: bool = False) -> None:
        super().__init__()
        if bucket_cap_mb is not None:
            bucket_cap_mb = check_float("bucket_cap_mb (MiB)", bucket_cap_mb, minimum=0,
                                        exclusive_minimum=True)
        overlap = check_bool("overlap", overlap)
        naive = check_bool("naive", naive)
        if algorithm != "builtin":
            from distlab.collectives.algorithms import check_algorithm
            check_algorithm(algorithm)
        self.module = module
        self.bucket_cap_mb = bucket_cap_mb
        self.group = process_group
        self.overlap = bool(overlap)
        self.algorithm = algorithm
        self.timeline = timeline
        self.naive = bool(naive)
        self.rank = dist.get_rank(process_group)
        self.world = dist.get_world_size(process_group)
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        with torch.no_grad():
            src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t.data, src=src, group=process_group)
        self._sync = True
        self._rebuilt = False
        self._ready_order: list[int] = []
        self.allreduce_count = 0
        self._set_buckets(initial_buckets(self._params, bucket_cap_mb))
        self._handles = [p.register_post_accumulate_grad_hook(self._make_hook(i))
                         for i, p in enumerate(self._params)]
        owner = {id(p): n.rsplit(".", 1)[0] if "." in n else "" for n, p in named}
        self._param_module = [owner[id(p)] for p in self._params]
        self._mod_left: dict[str, int] = {}
        self._mark = now_us()
        self._reset_iteration()

    # ---- buckets -----------------------------------------------------------------------------
    def _set_buckets(self, buckets: list[list[int]]) -> None:
        self._bucket_idx = buckets
        self._where = {i: b for b, idx in enumerate(buckets) for i in idx}
        self.buckets = [[self._names[i] for i in idx] for idx in buckets]
        self._flat = []
        self._views: dict[int, torch.Tensor] = {}
        for idx in buckets:
            flat = torch.empty(sum(self._params[i].numel() for i in idx),
                               dtype=self._params[idx[0]].dtype, device=self._params[idx[0]].device)
            off = 0
            for i in idx:
                n = self._params[i].numel()
                self._views[i] = flat[off:off + n].view_as(self._params[i])
                off += n
            self._flat.append(flat)

    def _reset_iteration(self) -> None:
        self._pending = [len(b) for b in self._bucket_idx]
        self._buffers: list[torch.Tensor | None] = [None] * len(self._bucket_idx)
        self._works: list[Any] = [None] * len(self._bucket_idx)
        self._next = 0
        self._queued = False
        self._mod_left = {}
        for m in getattr(self, "_param_module", []):
            self._mod_left[m] = self._mod_left.get(m, 0) + 1

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally inside the block (no communication)."""
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._sync and self._ready_order and not self._rebuilt:
            self._set_buckets(rebuilt_buckets(self._params, self._ready_order, self.bucket_cap_mb))
            self._rebuilt = True
        self._reset_iteration()
        out = self.module(*args, **kwargs)
        self._mark = now_us()  # backward spans start here (loss computation included)
        return out

    # ---- hooks -------------------------------------------------------------------------------
    def _lane(self, what: str) -> str:
        return f"rank{self.rank}/{what}"

    def _make_hook(self, i: int) -> Any:
        def hook(p: torch.Tensor) -> None:
            if not self._sync:
                return
            if not self._queued:
                self._queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._finish)
            if not self._rebuilt:
                self._ready_order.append(i)
            if self.naive:
                return
            torch.mul(p.grad, 1.0 / self.world, out=self._views[i])  # type: ignore[arg-type]
            self._module_done(i)
            b = self._where[i]
            self._pending[b] -= 1
            if self._pending[b] == 0:
                self._buffers[b] = self._flat[b]
                if self.timeline is not None:
                    self.timeline.record(f"bucket {b} ready", "ready", self._lane("backward"),
                                         now_us(), 0.0)
                if self.overlap:
                    while self._next < len(self._bucket_idx) and self._buffers[self._next] is not None:
                        self._launch(self._next)
                        self._next += 1
        return hook

    def _fill(self, b: int) -> None:
        for i in self._bucket_idx[b]:
            torch.mul(self._params[i].grad, 1.0 / self.world, out=self._views[i])  # type: ignore[arg-type]
        self._buffers[b] = self._flat[b]

    def _module_done(self, i: int) -> None:
        """Timeline: close the span of the leaf module whose last parameter became ready."""
        if self.timeline is None:
            return
        mod = self._param_module[i]
        self._mod_left[mod] -= 1
        if self._mod_left[mod] == 0:
            t = now_us()
            self.timeline.record(f"backward {mod}", "backward", self._lane("backward"),
                                 self._mark, t - self._mark)
            self._mark = t

    def _launch(self, b: int, name: str | None = None) -> None:
        buf = self._buffers[b]
        assert buf is not None
        self.allreduce_count += 1
        t0 = now_us()
        label = name or f"allreduce bucket {b}"
        if self.algorithm == "builtin":
            work = dist.all_reduce(buf, group=self.group, async_op=True)
            if self.timeline is not None:
                tl, lane = self.timeline, self._lane("allreduce")
                work.get_future().then(lambda _f: tl.record(label, "allreduce", lane, t0,
                                                             now_us() - t0, {"bytes": buf.numel() * buf.element_size()}))
            self._works[b] = work
        else:
            from distlab.collectives import all_reduce
            all_reduce(buf, "sum", self.algorithm, self.group)
            if self.timeline is not None:
                self.timeline.record(label, "allreduce", self._lane("allreduce"), t0, now_us() - t0,
                                     {"bytes": buf.numel() * buf.element_size()})

    def _finish(self) -> None:
        if self.naive:
            self._finish_naive()
            return
        for b in range(len(self._bucket_idx)):
            if self._buffers[b] is None:  # a parameter without gradient this iteration
                self._fill_missing(b)
        while self._next < len(self._bucket_idx):
            self._launch(self._next)
            self._next += 1
        for b, idx in enumerate(self._bucket_idx):
            if self._works[b] is not None:
                self._works[b].wait()
            buf = self._buffers[b]
            assert buf is not None
            off = 0
            for i in idx:
                p = self._params[i]
                n = p.numel()
                p.grad.copy_(buf[off:off + n].view_as(p))  # type: ignore[union-attr]
                off += n

    def _fill_missing(self, b: int) -> None:
        for i in self._bucket_idx[b]:
            if self._params[i].grad is None:
                self._params[i].grad = torch.zeros_like(self._params[i])
        self._fill(b)

    def _finish_naive(self) -> None:
        order = reversed(range(len(self._params)))  # roughly the ready order of a sequential model
        self._buffers = []
        self._works = []
        for k, i in enumerate(order):
            p = self._params[i]
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.mul_(1.0 / self.world)
            self._buffers.append(p.grad)
            self._works.append(None)
            self._launch(k, f"allreduce {self._names[i]}")
            if self._works[k] is not None:
                self._works[k].wait()

    def remove_hooks(self) -> None:
        """Detach the gradient hooks from the wrapped module's parameters."""
        for h in self._handles:
            h.remove()
        self._handles = []
