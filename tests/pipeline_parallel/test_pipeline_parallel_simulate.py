"""The event simulation of a pipeline plan: timings, step time, bubble, p2p, overlap, deadlocks."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.fit import fit_line
from distlab.pipeline_parallel.actions import Action, B, F, I, W
from distlab.pipeline_parallel.plan import PipelinePlan, stage_to_rank
from distlab.pipeline_parallel.schedules.registry import build_plan
from distlab.pipeline_parallel.simulate import (
    DEFAULT_P2P_PRESET,
    P2PCost,
    StageTimes,
    boundary_bytes,
    simulate,
)

FREE = P2PCost.free()
REL = 1e-9


def plan_of(orders: list[list[Action | tuple[Action, ...]]], *, stages_per_rank: int = 1,
            microbatches: int | None = None, style: str = "loop",
            name: str = "hand") -> PipelinePlan:
    """A plan from each rank's order (a tuple is one overlapped step)."""
    grid = tuple(tuple(x if isinstance(x, tuple) else (x,) for x in row) for row in orders)
    mbs = microbatches if microbatches is not None else 1 + max(
        a.microbatch for row in grid for step in row for a in step)
    return PipelinePlan(name, len(orders), stages_per_rank, mbs, style, grid)  # type: ignore


def gpipe_orders(p: int, m: int) -> list[list[Action]]:
    return [[Action(r, F, i) for i in range(m)] + [Action(r, B, i) for i in range(m)]
            for r in range(p)]


def test_two_ranks_one_microbatch_by_hand() -> None:
    plan = plan_of(gpipe_orders(2, 1))
    times = StageTimes((1.0, 2.0), (3.0, 4.0), (0.5, 0.25))
    sim = simulate(plan, times, boundary_nbytes=1000, p2p=P2PCost("link", 0.1, 1e-3))
    hop = 0.1 + 1000 * 1e-3                                    # 1.1 s per crossing
    f0, f1 = sim.timing(Action(0, F, 0)), sim.timing(Action(1, F, 0))
    b1, b0 = sim.timing(Action(1, B, 0)), sim.timing(Action(0, B, 0))
    assert (f0.start_s, f0.end_s) == (0.0, 1.0)
    assert f1.start_s == pytest.approx(1.0 + hop) and f1.end_s == pytest.approx(4.1)
    assert b1.start_s == pytest.approx(4.1) and b1.end_s == pytest.approx(8.35)   # I + W = 4.25
    assert b0.start_s == pytest.approx(8.35 + hop) and b0.end_s == pytest.approx(12.95)
    assert sim.step_time_s == pytest.approx(12.95)
    assert sim.busy_s == pytest.approx((4.5, 6.25))
    assert sim.idle_s == pytest.approx((8.45, 6.7))
    assert sim.bubble_fraction == pytest.approx((8.45 + 6.7) / (2 * 12.95))
    assert len(sim.transfers) == 2 and all(s == pytest.approx(hop) for *_, s in sim.transfers)
    assert [t.action for t in sim.rank_timings(1)] == [Action(1, F, 0), Action(1, B, 0)]


def test_stages_on_one_rank_hand_over_for_free() -> None:
    # a V on 1 rank: stages 0 and 1 both on rank 0, so no transfer is paid
    plan = plan_of([[Action(0, F, 0), Action(1, F, 0), Action(1, B, 0), Action(0, B, 0)]],
                   stages_per_rank=2, style="v")
    sim = simulate(plan, StageTimes.equal(2), boundary_nbytes=10**9,
                   p2p=P2PCost("slow", 5.0, 1.0))
    assert sim.step_time_s == pytest.approx(2 * (1 + 2)) and sim.transfers == ()
    assert sim.bubble_fraction == 0.0


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 4), (8, 3)])
def test_gpipe_by_hand_has_the_textbook_step(p: int, m: int) -> None:
    sim = simulate(plan_of(gpipe_orders(p, m)), StageTimes.equal(p, 1.0, 1.5, 0.5), p2p=FREE)
    assert sim.step_time_s == pytest.approx((m + p - 1) * 3.0, rel=REL)
    assert sim.bubble_fraction == pytest.approx((p - 1) / (m + p - 1), rel=REL)


