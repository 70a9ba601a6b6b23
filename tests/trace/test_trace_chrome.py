"""Chrome Trace Event JSON of a Timeline: pid/tid mapping, overlapping lanes spread over tids
(never two overlapping slices on one tid), round trip, foreign traces."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.timeline import DEFAULT_PROCESS, Timeline, split_lane
from distlab.trace import read_chrome_trace, trace_events, write_chrome_trace


def test_split_lane_and_pid_tid_mapping(tmp_path) -> None:
    assert split_lane("rank0/read") == ("rank0", "read")
    assert split_lane("rank1/worker/2") == ("rank1", "worker/2")
    assert split_lane("compute") == (DEFAULT_PROCESS, "compute")
    tl = Timeline()
    tl.record("a", "io", "rank10/read", 0, 1)
    tl.record("b", "io", "rank2/read", 0, 1)
    tl.record("c", "cpu", "rank2/decode", 0, 1)
    ev = trace_events(tl)
    pname = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    assert pname == {1: "rank2", 2: "rank10"}  # natural order
    tname = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["name"] == "thread_name"}
    assert tname == {(2, 1): "read", (1, 1): "read", (1, 2): "decode"}


def test_overlapping_lane_split_into_tids() -> None:
    tl = Timeline()
    tl.record("a", "cpu", "p/w", 0, 10)
    tl.record("b", "cpu", "p/w", 5, 10)   # overlaps a
    tl.record("c", "cpu", "p/w", 10, 3)   # touches a's end: may share a's tid
    tl.record("d", "cpu", "p/w", 2, 1)    # nested in a
    ev = trace_events(tl)
    tid = {e["name"]: e["tid"] for e in ev if e["ph"] == "X"}
    assert tid["a"] == tid["c"] == 1
    # d (2..3) goes to the second track, and b (5..15) fits there after it
    assert tid["d"] == tid["b"] == 2
    names = sorted(e["args"]["name"] for e in ev if e["name"] == "thread_name")
    assert names == ["w", "w [1]"]


def test_chrome_trace_round_trip(tmp_path) -> None:
    tl = Timeline(notes=["pin skipped: no accelerator"])
    tl.record("read", "io", "rank0/read", 100.5, 20.25, {"item": 0, "nbytes": 4096})
    tl.record("read", "io", "rank0/read", 110.0, 20.0, {"item": 1})  # overlap -> extra tid
    tl.record("step", "compute", "rank1/compute", 130.0, 50.0)
    tl.record("x", "cpu", "solo", 0.0, 0.0)
    path = write_chrome_trace(tl, tmp_path / "t.json")
    data = json.loads(path.read_text())
    assert set(data) >= {"traceEvents"}
    assert all(e["ph"] in ("X", "M") for e in data["traceEvents"])
    back = read_chrome_trace(path)
    key = lambda s: (s.lane, s.start_us, s.name)  # noqa: E731
    assert sorted(back.spans, key=key) == sorted(tl.spans, key=key)
    assert back.notes == ["pin skipped: no accelerator"]


def test_from_foreign_trace_without_lane_args(tmp_path) -> None:
    p = tmp_path / "f.json"
    p.write_text(json.dumps([
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "trainer"}},
        {"ph": "X", "name": "s", "cat": "c", "pid": 7, "tid": 3, "ts": 1, "dur": 2},
    ]))
    (s,) = read_chrome_trace(p).spans
    assert s.lane == "trainer/tid3" and s.duration_us == 2.0


span_st = st.tuples(st.integers(0, 3), st.integers(0, 2),
                    st.floats(0, 1e6, allow_nan=False), st.floats(0, 1e4, allow_nan=False))


@settings(max_examples=150, deadline=None)
@given(st.lists(span_st, max_size=60))
def test_chrome_trace_never_overlaps_on_a_tid(raw) -> None:
    tl = Timeline()
    for proc, thread, start, dur in raw:
        tl.record("s", "c", f"rank{proc}/t{thread}", start, dur)
    ev = trace_events(tl)
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == len(raw)
    per: dict = {}
    for e in xs:
        per.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for ivs in per.values():
        ivs.sort()
        for (_, e1), (s2, _) in zip(ivs, ivs[1:], strict=False):
            assert e1 <= s2
    # every (pid, tid) that carries slices is named, and each tid belongs to exactly one lane
    named = {(e["pid"], e["tid"]) for e in ev if e["name"] == "thread_name"}
    assert set(per) <= named
    # the number of tids a lane uses equals its maximum overlap depth (optimal partitioning):
    # with spans in (start, end) order, the spans still running when span b starts, plus b
    lanes: dict = {}
    for proc, thread, start, dur in raw:
        lanes.setdefault(f"rank{proc}/t{thread}", []).append((start, start + dur))
    lane_of = {(e["pid"], e["tid"]): e["args"]["lane"] for e in ev if e["name"] == "thread_name"}
    for lane, ivs in lanes.items():
        ivs.sort()
        depth = max(1 + sum(1 for a in ivs[:i] if a[1] > b[0]) for i, b in enumerate(ivs))
        used = sum(1 for v in lane_of.values() if v == lane)
        assert used == depth
