"""The device-adapter interface every transfer measurement goes through.

A :class:`Buffer` is ``nbytes`` bytes of one memory kind: ``"pageable"`` (ordinary host memory),
``"pinned"`` (page-locked host memory) or ``"device"`` (GPU memory). An adapter allocates buffers,
copies between them, synchronizes and times copies; :mod:`distlab.transfers.host` is the CPU-only
implementation (pinned/device unavailable, with the reason), :mod:`distlab.transfers.cuda` the thin
CUDA one (:func:`distlab.transfers.default.default_adapter` picks one). Everything above (sweep,
fit, figures, JSON, prefetcher) only talks to this interface.

Units: bytes, seconds; GB = 1e9 bytes.
"""

from __future__ import annotations

import textwrap
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from distlab._checks import check_choice, check_int, check_str

__all__ = ["MEMORY_KINDS", "Buffer", "DeviceAdapter", "Unavailable", "pattern", "count_wrong"]

MEMORY_KINDS = ("pageable", "pinned", "device")


class Unavailable(RuntimeError):
    """Raised when an adapter cannot provide a memory kind; ``str(exc)`` is the reason."""


@dataclass
class Buffer:
    """``nbytes`` bytes of memory ``kind``; ``data`` is a 1-D ``torch.uint8`` tensor."""

    kind: str
    nbytes: int
    data: torch.Tensor


def pattern(nbytes: int, seed: int = 0) -> torch.Tensor:
    """A deterministic uint8 pattern of ``nbytes`` bytes (``(i * 7 + seed) mod 251``)."""
    return ((torch.arange(nbytes, dtype=torch.int64) * 7 + seed) % 251).to(torch.uint8)


def count_wrong(dst: Buffer, expected: torch.Tensor) -> int:
    """Number of bytes of ``dst`` that differ from ``expected`` (a host uint8 tensor)."""
    got = (dst.data.cpu() if dst.data.device.type != "cpu" else dst.data).numpy()
    exp = expected.numpy()
    if np.array_equal(got, exp):   # fast path (torch.equal is ~10x slower on uint8 here)
        return 0
    return int(np.count_nonzero(got != exp))


class DeviceAdapter(ABC):
    """Allocate, copy, synchronize and time. Subclasses: host-only and CUDA."""

    name: str = "abstract"
    device: torch.device = torch.device("cpu")

    @abstractmethod
    def unavailable(self, kind: str) -> str | None:
        """``None`` if ``kind`` can be allocated here, else the reason it cannot."""

    def allocate(self, kind: str, nbytes: int) -> Buffer:
        """A new buffer; raises :class:`Unavailable` (with the reason) if ``kind`` is missing."""
        check_choice("kind", check_str("kind", kind), MEMORY_KINDS)
        nbytes = check_int("nbytes", nbytes, minimum=1)
        reason = self.unavailable(kind)
        if reason:
            raise Unavailable(reason)
        return Buffer(kind, nbytes, self._allocate(kind, nbytes))

    @abstractmethod
    def _allocate(self, kind: str, nbytes: int) -> torch.Tensor: ...

    def copy(self, dst: Buffer, src: Buffer) -> None:
        """Copy ``src`` into ``dst`` (same size); may be asynchronous until :meth:`synchronize`."""
        if dst.nbytes != src.nbytes:
            raise ValueError(f"size mismatch: dst {dst.nbytes} B, src {src.nbytes} B")
        dst.data.copy_(src.data, non_blocking=self.asynchronous(dst, src))

    def asynchronous(self, dst: Buffer, src: Buffer) -> bool:
        """Whether a copy between these kinds is issued non-blocking (pinned/device copies)."""
        return False

    def synchronize(self) -> None:  # noqa: B027 (a no-op for adapters whose copies are synchronous)
        """Wait until every issued copy has finished."""

    @abstractmethod
    def time_copies(self, dst: Buffer, src: Buffer, count: int) -> list[float]:
        """Seconds per copy for ``count`` copies of ``src`` into ``dst`` (one value per timing:
        per copy for host-timed copies, or one burst average for event-timed ones)."""

    def transfer(self, tensor: torch.Tensor, kind: str) -> torch.Tensor:
        """A copy of ``tensor`` (any shape and dtype) in memory ``kind``, made by :meth:`copy`
        (so the pipeline's pin/H2D stages and the benchmark share one copy). Raises
        :class:`Unavailable` with the reason if ``kind`` is missing here."""
        reason = self.unavailable(kind)
        if reason:
            raise Unavailable(reason)
        src = tensor.contiguous()
        if kind == "device":
            out = torch.empty(src.shape, dtype=src.dtype, device=self.device)
        else:
            out = torch.empty(src.shape, dtype=src.dtype, pin_memory=(kind == "pinned"))
        nbytes = src.numel() * src.element_size()
        if nbytes == 0:
            return out
        src_kind = ("device" if src.device.type != "cpu" else
                    "pinned" if src.is_pinned() else "pageable")
        self.copy(Buffer(kind, nbytes, out.reshape(-1).view(torch.uint8)),
                  Buffer(src_kind, nbytes, src.reshape(-1).view(torch.uint8)))
        return out

    def describe(self) -> dict[str, Any]:
        """Small JSON-able description (name, which kinds are missing and why)."""
        return {"adapter": self.name,
                "unavailable": {k: r for k in MEMORY_KINDS if (r := self.unavailable(k))}}

    def describe_lines(self, width: int = 110) -> list[str]:
        """:meth:`describe` as text for a reader: ``adapter: NAME; memory here: KINDS``, then
        one entry per missing memory kind with its reason, wrapped at word boundaries so no
        line is wider than ``width`` characters (at least 40)."""
        width = check_int("width", width, minimum=40)
        missing = self.describe()["unavailable"]
        here = [k for k in MEMORY_KINDS if k not in missing]
        lines = [f"adapter: {self.name}; memory here: {', '.join(here) or 'none'}"]
        for kind, reason in missing.items():
            lines += textwrap.wrap(f"no {kind} memory: {reason}", width, initial_indent="  ",
                                   subsequent_indent="      ", break_long_words=False,
                                   break_on_hyphens=False)
        return lines

