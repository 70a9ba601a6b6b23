"""Tests for distlab.timeline: recording, merging, Chrome trace (never overlapping), stats, Gantt."""

from __future__ import annotations

import json
import multiprocessing as mp
import threading
import time

import matplotlib

matplotlib.use("Agg")

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.timeline import DEFAULT_PROCESS, Span, Timeline, now_us, split_lane


def _child_spans(q: mp.Queue) -> None:  # runs in a spawned process
    from distlab.timeline import Timeline, now_us

    tl = Timeline()
    t = now_us()
    tl.record("child", "cpu", "rank1/work", t, 5.0, {"pid": 1})
    q.put(tl.to_dicts())


def test_now_us_monotonic_and_microseconds() -> None:
    a = now_us()
    b = now_us()
    assert b >= a
    import time
    t0 = now_us()
    time.sleep(0.02)
    assert 15_000 <= now_us() - t0 < 2_000_000


def test_clock_shared_across_processes() -> None:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    before = now_us()
    p = ctx.Process(target=_child_spans, args=(q,))
    p.start()
    try:
        dicts = q.get(timeout=60)
    finally:
        p.join(30)
        if p.is_alive():
            p.kill()
    after = now_us()
    tl = Timeline().merge(dicts)
    (span,) = tl.spans
    assert before <= span.start_us <= after
    assert span.lane == "rank1/work" and span.args == {"pid": 1}


def test_record_and_span_context_manager() -> None:
    tl = Timeline()
    s = tl.record("a", "io", "rank0/read", 10, 5, {"item": 1})
    assert s == Span("a", "io", "rank0/read", 10.0, 5.0, {"item": 1})
    assert s.end_us == 15.0
    before = now_us()
    with tl.span("b", "cpu", "rank0/decode", item=2) as args:
        time.sleep(0.002)
        args["nbytes"] = 7
    after = now_us()
    with pytest.raises(RuntimeError):
        with tl.span("c", "cpu", "rank0/decode", item=3):
            raise RuntimeError("boom")
    spans = tl.spans
    assert [x.name for x in spans] == ["a", "b", "c"]
    assert spans[1].args == {"item": 2, "nbytes": 7}
    # the span covers the body (>= the 2 ms sleep) and lies inside the caller's clock readings
    assert spans[1].duration_us >= 2000
    assert before <= spans[1].start_us and spans[1].end_us <= after
    assert spans[2].args["error"] == "RuntimeError"
    assert tl.lanes == ["rank0/read", "rank0/decode"]
    hash(s)  # frozen spans are hashable (args excluded from the hash)


@pytest.mark.parametrize("bad, exc, word", [
    (dict(duration_us=-1.0), ValueError, "duration_us"),
    (dict(lane=""), ValueError, "lane"),
    (dict(lane=3), TypeError, "lane"),
    (dict(start_us="x"), TypeError, "start_us"),
    (dict(args=[1]), TypeError, "args"),
])
def test_record_validates(bad: dict, exc: type, word: str) -> None:
    kw = dict(name="n", category="c", lane="l", start_us=0.0, duration_us=1.0, args=None)
    kw.update(bad)
    with pytest.raises(exc, match=word):
        Timeline().record(**kw)


@pytest.mark.timeout(60)
def test_thread_safe_recording() -> None:
    tl = Timeline()

    def work(k: int) -> None:
        for i in range(2000):
            tl.record(f"s{i}", "cpu", f"w{k}", float(i), 1.0)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(tl) == 8000
    assert sorted(tl.lanes) == ["w0", "w1", "w2", "w3"]


def test_split_lane_and_pid_tid_mapping(tmp_path) -> None:
    assert split_lane("rank0/read") == ("rank0", "read")
    assert split_lane("rank1/worker/2") == ("rank1", "worker/2")
    assert split_lane("compute") == (DEFAULT_PROCESS, "compute")
    tl = Timeline()
    tl.record("a", "io", "rank10/read", 0, 1)
    tl.record("b", "io", "rank2/read", 0, 1)
    tl.record("c", "cpu", "rank2/decode", 0, 1)
    ev = tl.chrome_trace_events()
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
    ev = tl.chrome_trace_events()
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
    path = tl.to_chrome_trace(tmp_path / "t.json")
    data = json.loads(path.read_text())
    assert set(data) >= {"traceEvents"}
    assert all(e["ph"] in ("X", "M") for e in data["traceEvents"])
    back = Timeline.from_chrome_trace(path)
    key = lambda s: (s.lane, s.start_us, s.name)  # noqa: E731
    assert sorted(back.spans, key=key) == sorted(tl.spans, key=key)
    assert back.notes == ["pin skipped: no accelerator"]


