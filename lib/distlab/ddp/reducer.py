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
itself, with its own timeout. ``join_process_group`` is ``process_group`` itself (the default
group for ``None``), so ``Join`` takes distlab's DDP together with any other joinable of that
group (torch's ``ZeroRedundancyOptimizer``, a user's own) in any order: Join's own count runs
there, DDP's collectives on the bounded group.

Unused parameters, as torch's reducer handles them. ``find_unused_parameters=False`` (default)
expects a gradient for every parameter in every synced backward: buckets still waiting at the end
of backward are not reduced and the next forward raises (as torch). ``find_unused_parameters=True``
walks the autograd graph from the forward's outputs and marks the parameters it does not reach
ready (zeros, or their accumulated gradient) at the first gradient hook; a map of locally used
parameters is summed over the ranks after the last bucket, and a parameter no rank used keeps its
``.grad`` untouched (``None`` stays ``None``). Its buckets are torch's: sized in parameter order,
never rebuilt. ``static_graph=True``: the first synced backward reduces every bucket at its end,
records the unused parameters once, and the buckets are rebuilt after the second. Every rebuild
takes group rank 0's assignment (torch's ``sync_bucket_indices``), so all ranks reduce the same
buckets whatever each one used; construction checks that every rank holds the same model and
bucket settings (:mod:`distlab.ddp.agreement`).

``broadcast_buffers=True`` (default, as torch): before each forward that follows a synced one, the
module's buffers are broadcast from group rank 0 (under ``Join``: from the highest rank not yet
joined, torch's ``_find_common_rank``), and at construction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import torch
import torch.distributed as dist
import torch.utils._pytree as pytree
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.distributed.algorithms.join import Join, Joinable

from distlab._checks import check_bool, check_float
from distlab.collectives.algorithms.registry import BUILTIN, check_algorithm, is_builtin
from distlab.collectives.runtime.execute import all_reduce
from distlab.ddp.agreement import check_ranks_agree, model_signature
from distlab.ddp.buckets import initial_buckets, rebuilt_buckets, unused_initial_buckets
from distlab.ddp.comm_hooks import check_comm_hook
from distlab.ddp.grad_bucket import BucketLayout
from distlab.ddp.join import DDPJoinHook, join_config_enabled
from distlab.timeline import now_us
from distlab.uneven import DEFAULT_TIMEOUT_S, bounded_group, check_timeout, run_bounded

_queue_callback = torch.autograd.Variable._execution_engine.queue_callback


def _aliases(grad: torch.Tensor, view: torch.Tensor) -> bool:
    """torch's ``grad.is_alias_of(bucket_view)`` (same storage); identity first (the usual case)."""
    return grad is view or torch._C._is_alias_of(grad, view)


def reached_parameters(output: Any) -> set[int]:
    """``id`` of every leaf tensor whose gradient accumulator the autograd graph of the tensors
    in ``output`` (any nesting of lists, tuples, dicts) reaches: torch's
    ``search_unused_parameters`` walk, in Python."""
    seen: set[Any] = set()
    found: set[int] = set()
    stack = [t.grad_fn for t in pytree.tree_leaves(output)
             if isinstance(t, torch.Tensor) and t.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn in seen:
            continue
        seen.add(fn)
        var = getattr(fn, "variable", None)
        if var is not None:
            found.add(id(var))
        stack.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)
    return found


