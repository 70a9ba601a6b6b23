"""Double-buffered prefetcher beside the sequential loop, both recorded on one Timeline.

Sequential: for each batch, copy it, then compute on it. Prefetch: copy batch 0; then while
batch ``i`` is computed, batch ``i + 1`` is copied into the *other* buffer on a side stream.
On the host adapter the side "stream" is a worker thread doing a real memcpy (NumPy releases
the GIL) and compute is a stand-in that also releases it (``time.sleep``), so the overlap is real;
on CUDA (:func:`distlab.transfers.cuda_prefetch.run_cuda`) the copy runs on a side CUDA stream.
Lanes: ``"<mode>/copy stream"`` and ``"<mode>/default stream"``. Units: seconds, bytes; spans in
microseconds on :func:`distlab.timeline.now_us`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from distlab._checks import check_choice, check_float, check_int, check_str
from distlab.timeline import Timeline, now_us
from distlab.transfers.adapter import DeviceAdapter, count_wrong, pattern
from distlab.transfers.copy_model import overlap_bounds

__all__ = ["PrefetchResult", "run_loop", "MODES"]

MODES = ("sequential", "prefetch")


@dataclass
class PrefetchResult:
    """One loop's wall time, measured mean copy/compute seconds, model bounds and #wrong."""

    mode: str
    batches: int
    nbytes: int
    memory: str
    wall_s: float
    copy_s: float
    compute_s: float
    wrong: int
    bounds: dict[str, float] = field(default_factory=dict)

    @property
    def model_s(self) -> float:
        """The model's time for this mode from the measured stage means."""
        return self.bounds["sequential_s" if self.mode == "sequential" else "overlapped_s"]

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "batches": self.batches, "nbytes": self.nbytes,
                "memory": self.memory, "wall_s": self.wall_s, "copy_s": self.copy_s,
                "compute_s": self.compute_s, "model_s": self.model_s, "wrong": self.wrong}


def run_loop(adapter: DeviceAdapter, *, mode: str, batches: int, nbytes: int,
             compute_s: float, memory: str = "pageable", timeline: Timeline | None = None,
             compute: Callable[[float], None] = time.sleep) -> PrefetchResult:
    """Run ``batches`` copy+compute steps of ``nbytes`` each in ``mode`` on a host-side loop.

    The copy goes from a ``memory`` buffer into a destination buffer (``device`` when the adapter
    has it, else ``pageable``); the consumer checks every batch's bytes (``wrong``).
    """
    check_choice("mode", check_str("mode", mode), MODES)
    batches = check_int("batches", batches, minimum=1)
    nbytes = check_int("nbytes", nbytes, minimum=1)
    compute_s = check_float("compute_s (seconds)", compute_s, minimum=0.0)
    tl = timeline if timeline is not None else Timeline()
    dst_kind = "pageable" if adapter.unavailable("device") else "device"
    expected = [pattern(nbytes, seed=s) for s in (1, 2)]
    srcs = [adapter.allocate(memory, nbytes) for _ in range(2)]
    for s, e in zip(srcs, expected, strict=True):
        s.data.copy_(e)
    dsts = [adapter.allocate(dst_kind, nbytes) for _ in range(2)]
    copy_lane, comp_lane = f"{mode}/copy stream", f"{mode}/default stream"
    wrong = 0

    def do_copy(i: int) -> None:
        t0 = now_us()
        adapter.copy(dsts[i % 2], srcs[i % 2])
        adapter.synchronize()
        tl.record(f"copy {i}", "copy", copy_lane, t0, now_us() - t0,
                  {"batch": i, "nbytes": nbytes})

    def do_compute(i: int) -> int:
        t0 = now_us()
        compute(compute_s)
        bad = count_wrong(dsts[i % 2], expected[i % 2])   # the consumer reads its batch
        tl.record(f"compute {i}", "compute", comp_lane, t0, now_us() - t0, {"batch": i})
        return bad

    start = time.perf_counter()
    if mode == "sequential":
        for i in range(batches):
            do_copy(i)
            wrong += do_compute(i)
    else:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="copy-stream") as pool:
            do_copy(0)
            for i in range(batches):
                nxt = pool.submit(do_copy, i + 1) if i + 1 < batches else None
                wrong += do_compute(i)
                if nxt is not None:
                    nxt.result()
    wall = time.perf_counter() - start
    spans = [s for s in tl.spans if s.lane in (copy_lane, comp_lane)][-2 * batches:]
    copy_mean = statistics.fmean(s.duration_us for s in spans if s.category == "copy") / 1e6
    comp_mean = statistics.fmean(s.duration_us for s in spans if s.category == "compute") / 1e6
    return PrefetchResult(mode, batches, nbytes, memory, wall, copy_mean, comp_mean, wrong,
                          overlap_bounds(copy_mean, comp_mean, batches))