def test_imbalance_slows_the_step_by_the_slow_stage() -> None:
    plan = build_plan("1F1B", 4, 8)
    even = simulate(plan, StageTimes.equal(4), p2p=FREE)
    times = StageTimes.equal(4).with_imbalance(2, 2.0)
    assert times.forward_s == (1.0, 1.0, 2.0, 1.0) and times.backward_s[2] == 4.0
    slow = simulate(plan, times, p2p=FREE)
    assert slow.step_time_s > even.step_time_s
    assert slow.step_time_s >= 8 * 6.0                   # the slow stage's own work
    assert slow.busy_s[2] == pytest.approx(48.0) and slow.busiest_s == pytest.approx(48.0)


def test_default_link_is_free_and_a_preset_s_transfers_add_time() -> None:
    plan = build_plan("GPipe", 2, 2)
    default = simulate(plan, StageTimes.equal(2, 1e-3, 1e-3, 1e-3), boundary_nbytes=2**20)
    assert default.p2p == FREE
    sim = simulate(plan, StageTimes.equal(2, 1e-3, 1e-3, 1e-3), boundary_nbytes=2**20,
                   p2p=P2PCost.from_preset(DEFAULT_P2P_PRESET))
    assert "NVLink" in sim.p2p.name and sim.p2p.source
    hop = sim.p2p.seconds(2**20)
    assert hop == pytest.approx(3e-6 + 2**20 / 450e9)
    # the critical path crosses the boundary once forward and once back
    assert sim.step_time_s == pytest.approx(default.step_time_s + 2 * hop, rel=1e-9)


def test_p2p_from_a_fitted_line() -> None:
    fit = fit_line([1e3, 1e6, 1e7], [11e-6 + 1e3 / 20e9, 10e-6 + 1e6 / 20e9,
                                     10e-6 + 1e7 / 20e9])
    link = P2PCost.from_fit("measured", fit)
    assert link.seconds(0) == pytest.approx(fit.intercept_s)
    assert link.bandwidth_gbps == pytest.approx(20.0, rel=0.05) and "R^2" in link.source
    assert FREE.bandwidth_gbps == float("inf") and FREE.seconds(10**9) == 0.0


def test_overlapped_steps_serial_or_max() -> None:
    # rank 0 holds stages 0 and 3 (a V over 2 ranks); the step (0F1, 3B0) overlaps
    a = Action
    orders = [[a(0, F, 0), a(3, F, 0), a(3, B, 0), a(0, F, 1), a(3, F, 1), a(3, B, 1),
               a(0, B, 0), a(0, B, 1)],
              [a(1, F, 0), a(2, F, 0), a(2, B, 0), a(1, B, 0), a(1, F, 1), a(2, F, 1),
               a(2, B, 1), a(1, B, 1)]]
    serial = simulate(plan_of(orders, stages_per_rank=2, style="v"), p2p=FREE)
    pair = [list(orders[0]), list(orders[1])]
    pair[0][2:4] = [(a(3, B, 0), a(0, F, 1))]          # backward of 0 beside forward of 1
    plan = plan_of(pair, stages_per_rank=2, style="v")
    s2 = simulate(plan, p2p=FREE)
    assert s2.step_time_s == pytest.approx(serial.step_time_s)   # back to back: same as serial
    m2 = simulate(plan, p2p=FREE, overlap="max")
    t_b, t_f = m2.timing(a(3, B, 0)), m2.timing(a(0, F, 1))
    assert t_b.start_s == t_f.start_s and t_b.seconds == 2.0 and t_f.seconds == 1.0
    assert m2.busy_s[0] == pytest.approx(s2.busy_s[0] - 1.0)    # the pair costs max(2, 1)
    assert m2.step_time_s <= s2.step_time_s


def test_to_timeline_lanes_units_and_args() -> None:
    sim = simulate(build_plan("1F1B", 2, 3), StageTimes.equal(2, 1e-3, 2e-3, 1e-3), p2p=FREE)
    tl = sim.to_timeline()
    assert tl.lanes == ["rank0/compute", "rank1/compute"]
    assert set(tl.categories) == {"forward", "backward"}
    assert len(tl.spans) == 2 * 2 * 3
    span = next(s for s in tl.spans if s.name == "1B2")
    t = sim.timing(Action(1, B, 2))
    assert span.start_us == pytest.approx(t.start_s * 1e6) and span.duration_us == \
        pytest.approx(3e3)
    assert span.args == {"stage": 1, "microbatch": 2, "kind": "B"}
    assert tl.extent_us()[1] == pytest.approx(sim.step_time_s * 1e6)
    stats = tl.lane_stats((0.0, sim.step_time_s * 1e6))
    assert stats["rank1/compute"].busy_us == pytest.approx(sim.busy_s[1] * 1e6)
    shifted = sim.to_timeline(origin_us=500.0)
    assert shifted.extent_us()[0] == pytest.approx(500.0)


