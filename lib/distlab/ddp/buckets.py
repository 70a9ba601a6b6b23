"""Gradient buckets exactly as torch's DistributedDataParallel forms them.

``compute_bucket_assignment_by_size`` is a Python rewrite of the reducer's bucket assignment
(``torch.distributed._compute_bucket_assignment_by_size``); ``torch_ddp_buckets`` predicts the
buckets a torch DDP uses from its second iteration on (after the rebuild in gradient-ready order).
Sizes are in bytes.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch

#: torch's default ``bucket_cap_mb`` (MiB) and its default first-bucket cap (bytes).
DEFAULT_BUCKET_CAP_MB = 25
DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024
_MB = 1024 * 1024


def compute_bucket_assignment_by_size(
    tensors: Sequence[torch.Tensor],
    size_limits: Sequence[int],
    expect_sparse_gradient: Sequence[bool] | None = None,
    tensor_indices: Sequence[int] | None = None,
) -> tuple[list[list[int]], list[int]]:
    """Group ``tensors`` into buckets; return ``(buckets, per_bucket_size_limits)``.

    Contract (same as torch's C++ reducer):
    - ``tensors[i]`` has index ``i``, or ``tensor_indices[i]`` when ``tensor_indices`` is given;
      buckets hold these indices in the order the tensors were visited.
    - A tensor whose ``expect_sparse_gradient[index]`` is true gets a bucket of its own, limit 0.
    - Dense tensors are grouped per (dtype, device). Each group walks ``size_limits``: a bucket
      closes as soon as its byte size reaches the group's current limit, and the group then moves
      to the next limit (staying on the last one). Open buckets are closed at the end, in order of
      first appearance of their group (torch's hash-map order there is unspecified; it only matters
      with ``tensor_indices`` and several groups).
    - Without ``tensor_indices`` buckets are sorted by their smallest index; with it they keep the
      order in which they closed (the gradient-ready order).
    """
    if not tensors:
        raise ValueError("tensors: expected at least one tensor, got none")
    if not size_limits:
        raise ValueError("size_limits: expected at least one limit, got none")
    if expect_sparse_gradient is not None and len(expect_sparse_gradient) not in (0, len(tensors)):
        raise ValueError(f"expect_sparse_gradient: expected {len(tensors)} flags, "
                         f"got {len(expect_sparse_gradient)}")
    use_indices = bool(tensor_indices)
    if use_indices and len(tensor_indices) != len(tensors):  # type: ignore[arg-type]
        raise ValueError(f"tensor_indices: expected {len(tensors)} indices, "
                         f"got {len(tensor_indices)}")  # type: ignore[arg-type]
    result: list[tuple[list[int], int]] = []
    open_buckets: dict[tuple[torch.dtype, torch.device], list] = {}  # key -> [idx, size, limit]
    limit_pos: dict[tuple[torch.dtype, torch.device], int] = {}
    for i, t in enumerate(tensors):
        if t.is_sparse:
            raise ValueError("No support for sparse tensors.")
        index = int(tensor_indices[i]) if use_indices else i  # type: ignore[index]
        if expect_sparse_gradient and expect_sparse_gradient[index]:
            result.append(([index], 0))
            continue
        key = (t.dtype, t.device)
        b = open_buckets.setdefault(key, [[], 0, 0])
        b[0].append(index)
        b[1] += t.numel() * t.element_size()
        pos = limit_pos.setdefault(key, 0)
        b[2] = int(size_limits[pos])
        if b[1] >= b[2]:
            result.append((b[0], b[2]))
            open_buckets[key] = [[], 0, 0]
            limit_pos[key] = min(pos + 1, len(size_limits) - 1)
    for idx, _size, limit in open_buckets.values():
        if idx:
            result.append((idx, limit))
    if not use_indices:
        result.sort(key=lambda r: min(r[0]))
    return [r[0] for r in result], [r[1] for r in result]


def _caps(bucket_cap_mb: float | None) -> tuple[int, int]:
    """(first bucket cap, bucket cap) in bytes, as torch's DDP derives them."""
    if bucket_cap_mb is None:
        return DEFAULT_FIRST_BUCKET_BYTES, int(DEFAULT_BUCKET_CAP_MB * _MB)
    cap = int(bucket_cap_mb * _MB)
    return cap, cap


def initial_buckets(params: Sequence[torch.Tensor],
                    bucket_cap_mb: float | None = None) -> list[list[int]]:
    """Buckets (parameter indices) torch DDP uses in its first iteration (default settings:
    ``find_unused_parameters=False``): one bucket per dtype/device, in reversed order."""
    buckets, _ = compute_bucket_assignment_by_size(list(params), [sys.maxsize])
    return list(reversed(buckets))


def unused_initial_buckets(params: Sequence[torch.Tensor],
                           bucket_cap_mb: float | None = None) -> list[list[int]]:
    """Buckets torch DDP uses with ``find_unused_parameters=True`` (and ``static_graph=False``),
    for the whole run since it never rebuilds them: limits ``[first cap, cap]`` (just ``[cap]``
    when ``bucket_cap_mb`` is given) walked in parameter order, then the bucket list reversed."""
    first, cap = _caps(bucket_cap_mb)
    limits = [first, cap] if bucket_cap_mb is None else [cap]
    buckets, _ = compute_bucket_assignment_by_size(list(params), limits)
    return list(reversed(buckets))


def rebuilt_buckets(params: Sequence[torch.Tensor], ready_order: Sequence[int],
                    bucket_cap_mb: float | None = None) -> list[list[int]]:
    """Buckets torch DDP rebuilds after iteration 0 from the order gradients became ready
    (``ready_order``: parameter indices): limits ``[first cap, cap]`` walked in ready order, the
    first bucket small (1 MiB) only when ``bucket_cap_mb`` is None."""
    first, cap = _caps(bucket_cap_mb)
    buckets, _ = compute_bucket_assignment_by_size(
        [params[i] for i in ready_order], [first, cap], tensor_indices=list(ready_order))
    return buckets


def backward_ready_order(module: torch.nn.Module, *inputs: torch.Tensor) -> list[int]:
    """Indices (into ``module.parameters()``) in the order their gradients are accumulated by
    one backward pass of ``module(*inputs).sum()``. Gradients are cleared afterwards."""
    params = [p for p in module.parameters() if p.requires_grad]
    order: list[int] = []
    handles = [p.register_post_accumulate_grad_hook(lambda _p, i=i: order.append(i))
               for i, p in enumerate(params)]
    try:
        module(*inputs).sum().backward()
    finally:
        for h in handles:
            h.remove()
        for p in params:
            p.grad = None
    return order


def torch_ddp_buckets(module: torch.nn.Module, bucket_cap_mb: float | None = None, *,
                      example_input: torch.Tensor | None = None,
                      ready_order: Sequence[int] | None = None) -> list[list[str]]:
    """Parameter names per bucket that torch DDP uses from its second iteration on.

    The ready order is ``ready_order`` if given, else measured with one backward pass of
    ``example_input`` (default: the reverse of ``parameters()``, which is what a sequential
    model produces). Names inside a bucket are in ``GradBucket.parameters()`` order."""
    named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    if ready_order is None:
        if example_input is not None:
            ready_order = backward_ready_order(module, example_input)
        else:
            ready_order = list(reversed(range(len(params))))
    if sorted(ready_order) != list(range(len(params))):
        raise ValueError("ready_order: expected a permutation of the parameter indices")
    return [[named[i][0] for i in b] for b in rebuilt_buckets(params, ready_order, bucket_cap_mb)]
