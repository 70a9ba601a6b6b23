"""Check a written Chrome trace: no two complete (``ph: "X"``) slices overlap on one (pid, tid)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["check_trace", "overlapping_slices"]


def overlapping_slices(trace: str | os.PathLike[str] | dict[str, Any] | list[dict[str, Any]]
                       ) -> list[dict[str, Any]]:
    """Every pair of X slices that overlap on one (pid, tid) lane, in lane and time order.

    Args:
        trace: a trace file path, a ``{"traceEvents": [...]}`` dict or the event list.

    Returns:
        ``[{"pid", "tid", "first", "second", "overlap_us"}]`` (slice names); empty when the trace
        is clean. Slices that only touch (one ends where the next starts) do not overlap.
    """
    if isinstance(trace, (str, os.PathLike)):
        trace = json.loads(Path(trace).read_text())
    events = trace.get("traceEvents", []) if isinstance(trace, dict) else trace
    lanes: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for e in events:
        if e.get("ph") == "X":
            lanes.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    found = []
    for (pid, tid), slices in sorted(lanes.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1]))):
        slices.sort(key=lambda e: (float(e["ts"]), float(e.get("dur", 0.0))))
        end, last = float("-inf"), None
        for e in slices:
            start = float(e["ts"])
            if last is not None and start < end:
                found.append({"pid": pid, "tid": tid, "first": last.get("name"),
                              "second": e.get("name"), "overlap_us": end - start})
            stop = start + float(e.get("dur", 0.0))
            if stop > end:
                end, last = stop, e
    return found


def check_trace(path: str | os.PathLike[str]) -> None:
    """Raise ``ValueError`` naming the first overlapping pair when ``path`` has any."""
    bad = overlapping_slices(path)
    if bad:
        b = bad[0]
        raise ValueError(f"{os.fspath(path)}: {len(bad)} overlapping slice pair(s); first on pid "
                         f"{b['pid']} tid {b['tid']}: {b['first']!r} and {b['second']!r} overlap "
                         f"by {b['overlap_us']:.3f} us")