def test_split_backward_is_timed_as_input_and_weight() -> None:
    a = Action
    plan = plan_of([[a(0, F, 0), a(0, I, 0), a(0, W, 0)], [a(1, F, 0), a(1, I, 0), a(1, W, 0)]])
    sim = simulate(plan, StageTimes.equal(2, 1.0, 2.0, 3.0), p2p=FREE)
    # 0F0 [0,1] 1F0 [1,2] 1I0 [2,4] 1W0 [4,7]; 0I0 [4,6] 0W0 [6,9]
    assert sim.timing(a(0, I, 0)).start_s == 4.0 and sim.step_time_s == 9.0
    assert {s.category for s in sim.to_timeline().spans} == {"forward", "backward_input",
                                                               "backward_weight"}


# ------------------------------------------------------------------ deadlocks and bad input
def test_a_deadlocking_plan_names_each_stuck_rank_and_what_it_waits_on() -> None:
    a = Action
    plan = plan_of([[a(0, F, 0), a(0, B, 0)], [a(1, B, 0), a(1, F, 0)]])
    with pytest.raises(ValueError) as info:
        simulate(plan, p2p=FREE)
    msg = str(info.value)
    assert "deadlocks" in msg
    assert "rank 1 is stuck at 1B0, waiting on 1F0 (which rank 1 runs later itself)" in msg
    assert "rank 0 is stuck at 0B0, waiting on 1B0 (of rank 1, itself stuck at 1B0)" in msg


def test_a_circle_between_two_ranks_and_a_missing_action() -> None:
    a = Action
    circle = plan_of([[a(0, F, 1), a(0, B, 0), a(0, F, 0), a(0, B, 1)],
                      [a(1, F, 0), a(1, B, 0), a(1, F, 1), a(1, B, 1)]])
    with pytest.raises(ValueError, match=r"rank 1 is stuck at 1F0, waiting on 0F0 .*rank 0"):
        simulate(circle, p2p=FREE)
    missing = plan_of([[a(0, F, 0), a(0, B, 0)], [a(1, B, 0)]])
    with pytest.raises(ValueError, match=r"rank 1 is stuck at 1B0, waiting on 1F0 \(which no "
                                         r"rank runs\)"):
        simulate(missing, p2p=FREE)
    # two actions overlapped in one step where one needs the other: stuck with overlap="max"
    pair = plan_of([[(a(0, F, 0), a(0, B, 0))]])
    assert simulate(pair, p2p=FREE).step_time_s == 3.0
    with pytest.raises(ValueError, match="runs beside it in the same overlapped step"):
        simulate(pair, p2p=FREE, overlap="max")


def test_bad_plans_and_arguments_are_refused_by_name() -> None:
    a = Action
    wrong_rank = plan_of([[a(1, F, 0)], [a(0, F, 0)]])
    with pytest.raises(ValueError, match="rank 0 runs 1F0, but stage 1 sits on rank 1"):
        simulate(wrong_rank)
    twice = plan_of([[a(0, F, 0), a(0, F, 0)]])
    with pytest.raises(ValueError, match="0F0 runs twice"):
        simulate(twice)
    plan = build_plan("GPipe", 2, 2)
    with pytest.raises(ValueError, match="times cover 3 stages, the plan has 2"):
        simulate(plan, StageTimes.equal(3))
    with pytest.raises(ValueError, match="overlap"):
        simulate(plan, overlap="sum")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"boundary_nbytes must hold one byte count per stage "
                                         r"boundary \(1 for 2 stages\), got 2"):
        simulate(plan, boundary_nbytes=[1, 2])
    with pytest.raises(ValueError, match="boundary_nbytes"):
        boundary_bytes(-1, 3)
    with pytest.raises(TypeError, match="times must be a StageTimes"):
        simulate(plan, (1.0, 1.0))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"forward_s\[1\] \(seconds\)"):
        StageTimes((1.0, -1.0), (1.0, 1.0), (1.0, 1.0))
    with pytest.raises(ValueError, match="one time per stage each, got 2, 1 and 2"):
        StageTimes((1.0, 1.0), (1.0,), (1.0, 1.0))
    with pytest.raises(ValueError, match="factor"):
        StageTimes.equal(2).with_imbalance(0, 0.0)
    with pytest.raises(ValueError, match="stage must be an int in"):
        StageTimes.equal(2).with_imbalance(2, 2.0)
    with pytest.raises(ValueError, match="alpha_s"):
        P2PCost("x", -1.0, 0.0)
    with pytest.raises(KeyError, match="not in the plan"):
        simulate(plan).timing(a(0, I, 0))


