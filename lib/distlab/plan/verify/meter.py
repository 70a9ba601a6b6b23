"""Peak memory of a training step as the device sees it, phase by phase.

Two meters with one interface (:class:`Meter`): :class:`CudaMeter` reads torch's caching
allocator on a GPU (``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``, reset at each
phase, so each phase has its own peaks; the allocator's bookkeeping is on the host, so nothing is
synchronised to read it), :class:`HostMeter` counts the bytes the CPU allocator hands out,
from the profiler's allocation events (``torch.profiler`` with ``profile_memory=True``: every
allocation and free of torch's CPU allocator with its running total), so every live tensor is
counted, the ones torch allocates inside its kernels and collectives included. A host has no
caching allocator: its reserved bytes are ``None``.

Phases are named by the caller (``"build"``, ``"forward"``, ``"backward"``, ``"optimizer"``);
:meth:`Meter.phase` opens one, :meth:`Meter.result` returns every phase's
:class:`PhasePeak` in bytes above what was allocated when the meter started.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import torch

__all__ = ["CudaMeter", "HostMeter", "Meter", "PhasePeak", "cuda_memory_stats", "meter_for"]


@dataclass(frozen=True)
class PhasePeak:
    """The most bytes held during one phase: ``allocated`` (tensors), ``reserved`` (the caching
    allocator's segments; ``None`` on a host), and what was allocated when the phase ended."""

    phase: str
    allocated: int
    reserved: int | None
    allocated_at_end: int


class Meter(Protocol):
    """What :func:`meter_for` returns."""

    def phase(self, name: str) -> Any:
        """A context manager: the peak of the code inside is recorded under ``name`` (the
        largest of repeated phases of one name is kept)."""

    def result(self) -> dict[str, PhasePeak]:
        """Every phase's peak, by name, in the order first seen."""


def _merge(peaks: dict[str, PhasePeak], new: PhasePeak) -> None:
    old = peaks.get(new.phase)
    if old is None:
        peaks[new.phase] = new
        return
    reserved = (None if new.reserved is None or old.reserved is None
                else max(old.reserved, new.reserved))
    peaks[new.phase] = PhasePeak(new.phase, max(old.allocated, new.allocated), reserved,
                                 new.allocated_at_end)


class CudaMeter:
    """Peaks of torch's caching allocator on ``device``, per phase; bytes as torch reports
    them (not relative: a GPU starts empty)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._peaks: dict[str, PhasePeak] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        torch.cuda.reset_peak_memory_stats(self.device)
        try:
            yield
        finally:
            _merge(self._peaks, PhasePeak(
                name, torch.cuda.max_memory_allocated(self.device),
                torch.cuda.max_memory_reserved(self.device),
                torch.cuda.memory_allocated(self.device)))

    def result(self) -> dict[str, PhasePeak]:
        return dict(self._peaks)


class HostMeter:
    """Bytes of torch's CPU allocator, from the profiler's allocation events, relative to what
    was allocated when :meth:`start` ran. Use as ``with meter: ...`` around the whole run."""

    def __init__(self) -> None:
        self._marks: list[tuple[str, int, int]] = []
        self._prof: Any = None
        self._peaks: dict[str, PhasePeak] | None = None

    def __enter__(self) -> HostMeter:
        from torch.profiler import ProfilerActivity, profile

        self._prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
        with _quiet_stderr():
            self._prof.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        with _quiet_stderr():
            self._prof.__exit__(*exc)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.time_ns()
        try:
            yield
        finally:
            self._marks.append((name, start, time.time_ns()))

    def _events(self) -> list[tuple[int, int]]:
        """``(time_ns, total_allocated)`` of every CPU allocation event, in time order."""
        from torch._C._profiler import _EventType

        out: list[tuple[int, int]] = []
        stack = list(self._prof.profiler.kineto_results.experimental_event_tree())
        while stack:
            e = stack.pop()
            if e.tag == _EventType.Allocation and e.extra_fields.device.type == "cpu":
                out.append((e.start_time_ns, e.extra_fields.total_allocated))
            stack.extend(e.children)
        out.sort()
        return out

    def result(self) -> dict[str, PhasePeak]:
        if self._peaks is not None:
            return dict(self._peaks)
        events = self._events()
        peaks: dict[str, PhasePeak] = {}
        for name, start, end in self._marks:
            inside = [total for t, total in events if start <= t <= end]
            before = [total for t, total in events if t < start]
            at_start = before[-1] if before else 0
            at_end = inside[-1] if inside else at_start
            _merge(peaks, PhasePeak(name, max([at_start, *inside]), None, at_end))
        self._peaks = peaks
        return dict(peaks)


@contextmanager
def _quiet_stderr() -> Iterator[None]:
    """File descriptor 2 sent to ``/dev/null`` while the profiler starts or stops: libkineto
    prints a ``USDT ... profiler_start`` line there each time, whatever its log level."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def meter_for(device: torch.device) -> CudaMeter | HostMeter:
    """:class:`CudaMeter` on a CUDA device, else :class:`HostMeter`."""
    return CudaMeter(device) if device.type == "cuda" else HostMeter()


CUDA_STATS = ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "active_bytes.all.peak",
              "inactive_split_bytes.all.peak", "segment.all.peak", "num_alloc_retries",
              "num_ooms", "num_device_alloc", "num_device_free")
"""The caching allocator's counters :func:`cuda_memory_stats` keeps."""


def cuda_memory_stats(device: torch.device) -> dict[str, int]:
    """The :data:`CUDA_STATS` counters of ``device``, plus ``device_used`` (total minus free, as
    the driver reports it: every process's memory, the CUDA context and NCCL's buffers
    included) and ``device_total``."""
    stats = torch.cuda.memory_stats(device)
    free, total = torch.cuda.mem_get_info(device)
    out = {k: int(stats.get(k, 0)) for k in CUDA_STATS}
    out["device_used"] = int(total - free)
    out["device_total"] = int(total)
    out["reserved_now"] = int(torch.cuda.memory_reserved(device))
    return out
