"""Reduce-scatter, all-gather and all-reduce (sum, blocking) on distlab's plans or torch's
built-ins, chosen by name: what ZeRO's engines and tensor parallelism's communicator run.

``algorithm`` is ``None`` (distlab's default plan of each collective), a distlab algorithm name
(:data:`distlab.collectives.algorithms.registry.PLANS`), or ``"builtin"`` (torch.distributed's own
reduce-scatter, all-gather and all-reduce of one tensor:
:mod:`distlab.collectives.runtime.group`'s ``builtin_*``). Every call is blocking and sums;
``group`` is the process group they run on.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from distlab.collectives.algorithms.registry import DEFAULT_ALGORITHM, is_builtin
from distlab.collectives.runtime.collectives import all_gather, reduce_scatter
from distlab.collectives.runtime.execute import all_reduce
from distlab.collectives.runtime.group import builtin_all_gather, builtin_reduce_scatter

__all__ = ["all_gather_into", "all_reduce_sum", "reduce_scatter_sum"]


def _builtin(collective: str, algorithm: str | None) -> bool:
    return algorithm is not None and is_builtin(collective, algorithm)


def reduce_scatter_sum(out: torch.Tensor, full: torch.Tensor, algorithm: str | None,
                       group: Any) -> None:
    """Block ``r`` of ``full`` (``N`` times ``out``'s size) summed over the ranks into rank
    ``r``'s ``out``."""
    if _builtin("reduce_scatter", algorithm):
        builtin_reduce_scatter(out, full, dist.ReduceOp.SUM, group)
    else:
        reduce_scatter(out, full, "sum", group, algorithm=algorithm)


def all_gather_into(full: torch.Tensor, shard: torch.Tensor, algorithm: str | None,
                    group: Any) -> None:
    """Every rank's ``shard`` into block ``r`` of ``full``."""
    if _builtin("all_gather", algorithm):
        builtin_all_gather(full, shard, group)
    else:
        all_gather(full, shard, group, algorithm=algorithm)


def all_reduce_sum(t: torch.Tensor, algorithm: str | None, group: Any) -> None:
    """``t`` summed over the ranks, in place."""
    if _builtin("all_reduce", algorithm):
        dist.all_reduce(t, group=group)
    else:
        all_reduce(t, "sum", algorithm or DEFAULT_ALGORITHM["all_reduce"], group)
