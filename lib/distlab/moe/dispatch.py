"""Expert parallelism's token dispatch and combine: all-to-alls of uneven splits, with autograd.

Over an expert-parallel group of ``W`` ranks, rank ``r`` holds the ``L = E / W`` experts
``r * L .. r * L + L - 1``. Each rank's routed tokens arrive grouped by (global) expert with
``counts`` ``(E,)``; :func:`dispatch` moves them to the ranks that hold their experts and
:func:`combine` brings the experts' outputs back, in three all-to-alls per forward:

1. the token counts: ``all_to_all_single`` of ``counts`` in ``W`` equal splits of ``L``, so
   rank ``r`` learns ``received[s, l]``, the tokens source rank ``s`` sends to its local
   expert ``l`` (no gradient);
2. the tokens: ``all_to_all_single`` with ``input_splits[d] = sum(counts[d*L:(d+1)*L])`` and
   ``output_splits[s] = sum(received[s, :])``; what arrives is ordered by source rank, then
   expert, and is reordered expert-major (:func:`expert_major_order`) for the experts;
3. the outputs: reordered back and ``all_to_all_single`` with the splits swapped.

The backward of a tokens all-to-all is the all-to-all of the gradient with the splits swapped
(:class:`EPComm.all_to_all` under an autograd Function), so the backward runs two more.
Every call runs ``torch.distributed.all_to_all_single`` (gloo and NCCL both implement it with
uneven splits; distlab's own all-to-all plans move equal blocks only). :class:`EPComm` counts
the all-to-alls per phase and, given a :class:`~distlab.timeline.Timeline`, records each as a
span on lane ``"rank{r}/ep"`` with its ``nbytes`` (this rank's bytes sent).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from distlab.timeline import Timeline, now_us

__all__ = ["EPComm", "Dispatched", "all_to_all", "combine", "dispatch", "expert_major_order"]


class EPComm:
    """The all-to-alls of one expert-parallel group, counted per phase and optionally traced.

    ``group``: the process group (None: the default group). ``timeline``: where to record
    every all-to-all (lane ``"rank{r}/ep"``, span name ``"all_to_all"``, args ``phase`` and
    ``nbytes``). ``counts``: all-to-alls run so far, per phase (``"counts"``, ``"dispatch"``,
    ``"combine"``, ``"dispatch backward"``, ``"combine backward"``).
    """

    def __init__(self, group: dist.ProcessGroup | None = None, *,
                 timeline: Timeline | None = None) -> None:
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.global_rank = dist.get_rank()
        self.timeline = timeline
        self.counts: Counter[str] = Counter()

    def all_to_all(self, x: torch.Tensor, output_splits: list[int], input_splits: list[int],
                   phase: str) -> torch.Tensor:
        """Rows ``input_splits[d]`` of ``x`` (in rank order) to rank ``d``; returns the rows
        every rank ``s`` sent here, ``output_splits[s]`` each, in rank order. No autograd."""
        start = now_us()
        x = x.contiguous()
        out = x.new_empty((sum(output_splits), *x.shape[1:]))
        if self.size == 1:
            out.copy_(x)
        else:
            dist.all_to_all_single(out, x, output_splits, input_splits, group=self.group)
        self.counts[phase] += 1
        if self.timeline is not None:
            self.timeline.record("all_to_all", "comm", f"rank{self.global_rank}/ep", start,
                                 max(0.0, now_us() - start),
                                 {"phase": phase, "nbytes": x.numel() * x.element_size()})
        return out

    def __repr__(self) -> str:
        return f"EPComm(rank {self.rank} of {self.size})"


class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, output_splits: list[int], input_splits: list[int],
                comm: EPComm, phase: str) -> torch.Tensor:
        ctx.splits, ctx.comm, ctx.phase = (output_splits, input_splits), comm, phase
        return comm.all_to_all(x, output_splits, input_splits, phase)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        output_splits, input_splits = ctx.splits
        back = ctx.comm.all_to_all(grad, input_splits, output_splits, f"{ctx.phase} backward")
        return back, None, None, None, None


def all_to_all(x: torch.Tensor, output_splits: list[int], input_splits: list[int],
               comm: EPComm, phase: str = "dispatch") -> torch.Tensor:
    """:meth:`EPComm.all_to_all` with autograd: the gradient goes back by the all-to-all with
    the splits swapped (recorded as ``phase + " backward"``). ``input_splits`` must sum to
    ``x``'s rows."""
    if sum(input_splits) != x.shape[0] or len(input_splits) != comm.size \
            or len(output_splits) != comm.size:
        raise ValueError(f"input_splits and output_splits must hold {comm.size} row counts "
                         f"each, input_splits summing to the {x.shape[0]} rows of x, got "
                         f"{input_splits} and {output_splits}")
    return _AllToAll.apply(x, list(output_splits), list(input_splits), comm, phase)


