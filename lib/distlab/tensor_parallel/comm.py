"""Tensor parallelism's f and f_bar, and sequence parallelism's g and g_bar, as autograd
Functions (Korthikanti et al. 2022's names; Megatron-LM's first paper calls f_bar g).

Each Function names the collective its forward and its backward run over one tensor-parallel
group (a :class:`TPComm`):

==============================  ==============================  ==============================
Function                        forward                         backward
==============================  ==============================  ==============================
:func:`copy_to_tp_region`       identity (f)                    all_reduce of the gradient
:func:`reduce_from_tp_region`   all_reduce (f_bar)              identity
:func:`gather_from_sp_region`   all_gather along ``dim`` (g)    reduce_scatter along ``dim``
:func:`reduce_scatter_to_sp`    reduce_scatter (g_bar)          all_gather along ``dim``
:func:`gather_from_tp_region`   all_gather along ``dim``        own chunk of the gradient
:func:`split_to_tp_region`      own chunk along ``dim``         all_gather along ``dim``
==============================  ==============================  ==============================

A :class:`TPComm` runs the collectives (torch's builtins, or distlab's plans of each collective:
``algorithm``), counts them per kind (``counts``, keyed by
:data:`distlab.vocabulary.COLLECTIVES` names, to compare with torch's ``CommDebugMode``) and,
given a :class:`~distlab.timeline.Timeline`, records each one as a span on lane
``"rank{r}/tp"`` named after the collective, with ``nbytes`` (bytes of this rank's input).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist

from distlab.collectives.algorithms.registry import BUILTIN, entry
from distlab.collectives.runtime.by_name import all_gather_into, all_reduce_sum, reduce_scatter_sum
from distlab.tensor_parallel.mesh import MeshLike, tp_group_of
from distlab.timeline import Timeline, now_us

__all__ = ["TPComm", "copy_to_tp_region", "gather_from_sp_region", "gather_from_tp_region",
           "grad_reduced_by", "mark_grad_reduced", "reduce_from_tp_region",
           "reduce_scatter_to_sp", "replicate_to_partial", "split_to_tp_region"]

# torch 2.13 renames the tensor forms (the old names warn); older torch has only the old ones
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


class TPComm:
    """The collectives of one tensor-parallel group, counted and optionally traced.

    ``group``: the process group (default: the default group), or a one-dimensional mesh,
    distlab's or torch's (:func:`~distlab.tensor_parallel.mesh.tp_group_of`). ``timeline``:
    where to record every collective (None: not recorded). ``algorithm``: what runs each collective:
    ``"builtin"`` (torch.distributed's own call, the default), ``None`` (distlab's default plan
    of each collective), a plan name every one of the three collectives has (``"ring"``), or a
    mapping ``{"all_reduce": ..., "all_gather": ..., "reduce_scatter": ...}`` (a collective it
    leaves out runs the builtin); a name a collective does not have is a ``ValueError`` listing
    its names. ``counts``: collectives run so far, per kind.
    """

    def __init__(self, group: MeshLike = None, *,
                 timeline: Timeline | None = None,
                 algorithm: str | None | Mapping[str, str | None] = BUILTIN) -> None:
        self.algorithms = _algorithms(algorithm)
        self.group = tp_group_of(group, "group")
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        self.global_rank = dist.get_rank()
        self.timeline = timeline
        self.counts: Counter[str] = Counter()

    def reset_counts(self) -> None:
        """Forget the collectives counted so far."""
        self.counts.clear()

    def _record(self, name: str, start_us: float, nbytes: int) -> None:
        self.counts[name] += 1
        if self.timeline is not None:
            self.timeline.record(name, "comm", f"rank{self.global_rank}/tp", start_us,
                                 max(0.0, now_us() - start_us), {"nbytes": nbytes})

    def all_reduce(self, x: torch.Tensor, op: Any = dist.ReduceOp.SUM) -> torch.Tensor:
        """A new tensor: ``x`` reduced with ``op`` over the group."""
        start = now_us()
        out = x.contiguous().clone()
        if self.size > 1:
            if self.algorithms["all_reduce"] == BUILTIN or op != dist.ReduceOp.SUM:
                dist.all_reduce(out, op=op, group=self.group)
            else:
                all_reduce_sum(out, self.algorithms["all_reduce"], self.group)
        self._record("all_reduce", start, x.numel() * x.element_size())
        return out

    def all_gather(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """Every rank's ``x`` concatenated along ``dim`` in group-rank order."""
        start = now_us()
        if self.size == 1:
            out = x.clone()
        else:
            dim = dim % x.dim()
            moved = x.movedim(dim, 0).contiguous()
            out = moved.new_empty((moved.shape[0] * self.size, *moved.shape[1:]))
            if self.algorithms["all_gather"] == BUILTIN:
                _ALL_GATHER(out, moved, group=self.group)
            else:
                all_gather_into(out.view(-1), moved.view(-1), self.algorithms["all_gather"],
                                self.group)
            out = out.movedim(0, dim).contiguous()
        self._record("all_gather", start, x.numel() * x.element_size())
        return out

    def reduce_scatter(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """This rank's chunk along ``dim`` of ``x`` summed over the group."""
        start = now_us()
        dim = dim % x.dim()
        if x.shape[dim] % self.size:
            raise ValueError(f"reduce_scatter needs dim {dim} of shape {tuple(x.shape)} to be "
                             f"divisible by the group size {self.size}")
        if self.size == 1:
            out = x.clone()
        else:
            moved = x.movedim(dim, 0).contiguous()
            out = moved.new_empty((moved.shape[0] // self.size, *moved.shape[1:]))
            if self.algorithms["reduce_scatter"] == BUILTIN:
                _REDUCE_SCATTER(out, moved, group=self.group)
            else:
                reduce_scatter_sum(out.view(-1), moved.view(-1),
                                   self.algorithms["reduce_scatter"], self.group)
            out = out.movedim(0, dim).contiguous()
        self._record("reduce_scatter", start, x.numel() * x.element_size())
        return out

    def chunk(self, x: torch.Tensor, dim: int) -> torch.Tensor:
        """This rank's chunk of ``x`` along ``dim`` (no communication)."""
        if x.shape[dim] % self.size:
            raise ValueError(f"dim {dim} of shape {tuple(x.shape)} is not divisible by the "
                             f"tensor-parallel size {self.size}")
        return x.chunk(self.size, dim)[self.rank].contiguous()


_TP_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter")


def _algorithms(algorithm: str | None | Mapping[str, str | None]) -> dict[str, str | None]:
    """``collective -> algorithm`` for :class:`TPComm` (each name checked against the
    collective's registry entries)."""
    if isinstance(algorithm, Mapping):
        unknown = set(algorithm) - set(_TP_COLLECTIVES)
        if unknown:
            raise ValueError(f"algorithm keys must be among {list(_TP_COLLECTIVES)}, got "
                             f"{sorted(unknown)}")
        chosen = {c: algorithm.get(c, BUILTIN) for c in _TP_COLLECTIVES}
    else:
        chosen = dict.fromkeys(_TP_COLLECTIVES, algorithm)
    for c, name in chosen.items():
        if name is not None:
            entry(c, name)   # ValueError naming the collective's entries
    return chosen


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: TPComm) -> torch.Tensor:
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return ctx.comm.all_reduce(grad), None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: TPComm) -> torch.Tensor:
        return comm.all_reduce(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


class _GatherFromSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: TPComm, dim: int) -> torch.Tensor:
        ctx.comm, ctx.dim = comm, dim
        return comm.all_gather(x, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return ctx.comm.reduce_scatter(grad, ctx.dim), None, None


class _ReduceScatterToSP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: TPComm, dim: int) -> torch.Tensor:
        ctx.comm, ctx.dim = comm, dim
        return comm.reduce_scatter(x, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return ctx.comm.all_gather(grad, ctx.dim), None, None


class _GatherFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: TPComm, dim: int) -> torch.Tensor:
        ctx.comm, ctx.dim = comm, dim
        return comm.all_gather(x, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return ctx.comm.chunk(grad, ctx.dim), None, None


class _SplitToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: TPComm, dim: int) -> torch.Tensor:
        ctx.comm, ctx.dim = comm, dim
        return comm.chunk(x, dim)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return ctx.comm.all_gather(grad, ctx.dim), None, None


class _ReplicateToPartial(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, comm: TPComm) -> torch.Tensor:
        return x.clone() if comm.rank == 0 else torch.zeros_like(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def replicate_to_partial(x: torch.Tensor, comm: TPComm) -> torch.Tensor:
    """A replicated ``x`` as a partial sum (``x`` on group rank 0, zeros elsewhere), to add to
    partial sums before a reduction; the gradient, replicated, passes unchanged to every rank.
    No communication."""
    return _ReplicateToPartial.apply(x, comm)


_MARK = "_distlab_tp_grad_reduced_by"


def mark_grad_reduced(x: torch.Tensor, comm: TPComm) -> torch.Tensor:
    """Mark ``x`` (a replicated activation) as one whose gradient ``comm`` already reduces
    upstream (``PrepareModuleInput(use_local_output=False)``: torch hands on a DTensor there).
    A ``ColwiseParallel`` fed this very tensor object skips its own Megatron f, so the partial
    gradients of several consumers are summed locally and reduced once. Returns ``x``."""
    setattr(x, _MARK, comm)
    return x


def grad_reduced_by(x: torch.Tensor) -> TPComm | None:
    """The :class:`TPComm` that :func:`mark_grad_reduced` named for ``x``, or None."""
    return getattr(x, _MARK, None)


def copy_to_tp_region(x: torch.Tensor, comm: TPComm) -> torch.Tensor:
    """f: ``x`` unchanged; its gradient all-reduced over ``comm``'s group."""
    return _CopyToTP.apply(x, comm)


def reduce_from_tp_region(x: torch.Tensor, comm: TPComm) -> torch.Tensor:
    """f_bar (Megatron-LM's first paper's g): ``x`` all-reduced (summed) over the group; its
    gradient unchanged."""
    return _ReduceFromTP.apply(x, comm)


def gather_from_sp_region(x: torch.Tensor, comm: TPComm, dim: int = 1) -> torch.Tensor:
    """Sequence shards all-gathered along ``dim``; the gradient reduce-scattered back."""
    return _GatherFromSP.apply(x, comm, dim)


def reduce_scatter_to_sp(x: torch.Tensor, comm: TPComm, dim: int = 1) -> torch.Tensor:
    """Partial sums reduce-scattered into sequence shards along ``dim``; the gradient
    all-gathered back."""
    return _ReduceScatterToSP.apply(x, comm, dim)


def gather_from_tp_region(x: torch.Tensor, comm: TPComm, dim: int = -1) -> torch.Tensor:
    """Shards all-gathered along ``dim`` (a replicated output); the gradient's own chunk back."""
    return _GatherFromTP.apply(x, comm, dim)


def split_to_tp_region(x: torch.Tensor, comm: TPComm, dim: int = -1) -> torch.Tensor:
    """This rank's chunk of a replicated ``x`` along ``dim``; the gradient all-gathered back."""
    return _SplitToTP.apply(x, comm, dim)