class DDP(nn.Module, Joinable):
    """Data-parallel wrapper; see the module docstring. ``buckets``: parameter names per bucket
    of the latest synced iteration, in reduction order. ``allreduce_count``: collectives issued
    so far (for the no_sync demonstration); ``shadow_count``: zero-filled collectives issued as
    a joined rank under ``Join``; ``last_joiner``: the group rank the model was broadcast from
    at the end of the last ``Join`` (``None`` before). ``timeout``: seconds a gradient
    collective may wait (``None``: the process group's timeout). ``find_unused_parameters``,
    ``static_graph``, ``broadcast_buffers``: as torch's (see the module docstring).
    ``buffer_broadcasts``: buffer syncs so far (forward and joined)."""

    def __init__(self, module: nn.Module, *, bucket_cap_mb: float | None = None,
                 process_group: Any = None, overlap: bool = True, algorithm: str = BUILTIN,
                 timeline: Any = None, naive: bool = False,
                 gradient_as_bucket_view: bool = False,
                 timeout: float | None = DEFAULT_TIMEOUT_S,
                 find_unused_parameters: bool = False, static_graph: bool = False,
                 broadcast_buffers: bool = True) -> None:
        super().__init__()
        Joinable.__init__(self)
        self.timeout = check_timeout(timeout)
        if bucket_cap_mb is not None:
            bucket_cap_mb = check_float("bucket_cap_mb (MiB)", bucket_cap_mb, minimum=0,
                                        exclusive_minimum=True)
        overlap = check_bool("overlap", overlap)
        naive = check_bool("naive", naive)
        gradient_as_bucket_view = check_bool("gradient_as_bucket_view", gradient_as_bucket_view)
        self.find_unused_parameters = check_bool("find_unused_parameters", find_unused_parameters)
        self.static_graph = check_bool("static_graph", static_graph)
        self.broadcast_buffers = check_bool("broadcast_buffers", broadcast_buffers)
        if naive and (self.find_unused_parameters or self.static_graph):
            raise ValueError("naive=True reduces every parameter on its own after backward; "
                             "find_unused_parameters and static_graph need naive=False")
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
        self._device = self._params[0].device
        settings = (f"cap={bucket_cap_mb};unused={self.find_unused_parameters};"
                    f"static={self.static_graph};naive={self.naive};"
                    f"view={self.gradient_as_bucket_view};buffers={self.broadcast_buffers}")
        check_ranks_agree(model_signature(self._params, list(module.buffers()), settings),
                          process_group, self._device)
        with torch.no_grad():
            src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
            states = list(module.parameters())
            if self.broadcast_buffers:
                states += list(module.buffers())
            for t in states:
                dist.broadcast(t.data, src=src, group=process_group)
        self._comm = bounded_group(process_group, self.timeout)
        n = len(self._params)
        # torch's reducer state for unused parameters (dynamic: find_unused and not static)
        self._dynamic_unused = self.find_unused_parameters and not self.static_graph
        self._track_used = self.find_unused_parameters or self.static_graph
        self._used = [False] * n          # local_used_map_ (this backward, or no_sync's since)
        self._used_dev = torch.zeros(n, dtype=torch.int32, device=self._device)  # its sum
        self._used_work: Any = None
        self._unused: list[int] = []      # unused_parameters_ of this forward
        self._missing: set[int] = set()   # buckets holding an unused parameter this backward
        self._unfinished: list[int] | None = None  # params left unreduced (raise next forward)
        self._static_calls = 0            # synced backwards seen with static_graph=True
        self._static_counts = [0] * n     # static graph: hooks fired in the first one
        self._static_unused: list[int] = []
        self._global_used: list[bool] | None = None  # static graph: fixed by the first backward
        self._require_fwd_sync = True     # torch's require_forward_param_sync
        self.buffer_broadcasts = 0
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
        self._set_buckets(unused_initial_buckets(self._params, bucket_cap_mb)
                          if self._dynamic_unused else initial_buckets(self._params, bucket_cap_mb))
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
        self._missing = set()

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
        grad_on = torch.is_grad_enabled()
        if grad_on and self._unfinished is not None:
            self._raise_unfinished()
        joining = join_config_enabled(self)
        if joining:
            work = Join.notify_join_context(self)  # "not joined yet" (first joinable only)
            self._set_divide_factor(work)
        if grad_on:  # torch rebuilds in any grad-enabled forward (no_sync too)
            self._maybe_rebuild()
        if self._will_sync_buffers():
            self._sync_buffers(self._common_rank(True) if joining else 0)
        if joining:  # tell joined ranks whether this iteration's backward syncs
            dist.all_reduce(torch.tensor([1.0 if self._sync else 0.0], device=self._device),
                            group=self._comm, async_op=True)
        self._reset_iteration()
        out = self.module(*args, **kwargs)
        synced = grad_on and self._sync
        self._require_fwd_sync = synced
        self._unused = []
        if synced and self._dynamic_unused:
            reached = reached_parameters(out)
            self._unused = [i for i, p in enumerate(self._params) if id(p) not in reached]
        elif synced and self.static_graph and self._static_calls >= 1:
            self._unused = self._static_unused
        if self._traced:
            self._mark = now_us()  # backward spans start here (loss computation included)
        return out

    def join(self, divide_by_initial_world_size: bool = True, enable: bool = True,
             throw_on_early_termination: bool = False) -> Join:
        """torch DDP's ``model.join(...)``: ``Join([self], ...)`` with the same keywords."""
        return Join([self], enable, throw_on_early_termination,
                    divide_by_initial_world_size=divide_by_initial_world_size)

    def _raise_unfinished(self) -> None:
        """torch's "Expected to have finished reduction in the prior iteration" error, naming
        the parameters that got no gradient on this rank."""
        missing = self._unfinished or []
        self._unfinished = None
        names = ", ".join(self._names[i] for i in missing)
        raise RuntimeError(
            f"rank {self.rank}: DDP expected to have finished the reduction of the previous "
            f"backward before a new forward: parameter(s) {names} (indices {missing}) got no "
            "gradient on this rank, so their buckets were never reduced. The module has "
            "parameters not used in producing the loss: pass find_unused_parameters=True (or "
            "static_graph=True if the unused set never changes), or make sure every forward "
            "output takes part in the loss.")

    # ---- buffers (torch's broadcast_buffers) -------------------------------------------------
    def _will_sync_buffers(self) -> bool:
        """torch's ``will_sync_module_buffers``: after a synced forward, with buffers."""
        return (self._require_fwd_sync and self.broadcast_buffers
                and next(self.module.buffers(), None) is not None)

    def _common_rank(self, candidate: bool) -> int:
        """torch's ``_find_common_rank``: the largest group rank with ``candidate`` (one MAX
        allreduce on the bounded group)."""
        t = torch.tensor([self.rank if candidate else -1], device=self._device)
        run_bounded(self.rank, "Join rank agreement (buffers)", self.timeout, dist.all_reduce,
                    t, dist.ReduceOp.MAX, self._comm)
        return int(t.item())

    def _sync_buffers(self, src: int) -> None:
        """Broadcast the module's buffers from group rank ``src``: one broadcast per dtype and
        device (torch's ``_broadcast_coalesced``; a copy, so bitwise torch's)."""
        groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for b in self.module.buffers():
            groups.setdefault((b.dtype, b.device), []).append(b)
        g = dist.get_global_rank(self._comm, src) if self._comm is not None else src
        with torch.no_grad():
            for bufs in groups.values():
                flat = _flatten_dense_tensors(bufs)
                run_bounded(self.rank, f"buffer broadcast from rank {src}", self.timeout,
                            dist.broadcast, flat, g, self._comm)
                if src != self.rank:
                    for b, v in zip(bufs, _unflatten_dense_tensors(flat, bufs), strict=True):
                        b.copy_(v)
        self.buffer_broadcasts += 1

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
        """The group ``Join`` counts on: ``process_group`` itself (the default group for
        ``None``), the one every other joinable of these ranks reports, so ``Join`` accepts
        them together. DDP's own collectives stay on the bounded group."""
        return self.group if self.group is not None else dist.group.WORLD

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

    def _should_rebuild(self) -> bool:
        """torch's ``should_rebuild_buckets``: once, unless unused parameters are searched."""
        return not self._rebuilt and not self._dynamic_unused

    def _maybe_rebuild(self) -> None:
        """The one rebuild of the buckets from the recorded gradient-ready order; the
        assignment of group rank 0 is broadcast to all (torch's ``sync_bucket_indices``), so
        every rank reduces the same buckets whatever order its own gradients came in."""
        if not self._should_rebuild() or not self._ready_order:
            return
        if sorted(self._ready_order) != list(range(len(self._params))):
            missing = sorted(set(range(len(self._params))) - set(self._ready_order))
            raise RuntimeError(
                f"rank {self.rank}: DDP cannot rebuild its buckets: parameter(s) "
                f"{[self._names[i] for i in missing]} got no gradient in the first synced "
                "backward; pass find_unused_parameters=True or static_graph=True")
        buckets = rebuilt_buckets(self._params, self._ready_order, self.bucket_cap_mb)
        buckets = self._sync_bucket_indices(buckets)
        self._set_buckets(buckets)
        self._rebuilt = True

    def _sync_bucket_indices(self, buckets: list[list[int]]) -> list[list[int]]:
        n = len(self._params)
        code = torch.empty(2 * n, dtype=torch.int64, device=self._device)
        code[:n] = torch.tensor([i for b in buckets for i in b], dtype=torch.int64)
        code[n:] = torch.tensor([k for k, b in enumerate(buckets) for _ in b], dtype=torch.int64)
        run_bounded(self.rank, "broadcast of the rebuilt bucket assignment", self.timeout,
                    dist.broadcast, code,
                    dist.get_global_rank(self._comm, 0) if self._comm is not None else 0,
                    self._comm)
        order, ids = code[:n].tolist(), code[n:].tolist()
        out: list[list[int]] = [[] for _ in range(max(ids) + 1)]
        for i, k in zip(order, ids, strict=True):
            out[k].append(i)
        return out

    def _shadow_used_map(self) -> None:
        """Joined rank: its used-parameter map (the last sum it saw) into the others' map
        allreduce, summed in place as torch's ``_match_unused_params_allreduce``."""
        run_bounded(self.rank, "shadow allreduce of the used-parameter map", self.timeout,
                    dist.all_reduce, self._used_dev, dist.ReduceOp.SUM, self._comm)

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
        if self._track_used and (self._dynamic_unused or self._static_calls == 0):
            self._used[i] = True  # torch's local_used_map_ (no_sync backwards included)
        if not self._sync:
            return
        if self.static_graph and self._static_calls == 0:  # first backward: count only
            self._static_counts[i] += 1
            if not self._queued:
                self._queued = True
                _queue_callback(self._finish_static_first)
            return
        if not self._queued:
            self._queued = True
            _queue_callback(self._finish)
            if self._unused:
                self._mark_unused_ready()
            self._fast = self._rebuilt and not self.naive and not self._traced
        if self._should_rebuild():
            self._ready_order.append(i)
        if self._traced:
            self._module_done(i)
        if self.naive:
            return
        b = self._bucket_of[i]
        self._pending[b] -= 1
        if self._pending[b] == 0:
            self._bucket_ready(b)

    def _mark_unused_ready(self) -> None:
        """torch's first-hook marking of the parameters the forward did not reach: their
        buckets count them as arrived (filled with zeros or their gradient, ``_fill_each``)."""
        for j in self._unused:
            b = self._bucket_of[j]
            self._missing.add(b)
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
        if self._missing and b in self._missing:
            self._fill_each(b)
            return
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
                    if not self._track_used:  # else the copy-out decides (global use)
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
                self._works[b] = self._trace_future(fut, f"allreduce bucket {b}", t0, buf)
        elif self._builtin:
            if self._traced:
                t0 = now_us()
            work = dist.all_reduce(buf, group=self._comm, async_op=True)
            self._works[b] = work
            if self._traced:
                self._works[b] = self._trace_future(work.get_future(), f"allreduce bucket {b}",
                                                    t0, buf)
        else:
            t0 = now_us()
            self._reduce_sync(buf, self._describe_bucket(b))
            if self._traced:
                self.timeline.record(f"allreduce bucket {b}", "allreduce", self._lane("allreduce"),
                                     t0, now_us() - t0, {"bytes": lay.nbytes})

    def _trace_future(self, fut: torch.futures.Future, label: str, t0: float,
                      buf: torch.Tensor) -> torch.futures.Future:
        """The future to wait on in place of ``fut``: it completes with ``fut``'s value once the
        span (``t0`` to completion, microseconds) is on the timeline. Waiting on ``fut`` itself
        could return before its callback ran, and the step would end without the span."""
        tl, lane, nbytes = self.timeline, self._lane("allreduce"), buf.numel() * buf.element_size()

        def record(done: torch.futures.Future) -> Any:
            tl.record(label, "allreduce", lane, t0, now_us() - t0, {"bytes": nbytes})
            return done.value()

        return fut.then(record)

    def _finish(self) -> None:
        try:
            if self.naive:
                self._finish_naive()
                return
            if min(self._pending) < 0:
                raise RuntimeError("a parameter's gradient became ready twice in one backward "
                                   "(reentrant backward or checkpointing): DDP expects each once")
            nb = len(self._layouts)
            unready = [b for b in range(nb) if not self._ready[b]]
            if unready and not self._track_used:
                self._leave_unfinished(unready)
                return
            for b in unready:  # a parameter the graph reached whose gradient never came
                self._fill_each(b)
                self._ready[b] = True
            while self._next < nb:
                self._launch(self._next)
                self._next += 1
            used_work = None
            if self._dynamic_unused:  # torch's all_reduce_local_used_map, after the last bucket
                self._used_dev.copy_(torch.tensor(self._used, dtype=torch.int32))
                used_work = dist.all_reduce(self._used_dev, group=self._comm, async_op=True)
            self._wait_and_copy_out(used_work)
            if self.static_graph and self._should_rebuild() and self._ready_order:
                self._ready_order += self._static_unused  # torch pushes them last
        finally:
            if self._dynamic_unused:
                self._used = [False] * len(self._params)
            self._reset_counters()

    def _leave_unfinished(self, unready: list[int]) -> None:
        """``find_unused_parameters=False`` and some bucket never filled: as torch, those
        buckets are not reduced (nor any after them) and the next forward raises; the buckets
        already launched are waited for."""
        idx = [i for b in unready for i in self._bucket_idx[b]]
        self._unfinished = [i for i in idx if self._params[i].grad is None] or idx
        for b in range(self._next):
            work = self._works[b]
            self._works[b] = None
            if work is not None:
                self._wait(work, self._describe_bucket(b))

    def _wait_and_copy_out(self, used_work: Any) -> None:
        """Wait for every bucket (and the used-parameter map), copy the sums into ``.grad``."""
        global_used = self._global_used
        if used_work is not None:
            self._wait(used_work, "allreduce of the used-parameter map")
            global_used = (self._used_dev != 0).tolist()
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
            if global_used is None or (
                    all(global_used[i] for i in self._bucket_idx[b])
                    and all(p.grad is not None for p in lay.params)):
                self._copy_out(lay, result)
            else:
                self._copy_out_used(b, result, global_used)

    def _copy_out_used(self, b: int, result: torch.Tensor, global_used: list[bool]) -> None:
        """torch's ``finalize_bucket_dense`` with unused parameters: a parameter no rank used
        keeps its ``.grad`` untouched; one used elsewhere gets the sum (created if ``None``)."""
        lay = self._layouts[b]
        if self.gradient_as_bucket_view and result is not lay.flat:
            lay.flat.copy_(result)
        views = lay.views if (result is lay.flat or self.gradient_as_bucket_view) \
            else lay.views_of(result)
        with torch.no_grad():
            for i, p, v in zip(self._bucket_idx[b], lay.params, views, strict=True):
                if not global_used[i]:
                    continue
                if self.gradient_as_bucket_view:
                    if p.grad is None:
                        p.grad = v
                elif p.grad is None:
                    p.grad = torch.empty_like(p).copy_(v)
                else:
                    p.grad.copy_(v)

    def _finish_static_first(self) -> None:
        """``static_graph=True``, end of the first synced backward (torch's
        ``delay_all_reduce``): the used-parameter map, then every bucket filled and reduced;
        the parameters whose hook never fired are the unused ones from now on."""
        try:
            self._static_calls = 1
            n = len(self._params)
            self._static_unused = [i for i in range(n) if self._static_counts[i] == 0]
            self._used_dev.copy_(torch.tensor(self._used, dtype=torch.int32))
            work = dist.all_reduce(self._used_dev, group=self._comm, async_op=True)
            nb = len(self._layouts)
            for b in range(nb):
                self._fill_each(b)
                self._ready[b] = True
            for b in range(nb):
                self._launch(b)
            self._next = nb
            self._wait_and_copy_out(work)
            self._global_used = (self._used_dev != 0).tolist()
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
