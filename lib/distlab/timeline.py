"""One timeline type for everything distlab times: spans, Gantt chart, Chrome trace, stats.

A :class:`Span` is ``(name, category, lane, start_us, duration_us, args)``. Times are microseconds
on one host-wide monotonic clock (:func:`now_us`, ``CLOCK_MONOTONIC`` on Linux), so spans recorded
in different threads *and* processes of one host line up without any offset correction.

    tl = Timeline()
    with tl.span("decode", "cpu", "rank0/decode", item=3):
        work()
    tl.record("h2d", "copy", "rank0/h2d", start_us, duration_us, nbytes=4096)
    write_chrome_trace(tl, "trace.json")    # distlab.trace: opens in ui.perfetto.dev
    gantt(tl)                               # distlab.viz.gantt: one row per lane

Lanes and the Chrome trace's pid/tid
------------------------------------
A lane is a string ``"<process>/<thread>"`` split at the *first* ``/``: ``"rank0/read"`` is thread
``read`` of process ``rank0``; ``"rank1/worker/2"`` is thread ``worker/2`` of process ``rank1``.
A lane without ``/`` belongs to the process :data:`DEFAULT_PROCESS` (``"main"``). In the trace,
processes get pids ``1, 2, ...`` in natural sort order of their names (``rank2`` before
``rank10``) and threads get tids ``1, 2, ...`` within their process in the order their lanes
first appear in the timeline. Both are named with ``M`` (metadata) events.

A trace viewer needs slices on one tid that nest or are disjoint; distlab goes further and
never lets two slices on one tid overlap at all. If a lane's spans overlap (several workers
recording into one lane, say), they are spread over extra tids by deterministic greedy interval
partitioning: spans sorted by (start, end, recording order), each placed on the lowest sub-track
that is free at its start. Sub-track ``k > 0`` of lane ``L`` is named ``"<thread> [k]"`` and its
``M`` event carries ``args.lane = L``, so :meth:`Timeline.from_chrome_trace` restores the lane.
Spans that only touch (one ends exactly where the next starts) share a tid.

The trace I/O lives in :mod:`distlab.trace` (Chrome trace JSON: :mod:`distlab.trace.chrome`,
torch.profiler traces: :mod:`distlab.trace.kineto`) and the figure in :mod:`distlab.viz.gantt`;
they import this module, never the reverse (a test enforces it):

    from distlab.trace import write_chrome_trace, read_chrome_trace
    from distlab.viz.gantt import gantt
    write_chrome_trace(tl, "trace.json"); gantt(tl)
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from distlab._checks import check_float, check_instance, check_str, check_window

__all__ = [
    "DEFAULT_PROCESS",
    "LaneStats",
    "Span",
    "Timeline",
    "now_us",
    "split_lane",
]

DEFAULT_PROCESS = "main"

if hasattr(time, "clock_gettime_ns") and hasattr(time, "CLOCK_MONOTONIC"):
    _MONO = time.CLOCK_MONOTONIC

    def now_us() -> float:
        """Microseconds on the host-wide monotonic clock (``CLOCK_MONOTONIC``).

        Comparable across threads and processes of one host; not across hosts.
        """
        return time.clock_gettime_ns(_MONO) / 1000.0
else:  # pragma: no cover - non-POSIX fallback; perf_counter is system-wide on Windows/macOS
    def now_us() -> float:
        """Microseconds on ``time.perf_counter_ns`` (system-wide on Windows and macOS)."""
        return time.perf_counter_ns() / 1000.0


def split_lane(lane: str) -> tuple[str, str]:
    """``"rank0/read"`` -> ``("rank0", "read")``; ``"read"`` -> ``(DEFAULT_PROCESS, "read")``."""
    proc, sep, thread = lane.partition("/")
    if not sep:
        return DEFAULT_PROCESS, lane
    return proc, thread


@dataclass(frozen=True)
class Span:
    """One timed interval.

    Attributes:
        name: what happened (``"read"``, ``"step 3"``).
        category: a colour group (``"io"``, ``"cpu"``, ``"copy"``, ``"compute"``).
        lane: the row it belongs to, ``"<process>/<thread>"`` (see the module docstring).
        start_us: start on the :func:`now_us` clock, microseconds.
        duration_us: length in microseconds, >= 0.
        args: small JSON-able details (item index, byte counts, ...).
    """

    name: str
    category: str
    lane: str
    start_us: float
    duration_us: float
    args: dict[str, Any] = field(default_factory=dict, compare=True, hash=False)

    @property
    def end_us(self) -> float:
        """``start_us + duration_us``."""
        return self.start_us + self.duration_us


@dataclass(frozen=True)
class LaneStats:
    """Busy and idle microseconds of one lane inside a window, and its span count."""

    lane: str
    busy_us: float
    idle_us: float
    spans: int

    @property
    def utilization(self) -> float:
        """busy / (busy + idle), 0.0 for an empty window."""
        total = self.busy_us + self.idle_us
        return self.busy_us / total if total > 0 else 0.0


def _check_span(name: Any, category: Any, lane: Any, start_us: Any, duration_us: Any,
                args: Any) -> None:
    check_str("name", name)
    check_str("category", category)
    check_str("lane", lane, nonempty=True, example="'rank0/read'")
    check_float("start_us (microseconds)", start_us)
    check_float("duration_us (microseconds)", duration_us, minimum=0)
    if args is not None:
        check_instance("args", args, Mapping, "a mapping or None")


_NUM = (float, int)
_INF = float("inf")


def natural_key(text: str) -> list[Any]:
    """Sort key that orders embedded numbers by value: ``rank2`` before ``rank10``."""
    return [(0, int(tok), "") if tok.isdigit() else (1, 0, tok)
            for tok in re.split(r"(\d+)", text) if tok]


def _union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of ``[start, end)`` intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s  # type: ignore[operator]
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s  # type: ignore[operator]
    return total


class Timeline:
    """A thread-safe list of :class:`Span` with Gantt, Chrome-trace and stats views.

    Args:
        spans: optional initial spans.
        notes: optional free-text notes (e.g. "pin skipped: no accelerator"); exported to the
            Chrome trace under ``otherData.notes``.
    """

    def __init__(self, spans: Iterable[Span] = (), notes: Iterable[str] = ()) -> None:
        self._lock = threading.Lock()
        self._spans: list[Span] = []
        self.notes: list[str] = list(notes)
        self.extend(spans)

    # ----------------------------------------------------------------- recording
    def record(self, name: str, category: str, lane: str, start_us: float, duration_us: float,
               args: Mapping[str, Any] | None = None) -> Span:
        """Record one span (thread-safe) and return it. Units: microseconds."""
        if not (type(name) is str and type(category) is str and type(lane) is str and lane
                and type(start_us) in _NUM and type(duration_us) in _NUM
                and 0 <= duration_us < _INF and -_INF < start_us < _INF
                and (args is None or type(args) is dict)):
            _check_span(name, category, lane, start_us, duration_us, args)  # says what is wrong
        span = Span(name, category, lane, float(start_us), float(duration_us),
                    dict(args) if args else {})
        with self._lock:
            self._spans.append(span)
        return span

    @contextmanager
    def span(self, name: str, category: str, lane: str, **args: Any) -> Iterator[dict[str, Any]]:
        """Time the ``with`` body as one span; yields the args dict so the body can add to it.

        The span is recorded even if the body raises (with ``args["error"]`` set to the
        exception type name).
        """
        _check_span(name, category, lane, 0.0, 0.0, None)
        start = now_us()
        try:
            yield args
        except BaseException as exc:
            args["error"] = type(exc).__name__
            raise
        finally:
            self.record(name, category, lane, start, now_us() - start, args)

    def add_note(self, text: str) -> None:
        """Attach a free-text note, e.g. what a run skipped and why."""
        check_str("text", text)
        with self._lock:
            if text not in self.notes:
                self.notes.append(text)

    def extend(self, spans: Iterable[Span | Mapping[str, Any]]) -> None:
        """Add spans gathered elsewhere (other threads, processes): Span objects or their dicts."""
        new: list[Span] = []
        for s in spans:
            if isinstance(s, Mapping):
                s = Span(s["name"], s["category"], s["lane"], s["start_us"], s["duration_us"],
                         dict(s.get("args") or {}))
            if not isinstance(s, Span):
                raise TypeError(f"spans must hold Span or dict items, got {type(s).__name__}")
            _check_span(s.name, s.category, s.lane, s.start_us, s.duration_us, s.args)
            new.append(s)
        with self._lock:
            self._spans.extend(new)

    def merge(self, *others: Timeline | Iterable[Span | Mapping[str, Any]]) -> Timeline:
        """Add every span (and note) of ``others`` to this timeline in place; returns ``self``."""
        for other in others:
            if isinstance(other, Timeline):
                self.extend(other.spans)
                for note in other.notes:
                    self.add_note(note)
            else:
                self.extend(other)
        return self

    # ----------------------------------------------------------------- access
    @property
    def spans(self) -> list[Span]:
        """A snapshot copy of the spans in recording order."""
        with self._lock:
            return list(self._spans)

    def __len__(self) -> int:
        with self._lock:
            return len(self._spans)

    def __iter__(self) -> Iterator[Span]:
        return iter(self.spans)

    def to_dicts(self) -> list[dict[str, Any]]:
        """Plain dicts (cheap to pickle or send through a queue); :meth:`extend` takes them."""
        return [{"name": s.name, "category": s.category, "lane": s.lane, "start_us": s.start_us,
                 "duration_us": s.duration_us, "args": dict(s.args)} for s in self.spans]

    @property
    def lanes(self) -> list[str]:
        """Lanes in order of first appearance."""
        return list(dict.fromkeys(s.lane for s in self.spans))

    @property
    def categories(self) -> list[str]:
        """Categories in order of first appearance."""
        return list(dict.fromkeys(s.category for s in self.spans))

    def filter(self, *, lanes: Iterable[str] | None = None,
               categories: Iterable[str] | None = None) -> Timeline:
        """A new timeline holding only spans in ``lanes`` and ``categories`` (None = all)."""
        lane_set = None if lanes is None else set(lanes)
        cat_set = None if categories is None else set(categories)
        return Timeline((s for s in self.spans
                         if (lane_set is None or s.lane in lane_set)
                         and (cat_set is None or s.category in cat_set)), self.notes)

    # ----------------------------------------------------------------- stats
    def extent_us(self) -> tuple[float, float]:
        """(earliest start, latest end) in microseconds; ValueError when empty."""
        spans = self.spans
        if not spans:
            raise ValueError("the timeline is empty: no spans recorded")
        return min(s.start_us for s in spans), max(s.end_us for s in spans)

    def wall_us(self) -> float:
        """Latest end minus earliest start, microseconds (0.0 when empty)."""
        if not len(self):
            return 0.0
        t0, t1 = self.extent_us()
        return t1 - t0

    def lane_stats(self, window: tuple[float, float] | None = None) -> dict[str, LaneStats]:
        """Busy (union of span intervals) and idle time per lane within ``window`` (default:
        the whole extent), microseconds."""
        spans = self.spans
        if not spans:
            return {}
        t0, t1 = check_window("window", window) if window is not None else self.extent_us()
        per: dict[str, list[tuple[float, float]]] = {}
        for s in spans:
            per.setdefault(s.lane, [])
            lo, hi = max(s.start_us, t0), min(s.end_us, t1)
            if hi > lo:
                per[s.lane].append((lo, hi))
        out = {}
        for lane, ivs in per.items():
            busy = _union_us(ivs)
            out[lane] = LaneStats(lane, busy, max(0.0, (t1 - t0) - busy), len(ivs))
        return out

    def idle_gaps(self, lane: str, window: tuple[float, float] | None = None,
                  min_gap_us: float = 0.0) -> list[tuple[float, float]]:
        """Intervals ``(start_us, end_us)`` inside ``window`` (default: from the timeline start
        to the lane's last end) where ``lane`` has no span, longer than ``min_gap_us``."""
        ivs = sorted((s.start_us, s.end_us) for s in self.spans if s.lane == lane)
        if not ivs:
            raise ValueError(f"lane {lane!r} has no spans; lanes are {self.lanes}")
        min_gap_us = check_float("min_gap_us", min_gap_us, minimum=0)
        t0, t1 = check_window("window", window) if window is not None else \
            (self.extent_us()[0], max(e for _, e in ivs))
        gaps, cursor = [], t0
        for s, e in ivs:
            if s > cursor and min(s, t1) - cursor > min_gap_us:
                gaps.append((cursor, min(s, t1)))
            cursor = max(cursor, e)
            if cursor >= t1:
                break
        if t1 - cursor > min_gap_us:
            gaps.append((cursor, t1))
        return gaps

    def stall_us(self, lane: str) -> float:
        """Consumer stall: time ``lane`` sat idle from the timeline's start to its last span's
        end (waiting for the first item counts), microseconds."""
        return sum(e - s for s, e in self.idle_gaps(lane))

    def items_per_s(self, lane: str, category: str | None = None) -> float:
        """Spans on ``lane`` (optionally of ``category``) per second of wall time."""
        n = sum(1 for s in self.spans if s.lane == lane
                and (category is None or s.category == category))
        wall = self.wall_us()
        return n / (wall * 1e-6) if wall > 0 else 0.0

    def efficiency(self, bound_s: float) -> float:
        """Overlap efficiency: the model's bound (seconds) over the measured wall time."""
        bound_s = check_float("bound_s (seconds)", bound_s, minimum=0)
        wall = self.wall_us() * 1e-6
        return bound_s / wall if wall > 0 else 0.0
