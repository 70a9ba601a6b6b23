"""Communication hooks for :meth:`distlab.ddp.DDP.register_comm_hook`, with torch's contract.

A hook is ``hook(state, bucket) -> torch.futures.Future[torch.Tensor]``: called once per bucket
when the bucket is ready (in reduction order), with ``bucket`` a :class:`~distlab.ddp.grad_bucket.
GradBucket`; the future's value is the bucket's new flat gradient (same shape as
``bucket.buffer()``), which DDP copies into the parameters' ``.grad``. With a hook registered the
bucket is *not* divided by the world size beforehand: the hook owns the whole reduction.

The hooks here do what torch's ``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``
do (read in torch 2.13, ``default_hooks.py``), so a distlab DDP with one of them gives bitwise the
parameters a torch DDP gives with torch's hook of the same name:

- :func:`allreduce_hook`: divide the buffer by the group size in place, allreduce (sum) it.
- :func:`fp16_compress_hook` / :func:`bf16_compress_hook`: cast the buffer to float16 / bfloat16,
  divide that by the group size, allreduce (sum) the half-size tensor, copy the result back into
  the buffer (the cast back) and return the buffer. Half the bytes on the wire, two casts and a
  division on each side (priced by :func:`distlab.ddp.step_model.compressed_allreduce_seconds`).

``state`` is the process group (``None``: the default group), as for torch's hooks.
gloo sums float16 and bfloat16 on CPU (checked on torch 2.13); torch DDP itself refuses a hook
*named* ``bf16_compress_hook`` unless CUDA and NCCL >= 2.10 are present (its
``_check_comm_hook``); distlab's DDP does not.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["allreduce_hook", "bf16_compress_hook", "check_comm_hook", "fp16_compress_hook"]

CommHook = Callable[[Any, Any], "torch.futures.Future[torch.Tensor]"]


def _group_size(process_group: Any) -> tuple[Any, int]:
    group = process_group if process_group is not None else dist.group.WORLD
    return group, dist.get_world_size(group)


def _first_tensor(fut: torch.futures.Future) -> torch.Tensor:
    return fut.value()[0]


def allreduce_hook(process_group: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """Average the bucket over the group: ``buffer.div_(size)`` then an async sum allreduce.
    The future's value is the buffer itself."""
    group, size = _group_size(process_group)
    buf = bucket.buffer()
    buf.div_(size)
    return dist.all_reduce(buf, group=group, async_op=True).get_future().then(_first_tensor)


def _compress_hook(dtype: torch.dtype, process_group: Any,
                   bucket: Any) -> torch.futures.Future[torch.Tensor]:
    group, size = _group_size(process_group)
    buf = bucket.buffer()
    wire = buf.to(dtype)
    wire.div_(size)

    def cast_back(fut: torch.futures.Future) -> torch.Tensor:
        buf.copy_(fut.value()[0])  # in place: no second full-precision buffer
        return buf

    return dist.all_reduce(wire, group=group, async_op=True).get_future().then(cast_back)


def fp16_compress_hook(process_group: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """Allreduce the bucket in float16 (``buffer.to(float16).div_(size)``), cast back in place."""
    return _compress_hook(torch.float16, process_group, bucket)


def bf16_compress_hook(process_group: Any, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """Allreduce the bucket in bfloat16 (``buffer.to(bfloat16).div_(size)``), cast back in place."""
    return _compress_hook(torch.bfloat16, process_group, bucket)


def check_comm_hook(hook: Any) -> Callable[[Any, Any], Any]:
    """Return ``hook`` if it is callable as ``hook(state, bucket)``, else raise ``TypeError``."""
    if not callable(hook):
        raise TypeError(f"hook must be callable as hook(state, bucket) -> Future[Tensor], "
                        f"got {type(hook).__name__} {hook!r}")
    try:
        inspect.signature(hook).bind(None, None)
    except TypeError:
        raise TypeError(f"hook must accept two positional arguments (state, bucket), got "
                        f"{getattr(hook, '__qualname__', hook)!r} with signature "
                        f"{inspect.signature(hook)}") from None
    except ValueError:  # a builtin without a signature: accept
        pass
    return hook
