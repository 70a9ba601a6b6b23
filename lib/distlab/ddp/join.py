"""torch's Join protocol for distlab's :class:`~distlab.ddp.DDP`: what a rank that has run out of
inputs does while the others still train.

    from torch.distributed.algorithms import Join
    with Join([model]):                  # model = distlab.ddp.DDP(...)
        for x in my_uneven_batches:
            model(x).sum().backward(); opt.step(); opt.zero_grad()

Per iteration of the ranks still training, a joined rank runs :meth:`DDPJoinHook.main_hook`,
which issues the same collectives, in the same order, on the same group, as torch's
``_DDPJoinHook`` does for torch's DDP:

1. (torch's ``Join`` itself: the allreduce counting ranks not yet joined, matched by the ``ones``
   allreduce of ``Join.notify_join_context`` in the others' forward);
2. the one bucket rebuild (after the first synced iteration), with the bucket assignment
   broadcast from group rank 0 as torch's ``Reducer::sync_bucket_indices`` does, since a rank
   that joined before its first backward cannot know the others' gradient-ready order (it offers
   the parameter order, as torch's ``_push_all_rebuilt_params``);
3. with ``broadcast_buffers`` (after a synced forward): the MAX allreduce that picks the
   highest rank not yet joined and the buffer broadcast from it (torch's
   ``_check_and_sync_module_buffers``);
4. the allreduce of the "does this iteration sync gradients" flag (``no_sync`` iterations: 0);
5. when it is 1, one collective per bucket of zeros, in bucket order, through the same path as
   the live buckets (built-in allreduce, the comm hook, or distlab's algorithm; ``naive=True``:
   one per parameter), then waits for them; with ``find_unused_parameters=True`` also the
   allreduce of its used-parameter map (the sum it last saw, as torch's joined rank sends).

Joined ranks contribute zeros, so the others' sums are theirs alone; with
``divide_by_initial_world_size=True`` (default) gradients are divided by the initial world size,
else by the number of ranks not yet joined (the count from step 1). A joined rank does not step
its optimizer; :meth:`DDPJoinHook.post_hook` broadcasts parameters (and buffers, with
``broadcast_buffers``) from the largest rank among the last joiners (torch's
``_sync_final_model``), so every rank leaves the ``with`` block with the same model.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn
from torch.distributed.algorithms.join import JoinHook

from distlab.timeline import Timeline, now_us
from distlab.uneven import broadcast_from, last_joiner_rank

__all__ = ["DDPJoinHook", "JoinedDDP", "JoinedReducer"]


class JoinedReducer(Protocol):
    """What :class:`DDPJoinHook` uses of the DDP's
    :class:`~distlab.ddp.reducer.Reducer`."""

    timeline: Timeline | None

    def rebuild_buckets(self) -> None: ...

    def push_all_rebuilt_params(self) -> None: ...

    def shadow_backward(self) -> None: ...

    def shadow_used_map(self) -> None: ...

    def lane(self, what: str) -> str: ...


class JoinedDDP(Protocol):
    """What :class:`DDPJoinHook` uses of :class:`~distlab.ddp.wrapper.DDP` (named here so that
    this module does not import the wrapper, which imports it)."""

    module: nn.Module
    reducer: JoinedReducer
    rank: int
    last_joiner: int | None
    _divide_by_initial_world_size: bool
    _require_fwd_sync: bool
    find_unused_parameters: bool
    broadcast_buffers: bool
    _comm: Any  # a process group, or None for the default one

    @property
    def join_device(self) -> torch.device: ...

    def _will_sync_buffers(self) -> bool: ...

    def _common_rank(self, candidate: bool) -> int: ...

    def _sync_buffers(self, src: int) -> None: ...

    def _peer_sync_flag(self) -> bool: ...


class DDPJoinHook(JoinHook):
    """The join hook of one :class:`~distlab.ddp.DDP` (see the module docstring).
    ``iterations``: main-hook calls so far (iterations this rank shadowed)."""

    def __init__(self, ddp: JoinedDDP, divide_by_initial_world_size: bool = True) -> None:
        super().__init__()
        self.ddp = ddp
        ddp._divide_by_initial_world_size = bool(divide_by_initial_world_size)
        self.iterations = 0

    def main_hook(self) -> None:
        ddp = self.ddp
        reducer = ddp.reducer
        self.iterations += 1
        reducer.rebuild_buckets()
        if ddp._will_sync_buffers():
            ddp._sync_buffers(ddp._common_rank(False))
        sync = ddp._peer_sync_flag()
        ddp._require_fwd_sync = sync  # torch: require_forward_param_sync = should_sync
        if not sync:
            return
        t0 = now_us()
        reducer.shadow_backward()
        if ddp.find_unused_parameters:
            reducer.shadow_used_map()
        if reducer.timeline is not None:
            reducer.timeline.record(f"joined: shadow iteration {self.iterations}", "shadow",
                                    reducer.lane("backward"), t0, now_us() - t0)
        # torch's _push_all_rebuilt_params: every parameter, in parameter order
        reducer.push_all_rebuilt_params()

    def post_hook(self, is_last_joiner: bool) -> None:
        ddp = self.ddp
        group = ddp._comm
        src = last_joiner_rank(ddp.rank, is_last_joiner, group, ddp.join_device)
        tensors: list[torch.Tensor] = [p.data for p in ddp.module.parameters()]
        if ddp.broadcast_buffers:
            tensors += list(ddp.module.buffers())
        broadcast_from(tensors, src, group)
        ddp.last_joiner = src


def join_config_enabled(joinable: Any) -> bool:
    """True inside an enabled ``Join`` context (torch sets ``_join_config`` on entry)."""
    cfg = getattr(joinable, "_join_config", None)
    return bool(cfg is not None and cfg.enable)
