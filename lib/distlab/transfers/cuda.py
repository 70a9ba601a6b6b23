"""Thin CUDA adapter: pinned and device buffers, event-timed bursts behind a spin kernel.

Method (nvbandwidth's): on a side stream, enqueue ``torch.cuda._sleep(cycles)`` so the stream is
held, then record a start event, ``count`` async copies and an end event; the copies run back to
back after the spin, so host enqueue overhead is not inside the timed interval. Pageable copies
cannot be asynchronous (the driver stages them), so they are timed per copy on the host with a
synchronize. The arithmetic is in pure functions (:func:`burst_seconds`, :func:`event_to_host_us`)
tested on CPU with fake events.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import torch

from distlab._checks import check_float, check_int
from distlab.transfers.adapter import Buffer, DeviceAdapter

__all__ = ["CudaAdapter", "burst_seconds", "event_to_host_us", "SPIN_CYCLES"]

SPIN_CYCLES = 20_000_000  # ~10 ms at ~2 GHz: long enough to enqueue a burst behind it


class _Event(Protocol):
    def elapsed_time(self, end: Any) -> float: ...


def burst_seconds(elapsed_ms: float, count: int) -> float:
    """Seconds per copy from an event interval of ``elapsed_ms`` milliseconds over ``count``."""
    count = check_int("count", count, minimum=1)
    elapsed_ms = check_float("elapsed_ms (milliseconds)", elapsed_ms, minimum=0)
    return elapsed_ms / 1e3 / count


def event_to_host_us(anchor_host_us: float, anchor: _Event, event: _Event) -> float:
    """Host-clock microseconds of ``event``: the anchor event was recorded on an idle device at
    host time ``anchor_host_us``; ``anchor.elapsed_time(event)`` (ms) is added."""
    return anchor_host_us + anchor.elapsed_time(event) * 1e3


class CudaAdapter(DeviceAdapter):
    """Pageable, pinned and device buffers on ``cuda:<index>``."""

    name = "cuda"

    def __init__(self, index: int = 0, spin_cycles: int = SPIN_CYCLES) -> None:
        self.device = torch.device("cuda", index)
        self.spin_cycles = spin_cycles
        self.stream = torch.cuda.Stream(device=self.device)

    def unavailable(self, kind: str) -> str | None:
        return None

    def _allocate(self, kind: str, nbytes: int) -> torch.Tensor:
        if kind == "device":
            return torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=(kind == "pinned"))

    def asynchronous(self, dst: Buffer, src: Buffer) -> bool:
        return "pageable" not in (dst.kind, src.kind)

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def time_copies(self, dst: Buffer, src: Buffer, count: int) -> list[float]:
        if not self.asynchronous(dst, src):   # pageable involved: host-timed per copy
            return self._host_timed(dst, src, count)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        self.synchronize()
        with torch.cuda.stream(self.stream):
            torch.cuda._sleep(self.spin_cycles)
            start.record(self.stream)
            for _ in range(count):
                dst.data.copy_(src.data, non_blocking=True)
            end.record(self.stream)
        end.synchronize()
        return [burst_seconds(start.elapsed_time(end), count)]

    def _host_timed(self, dst: Buffer, src: Buffer, count: int) -> list[float]:
        out = []
        for _ in range(count):
            self.synchronize()
            t0 = time.perf_counter()
            dst.data.copy_(src.data)
            self.synchronize()
            out.append(time.perf_counter() - t0)
        return out
