"""Run a :class:`~distlab.collectives.plan.schedule.Schedule` in one process on per-rank buffers
(NumPy or torch).

Correctness at world size 64 in milliseconds: the same plan that runs on real ranks, applied to
a list of arrays with the step semantics of :mod:`distlab.collectives.plan.schedule`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from distlab._checks import check_instance
from distlab.collectives.plan.ops import check_op, check_op_dtype
from distlab.collectives.plan.schedule import Schedule

__all__ = ["simulate"]


def _numpy_reduce(op: str) -> Any:
    return {"sum": np.add, "avg": np.add, "prod": np.multiply, "max": np.maximum,
            "min": np.minimum}[op]


def _torch_reduce(op: str) -> Any:

    return {"sum": torch.add, "avg": torch.add, "prod": torch.mul, "max": torch.maximum,
            "min": torch.minimum}[op]


def _check_inputs(schedule: Any, inputs: Any) -> tuple[bool, tuple[int, ...], Any]:
    check_instance("schedule", schedule, Schedule)
    if isinstance(inputs, (str, bytes)):
        raise TypeError(f"inputs must be a list of per-rank arrays, got {type(inputs).__name__}")
    check_instance("inputs", inputs, Sequence, "a list of per-rank arrays")
    if len(inputs) != schedule.world_size:
        raise ValueError(f"inputs has {len(inputs)} arrays but the schedule is for "
                         f"world_size={schedule.world_size}; pass one array per rank")
    try:
        is_tensor = [isinstance(x, torch.Tensor) for x in inputs]
    except ImportError:  # pragma: no cover - torch is a dependency
        is_tensor = [False] * len(inputs)
    if any(is_tensor) and not all(is_tensor):
        raise TypeError("inputs mixes torch tensors and NumPy arrays; use one kind for all ranks")
    use_torch = bool(is_tensor) and all(is_tensor)
    arrays = inputs if use_torch else [np.asarray(x) for x in inputs]
    if not arrays:
        raise ValueError("inputs is empty")
    shape, dtype = tuple(arrays[0].shape), arrays[0].dtype
    for r, a in enumerate(arrays):
        if tuple(a.shape) != shape or a.dtype != dtype:
            raise ValueError(f"inputs[{r}] has shape {tuple(a.shape)} dtype {a.dtype}, but "
                             f"inputs[0] has shape {shape} dtype {dtype}; all ranks must match")
        if use_torch and a.device != arrays[0].device:
            raise ValueError(f"inputs[{r}] is on {a.device} but inputs[0] is on "
                             f"{arrays[0].device}; all ranks' tensors must share a device")
    size = int(np.prod(shape)) if shape else 1
    if size != schedule.count:
        raise ValueError(f"inputs have {size} elements but the schedule is for "
                         f"count={schedule.count}")
    return use_torch, shape, arrays


def simulate(schedule: Schedule, inputs: Sequence[Any], op: str = "sum") -> list[Any]:
    """Apply ``schedule`` to copies of ``inputs`` and return the per-rank outputs.

    Args:
        schedule: the plan (its ``world_size`` and ``count`` must match ``inputs``).
        inputs: one array per rank, all the same shape and dtype; NumPy arrays (or anything
            ``np.asarray`` takes) or torch tensors (needed for bfloat16). Not modified.
        op: ``"sum"``, ``"prod"``, ``"max"``, ``"min"`` or ``"avg"`` (floating dtypes only;
            the schedule sums, then every rank divides by ``world_size``).

    Returns:
        A list of ``world_size`` arrays (same kind, shape and dtype as the inputs).
    """
    op = check_op(op)
    use_torch, shape, arrays = _check_inputs(schedule, inputs)
    check_op_dtype(op, arrays[0].dtype)
    if use_torch:
        bufs = [a.detach().reshape(-1).clone() for a in arrays]
        reduce = _torch_reduce(op)
    else:
        bufs = [np.array(a, copy=True).reshape(-1) for a in arrays]
        reduce = _numpy_reduce(op)
    for step in schedule.steps:
        incoming = [(t, bufs[t.src][t.start:t.stop].clone() if use_torch
                     else bufs[t.src][t.start:t.stop].copy()) for t in step.transfers]
        for t, data in incoming:
            view = bufs[t.dst][t.start:t.stop]
            if t.kind == "reduce":
                view[...] = reduce(view, data)
            else:
                view[...] = data
    if op == "avg":
        bufs = [b / schedule.world_size for b in bufs]
        if not use_torch:
            bufs = [b.astype(arrays[0].dtype, copy=False) for b in bufs]
    return [b.reshape(shape) for b in bufs]
