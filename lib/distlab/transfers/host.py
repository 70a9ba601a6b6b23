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

__all__ = ["HostAdapter", "NO_ACCELERATOR"]

NO_ACCELERATOR = "no CUDA device (torch.cuda.is_available() is False)"


def _pin_reason() -> str | None:
    """``None`` if pinning works here, else why not (tries a 1-byte ``pin_memory()``)."""
    if not torch.cuda.is_available():
        return f"pinned memory needs an accelerator: {NO_ACCELERATOR}"
    try:
        torch.empty(1, dtype=torch.uint8).pin_memory()
    except RuntimeError as exc:  # pragma: no cover - depends on the driver
        return f"pin_memory() failed: {exc}".splitlines()[0]
    return None


class HostAdapter(DeviceAdapter):
    """Pageable host buffers only; copies are one memcpy each, timed per copy."""

    name = "host"

    def unavailable(self, kind: str) -> str | None:
        if kind == "pageable":
            return None
        if kind == "pinned":
            return "host adapter: " + (_pin_reason() or "pinned memory is the CUDA adapter's")
        return f"device memory: {NO_ACCELERATOR}"

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
