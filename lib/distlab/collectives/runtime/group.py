"""What every runtime piece asks of a ``torch.distributed`` process group: this rank, the world
size and backend, a group rank's global rank, this rank's device, the executor's reduction, a
bounded wait, and torch's built-in allreduce under distlab's op names."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["builtin_all_gather", "builtin_all_reduce", "builtin_reduce_scatter",
           "check_tensor_backend", "global_rank", "group_info", "rank_device", "reducer",
           "wait"]


def group_info(group: Any) -> tuple[int, int, str]:
    """``(rank in group, group size, backend lower-cased)``; clear errors when the process group
    is not initialized or this rank is not a member."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("torch.distributed is not initialized; call "
                           "torch.distributed.init_process_group (or use distlab.launch.run)")
    rank = dist.get_rank(group)
    if rank < 0:
        raise ValueError("this rank is not a member of group; call the collective only on its "
                         "members")
    return rank, dist.get_world_size(group), str(dist.get_backend(group)).lower()


def global_rank(group: Any, rank: int) -> int:
    """The global rank of group rank ``rank`` (``group=None``: the world, same number)."""
    return rank if group is None else dist.get_global_rank(group, rank)


def reducer(op: str) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    """``reduce(out, x)``: combine ``x`` into ``out`` in place (``avg`` sums; divide after)."""
    if op in ("sum", "avg"):
        return lambda out, x: out.add_(x)
    if op == "prod":
        return lambda out, x: out.mul_(x)
    if op == "max":
        return lambda out, x: torch.maximum(out, x, out=out)
    return lambda out, x: torch.minimum(out, x, out=out)


def check_tensor_backend(tensor: torch.Tensor, backend: str) -> None:
    """The tensor's device must match the group's backend (cpu: gloo, this rank's cuda: nccl).

    ``backend`` is ``dist.get_backend(group)`` lower-cased; a group created with both
    (``"cpu:gloo,cuda:nccl"``) takes either device.
    """
    dev = tensor.device
    if dev.type == "cuda":
        if "nccl" not in backend:
            raise ValueError(f"tensor is on {dev} but the process group backend is {backend!r}; "
                             "CUDA tensors need a 'nccl' group, CPU tensors a 'gloo' group")
        if dev.index != torch.cuda.current_device():
            raise ValueError(f"tensor is on {dev} but this rank's current device is "
                             f"cuda:{torch.cuda.current_device()}; put each rank's tensor on "
                             "its own device (torch.cuda.set_device)")
    elif dev.type == "cpu":
        if "gloo" not in backend:
            raise ValueError(f"tensor is on cpu but the process group backend is {backend!r}; "
                             "CPU tensors need a 'gloo' group, CUDA tensors a 'nccl' group")
    else:
        raise ValueError(f"tensor device {dev} is not supported; use cpu (gloo) or cuda (nccl)")


def rank_device(group: Any = None) -> torch.device:
    """This rank's device: its current CUDA device under NCCL, else the CPU."""
    if dist.is_initialized() and "nccl" in str(dist.get_backend(group)).lower() \
            and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def wait(work: Any, timeout: datetime.timedelta | None) -> None:
    """``work.wait`` bounded by ``timeout`` (``None``: the process group's own timeout)."""
    if timeout is None:
        work.wait()
    else:
        work.wait(timeout)


def builtin_all_reduce(tensor: torch.Tensor, op: str, group: Any = None) -> torch.Tensor:
    """``torch.distributed.all_reduce`` under distlab's op names (``avg``: sum, then divide)."""
    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
           "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    dist.all_reduce(tensor, op=ops[op], group=group)
    if op == "avg":
        tensor.div_(dist.get_world_size(group))
    return tensor


def builtin_all_gather(output: torch.Tensor, tensor: torch.Tensor, group: Any = None) -> Any:
    """torch's all-gather into one tensor: ``all_gather_single`` (torch >= 2.13, which deprecates
    the older name), else ``all_gather_into_tensor``."""
    fn = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return fn(output, tensor, group=group)


def builtin_reduce_scatter(output: torch.Tensor, tensor: torch.Tensor, op: Any,
                           group: Any = None) -> Any:
    """torch's reduce-scatter of one tensor: ``reduce_scatter_single`` (torch >= 2.13), else
    ``reduce_scatter_tensor``; ``op`` is a ``torch.distributed.ReduceOp``."""
    fn = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return fn(output, tensor, op=op, group=group)
