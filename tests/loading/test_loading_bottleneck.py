"""The bound and the discrete-event simulation, checked against each other and by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.loading.bottleneck import (
    Station,
    bound_s,
    describe,
    measured_costs,
    plan_for,
    plan_rows,
    rate_items_per_s,
    simulate_pipeline,
    sync_time_s,
)
from distlab.timeline import Timeline


def makespan(tl: Timeline) -> float:
    spans = [s for s in tl.spans if s.category != "blocked"]
    return (max(s.end_us for s in spans) - min(s.start_us for s in spans)) * 1e-6 if spans else 0


def test_hand_computed_three_stage() -> None:
    st_ = [Station("a", 1.0), Station("b", 2.0), Station("c", 1.0)]
    assert bound_s(st_, 4) == pytest.approx(1 + 2 + 1 + 3 * 2)
    assert rate_items_per_s(st_) == pytest.approx(0.5)
    assert sync_time_s(st_, 4) == pytest.approx(16)
    tl = simulate_pipeline(st_, 4)
    b = sorted((s.start_us, s.end_us) for s in tl.spans if s.name == "b")
    assert b == [(1e6, 3e6), (3e6, 5e6), (5e6, 7e6), (7e6, 9e6)]
    assert makespan(tl) == pytest.approx(10.0)
    assert describe(st_, 4)["bound_s"] == pytest.approx(10.0)


def test_blocking_after_service_with_depth_one() -> None:
    # fast producer, slow consumer, buffer of 1: the producer must block holding an item
    tl = simulate_pipeline([Station("p", 1.0, depth=1), Station("c", 3.0)], 4)
    blocked = [s for s in tl.spans if s.category == "blocked"]
    assert blocked, "a fast producer in front of a depth-1 buffer must block"
    starts = sorted(s.start_us for s in tl.spans if s.name == "p")
    assert starts == [0, 1e6, 2e6, 4e6]  # item 3 waits until item 1 leaves the buffer


def test_workers_parallel_station() -> None:
    tl = simulate_pipeline([Station("w", 2.0, workers=2, depth=4), Station("c", 1.0)], 4)
    assert {s.lane for s in tl.spans if s.name == "w"} == {"sim/w0", "sim/w1"}
    assert makespan(tl) == pytest.approx(bound_s([Station("w", 2.0, 2), Station("c", 1.0)], 4))


costs = st.floats(0.0, 5.0, allow_nan=False, allow_infinity=False)
station = st.builds(Station, name=st.just("s"), cost_s=costs, workers=st.integers(1, 3),
                    depth=st.integers(1, 4))


@settings(max_examples=200, deadline=None)
@given(st.lists(station, min_size=1, max_size=5), st.integers(0, 25))
def test_simulation_never_beats_the_bound(stations, n) -> None:
    stations = [Station(f"s{i}", s.cost_s, s.workers, s.depth) for i, s in enumerate(stations)]
    tl = simulate_pipeline(stations, n)
    sim = makespan(tl) if n else 0.0
    assert sim >= bound_s(stations, n) - 1e-9
    assert sim <= sync_time_s(stations, n) + 1e-9  # overlap never makes it slower than sync
    # a lane (one server) never runs two items at once
    per: dict = {}
    for s in tl.spans:
        per.setdefault(s.lane, []).append((s.start_us, s.end_us))
    for ivs in per.values():
        ivs.sort()
        assert all(e1 <= s2 + 1e-6 for (_, e1), (s2, _) in zip(ivs, ivs[1:], strict=False))


@settings(max_examples=200, deadline=None)
@given(st.lists(costs, min_size=1, max_size=5), st.integers(1, 25), st.integers(1, 4))
def test_single_server_constant_costs_meet_the_bound(cs, n, depth) -> None:
    stations = [Station(f"s{i}", c, 1, depth) for i, c in enumerate(cs)]
    assert makespan(simulate_pipeline(stations, n)) == pytest.approx(
        sum(cs) + (n - 1) * max(cs), abs=1e-6)


def test_per_item_costs_and_validation() -> None:
    tl = simulate_pipeline([Station("a", [1.0, 3.0]), Station("b", 1.0)], 2)
    assert makespan(tl) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="per-item costs"):
        simulate_pipeline([Station("a", [1.0])], 2)
    with pytest.raises(ValueError, match="workers"):
        bound_s([Station("a", 1.0, workers=0)], 2)
    with pytest.raises(ValueError, match="depth"):
        simulate_pipeline([Station("a", 1.0, depth=0)], 2)
    with pytest.raises(ValueError, match="cost_s"):
        bound_s([Station("a", -1.0)], 2)
    with pytest.raises(ValueError, match="n_items"):
        bound_s([Station("a", 1.0)], -1)
    assert rate_items_per_s([Station("a", 0.0)]) == math.inf


def test_plan_for_each_executor() -> None:
    names, costs_, places = ["read", "decode", "pin", "compute"], [1, 2, 0.5, 1], \
        ["worker", "worker", "host", "host"]
    assert [s.name for s in plan_for("sync", names, costs_, places)] == ["read+decode+pin+compute"]
    thr = plan_for("threads", names, costs_, places, queue_depth=3)
    assert [(s.name, s.depth) for s in thr] == [(n, 3) for n in names]
    pr = plan_for("processes", names, costs_, places, workers=2, queue_depth=2)
    assert [(s.name, s.cost_s, s.workers) for s in pr] == [("worker", 3.0, 2), ("pin", 0.5, 1),
                                                           ("compute", 1.0, 1)]
    pr0 = plan_for("torch", names, costs_, places, workers=0)
    assert [s.name for s in pr0] == ["read+decode+pin", "compute"]
    with pytest.raises(ValueError, match="executor"):
        plan_for("gpu", names, costs_, places)


def test_measured_costs() -> None:
    tl = Timeline()
    tl.record("a", "c", "l", 0, 10)
    tl.record("a", "c", "l", 10, 30)
    assert measured_costs(tl, ["a", "b"]) == [pytest.approx(20e-6), 0.0]


def test_checks_reject_non_finite_and_accept_numpy_ints() -> None:
    import numpy as np

    for bad in (math.inf, math.nan):
        with pytest.raises(ValueError, match="cost_s"):
            bound_s([Station("a", bad)], 2)
        with pytest.raises(ValueError, match=r"cost_s\[1\]"):
            simulate_pipeline([Station("a", [1.0, bad])], 2)
        with pytest.raises(ValueError, match=r"costs_s\[0\]"):
            plan_for("threads", ["a"], [bad], ["host"])
    with pytest.raises(TypeError, match="workers"):
        bound_s([Station("a", 1.0, workers=True)], 2)
    with pytest.raises(TypeError, match="n_items"):
        bound_s([Station("a", 1.0)], 2.0)
    with pytest.raises(TypeError, match="queue_depth"):
        plan_for("threads", ["a"], [1.0], ["host"], queue_depth=1.5)
    st_ = [Station("a", np.float64(1.0), workers=np.int64(2), depth=np.int32(2))]
    assert bound_s(st_, np.int64(4)) == pytest.approx(2.0)
    assert makespan(simulate_pipeline(st_, np.int64(4))) == pytest.approx(2.0)
    assert [s.workers for s in plan_for("processes", ["r", "c"], [1.0, 1.0], ["worker", "host"],
                                        workers=np.int64(3))] == [3, 1]


def test_plan_for_stages_reads_the_stages() -> None:
    from distlab.loading import equal_stages, plan_for_stages
    from distlab.viz.loading import explorer_stages

    stages = explorer_stages(2, 3, 4)   # read io/worker, decode cpu/worker, compute host
    for ex in ("sync", "threads", "processes", "torch"):
        expect = plan_for(ex, ["read", "decode", "compute"], [0.002, 0.003, 0.004],
                          ["worker", "worker", "host"], workers=3, queue_depth=2,
                          categories=["io", "cpu", "compute"])
        assert plan_for_stages(ex, stages, workers=3, queue_depth=2) == expect
    thr = plan_for_stages("threads", stages)
    assert [s.category for s in thr] == ["io", "cpu", "compute"]
    measured = plan_for_stages("threads", stages, costs_s=[0.01, 0.02, 0.03])
    assert [s.cost_s for s in measured] == [0.01, 0.02, 0.03]
    with pytest.raises(ValueError, match="one cost per stage"):
        plan_for_stages("threads", stages, costs_s=[0.01])
    with pytest.raises(ValueError, match="stages"):
        plan_for_stages("threads", [])
    unknown = equal_stages("identity", 2, 0.0)
    unknown[0].cost_s = None                          # unknown cost: 0.0 in the model
    assert plan_for_stages("sync", unknown)[0].cost_s == 0.0


def test_plan_rows_model_values() -> None:
    stages = _explorer_like_stages()
    rows = plan_rows(stages, 10, workers=2, queue_depth=2)
    assert [r["executor"] for r in rows] == ["sync", "threads", "processes", "torch"]
    assert rows[0]["bound_s"] == pytest.approx(0.040)       # 10 * 4 ms, no overlap
    assert rows[1]["bound_s"] == pytest.approx(0.004 + 9 * 0.002)
    # processes: read+decode (3 ms) on 2 workers, then compute 1 ms: 1 + 5 * 3 ms
    assert rows[2]["bound_s"] == pytest.approx(0.001 + 5 * 0.003)
    for r in rows:
        assert r["sim_s"] >= r["bound_s"] - 1e-12


def _explorer_like_stages() -> list:
    """read 2 ms (sleep), decode 1 ms (burn), compute 1 ms (sleep, on the host)."""
    from distlab.loading.synthetic_stages import BurnStage, SleepStage
    compute = SleepStage(0.001, name="compute")
    compute.category, compute.placement = "compute", "host"
    return [SleepStage(0.002, name="read"), BurnStage(0.001, name="decode"), compute]
