"""distlab's own DistributedDataParallel: torch's buckets, reduced while backward still runs.

``DDP(module)`` broadcasts parameters and buffers from rank 0. On every synced backward each
parameter's post-accumulate-grad hook counts its bucket down; when a bucket's last gradient is in,
the bucket is filled in a few tensor ops (:class:`~distlab.ddp.grad_bucket.BucketLayout`: one
``torch._foreach_copy_`` for the small gradients and one ``mul_`` by ``1/world`` per run of them,
one ``torch.mul(grad, 1/world, out=view)`` per large one -- torch's reducer does the latter for
every parameter) and, once every earlier bucket has been launched, its allreduce starts (async with
the built-in allreduce; ``overlap=False`` launches all buckets after backward). A callback queued
on the autograd engine waits for them at the end of backward and copies the sums back into
``.grad`` (one ``torch._foreach_copy_`` per bucket). Iteration 0 uses one bucket per dtype; the
first synced backward records the gradient-ready order and the buckets are rebuilt from it exactly
as torch rebuilds them (:func:`distlab.ddp.buckets.rebuilt_buckets`). Nothing in backward reads a
tensor's value on the host (no ``.item()``, ``.cpu()`` or synchronize), so with CUDA parameters
the copies, scaling and NCCL allreduces are queued on streams without blocking the host.

Per-step cost on the hot path (no timeline, built-in allreduce, no hook): per parameter one Python
hook call (a list decrement); per bucket the fill above, the allreduce call, one wait and one
copy-back. Results are bitwise those of torch DDP: the bucket holds ``grad * (1/world)`` (the
same single rounding as torch's ``mul_out`` with its wrapped double scalar), summed by the same
allreduce.

``gradient_as_bucket_view=True`` (as in torch): a gradient that is not yet a view into its bucket
is copied (times ``1/world``) into it and ``param.grad`` becomes that view; from then on autograd
accumulates straight into the bucket, which is divided in place by ``world`` (one ``div_`` per
bucket, as torch's ``bucket_view.div_(div_factor)``) and reduced; no copy either way.
``register_comm_hook(state, hook)``: ``hook(state, bucket)`` replaces the allreduce and the
division (see :mod:`distlab.ddp.comm_hooks`).

With ``algorithm`` other than ``"builtin"`` each bucket goes through
:func:`distlab.collectives.all_reduce` (synchronous p2p schedules), so it blocks backward at the
moment the bucket is launched. ``naive=True`` reduces every parameter on its own after backward.
Timeline (only when ``timeline`` is set; the hot path then pays for it): lanes
``rank{r}/backward`` (one span per module owning parameters, from the previous module's last ready
gradient -- or the end of forward -- to its own, ``naive=True`` included; "bucket ready" marks) and
``rank{r}/allreduce`` (launch to completion of each bucket's allreduce, or of each parameter's with
``naive=True``). Times are in us.

Uneven inputs (:mod:`distlab.uneven`): DDP is ``Joinable``; inside
``torch.distributed.algorithms.Join([ddp])`` a rank out of batches shadows the others'
collectives (:mod:`distlab.ddp.join`). Gradient collectives run on a process group of their own
whose timeout is ``timeout`` seconds (30 by default), so without Join a rank left alone in a
bucket's collective raises :class:`~distlab.uneven.UnevenInputsError` (naming the bucket, the
likely cause and the fix) instead of waiting forever; ``timeout=None`` uses ``process_group``
itself, with its own timeout.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.join import Join, Joinable

from distlab._checks import check_bool, check_float
from distlab.collectives.algorithms.registry import BUILTIN, check_algorithm, is_builtin
from distlab.collectives.runtime.execute import all_reduce
from distlab.ddp.buckets import initial_buckets, rebuilt_buckets
from distlab.ddp.comm_hooks import check_comm_hook
from distlab.ddp.grad_bucket import BucketLayout
from distlab.ddp.join import DDPJoinHook, join_config_enabled
from distlab.timeline import now_us
from distlab.uneven import DEFAULT_TIMEOUT_S, bounded_group, check_timeout, run_bounded

_queue_callback = torch.autograd.Variable._execution_engine.queue_callback


def _aliases(grad: torch.Tensor, view: torch.Tensor) -> bool:
    """torch's ``grad.is_alias_of(bucket_view)`` (same storage); identity first (the usual case)."""
    return grad is view or torch._C._is_alias_of(grad, view)


