"""torch.profiler (Kineto) traces on distlab's timeline, and the distributedInfo block we write."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import torch

from distlab import launch
from distlab.timeline import Timeline
from distlab.trace import (
    check_distributed_info,
    clock_offset_us,
    from_torch_profiler,
    read_chrome_trace,
    write_chrome_trace,
    write_rank_traces,
)
from helpers import kineto_targets

pytestmark = pytest.mark.timeout(150)  # the 2-rank launch (its own timeout: 90 s)

SLACK_US = 200.0  # clock reads around the span vs Kineto's own stamps


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("kineto")
    return launch.run(kineto_targets.profiled_step, 2, backend="gloo", args=(str(out),),
                      timeout=90)


def _no_overlap_per_lane(tl: Timeline) -> None:
    by: dict[str, list] = {}
    for s in tl.spans:
        by.setdefault(s.lane, []).append((s.start_us, s.end_us))
    for lane, ivs in by.items():
        ivs.sort()
        for (_, e0), (s1, _) in zip(ivs, ivs[1:], strict=False):
            assert s1 >= e0, f"overlap on {lane}"


def test_real_trace_lands_inside_the_distlab_span(two_rank_run) -> None:
    for rank, res in enumerate(two_rank_run):
        (step,) = res["spans"]
        lo, hi = step["start_us"], step["start_us"] + step["duration_us"]
        tl = from_torch_profiler(res["path"]).merge(Timeline(res["spans"]))
        torch_spans = [s for s in tl.spans if s.category != "distlab"]
        names = {s.name for s in torch_spans}
        assert {"aten::matmul", "aten::mm", "c10d::allreduce_", "gloo:all_reduce"} <= names
        assert all(s.lane.startswith(f"rank{rank}/") for s in tl.spans)
        assert sum(s.name == "aten::matmul" for s in torch_spans) == 3
        for s in torch_spans:
            if s.category == "cpu_op":  # recorded on this thread inside the with-block
                assert lo - SLACK_US <= s.start_us and s.end_us <= hi + SLACK_US, (s, lo, hi)
        # the collective lies after the matmuls, inside the step, on the same clock
        mm_end = max(s.end_us for s in torch_spans if s.name == "aten::matmul")
        (ar,) = [s for s in torch_spans if s.name == "c10d::allreduce_"]
        assert mm_end <= ar.start_us <= hi + SLACK_US
        _no_overlap_per_lane(tl)


def test_real_trace_lanes_depth_and_distributed_info(two_rank_run, tmp_path) -> None:
    path = two_rank_run[1]["path"]
    info = json.loads(open(path).read())["distributedInfo"]
    assert info["rank"] == 1 and info["world_size"] == 2 and info["backend"] == "gloo"
    tl = from_torch_profiler(path)
    (mm,) = {s.lane for s in tl.spans if s.name == "aten::mm"}
    (matmul,) = {s.lane for s in tl.spans if s.name == "aten::matmul"}
    assert mm == matmul + " d1"
    assert {s.args["depth"] for s in tl.spans if s.name == "aten::mm"} == {1}
    top = from_torch_profiler(path, max_depth=0)
    assert {s.args["depth"] for s in top.spans} == {0}
    assert "aten::mm" not in {s.name for s in top.spans}
    assert from_torch_profiler(path, rank=np.int64(5)).lanes[0].startswith("rank5/")
    # the Chrome export of the merged timeline keeps one lane per tid: no overlaps
    back = read_chrome_trace(write_chrome_trace(tl, tmp_path / "t.json"))
    _no_overlap_per_lane(back)
    assert sorted(back.to_dicts(), key=str) == sorted(tl.to_dicts(), key=str)


def test_explicit_clock_offset_shifts_every_span(two_rank_run) -> None:
    path = two_rank_run[0]["path"]
    off = clock_offset_us()
    a = from_torch_profiler(path, clock_offset_us=off)
    b = from_torch_profiler(path, clock_offset_us=off + 1000.0)
    for sa, sb in zip(a.spans, b.spans, strict=True):
        # a float offset of ~1.8e15 us has 0.25 us steps
        assert sa.start_us - sb.start_us == pytest.approx(1000.0, abs=0.5)
        assert sa.duration_us == sb.duration_us


def test_profiler_object_in_process() -> None:
    x = torch.randn(64, 64)
    tl = Timeline()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        with tl.span("step", "distlab", "rank0/step"):
            x @ x
    (step,) = tl.spans
    got = from_torch_profiler(prof)
    (mm,) = [s for s in got.spans if s.name == "aten::matmul"]
    assert mm.lane.startswith("rank0/")  # no distributedInfo: rank 0
    assert step.start_us - SLACK_US <= mm.start_us and mm.end_us <= step.end_us + SLACK_US


def test_realtime_minus_monotonic_is_consistent() -> None:
    """A monotonic read plus the offset lands between wall-clock reads taken around it (10 ms
    of slack for the offset's own error): the bracket holds however long a loaded machine
    deschedules this thread between the reads, where one read after it did not."""
    import time
    off = clock_offset_us()
    before_us = time.time_ns() / 1e3
    mono_us = time.clock_gettime_ns(time.CLOCK_MONOTONIC) / 1e3
    after_us = time.time_ns() / 1e3
    assert before_us - 1e4 < mono_us + off < after_us + 1e4


@pytest.mark.parametrize("bad", [3.5, object(), None, [1]])
def test_from_torch_profiler_rejects_other_types(bad) -> None:
    with pytest.raises(TypeError, match="trace_path_or_profiler"):
        from_torch_profiler(bad)


def test_distlab_trace_is_not_a_kineto_trace(tmp_path) -> None:
    p = write_chrome_trace(Timeline(), tmp_path / "d.json")
    with pytest.raises(ValueError, match="baseTimeNanoseconds"):
        from_torch_profiler(p)


def test_distributed_info_is_written_and_checked(tmp_path) -> None:
    tl = Timeline()
    tl.record("a", "c", "rank0/x", 0.0, 1.0)
    tl.record("b", "c", "rank1/x", 0.0, 2.0)
    info = {"backend": "gloo", "rank": np.int32(1), "world_size": 2,
            "pg_config": [{"pg_name": "0", "ranks": [0, 1]}]}
    written = write_chrome_trace(tl, tmp_path / "t.json", distributed_info=info)
    data = json.loads(written.read_text())
    assert data["distributedInfo"] == {"backend": "gloo", "rank": 1, "world_size": 2,
                                       "pg_count": 1, "pg_config": [{"pg_name": "0",
                                                                     "ranks": [0, 1]}]}
    plain = write_chrome_trace(tl, tmp_path / "u.json")
    assert "distributedInfo" not in json.loads(plain.read_text())
    with pytest.raises(ValueError, match="rank"):
        check_distributed_info({"backend": "gloo", "rank": 2, "world_size": 2})
    with pytest.raises(ValueError, match="world_size"):
        check_distributed_info({"backend": "gloo", "rank": 0})
    with pytest.raises(TypeError, match="rank"):
        check_distributed_info({"backend": "gloo", "rank": True, "world_size": 2})
    with pytest.raises(TypeError, match="distributed_info"):
        write_chrome_trace(tl, tmp_path / "v.json", distributed_info=[1, 2])
    paths = write_rank_traces(tl, tmp_path / "ranks", backend="gloo", world_size=4)
    assert [p.name for p in paths] == ["rank0.json", "rank1.json"]
    for r, p in enumerate(paths):
        d = json.loads(p.read_text())
        assert d["distributedInfo"]["rank"] == r and d["distributedInfo"]["world_size"] == 4
        assert [s.lane for s in read_chrome_trace(p).spans] == [f"rank{r}/x"]
    with pytest.raises(ValueError, match="world_size"):
        write_rank_traces(tl, tmp_path / "r2", backend="gloo", world_size=1)


def test_trace_without_base_time_is_read_with_an_offset(tmp_path) -> None:
    """Before torch 2.1 Kineto wrote no baseTimeNanoseconds and ts as wall-clock microseconds:
    given clock_offset_us, ts - offset is the monotonic time; without it, one clear error."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1,
           "ts": 1_700_000_000_000_000.0, "dur": 5.0}]
    p = tmp_path / "old.json"
    p.write_text(json.dumps({"traceEvents": ev, "distributedInfo": {"rank": 1}}))
    with pytest.raises(ValueError, match="pass clock_offset_us"):
        from_torch_profiler(p)
    tl = from_torch_profiler(p, clock_offset_us=1_699_999_000_000_000.0)
    (s,) = tl.spans
    assert s.lane.startswith("rank1/") and s.start_us == pytest.approx(1_000_000_000.0)
    assert s.duration_us == 5.0
    gz = tmp_path / "old.json.gz"  # as tensorboard_trace_handler(use_gzip=True) writes it
    gz.write_bytes(gzip.compress(p.read_bytes()))
    assert from_torch_profiler(gz, clock_offset_us=1_699_999_000_000_000.0).to_dicts() == \
        tl.to_dicts()
