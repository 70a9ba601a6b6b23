"""One gradient bucket of :class:`distlab.ddp.DDP`: its flat buffer, per-parameter views, and the
``GradBucket`` object a communication hook receives.

:class:`BucketLayout` is built once per bucket assignment (construction and the one rebuild), never
per step: the flat buffer (``numel`` elements of the parameters' dtype, on their device), one view
per parameter laid out as torch's reducer lays them out (``offset`` = running sum of the earlier
parameters' ``numel``; a view has the parameter's strides when the parameter is dense and
non-overlapping, else it is row-major), and the split the reducer's hot path needs to fill the
bucket with few tensor ops: parameters with fewer than :data:`FUSE_MIN_NUMEL` elements are copied
with one ``torch._foreach_copy_`` and scaled with one ``mul_`` per contiguous run of them in the
flat buffer; larger ones are copied and scaled in one pass (``torch.mul(grad, s, out=view)``).

:class:`GradBucket` has the API of ``torch.distributed.GradBucket`` (``index()``, ``buffer()``,
``set_buffer()``, ``gradients()``, ``parameters()``, ``is_last()``), so torch's own hooks
(``torch.distributed.algorithms.ddp_comm_hooks.default_hooks``) run unchanged on distlab's DDP.
"""

from __future__ import annotations

import torch

__all__ = ["FUSE_MIN_NUMEL", "BucketLayout", "GradBucket"]

#: Parameters with at least this many elements are copied into the bucket and scaled in one pass
#: (``torch.mul(..., out=view)``, one call each); smaller ones are copied together with
#: ``torch._foreach_copy_`` and scaled with one ``mul_`` per contiguous run. Measured on the
#: 2-core CPU machine (torch 2.13, float32, one thread): per parameter, the one-pass call costs
#: 3.2 us at 1024 elements and 6.0 us at 32768, copy-then-scale 0.55 us and 5.2 us; at 65536
#: elements the one-pass call is faster (9.2 vs 9.7 us). Both give bitwise the same bucket.
FUSE_MIN_NUMEL = 32768


def _dense_strides(p: torch.Tensor) -> bool:
    """True when ``p``'s elements fill ``p.numel()`` consecutive slots without overlap (any dim
    order), i.e. a view with ``p``'s strides fits in a flat segment of ``p.numel()`` elements."""
    dims = sorted((s, n) for s, n in zip(p.stride(), p.shape, strict=True) if n != 1)
    expected = 1
    for stride, size in dims:
        if stride != expected:
            return False
        expected *= size
    return True


def bucket_view(flat: torch.Tensor, p: torch.Tensor, offset: int) -> torch.Tensor:
    """The view of ``flat`` that holds ``p``'s gradient from element ``offset`` on: ``p``'s
    strides when they are dense (as AccumulateGrad lays out gradients), else row-major."""
    if p.is_contiguous():
        return flat.narrow(0, offset, p.numel()).view(p.shape)
    if _dense_strides(p):
        return flat.as_strided(p.shape, p.stride(), offset)
    return flat.narrow(0, offset, p.numel()).view(p.shape)


