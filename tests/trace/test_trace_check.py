"""The trace checker finds overlapping X slices per (pid, tid), and only those."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distlab.timeline import Timeline
from distlab.trace import check_trace, overlapping_slices, write_chrome_trace


def _x(name: str, ts: float, dur: float, pid: int = 1, tid: int = 1) -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid}


def test_disjoint_touching_and_other_lanes_are_clean() -> None:
    events = [_x("a", 0, 10), _x("b", 10, 5), _x("c", 2, 50, tid=2), _x("d", 3, 1, pid=2),
              {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "x"}}]
    assert overlapping_slices(events) == []


def test_overlap_on_one_lane_is_reported() -> None:
    bad = overlapping_slices({"traceEvents": [_x("a", 0, 10), _x("b", 4, 2), _x("c", 20, 1)]})
    assert bad == [{"pid": 1, "tid": 1, "first": "a", "second": "b", "overlap_us": 6.0}]


def test_slice_inside_a_long_one_after_a_short_one_is_caught() -> None:
    bad = overlapping_slices([_x("long", 0, 100), _x("short", 1, 1), _x("late", 50, 1)])
    assert [(b["first"], b["second"]) for b in bad] == [("long", "short"), ("long", "late")]


def test_check_trace_on_files(tmp_path: Path) -> None:
    tl = Timeline()
    tl.record("a", "c", "p/t", 0.0, 10.0)
    tl.record("b", "c", "p/t", 5.0, 10.0)  # overlaps: the writer spreads it to a second tid
    good = write_chrome_trace(tl, tmp_path / "good.json")
    check_trace(good)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"traceEvents": [_x("a", 0, 10), _x("b", 5, 10)]}))
    with pytest.raises(ValueError, match="overlapping.*'a' and 'b'"):
        check_trace(bad)
