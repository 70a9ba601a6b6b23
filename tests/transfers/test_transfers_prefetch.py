"""Prefetcher: both loops record one copy and one compute span per batch on their lanes; the
prefetcher's copy of batch i+1 starts before compute of batch i ends (real overlap)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

import pytest

from distlab.timeline import Timeline
from distlab.transfers import HostAdapter
from distlab.transfers.prefetch import run_loop


def _compute_that_waits_for_the_next_copy(tl: Timeline, lane: str, batches: int,
                                          wait_s: float = 5.0) -> Callable[[float], None]:
    """A compute step that, before its sleep, waits (at most ``wait_s``) until the copy of the
    next batch is on ``lane``. Only a copy that runs beside the compute can end that wait early;
    a loop that copied only after the compute would make every wait run out."""
    calls = itertools.count()

    def compute(seconds: float) -> None:
        nxt = next(calls) + 1
        deadline = time.monotonic() + wait_s
        while nxt < batches and time.monotonic() < deadline and not any(
                s.lane == lane and s.name == f"copy {nxt}" for s in tl.spans):
            time.sleep(0.001)
        time.sleep(seconds)
    return compute


@pytest.mark.parametrize("mode", ["sequential", "prefetch"])
def test_loop_spans_and_content(mode: str) -> None:
    """Each batch is copied before it is computed on; sequentially the next copy waits for the
    compute, with prefetch it starts before the compute ends. The prefetch run's compute waits
    for the next copy rather than sleeping a fixed 4 ms a loaded machine may not give the copy
    thread a core within: the overlap is then the mechanism's, never the scheduler's luck."""
    tl = Timeline()
    compute = (time.sleep if mode == "sequential" else
               _compute_that_waits_for_the_next_copy(tl, f"{mode}/copy stream", 5))
    r = run_loop(HostAdapter(), mode=mode, batches=5, nbytes=1 << 16, compute_s=0.004,
                 timeline=tl, compute=compute)
    assert r.wrong == 0 and r.batches == 5
    copies = [s for s in tl.spans if s.lane == f"{mode}/copy stream"]
    comps = [s for s in tl.spans if s.lane == f"{mode}/default stream"]
    assert len(copies) == len(comps) == 5
    for i in range(5):   # batch i is copied before it is computed on
        assert copies[i].end_us <= comps[i].start_us + 1e-6
    if mode == "sequential":
        for i in range(4):
            assert comps[i].end_us <= copies[i + 1].start_us + 1e-6
    else:   # double buffering: copy i+1 is issued before compute i finishes
        for i in range(4):
            assert copies[i + 1].start_us < comps[i].end_us
    assert r.bounds["overlapped_s"] <= r.bounds["sequential_s"]
    assert r.as_dict()["model_s"] == r.model_s


def test_loop_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        run_loop(HostAdapter(), mode="both", batches=2, nbytes=8, compute_s=0.0)
    with pytest.raises(ValueError):
        run_loop(HostAdapter(), mode="prefetch", batches=0, nbytes=8, compute_s=0.0)


@pytest.mark.cuda
def test_cuda_prefetch_overlaps_and_maps_events_to_host_clock() -> None:
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    from distlab.transfers.cuda import CudaAdapter
    from distlab.transfers.cuda_prefetch import run_cuda
    tl = Timeline()
    for mode in ("sequential", "prefetch"):
        r = run_cuda(CudaAdapter(), mode=mode, batches=6, nbytes=8 << 20, compute_s=0.002,
                     timeline=tl)
        assert r.wrong == 0
    copies = [s for s in tl.spans if s.lane == "prefetch/copy stream"]
    comps = [s for s in tl.spans if s.lane == "prefetch/default stream"]
    assert len(copies) == len(comps) == 6
    assert all(copies[i].end_us <= comps[i].start_us + 1.0 for i in range(6))


def test_the_prefetch_runner_is_chosen_by_the_adapter() -> None:
    from types import SimpleNamespace

    from distlab.transfers.cuda_prefetch import prefetch_runner, run_cuda
    from distlab.transfers.prefetch import run_loop

    assert prefetch_runner(SimpleNamespace(name="cuda")) is run_cuda
    assert prefetch_runner(SimpleNamespace(name="host")) is run_loop