# ------------------------------------------------------------------ properties
def random_plan(rng: random.Random, ranks: int, stages_per_rank: int, microbatches: int,
                split: bool, style: str, idle: bool) -> PipelinePlan:
    """A valid plan: one random topological order of every action, cut into ranks' orders."""
    n = ranks * stages_per_rank
    back = (I,) if split else (B,)
    need: dict[Action, list[Action]] = {}
    for m in range(microbatches):
        for s in range(n):
            need[Action(s, F, m)] = [Action(s - 1, F, m)] if s else []
            need[Action(s, back[0], m)] = [Action(s, F, m)] + (
                [Action(s + 1, back[0], m)] if s < n - 1 else [])
            if split:
                need[Action(s, W, m)] = [Action(s, I, m)]
    done: set[Action] = set()
    ready = [a for a, d in need.items() if not d]
    rows: list[list[tuple[Action, ...]]] = [[] for _ in range(ranks)]
    while ready:
        a = ready.pop(rng.randrange(len(ready)))
        done.add(a)
        rank = stage_to_rank(a.stage, ranks, stages_per_rank, style)  # type: ignore[arg-type]
        if idle and rng.random() < 0.3:
            rows[rank].append(())
        rows[rank].append((a,))
        ready += [b for b, d in need.items() if a in d and b not in done and b not in ready
                  and all(x in done for x in d)]
    assert len(done) == len(need)
    return PipelinePlan("random", ranks, stages_per_rank, microbatches, style,  # type: ignore
                        tuple(tuple(r) for r in rows))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), ranks=st.integers(1, 4), spr=st.integers(1, 3),
       mbs=st.integers(1, 5), split=st.booleans(), style=st.sampled_from(["loop", "v"]),
       idle=st.booleans(),
       costs=st.lists(st.floats(0.01, 10.0), min_size=3, max_size=3),
       alpha=st.floats(0.0, 1.0), nbytes=st.integers(0, 10**6))
def test_valid_plans_never_deadlock_and_the_step_bounds_hold(seed: int, ranks: int, spr: int,
                                                             mbs: int, split: bool, style: str,
                                                             idle: bool, costs: list[float],
                                                             alpha: float, nbytes: int) -> None:
    rng = random.Random(seed)
    plan = random_plan(rng, ranks, spr, mbs, split, style, idle)
    n = plan.num_stages
    times = StageTimes(tuple(costs[0] * rng.uniform(0.5, 2) for _ in range(n)),
                       tuple(costs[1] * rng.uniform(0.5, 2) for _ in range(n)),
                       tuple(costs[2] * rng.uniform(0.5, 2) for _ in range(n)))
    link = P2PCost("test link", alpha, 1e-9)
    sim = simulate(plan, times, boundary_nbytes=nbytes, p2p=link)
    assert len(sim.timings) == sum(len(plan.compute(r)) for r in range(ranks))
    assert sim.step_time_s >= sim.busiest_s * (1 - 1e-12)
    assert 0.0 <= sim.bubble_fraction < 1.0
    assert sum(sim.busy_s) == pytest.approx(sum(t.seconds for t in sim.timings), rel=1e-9)
    for t in sim.timings:                                  # dependencies and transfers honoured
        for d in plan.dependencies(t.action):
            dt = sim.timing(d)
            hop = 0.0 if dt.rank == t.rank else link.seconds(nbytes)
            assert t.start_s >= dt.end_s + hop - 1e-9
    for r in range(ranks):                                  # one action at a time, in order
        rows = sim.rank_timings(r)
        assert [x.action for x in rows] == list(plan.compute(r))
        assert all(x.end_s <= y.start_s + 1e-12 for x, y in zip(rows, rows[1:], strict=False))


@settings(max_examples=40, deadline=None)
@given(ranks=st.integers(1, 6), extra=st.integers(0, 6), name=st.sampled_from(["GPipe", "1F1B"]),
       f=st.floats(0.01, 5.0), i=st.floats(0.01, 5.0), w=st.floats(0.0, 5.0))
def test_registry_plans_simulate_within_bounds(ranks: int, extra: int, name: str, f: float,
                                              i: float, w: float) -> None:
    plan = build_plan(name, ranks, ranks + extra)
    sim = simulate(plan, StageTimes.equal(ranks, f, i, w), boundary_nbytes=4096)
    assert sim.step_time_s >= sim.busiest_s
    assert 0.0 <= sim.bubble_fraction < 1.0
