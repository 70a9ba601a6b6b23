"""The one clock distlab's benchmarks time with: seconds after the device's queued work is done.

:func:`synced_seconds` reads the host-wide monotonic clock of :func:`distlab.timeline.now_us`
(``CLOCK_MONOTONIC`` on Linux), in seconds, so a time a benchmark measures and a span it records
(``start_us = seconds * 1e6``) are on one clock, comparable across threads and processes of one
host (not across hosts). On a CUDA device it first waits for the device's queued work
(``torch.cuda.synchronize``), so a GPU step is timed to its end, not to the end of its launches;
on the CPU, or with ``device=None`` (a reading taken where nothing may wait, e.g. inside an
autograd hook), it reads at once.

    t0 = synced_seconds(device)
    step()
    seconds = synced_seconds(device) - t0
"""

from __future__ import annotations

import torch

from distlab.timeline import now_us

__all__ = ["sync_device", "synced_seconds"]


def sync_device(device: torch.device | None) -> None:
    """Wait for ``device``'s queued work (CUDA: ``torch.cuda.synchronize(device)``; CPU or None:
    a no-op)."""
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def synced_seconds(device: torch.device | None) -> float:
    """Seconds on the :func:`~distlab.timeline.now_us` clock, read after ``device``'s queued
    work is done (CUDA: a ``torch.cuda.synchronize(device)`` first; CPU or None: no wait)."""
    sync_device(device)
    return now_us() / 1e6
