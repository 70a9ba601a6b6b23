"""Read a torch.profiler (Kineto) Chrome trace into a :class:`~distlab.timeline.Timeline`.

So a user's own training step (``aten::`` ops, ``c10d::`` collectives, the gloo thread's
``gloo:all_reduce``) lands on the same timeline as distlab's spans.

The file is read by :func:`distlab.trace.kineto_file.read_kineto_events` (streamed: only the
complete events and the thread names are kept); a bad file raises its
:class:`~distlab.trace.kineto_file.TraceReadError` (a ``ValueError``).

Clock alignment (measured on torch 2.13 CPU, Linux)
--------------------------------------------------- A Kineto trace's event ``ts`` is in microseconds
relative to the top-level ``baseTimeNanoseconds``: ``baseTimeNanoseconds / 1000 + ts`` is wall-clock
(``CLOCK_REALTIME``, Unix epoch) microseconds. ``baseTimeNanoseconds`` is a fixed offset, *not* the
profiler's start: in the measured trace it was about 52 days before the run, and every
``aten::matmul`` slice fell inside the ``time.time_ns()`` readings taken just around it. distlab's
:func:`~distlab.timeline.now_us` is ``CLOCK_MONOTONIC``, so a trace is shifted by
``clock_offset_us`` = realtime minus monotonic, microseconds; by default that is read (as paired
``clock_gettime`` samples) when the trace is loaded on the host that recorded it. An NTP step
between recording and loading shifts the result by the step; pass ``clock_offset_us`` measured
during the run to avoid it. Offsets are computed in integer nanoseconds so no precision is lost to
the 1e15-us epoch values.

Lanes
-----
Only complete events (``ph == "X"`` with a ``dur``) become spans; instants, flows, counters and
the profiler's own ``"Trace"``-category span (non-numeric pid ``"Spans"``) are skipped. Each
event lands on lane ``"rank{r}/<thread>"`` where ``r`` comes from the trace's
``distributedInfo.rank`` (or the ``rank`` argument; 0 if neither) and ``<thread>`` is Kineto's
thread name for the host process (``"thread 8082 (python)"``; of several names for one tid the
first, e.g. ``"thread 8144 (pt_gloo_runloop)"``), prefixed by the process name for other pids
(a GPU's streams). CPU ops nest (``aten::matmul`` contains ``aten::mm``), and a lane
must never hold two overlapping slices, so the nesting depth goes into the lane: depth 0 on
``"rank0/thread 8082 (python)"``, depth ``d > 0`` on ``"rank0/thread 8082 (python) d{d}"``.
``max_depth=0`` keeps top-level ops only. Depth is computed by a stack over the thread's events
sorted by (start, longest first); an event that is still open always sits on the stack below a
new one, so no two slices on one lane overlap even when Kineto's events nest imperfectly.
Each span's category is Kineto's ``cat`` (``cpu_op``, ``user_annotation``, ``kernel``, ...), its
args are Kineto's args plus ``depth``.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from distlab._checks import check_float, check_int
from distlab.timeline import Timeline
from distlab.trace.kineto_file import TraceReadError, epoch_shift_us, read_kineto_events

__all__ = ["clock_offset_us", "read_kineto_trace", "from_torch_profiler"]

_KINETO_CATS = ("cpu_op", "kernel", "user_annotation", "cuda_runtime", "gpu_memcpy")


def _realtime_minus_monotonic_ns(samples: int) -> int:
    """Paired clock reads; the tightest pair (least time between the monotonic reads) wins."""
    best: tuple[int, int] | None = None
    for _ in range(samples):
        m0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        rt = time.time_ns()
        m1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if best is None or m1 - m0 < best[0]:
            best = (m1 - m0, rt - (m0 + m1) // 2)
    assert best is not None
    return best[1]


def clock_offset_us(samples: int = 5) -> float:
    """``CLOCK_REALTIME - CLOCK_MONOTONIC`` now, microseconds (the tightest of ``samples``)."""
    return _realtime_minus_monotonic_ns(check_int("samples", samples, minimum=1)) / 1000.0


def _offset_ns(offset_us: Any) -> int:
    if offset_us is None:
        return _realtime_minus_monotonic_ns(5)
    return round(check_float("clock_offset_us (microseconds)", offset_us) * 1000)


def read_kineto_trace(path: str | os.PathLike[str], *, rank: int | None = None,
                      max_depth: int | None = None,
                      clock_offset_us: float | None = None) -> Timeline:
    """Load a Kineto Chrome trace file into a Timeline on the :func:`~distlab.timeline.now_us`
    clock (see the module docstring for the alignment and the lanes).

    Args:
        path: the JSON file ``torch.profiler.profile.export_chrome_trace`` wrote.
        rank: overrides ``distributedInfo.rank`` in the lane names (int >= 0).
        max_depth: keep CPU ops nested at most this deep (0 = top-level only; None = all).
        clock_offset_us: realtime minus monotonic, microseconds; None measures it now. A trace
            without ``baseTimeNanoseconds`` (torch before 2.1 wrote ``ts`` as wall-clock
            microseconds) is read only when this is given.
    """
    if rank is not None:
        rank = check_int("rank", rank, minimum=0)
    if max_depth is not None:
        max_depth = check_int("max_depth", max_depth, minimum=0)
    given_offset = clock_offset_us is not None
    offset_ns = _offset_ns(clock_offset_us)
    pnames: dict[int, str] = {}
    tnames: dict[tuple[int, int], str] = {}
    xs: list[dict[str, Any]] = []
    kineto_cat = False

    def consume(events: list[dict[str, Any]]) -> None:
        # keeps the complete events and the process/thread names; every other event is dropped
        nonlocal kineto_cat
        for e in events:
            ph, pid = e.get("ph"), e.get("pid")
            if not kineto_cat and e.get("cat") in _KINETO_CATS:
                kineto_cat = True
            if ph == "M" and isinstance(pid, int):
                name = str((e.get("args") or {}).get("name", ""))
                if e.get("name") == "process_name":
                    pnames[pid] = name
                elif e.get("name") == "thread_name":
                    tnames.setdefault((pid, e.get("tid")), name)  # first name: the specific one
            elif ph == "X" and "dur" in e and isinstance(pid, int) and e.get("cat") != "Trace":
                xs.append(e)

    data = read_kineto_events(path, consume)
    base_ns = data.get("baseTimeNanoseconds")
    if base_ns is None:
        kineto = "distributedInfo" in data or "deviceProperties" in data or kineto_cat
        if not (given_offset and kineto):
            raise TraceReadError(f"{path}: no baseTimeNanoseconds: "
                                 + ("an older torch's Kineto trace; pass clock_offset_us to read "
                                    "its ts as wall-clock microseconds" if kineto else
                                    "not a Kineto trace, cannot align its clock (use "
                                    "distlab.trace.read_chrome_trace for distlab's own traces)"))
        # before torch 2.1 Kineto wrote ts as wall-clock (Unix epoch) microseconds: base 0
    shift_us = epoch_shift_us(base_ns, offset_ns)  # ts + shift_us = monotonic microseconds
    info = data.get("distributedInfo") or {}
    r = rank if rank is not None else int(info.get("rank", 0))
    cpu_pids = [e["pid"] for e in xs if e.get("cat") == "cpu_op"]
    host_pid = max(set(cpu_pids), key=cpu_pids.count) if cpu_pids else None
    by_thread: dict[tuple[int, Any], list[dict[str, Any]]] = {}
    for e in xs:
        by_thread.setdefault((e["pid"], e.get("tid")), []).append(e)
    tl = Timeline(notes=[f"torch.profiler trace {Path(path).name}: ts + baseTimeNanoseconds "
                         f"shifted to the monotonic clock by {offset_ns / 1000.0:.0f} us"])
    for (pid, tid), evs in by_thread.items():
        thread = tnames.get((pid, tid), f"tid {tid}")
        if pid != host_pid:
            thread = f"{pnames.get(pid, f'pid {pid}')} {thread}"
        stack: list[float] = []
        for e in sorted(evs, key=lambda e: (float(e["ts"]), -float(e["dur"]))):
            ts, dur = float(e["ts"]), max(0.0, float(e["dur"]))
            while stack and stack[-1] <= ts:
                stack.pop()
            depth = len(stack)
            stack.append(ts + dur)
            if max_depth is not None and depth > max_depth:
                continue
            lane = f"rank{r}/{thread}" + (f" d{depth}" if depth else "")
            args = dict(e.get("args") or {})
            args["depth"] = depth
            tl.record(str(e.get("name", "")), str(e.get("cat", "")), lane, ts + shift_us, dur,
                      args)
    return tl


def from_torch_profiler(trace_or_profiler: Any, **kwargs: Any) -> Timeline:
    """A Timeline from a Kineto trace path or a finished ``torch.profiler.profile`` (exported to
    a temporary file, removed afterwards); ``kwargs`` as in :func:`read_kineto_trace`."""
    if isinstance(trace_or_profiler, (str, os.PathLike)):
        return read_kineto_trace(trace_or_profiler, **kwargs)
    export = getattr(trace_or_profiler, "export_chrome_trace", None)
    if export is None:
        raise TypeError("trace_path_or_profiler must be a path (str or os.PathLike) or a finished "
                        f"torch.profiler.profile, got {type(trace_or_profiler).__name__}")
    fd, tmp = tempfile.mkstemp(suffix=".json", prefix="distlab_kineto_")
    os.close(fd)
    try:
        export(tmp)
        return read_kineto_trace(tmp, **kwargs)
    finally:
        os.unlink(tmp)