class BucketLayout:
    """Flat buffer and views of one bucket (see the module docstring). ``index``: the bucket's
    position in reduction order; ``indices``: parameter indices (into DDP's parameter list);
    ``params``: the parameters; ``views``: one view of ``flat`` per parameter."""

    __slots__ = ("index", "indices", "params", "flat", "views", "offsets", "small_params",
                 "small_views", "small_runs", "big_params", "big_views", "grad_bucket")

    def __init__(self, index: int, count: int, indices: list[int],
                 params: list[torch.Tensor]) -> None:
        if not indices:
            raise ValueError("indices: a bucket needs at least one parameter, got none")
        self.index = index
        self.indices = list(indices)
        self.params = [params[i] for i in indices]
        first = self.params[0]
        total = sum(p.numel() for p in self.params)
        self.flat = torch.empty(total, dtype=first.dtype, device=first.device)
        self.views: list[torch.Tensor] = []
        self.offsets: list[int] = []
        self.small_params: list[torch.Tensor] = []
        self.small_views: list[torch.Tensor] = []
        self.big_params: list[torch.Tensor] = []
        self.big_views: list[torch.Tensor] = []
        runs: list[list[int]] = []  # [start, end) element ranges of consecutive small params
        off = 0
        for p in self.params:
            v = bucket_view(self.flat, p, off)
            self.views.append(v)
            self.offsets.append(off)
            n = p.numel()
            if n >= FUSE_MIN_NUMEL:
                self.big_params.append(p)
                self.big_views.append(v)
            else:
                self.small_params.append(p)
                self.small_views.append(v)
                if runs and runs[-1][1] == off:
                    runs[-1][1] = off + n
                else:
                    runs.append([off, off + n])
            off += n
        self.small_runs = [self.flat.narrow(0, a, b - a) for a, b in runs if b > a]
        self.grad_bucket = GradBucket(index, count, self.flat, self.params, self.offsets)

    @property
    def nbytes(self) -> int:
        """Bytes of the flat buffer."""
        return self.flat.numel() * self.flat.element_size()

    def check_result(self, tensor: object) -> torch.Tensor:
        """Return ``tensor`` if it can stand for this bucket's reduced buffer (a tensor of the
        flat buffer's shape), else raise ``TypeError``/``RuntimeError`` saying what came back."""
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"comm hook: the future must hold one tensor (the reduced bucket), "
                            f"got {type(tensor).__name__}")
        if tensor.shape != self.flat.shape:
            raise RuntimeError(f"comm hook: expected a result of shape {tuple(self.flat.shape)} "
                               f"(the bucket's buffer), got {tuple(tensor.shape)}")
        return tensor

    def views_of(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Per-parameter views of another flat tensor with this bucket's layout (a comm hook's
        result that is not the bucket buffer itself)."""
        self.check_result(tensor)
        return [bucket_view(tensor, p, off) for p, off in zip(self.params, self.offsets,
                                                               strict=True)]


class GradBucket:
    """The bucket a communication hook receives; the API of ``torch.distributed.GradBucket``.

    ``buffer()`` is the flat 1-D gradient tensor (world-size division not applied when a hook is
    registered, as in torch); ``gradients()`` per-parameter views of it; ``parameters()`` the
    parameters in bucket order; ``index()`` the bucket's position in reduction order (buckets are
    rebuilt after the first iteration, so indices change once); ``is_last()`` true for the bucket
    reduced last (the first layers of the forward pass); ``set_buffer(t)`` replaces the buffer.
    """

    __slots__ = ("_index", "_count", "_buffer", "_params", "_offsets")

    def __init__(self, index: int, count: int, buffer: torch.Tensor, params: list[torch.Tensor],
                 offsets: list[int]) -> None:
        self._index = index
        self._count = count
        self._buffer = buffer
        self._params = params
        self._offsets = offsets

    def index(self) -> int:
        return self._index

    def is_last(self) -> bool:
        return self._index == self._count - 1

    def buffer(self) -> torch.Tensor:
        return self._buffer

    def set_buffer(self, buffer: torch.Tensor) -> None:
        if not isinstance(buffer, torch.Tensor):
            raise TypeError(f"buffer must be a torch.Tensor, got {type(buffer).__name__}")
        self._buffer = buffer

    def parameters(self) -> list[torch.Tensor]:
        return list(self._params)

    def gradients(self) -> list[torch.Tensor]:
        return [self._buffer.narrow(0, off, p.numel()).view(p.shape)
                for p, off in zip(self._params, self._offsets, strict=True)]

    def __repr__(self) -> str:
        return (f"GradBucket(index={self._index}, count={self._count}, "
                f"parameters={len(self._params)}, numel={self._buffer.numel()})")