def expert_major_order(received: torch.Tensor) -> torch.Tensor:
    """The permutation that reorders rows laid out source-major (for each source rank ``s``,
    for each local expert ``l``, ``received[s, l]`` rows) into expert-major order (for each
    ``l``, for each ``s``): ``rows[perm]`` is grouped by local expert. ``received``:
    ``(W, L)`` non-negative integer counts. Returns an int64 vector of ``received.sum()``."""
    if received.dim() != 2 or received.is_floating_point():
        raise ValueError(f"received must be a (ranks, local experts) integer tensor, got "
                         f"{received.dtype} {tuple(received.shape)}")
    counts = received.to(torch.int64)
    flat = counts.reshape(-1)
    starts = (torch.cumsum(flat, 0) - flat).reshape(counts.shape)   # source-major offsets
    lengths = counts.t().reshape(-1)                                  # expert-major blocks
    block_starts = starts.t().reshape(-1)
    total = int(flat.sum())
    out_starts = torch.cumsum(lengths, 0) - lengths
    shift = torch.repeat_interleave(block_starts - out_starts, lengths, output_size=total)
    return torch.arange(total, dtype=torch.int64, device=counts.device) + shift


@dataclass(frozen=True)
class Dispatched:
    """One dispatch's bookkeeping, which :func:`combine` reverses.

    Attributes:
        input_splits: rows this rank sent to each rank.
        output_splits: rows this rank received from each rank.
        order: the source-major -> expert-major permutation of the received rows.
        tokens_per_local_expert: ``(L,)`` rows each local expert computes.
        received: ``(W, L)`` rows from each source rank for each local expert.
    """

    input_splits: list[int]
    output_splits: list[int]
    order: torch.Tensor
    tokens_per_local_expert: torch.Tensor
    received: torch.Tensor


def dispatch(x: torch.Tensor, counts: torch.Tensor, comm: EPComm
             ) -> tuple[torch.Tensor, Dispatched]:
    """Send each row of ``x`` (grouped by global expert, ``counts`` ``(E,)`` rows each) to the
    rank holding its expert; returns the rows this rank's experts compute, grouped by local
    expert, and the bookkeeping. ``E`` must be a multiple of the group size."""
    world = comm.size
    experts = counts.numel()
    if counts.dim() != 1 or experts % world or counts.is_floating_point():
        raise ValueError(f"counts must be one integer count per expert, a multiple of the "
                         f"expert-parallel size {world}, got {counts.dtype} "
                         f"{tuple(counts.shape)}")
    local = experts // world
    with torch.no_grad():
        sent = counts.to(torch.int64).contiguous()
        received = comm.all_to_all(sent, [local] * world, [local] * world, "counts")
        received = received.reshape(world, local)
    input_splits = [int(v) for v in sent.reshape(world, local).sum(dim=1).tolist()]
    output_splits = [int(v) for v in received.sum(dim=1).tolist()]
    if sum(input_splits) != x.shape[0]:
        raise ValueError(f"counts sum to {sum(input_splits)} but x has {x.shape[0]} rows")
    moved = all_to_all(x, output_splits, input_splits, comm, "dispatch")
    order = expert_major_order(received).to(x.device)
    state = Dispatched(input_splits, output_splits, order, received.sum(dim=0), received)
    return moved.index_select(0, order), state


def combine(y: torch.Tensor, state: Dispatched, comm: EPComm) -> torch.Tensor:
    """The local experts' outputs ``y`` (expert-major, as :func:`dispatch` returned their
    inputs) back to the ranks and rows their tokens came from."""
    inverse = torch.empty_like(state.order)
    inverse[state.order] = torch.arange(state.order.numel(), dtype=state.order.dtype,
                                        device=state.order.device)
    back = y.index_select(0, inverse)
    return all_to_all(back, state.input_splits, state.output_splits, comm, "combine")
