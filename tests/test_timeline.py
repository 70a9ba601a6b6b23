"""Tests for distlab.timeline: recording, merging, Chrome trace (never overlapping), stats,
Gantt."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time

import matplotlib

matplotlib.use("Agg")

import pytest

from distlab.timeline import Span, Timeline, now_us


def _child_spans(q: mp.Queue) -> None:  # runs in a spawned process
    from distlab.timeline import Timeline, now_us

    tl = Timeline()
    t = now_us()
    tl.record("child", "cpu", "rank1/work", t, 5.0, {"pid": 1})
    q.put(tl.to_dicts())


def test_now_us_monotonic_and_microseconds() -> None:
    """now_us never goes back and counts microseconds: a 20 ms sleep (which never ends early)
    reads as at least 20,000, and no more than the monotonic clock's own nanoseconds / 1000
    read around it, however long a loaded machine kept this thread off its core."""
    a = now_us()
    b = now_us()
    assert b >= a
    import time
    m0 = time.monotonic_ns()   # CLOCK_MONOTONIC on Linux, the clock now_us reads
    t0 = now_us()
    time.sleep(0.02)
    t1 = now_us()
    m1 = time.monotonic_ns()
    assert 20_000 - 1 <= t1 - t0 <= (m1 - m0) / 1000 + 1


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
