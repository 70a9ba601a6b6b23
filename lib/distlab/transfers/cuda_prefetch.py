"""The prefetcher on a real GPU: copy batch ``i + 1`` on a side CUDA stream while the default
stream computes batch ``i`` (``torch.cuda._sleep`` as a fixed-length stand-in kernel).

Every span is taken from CUDA events and placed on the host clock with
:func:`distlab.transfers.cuda.event_to_host_us` against an anchor event recorded on the idle
device (the host reads its clock right after the anchor completes, so spans may sit a few
microseconds late). ``wrong`` checks the last two batches' bytes on the
device. Thin on purpose; untested here (no GPU on the development machine).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from distlab._checks import check_choice, check_float, check_int, check_str
from distlab.timeline import Timeline, now_us
from distlab.transfers.adapter import count_wrong, pattern
from distlab.transfers.copy_model import overlap_bounds
from distlab.transfers.cuda import CudaAdapter, event_to_host_us
from distlab.transfers.prefetch import PrefetchResult, run_loop

__all__ = ["prefetch_runner", "run_cuda", "sleep_cycles_per_s"]


def sleep_cycles_per_s(adapter: CudaAdapter, cycles: int = 10_000_000) -> float:
    """Cycles of ``torch.cuda._sleep`` per second on this GPU (event-timed once)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / (start.elapsed_time(end) / 1e3)


def run_cuda(adapter: CudaAdapter, *, mode: str, batches: int, nbytes: int, compute_s: float,
             memory: str = "pinned", timeline: Timeline | None = None) -> PrefetchResult:
    """Sequential or double-buffered loop on the GPU; spans on lanes ``"<mode>/copy stream"``
    and ``"<mode>/default stream"``."""
    check_choice("mode", check_str("mode", mode), ("sequential", "prefetch"))
    batches = check_int("batches", batches, minimum=1)
    nbytes = check_int("nbytes", nbytes, minimum=1)
    compute_s = check_float("compute_s (seconds)", compute_s, minimum=0)
    tl = timeline if timeline is not None else Timeline()
    cycles = int(compute_s * sleep_cycles_per_s(adapter))
    srcs = [adapter.allocate(memory, nbytes) for _ in range(2)]
    for j, src in enumerate(srcs):
        src.data.copy_(pattern(nbytes, seed=j + 1))
    dsts = [adapter.allocate("device", nbytes) for _ in range(2)]
    side, main = adapter.stream, torch.cuda.current_stream()
    ev = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    cp = [(ev(), ev()) for _ in range(batches)]
    cm = [(ev(), ev()) for _ in range(batches)]
    adapter.synchronize()
    anchor = ev()
    anchor.record(main)
    anchor.synchronize()
    anchor_us = now_us()
    t0 = time.perf_counter()
    for i in range(batches):
        copy_stream = main if mode == "sequential" else side
        with torch.cuda.stream(copy_stream):
            if i >= 2:   # do not overwrite the buffer compute i - 2 still reads
                copy_stream.wait_event(cm[i - 2][1])
            cp[i][0].record(copy_stream)
            dsts[i % 2].data.copy_(srcs[i % 2].data, non_blocking=True)
            cp[i][1].record(copy_stream)
        main.wait_event(cp[i][1])
        cm[i][0].record(main)
        torch.cuda._sleep(cycles)
        cm[i][1].record(main)
    adapter.synchronize()
    wall = time.perf_counter() - t0
    lanes = (f"{mode}/copy stream", f"{mode}/default stream")
    for i in range(batches):
        for (a, b), lane, cat in ((cp[i], lanes[0], "copy"), (cm[i], lanes[1], "compute")):
            s = event_to_host_us(anchor_us, anchor, a)
            tl.record(f"{cat} {i}", cat, lane, s, a.elapsed_time(b) * 1e3, {"batch": i})
    copy_s = sum(a.elapsed_time(b) for a, b in cp) / 1e3 / batches
    comp_s = sum(a.elapsed_time(b) for a, b in cm) / 1e3 / batches
    wrong = sum(count_wrong(dsts[j], pattern(nbytes, seed=j + 1)) for j in range(min(2, batches)))
    return PrefetchResult(mode, batches, nbytes, memory, wall, copy_s, comp_s, wrong,
                          overlap_bounds(copy_s, comp_s, batches))


def prefetch_runner(adapter: Any) -> Callable[..., PrefetchResult]:
    """The loop that measures a prefetch on ``adapter``: :func:`run_cuda` (copies on a side CUDA
    stream, event-timed) on a CUDA adapter, :func:`~distlab.transfers.prefetch.run_loop` (a
    host-side loop) elsewhere. Both take ``(adapter, *, mode, batches, nbytes, compute_s,
    memory, timeline)``."""
    return run_cuda if getattr(adapter, "name", None) == "cuda" else run_loop
