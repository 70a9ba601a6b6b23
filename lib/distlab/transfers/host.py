"""Host-only adapter: real pageable memcpy, timed per copy on the host clock.

Pinned memory needs an accelerator driver (``tensor.pin_memory()`` raises without one) and device
memory needs a GPU, so both are reported unavailable with the reason; nothing is simulated.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from distlab._checks import check_int
from distlab.transfers.adapter import Buffer, DeviceAdapter

__all__ = ["HostAdapter", "NO_ACCELERATOR", "host_unavailable"]

NO_ACCELERATOR = "no CUDA device (torch.cuda.is_available() is False)"
CUDA_ADAPTER = ("the host adapter measures host memory only; with a GPU, "
                "distlab.transfers.default_adapter() is the CUDA adapter")


def host_unavailable(kind: str, cuda_available: bool) -> str | None:
    """Why the host adapter does not provide memory ``kind`` (None for pageable): a pure
    function of whether torch sees a GPU, so the text is right on either machine."""
    if kind == "pageable":
        return None
    if not cuda_available:
        what = "pinned memory needs an accelerator" if kind == "pinned" else "device memory"
        return f"host adapter: {what}: {NO_ACCELERATOR}"
    return f"host adapter: {kind} memory: {CUDA_ADAPTER}"


class HostAdapter(DeviceAdapter):
    """Pageable host buffers only; copies are one memcpy each, timed per copy."""

    name = "host"

    def unavailable(self, kind: str) -> str | None:
        return host_unavailable(kind, torch.cuda.is_available())

    def _allocate(self, kind: str, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8)

    def copy(self, dst: Buffer, src: Buffer) -> None:
        """One ``numpy.copyto`` over the buffers' memory (a single-threaded memcpy; torch's
        ``copy_`` may split a large copy over threads, which is a different measurement)."""
        if dst.nbytes != src.nbytes:
            raise ValueError(f"size mismatch: dst {dst.nbytes} B, src {src.nbytes} B")
        np.copyto(dst.data.numpy(), src.data.numpy())

    def time_copies(self, dst: Buffer, src: Buffer, count: int) -> list[float]:
        count = check_int("count", count, minimum=0)
        out = []
        for _ in range(count):
            t0 = time.perf_counter()
            self.copy(dst, src)
            out.append(time.perf_counter() - t0)
        return out