class DDP(nn.Module, Joinable):
    """Data-parallel wrapper; see the module docstring. ``buckets``: parameter names per bucket
    of the latest synced iteration, in reduction order. ``allreduce_count``: collectives issued
    so far (for the no_sync demonstration); ``shadow_count``: zero-filled collectives issued as
    a joined rank under ``Join``; ``last_joiner``: the group rank the model was broadcast from
    at the end of the last ``Join`` (``None`` before). ``timeout``: seconds a gradient
    collective may wait (``None``: the process group's timeout)."""

    def __init__(self, module: nn.Module, *, bucket_cap_mb: float | None = None,
                 process_group: Any = None, overlap: bool = True, algorithm: str = BUILTIN,
                 timeline: Any = None, naive: bool = False,
                 gradient_as_bucket_view: bool = False,
                 timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        super().__init__()
        Joinable.__init__(self)
        self.timeout = check_timeout(timeout)
        if bucket_cap_mb is not None:
            bucket_cap_mb = check_float("bucket_cap_mb (MiB)", bucket_cap_mb, minimum=0,
                                        exclusive_minimum=True)
        overlap = check_bool("overlap", overlap)
        naive = check_bool("naive", naive)
        gradient_as_bucket_view = check_bool("gradient_as_bucket_view", gradient_as_bucket_view)
        self._builtin = is_builtin("all_reduce", algorithm)
        if not self._builtin:
            check_algorithm(algorithm)
        self.module = module
        self.bucket_cap_mb = bucket_cap_mb
        self.group = process_group
        self.overlap = bool(overlap)
        self.algorithm = algorithm
        self.timeline = timeline
        self.naive = bool(naive)
        self.gradient_as_bucket_view = bool(gradient_as_bucket_view)
        self.rank = dist.get_rank(process_group)
        self.world = dist.get_world_size(process_group)
        self._div = self.world  # torch's div_factor_: the world, or the ranks not yet joined
        self._scale = 1.0 / self.world  # torch: wrapped_scalar_tensor(double(1.) / div_factor_)
        self._divide_by_initial_world_size = True
        self.shadow_count = 0
        self.last_joiner: int | None = None
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("module: DDP needs at least one parameter that requires grad")
        self._names = [n for n, _ in named]
        self._params = [p for _, p in named]
        with torch.no_grad():
            src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t.data, src=src, group=process_group)
        self._comm = bounded_group(process_group, self.timeout)
        self._device = self._params[0].device
        self._comm_hook: Callable[[Any, Any], Any] | None = None
        self._comm_state: Any = None
        self._sync = True
        self._rebuilt = False
        self._ready_order: list[int] = []
        self.allreduce_count = 0
        owner = {id(p): n.rsplit(".", 1)[0] if "." in n else "" for n, p in named}
        self._param_module = [owner[id(p)] for p in self._params]
        self._mod_counts: dict[str, int] = {}
        for m in self._param_module:
            self._mod_counts[m] = self._mod_counts.get(m, 0) + 1
        self._mod_left: dict[str, int] = {}
        self._mark = now_us()
        self._fast = False    # hooks take the short path (set by the first hook of a backward)
        self._queued = False  # the end-of-backward callback is queued for this backward
        self._traced = False  # a timeline records this iteration (decided in forward)
        self._set_buckets(initial_buckets(self._params, bucket_cap_mb))
        self._handles = [p.register_post_accumulate_grad_hook(partial(self._grad_ready, i))
                         for i, p in enumerate(self._params)]
        self._reset_iteration()

    # ---- buckets -----------------------------------------------------------------------------
    def _set_buckets(self, buckets: list[list[int]]) -> None:
        self._bucket_idx = buckets
        self._layouts = [BucketLayout(b, len(buckets), idx, self._params)
                         for b, idx in enumerate(buckets)]
        self._bucket_of = [0] * len(self._params)
        for b, idx in enumerate(buckets):
            for i in idx:
                self._bucket_of[i] = b
        self._sizes = [len(idx) for idx in buckets]
        self.buckets = [[self._names[i] for i in idx] for idx in buckets]
        if self.gradient_as_bucket_view:  # as torch's initialize_bucket_views on a rebuild
            with torch.no_grad():
                for lay in self._layouts:
                    for p, v in zip(lay.params, lay.views, strict=True):
                        if p.grad is not None and not _aliases(p.grad, v):
                            v.copy_(p.grad)
                            p.grad = v
        nb = len(buckets)
        self._pending = list(self._sizes)
        self._ready = [False] * nb
        self._works: list[Any] = [None] * nb
        self._next = 0

    def _reset_counters(self) -> None:
        """Bucket counters for the next backward (after each backward and in forward)."""
        self._pending[:] = self._sizes
        nb = len(self._sizes)
        self._ready[:] = [False] * nb
        self._works[:] = [None] * nb
        self._next = 0
        self._queued = False
        self._fast = False

    def _reset_iteration(self) -> None:
        self._reset_counters()
        self._traced = self.timeline is not None
        if self._traced:
            self._mod_left = dict(self._mod_counts)
            self._mark = now_us()

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally inside the block (no communication)."""
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    def register_comm_hook(self, state: Any, hook: Callable[[Any, Any], Any]) -> None:
        """Let ``hook(state, bucket)`` reduce every bucket (torch's contract; see
        :mod:`distlab.ddp.comm_hooks`). Once per DDP, before the backward it should act on.

        Raises:
            TypeError: ``hook`` is not callable with two arguments.
            ValueError: ``naive=True`` (no buckets) or ``algorithm`` is not ``"builtin"``
                (the hook replaces the allreduce, so the algorithm would be ignored).
            RuntimeError: a hook is already registered.
        """
        hook = check_comm_hook(hook)
        if self.naive:
            raise ValueError("register_comm_hook: naive=True reduces each parameter on its own, "
                             "without buckets; a comm hook needs naive=False")
        if not self._builtin:
            raise ValueError(f"register_comm_hook: the hook replaces the allreduce, so algorithm "
                             f"must be 'builtin', got {self.algorithm!r}")
        if self._comm_hook is not None:
            raise RuntimeError("register_comm_hook can only be called once per DDP")
        self._comm_hook, self._comm_state = hook, state

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        joining = join_config_enabled(self)
        if joining:
            work = Join.notify_join_context(self)  # "not joined yet" (first joinable only)
            self._set_divide_factor(work)
        if self._sync or joining:  # torch rebuilds in any forward; a joined rank can't tell
            self._maybe_rebuild()
        if joining:  # tell joined ranks whether this iteration's backward syncs
            dist.all_reduce(torch.tensor([1.0 if self._sync else 0.0], device=self._device),
                            group=self._comm, async_op=True)
        self._reset_iteration()
        out = self.module(*args, **kwargs)
        if self._traced:
            self._mark = now_us()  # backward spans start here (loss computation included)
        return out

    # ---- Join (distlab.ddp.join) ---------------------------------------------------------------
    def join_hook(self, **kwargs: Any) -> DDPJoinHook:
        """torch's Join protocol: the hook a joined rank runs (``divide_by_initial_world_size``,
        default ``True``, is the only keyword it reads)."""
        return DDPJoinHook(self, kwargs.get("divide_by_initial_world_size", True))

    @property
    def join_device(self) -> torch.device:
        return self._device

    @property
    def join_process_group(self) -> Any:
        return self._comm

    def _set_divide_factor(self, work: Any) -> None:
        """Divide by the initial world size, or (``divide_by_initial_world_size=False``) by the
        ranks not yet joined: the sum of the "not joined" allreduce ``work`` (torch's
        ``_set_forward_pass_work_handle``)."""
        div = self.world
        if work is not None and not self._divide_by_initial_world_size:
            work.wait()
            div = int(round(float(work.result()[0].item())))
        if div != self._div:
            self._div, self._scale = div, 1.0 / div

    def _maybe_rebuild(self) -> None:
        """The one rebuild of the buckets from the recorded gradient-ready order; under Join the
        assignment of group rank 0 is broadcast to all (torch's ``sync_bucket_indices``)."""
        if self._rebuilt or not self._ready_order:
            return
        buckets = rebuilt_buckets(self._params, self._ready_order, self.bucket_cap_mb)
        if join_config_enabled(self):
            buckets = self._sync_bucket_indices(buckets)
        self._set_buckets(buckets)
        self._rebuilt = True

    def _sync_bucket_indices(self, buckets: list[list[int]]) -> list[list[int]]:
        n = len(self._params)
        code = torch.empty(2 * n, dtype=torch.int64, device=self._device)
        code[:n] = torch.tensor([i for b in buckets for i in b], dtype=torch.int64)
        code[n:] = torch.tensor([k for k, b in enumerate(buckets) for _ in b], dtype=torch.int64)
        dist.broadcast(code, src=dist.get_global_rank(self._comm, 0) if self._comm is not None
                       else 0, group=self._comm)
        order, ids = code[:n].tolist(), code[n:].tolist()
        out: list[list[int]] = [[] for _ in range(max(ids) + 1)]
        for i, k in zip(order, ids, strict=True):
            out[k].append(i)
        return out

    def _peer_sync_flag(self) -> bool:
        """Joined rank: the flag allreduce of the others' forward; ``True`` when they sync."""
        flag = torch.zeros(1, device=self._device)
        work = dist.all_reduce(flag, group=self._comm, async_op=True)
        self._wait(work, "Join flag allreduce")
        return bool(flag.item() != 0)

    def _shadow_backward(self) -> None:
        """Joined rank: zeros into every gradient collective the others run, in their order."""
        if self.naive:
            for i in reversed(range(len(self._params))):
                zeros = torch.zeros_like(self._params[i])
                self.shadow_count += 1
                self._reduce_sync(zeros, f"shadow allreduce of {self._names[i]}")
            return
        works: list[tuple[int, float, Any]] = []
        for b, lay in enumerate(self._layouts):
            zeros = torch.zeros_like(lay.flat)
            self.shadow_count += 1
            t0 = now_us()
            if self._comm_hook is not None:
                gb = lay.grad_bucket
                gb._buffer = zeros
                works.append((b, t0, self._comm_hook(self._comm_state, gb)))
                gb._buffer = lay.flat
            elif self._builtin:
                works.append((b, t0, dist.all_reduce(zeros, group=self._comm, async_op=True)))
            else:
                self._reduce_sync(zeros, f"shadow allreduce of bucket {b}")
                works.append((b, t0, None))
        for b, t0, w in works:  # spans from launch to completion, as the live buckets'
            if w is not None:
                self._wait(w, f"shadow allreduce of bucket {b}")
            if self.timeline is not None:
                self.timeline.record(f"shadow allreduce bucket {b}", "shadow",
                                     self._lane("allreduce"), t0, now_us() - t0,
                                     {"bytes": self._layouts[b].nbytes})

    # ---- bounded waits ---------------------------------------------------------------------
    def _wait(self, work: Any, what: str) -> Any:
        """``work.wait()``; a failure (the bounded group's timeout, a peer gone) becomes
        :class:`~distlab.uneven.UnevenInputsError` naming ``what``."""
        return run_bounded(self.rank, what, self.timeout, work.wait)

    def _reduce_sync(self, t: torch.Tensor, what: str) -> None:
        """A blocking sum of ``t`` over the bounded group (built-in or distlab's algorithm,
        whose waits take the group's timeout)."""
        if self._builtin:
            run_bounded(self.rank, what, self.timeout, dist.all_reduce, t, dist.ReduceOp.SUM,
                        self._comm)
        else:
            run_bounded(self.rank, what, self.timeout, all_reduce, t, "sum", self.algorithm,
                        self._comm)

    def _describe_bucket(self, b: int) -> str:
        lay = self._layouts[b]
        return f"allreduce of bucket {b} ({len(lay.params)} parameters, {lay.nbytes:,} bytes)"

    # ---- hooks -------------------------------------------------------------------------------
    def _lane(self, what: str) -> str:
        return f"rank{self.rank}/{what}"

    def _grad_ready(self, i: int, _param: torch.Tensor) -> None:
        """Post-accumulate-grad hook of parameter ``i``. The short path (taken from the second
        hook of a synced backward on, when no timeline records and the buckets are rebuilt) is
        one list decrement."""
        if self._fast:
            b = self._bucket_of[i]
            left = self._pending[b] - 1
            self._pending[b] = left
            if left == 0:
                self._bucket_ready(b)
            return
        if not self._sync:
            return
        if not self._queued:
            self._queued = True
            _queue_callback(self._finish)
            self._fast = self._rebuilt and not self.naive and not self._traced
        if not self._rebuilt:
            self._ready_order.append(i)
        if self._traced:
            self._module_done(i)
        if self.naive:
            return
        b = self._bucket_of[i]
        self._pending[b] -= 1
        if self._pending[b] == 0:
            self._bucket_ready(b)

    def _bucket_ready(self, b: int) -> None:
        self._fill(b)
        self._ready[b] = True
        if self._traced:
            self.timeline.record(f"bucket {b} ready", "ready", self._lane("backward"), now_us(),
                                 0.0)
        if self.overlap:
            nb = len(self._layouts)
            while self._next < nb and self._ready[self._next]:
                self._launch(self._next)
                self._next += 1

    def _fill(self, b: int) -> None:
        """Bring bucket ``b``'s gradients into its flat buffer, scaled by 1/world unless a hook
        is registered (see the module docstring for the ops)."""
        lay = self._layouts[b]
        if self.gradient_as_bucket_view:
            grads = [p.grad for p in lay.params]
            if all(g is v for g, v in zip(grads, lay.views, strict=True)):
                if self._comm_hook is None:
                    lay.flat.div_(self._div)  # torch: bucket_view.div_(div_factor_) per view
                return
            if any(g is None or _aliases(g, v) for g, v in zip(grads, lay.views, strict=True)):
                self._fill_each(b)
                return
            self._copy_in(lay)
            for p, v in zip(lay.params, lay.views, strict=True):
                p.grad = v
            return
        self._copy_in(lay)

    def _copy_in(self, lay: BucketLayout) -> None:
        """Copy every (non-aliasing) gradient of ``lay`` into its view, times 1/world without a
        hook: small ones with one foreach copy and a ``mul_`` per run, large ones in one pass."""
        if self._comm_hook is not None:
            torch._foreach_copy_(lay.views, [p.grad for p in lay.params])
            return
        s = self._scale
        if lay.small_params:
            torch._foreach_copy_(lay.small_views, [p.grad for p in lay.small_params])
            for run in lay.small_runs:
                run.mul_(s)
        for p, v in zip(lay.big_params, lay.big_views, strict=True):
            torch.mul(p.grad, s, out=v)

    def _fill_each(self, b: int) -> None:
        """Per-parameter fill (torch's ``mark_variable_ready_dense`` rule for each one): for a
        missing gradient (zeros), a gradient already in its bucket view, or a mix."""
        lay = self._layouts[b]
        hook = self._comm_hook is not None
        with torch.no_grad():
            for p, v in zip(lay.params, lay.views, strict=True):
                g = p.grad
                if g is None:
                    v.zero_()
                    p.grad = v if self.gradient_as_bucket_view else torch.zeros_like(p)
                elif _aliases(g, v):
                    if not hook:
                        v.div_(self._div)
                else:
                    if hook:
                        v.copy_(g)
                    else:
                        torch.mul(g, self._scale, out=v)
                    if self.gradient_as_bucket_view:
                        p.grad = v

    def _module_done(self, i: int) -> None:
        """Timeline: close the span of the leaf module whose last parameter became ready."""
        mod = self._param_module[i]
        self._mod_left[mod] -= 1
        if self._mod_left[mod] == 0:
            t = now_us()
            self.timeline.record(f"backward {mod}", "backward", self._lane("backward"),
                                 self._mark, t - self._mark)
            self._mark = t

    def _launch(self, b: int) -> None:
        self.allreduce_count += 1
        lay = self._layouts[b]
        buf = lay.flat
        if self._comm_hook is not None:
            gb = lay.grad_bucket
            gb._buffer = buf  # a hook may have replaced it (set_buffer) last time
            if self._traced:
                t0 = now_us()
            fut = self._comm_hook(self._comm_state, gb)
            if not isinstance(fut, torch._C.Future):  # torch.futures.Future or get_future()
                raise TypeError(f"comm hook must return a torch.futures.Future, got "
                                f"{type(fut).__name__}")
            self._works[b] = fut
            if self._traced:
                self._trace_future(fut, f"allreduce bucket {b}", t0, buf)
        elif self._builtin:
            if self._traced:
                t0 = now_us()
            work = dist.all_reduce(buf, group=self._comm, async_op=True)
            self._works[b] = work
            if self._traced:
                self._trace_future(work.get_future(), f"allreduce bucket {b}", t0, buf)
        else:
            t0 = now_us()
            self._reduce_sync(buf, self._describe_bucket(b))
            if self._traced:
                self.timeline.record(f"allreduce bucket {b}", "allreduce", self._lane("allreduce"),
                                     t0, now_us() - t0, {"bytes": lay.nbytes})

    def _trace_future(self, fut: torch.futures.Future, label: str, t0: float,
                      buf: torch.Tensor) -> None:
        tl, lane, nbytes = self.timeline, self._lane("allreduce"), buf.numel() * buf.element_size()
        fut.then(lambda _f: tl.record(label, "allreduce", lane, t0, now_us() - t0,
                                      {"bytes": nbytes}))

    def _finish(self) -> None:
        try:
            if self.naive:
                self._finish_naive()
                return
            if min(self._pending) < 0:
                raise RuntimeError("a parameter's gradient became ready twice in one backward "
                                   "(reentrant backward or checkpointing): DDP expects each once")
            nb = len(self._layouts)
            for b in range(nb):
                if not self._ready[b]:  # a parameter without gradient this iteration
                    self._fill_each(b)
                    self._ready[b] = True
            while self._next < nb:
                self._launch(self._next)
                self._next += 1
            hook = self._comm_hook is not None
            for b, lay in enumerate(self._layouts):
                work = self._works[b]
                self._works[b] = None
                result = lay.flat
                if work is not None:
                    if hook:
                        result = lay.check_result(self._wait(work, self._describe_bucket(b)))
                    else:
                        self._wait(work, self._describe_bucket(b))
                self._copy_out(lay, result)
        finally:
            self._reset_counters()

    def _copy_out(self, lay: BucketLayout, result: torch.Tensor) -> None:
        """Reduced bucket -> ``.grad``: one foreach copy, or (bucket views) nothing unless a hook
        returned another tensor."""
        same = result is lay.flat
        if self.gradient_as_bucket_view:
            if not same:
                lay.flat.copy_(result)
            return
        views = lay.views if same else lay.views_of(result)
        torch._foreach_copy_([p.grad for p in lay.params], views)

    def _finish_naive(self) -> None:
        order = reversed(range(len(self._params)))  # roughly the ready order of a sequential model
        for i in order:
            p = self._params[i]
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.mul_(self._scale)
            self.allreduce_count += 1
            t0 = now_us()
            self._reduce_sync(p.grad, f"allreduce of {self._names[i]}")
            if self._traced:
                self.timeline.record(f"allreduce {self._names[i]}", "allreduce",
                                     self._lane("allreduce"), t0, now_us() - t0,
                                     {"bytes": p.grad.numel() * p.grad.element_size()})

    def remove_hooks(self) -> None:
        """Detach the gradient hooks from the wrapped module's parameters."""
        for h in self._handles:
            h.remove()
        self._handles = []