def test_from_foreign_trace_without_lane_args(tmp_path) -> None:
    p = tmp_path / "f.json"
    p.write_text(json.dumps([
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "trainer"}},
        {"ph": "X", "name": "s", "cat": "c", "pid": 7, "tid": 3, "ts": 1, "dur": 2},
    ]))
    (s,) = Timeline.from_chrome_trace(p).spans
    assert s.lane == "trainer/tid3" and s.duration_us == 2.0


span_st = st.tuples(st.integers(0, 3), st.integers(0, 2),
                    st.floats(0, 1e6, allow_nan=False), st.floats(0, 1e4, allow_nan=False))


@settings(max_examples=150, deadline=None)
@given(st.lists(span_st, max_size=60))
def test_chrome_trace_never_overlaps_on_a_tid(raw) -> None:
    tl = Timeline()
    for proc, thread, start, dur in raw:
        tl.record("s", "c", f"rank{proc}/t{thread}", start, dur)
    ev = tl.chrome_trace_events()
    xs = [e for e in ev if e["ph"] == "X"]
    assert len(xs) == len(raw)
    per: dict = {}
    for e in xs:
        per.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"]))
    for ivs in per.values():
        ivs.sort()
        for (s1, e1), (s2, _) in zip(ivs, ivs[1:]):
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


def test_stats_busy_idle_stall_items() -> None:
    tl = Timeline()
    tl.record("r", "io", "read", 0, 100)
    tl.record("r", "io", "read", 50, 100)     # overlapping: busy is the union 0..150
    tl.record("c", "compute", "compute", 100, 50)
    tl.record("c", "compute", "compute", 200, 100)
    st_ = tl.lane_stats()
    assert st_["read"].busy_us == 150 and st_["read"].idle_us == 150
    assert st_["compute"].busy_us == 150 and st_["compute"].spans == 2
    assert st_["compute"].utilization == pytest.approx(0.5)
    assert tl.idle_gaps("compute") == [(0.0, 100.0), (150.0, 200.0)]
    assert tl.stall_us("compute") == 150
    assert tl.wall_us() == 300
    assert tl.items_per_s("compute") == pytest.approx(2 / 300e-6)
    assert tl.efficiency(150e-6) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="bound_s"):
        tl.efficiency(-1)
    with pytest.raises(ValueError, match="nope"):
        tl.idle_gaps("nope")
    assert Timeline().lane_stats() == {} and Timeline().wall_us() == 0.0


def test_filter_and_merge() -> None:
    a, b = Timeline(), Timeline(notes=["n"])
    a.record("x", "io", "r", 0, 1)
    b.record("y", "cpu", "c", 1, 1)
    a.merge(b, [Span("z", "io", "r", 3, 1)])
    assert [s.name for s in a] == ["x", "y", "z"] and a.notes == ["n"]
    assert [s.name for s in a.filter(categories=["io"])] == ["x", "z"]
    assert [s.name for s in a.filter(lanes=["c"])] == ["y"]
    with pytest.raises(TypeError):
        a.extend([1])


def test_gantt_rows_and_gaps() -> None:
    tl = Timeline()
    tl.record("r", "io", "rank0/read", 0, 1000)
    tl.record("c", "compute", "rank0/compute", 1000, 1000)
    tl.record("c", "compute", "rank0/compute", 3000, 1000)
    fig = tl.gantt(highlight_idle="rank0/compute", title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["rank0/read", "rank0/compute"]
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["io", "compute", "rank0/compute idle"]
    assert len(ax.patches) >= 2  # shaded idle gaps
    import matplotlib.pyplot as plt
    plt.close(fig)
