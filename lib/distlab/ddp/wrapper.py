"""distlab's own DistributedDataParallel: the module wrapper around its reducer.

``DDP(module)`` checks that every rank holds the same model and bucket settings
(:mod:`distlab.ddp.agreement`), broadcasts parameters (and, with ``broadcast_buffers``, buffers)
from rank 0, and hands the parameters to a :class:`~distlab.ddp.reducer.Reducer`, which
owns the gradient buckets and reduces them while backward runs (its module docstring says how:
bucket fills, overlap, ``gradient_as_bucket_view``, comm hooks, algorithms, ``naive``, the
timeline, unused parameters, ``static_graph``). What stays here is torch's
``DistributedDataParallel`` side: ``forward`` (the rebuild of the buckets, the buffer broadcast,
the reducer told whether and how this iteration syncs), ``no_sync``, the Join protocol.

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

``broadcast_buffers=True`` (default, as torch): before each forward that follows a synced one, the
module's buffers are broadcast from group rank 0 (under ``Join``: from the highest rank not yet
joined, torch's ``_find_common_rank``), and at construction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors
from torch.distributed.algorithms.join import Join, Joinable

from distlab._checks import check_bool, check_float
from distlab.collectives.algorithms.registry import BUILTIN, check_algorithm, is_builtin
from distlab.ddp.agreement import check_ranks_agree, model_signature
from distlab.ddp.join import DDPJoinHook, join_config_enabled
from distlab.ddp.reducer import Reducer
from distlab.uneven import DEFAULT_TIMEOUT_S, bounded_group, check_timeout, run_bounded

__all__ = ["DDP"]


class _ReducerAttribute:
    """An attribute of :class:`DDP` that its reducer holds: read and written through
    ``ddp.reducer`` (under the reducer's name ``name``, default the same)."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = self.name or name

    def __get__(self, ddp: DDP | None, owner: type | None = None) -> Any:
        if ddp is None:
            return self
        return getattr(ddp.reducer, self.name)

    def __set__(self, ddp: DDP, value: Any) -> None:
        setattr(ddp.reducer, self.name, value)


class DDP(nn.Module, Joinable):
    """Data-parallel wrapper; see the module docstring. ``reducer``: its
    :class:`~distlab.ddp.reducer.Reducer`. ``buckets``: parameter names per bucket of the
    latest synced iteration, in reduction order. ``allreduce_count``: collectives issued so far
    (for the no_sync demonstration); ``shadow_count``: zero-filled collectives issued as a
    joined rank under ``Join``; ``last_joiner``: the group rank the model was broadcast from at
    the end of the last ``Join`` (``None`` before). ``timeout``: seconds a gradient collective
    may wait (``None``: the process group's timeout). ``find_unused_parameters``,
    ``static_graph``, ``broadcast_buffers``: as torch's (see the module docstrings).
    ``buffer_broadcasts``: buffer syncs so far (forward and joined). ``timeline``,
    ``bucket_cap_mb``, ``overlap``, ``algorithm``, ``naive``, ``gradient_as_bucket_view`` are
    the reducer's, read and set through it.

    Raises:
        ValueError: ``naive=True`` with ``find_unused_parameters`` or ``static_graph``, an
            unknown ``algorithm``, a module without a parameter that requires grad, ranks
            that disagree on the model or the settings.
    """

    timeline = _ReducerAttribute()
    bucket_cap_mb = _ReducerAttribute()
    overlap = _ReducerAttribute()
    algorithm = _ReducerAttribute()
    naive = _ReducerAttribute()
    gradient_as_bucket_view = _ReducerAttribute()
    buckets = _ReducerAttribute()
    allreduce_count = _ReducerAttribute()
    shadow_count = _ReducerAttribute()
    _layouts = _ReducerAttribute("layouts")
    _params = _ReducerAttribute("params")

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
        builtin = is_builtin("all_reduce", algorithm)
        if not builtin:
            check_algorithm(algorithm)
        self.module = module
        self.group = process_group
        self.rank = dist.get_rank(process_group)
        self.world = dist.get_world_size(process_group)
        self._divide_by_initial_world_size = True
        self.last_joiner: int | None = None
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise ValueError("module: DDP needs at least one parameter that requires grad")
        self._device = named[0][1].device
        settings = (f"cap={bucket_cap_mb};unused={self.find_unused_parameters};"
                    f"static={self.static_graph};naive={bool(naive)};"
                    f"view={bool(gradient_as_bucket_view)};buffers={self.broadcast_buffers}")
        check_ranks_agree(model_signature([p for _, p in named], list(module.buffers()),
                                          settings), process_group, self._device)
        with torch.no_grad():
            src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
            states = list(module.parameters())
            if self.broadcast_buffers:
                states += list(module.buffers())
            for t in states:
                dist.broadcast(t.data, src=src, group=process_group)
        self._comm = bounded_group(process_group, self.timeout)
        self._require_fwd_sync = True     # torch's require_forward_param_sync
        self.buffer_broadcasts = 0
        self.reducer = Reducer(
            named, comm=self._comm, rank=self.rank, world=self.world, timeout=self.timeout,
            bucket_cap_mb=bucket_cap_mb, overlap=bool(overlap), algorithm=algorithm,
            builtin=builtin, naive=bool(naive),
            gradient_as_bucket_view=bool(gradient_as_bucket_view),
            find_unused_parameters=self.find_unused_parameters, static_graph=self.static_graph,
            timeline=timeline)

    @contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally inside the block (no communication)."""
        reducer = self.reducer
        old, reducer.sync = reducer.sync, False
        try:
            yield
        finally:
            reducer.sync = old

    def register_comm_hook(self, state: Any, hook: Callable[[Any, Any], Any]) -> None:
        """Let ``hook(state, bucket)`` reduce every bucket (torch's contract; see
        :mod:`distlab.ddp.comm_hooks`). Once per DDP, before the backward it should act on.

        Raises:
            TypeError: ``hook`` is not callable with two arguments.
            ValueError: ``naive=True`` (no buckets) or ``algorithm`` is not ``"builtin"``
                (the hook replaces the allreduce, so the algorithm would be ignored).
            RuntimeError: a hook is already registered.
        """
        self.reducer.register_comm_hook(state, hook)

    def remove_hooks(self) -> None:
        """Detach the gradient hooks from the wrapped module's parameters."""
        self.reducer.remove_hooks()

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """``module(*args, **kwargs)``, with what torch's DDP does around it: raise if the last
        synced backward left buckets unreduced, rebuild the buckets once (any grad-enabled
        forward), broadcast buffers after a synced forward, and under ``Join`` the divisor and
        the "this iteration syncs" flag for joined ranks; with ``static_graph``, until the first
        synced backward, the output's tensors pass through the reducer's sink (torch's
        ``_DDPSink``)."""
        reducer = self.reducer
        grad_on = torch.is_grad_enabled()
        if grad_on:
            reducer.check_finished()
        joining = join_config_enabled(self)
        if joining:
            work = Join.notify_join_context(self)  # "not joined yet" (first joinable only)
            reducer.set_divide_factor(work, self._divide_by_initial_world_size)
        if grad_on:  # torch rebuilds in any grad-enabled forward (no_sync too)
            reducer.rebuild_buckets()
        if self._will_sync_buffers():
            self._sync_buffers(self._common_rank(True) if joining else 0)
        if joining:  # tell joined ranks whether this iteration's backward syncs
            dist.all_reduce(torch.tensor([1.0 if reducer.sync else 0.0], device=self._device),
                            group=self._comm, async_op=True)
        reducer.prepare_for_forward()
        out = self.module(*args, **kwargs)
        synced = grad_on and reducer.sync
        self._require_fwd_sync = synced
        reducer.prepare_for_backward(out, synced)
        return reducer.sink_output(out, synced)

    def join(self, divide_by_initial_world_size: bool = True, enable: bool = True,
             throw_on_early_termination: bool = False) -> Join:
        """torch DDP's ``model.join(...)``: ``Join([self], ...)`` with the same keywords."""
        return Join([self], enable, throw_on_early_termination,
                    divide_by_initial_world_size=divide_by_initial_world_size)

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
        device (torch's ``_broadcast_coalesced``; a copy, so bitwise torch's).

        The copy keeps each buffer's autograd version counter, as torch's ``_sync_buffers``
        does (``torch.autograd._unsafe_preserve_version_counter``): batch norm in training
        saves its running statistics for backward (``NativeBatchNormBackward0`` holds
        ``running_mean`` and ``running_var``, unread there in training mode), so a second
        forward before the first one's backward (a GAN discriminator on real, then fake
        data) would otherwise fail that backward with "modified by an inplace operation"."""
        buffers = list(self.module.buffers())
        groups: dict[tuple[torch.dtype, torch.device], list[torch.Tensor]] = {}
        for b in buffers:
            groups.setdefault((b.dtype, b.device), []).append(b)
        g = dist.get_global_rank(self._comm, src) if self._comm is not None else src
        with torch.no_grad(), torch.autograd._unsafe_preserve_version_counter(tuple(buffers)):
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

    def _peer_sync_flag(self) -> bool:
        """Joined rank: the flag allreduce of the others' forward; ``True`` when they sync."""
        flag = torch.zeros(1, device=self._device)
        work = dist.all_reduce(flag, group=self._comm, async_op=True)
        run_bounded(self.rank, "Join flag allreduce", self.timeout, work.wait)
        return bool(flag.item() != 0)
