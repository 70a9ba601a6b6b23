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
   that joined before its first backward cannot know the others' gradient-ready order;
3. the allreduce of the "does this iteration sync gradients" flag (``no_sync`` iterations: 0);
4. when it is 1, one collective per bucket of zeros, in bucket order, through the same path as
   the live buckets (built-in allreduce, the comm hook, or distlab's algorithm; ``naive=True``:
   one per parameter), then waits for them.

Joined ranks contribute zeros, so the others' sums are theirs alone; with
``divide_by_initial_world_size=True`` (default) gradients are divided by the initial world size,
else by the number of ranks not yet joined (the count from step 1). A joined rank does not step
its optimizer; :meth:`DDPJoinHook.post_hook` broadcasts parameters and buffers from the largest
rank among the last joiners (torch's ``_sync_final_model``), so every rank leaves the ``with``
block with the same model.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn
from torch.distributed.algorithms.join import JoinHook

from distlab.timeline import Timeline, now_us
from distlab.uneven import broadcast_from, last_joiner_rank

__all__ = ["DDPJoinHook", "JoinedReducer"]


class JoinedReducer(Protocol):
    """What :class:`DDPJoinHook` uses of :class:`~distlab.ddp.DDP` (named here so that this
    module does not import the reducer, which imports it)."""

    module: nn.Module
    rank: int
    timeline: Timeline | None
    last_joiner: int | None
    _divide_by_initial_world_size: bool
    _ready_order: list[int]
    _params: list[nn.Parameter]
    _comm: Any  # a process group, or None for the default one

    @property
    def join_device(self) -> torch.device: ...

    def _maybe_rebuild(self) -> None: ...

    def _peer_sync_flag(self) -> bool: ...

    def _shadow_backward(self) -> None: ...

    def _lane(self, what: str) -> str: ...


class DDPJoinHook(JoinHook):
    """The join hook of one :class:`~distlab.ddp.DDP` (see the module docstring).
    ``iterations``: main-hook calls so far (iterations this rank shadowed)."""

    def __init__(self, ddp: JoinedReducer, divide_by_initial_world_size: bool = True) -> None:
        super().__init__()
        self.ddp = ddp
        ddp._divide_by_initial_world_size = bool(divide_by_initial_world_size)
        self.iterations = 0

    def main_hook(self) -> None:
        ddp = self.ddp
        self.iterations += 1
        ddp._maybe_rebuild()
        if not ddp._peer_sync_flag():
            return
        t0 = now_us()
        ddp._shadow_backward()
        if ddp.timeline is not None:
            ddp.timeline.record(f"joined: shadow iteration {self.iterations}", "shadow",
                                ddp._lane("backward"), t0, now_us() - t0)
        if not ddp._ready_order:  # as torch's _push_all_rebuilt_params: rebuild next time
            ddp._ready_order = list(reversed(range(len(ddp._params))))

    def post_hook(self, is_last_joiner: bool) -> None:
        ddp = self.ddp
        group = ddp._comm
        src = last_joiner_rank(ddp.rank, is_last_joiner, group, ddp.join_device)
        tensors: list[torch.Tensor] = [p.data for p in ddp.module.parameters()]
        tensors += list(ddp.module.buffers())
        broadcast_from(tensors, src, group)
        ddp.last_joiner = src


def join_config_enabled(joinable: Any) -> bool:
    """True inside an enabled ``Join`` context (torch sets ``_join_config`` on entry)."""
    cfg = getattr(joinable, "_join_config", None)
    return bool(cfg is not None and cfg.enable)
