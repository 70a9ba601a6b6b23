"""In-round calibration: the per-step hand-off term, its fit, and the benchmark using it."""

from __future__ import annotations

import numpy as np
import pytest

from distlab import launch
from distlab.bench import allreduce as bench
from distlab.collectives import build, cost, step_costs
from distlab.collectives.model.calibration import calibration_sizes, fit_step_model, oneway_schedule
from distlab.collectives.model.rates import size_rates
from helpers.collectives_targets import round_calibration_worker


def test_handoff_adds_once_per_step_and_defaults_to_the_old_model() -> None:
    s = build("tree", 4, 1000)
    a, b, g = 5e-6, 1e-9, 1e-10
    old = cost(s, a, b, g, 4, duplex="shared")
    assert cost(s, a, b, g, 4, duplex="shared", handoff=0.0) == old
    assert cost(s, a, b, g, 4, duplex="shared", handoff=1e-4) == pytest.approx(
        old + 1e-4 * len(s.steps))
    steps = step_costs(s, a, b, g, 4, duplex="shared", handoff=1e-4)
    for c in steps:
        assert c.handoff_s == 1e-4
        assert c.seconds == pytest.approx(c.latency_s + c.bandwidth_s + c.compute_s + 1e-4)
    with pytest.raises(ValueError, match="handoff"):
        cost(s, a, b, g, 4, handoff=-1.0)


def test_fit_step_model_separates_handoff_from_alpha() -> None:
    h, a, b = 80e-6, 15e-6, 0.3e-9
    sizes = np.array([4096, 65536, 1 << 20, 1 << 22], dtype=float)
    m = np.concatenate([np.full(4, 4.0), np.ones(4)])
    nb = np.concatenate([16 * sizes, 2 * sizes])
    y = h + a * m + b * nb
    got = fit_step_model(m, nb, y)
    assert got[:4] == pytest.approx((h, a, b, 0.0), rel=1e-6)
    assert got[4] == pytest.approx(1.0) and got[5] < 1e-9
    # a third pattern (ring shift over 4 ranks: 2 ranks beyond a pair) identifies the relay
    r = 120e-6
    m3, nb3 = np.concatenate([m, np.full(4, 4.0)]), np.concatenate([nb, 8 * sizes])
    k3 = np.concatenate([np.zeros(8), np.full(4, 2.0)])
    got = fit_step_model(m3, nb3, h + a * m3 + b * nb3 + r * k3, k3)
    assert got[:4] == pytest.approx((h, a, b, r), rel=1e-6)
    # no hand-off in the data: the fit drops the term instead of going negative
    got = fit_step_model(m, nb, a * m + b * nb)
    assert got[0] == pytest.approx(0.0, abs=1e-12) and got[1] == pytest.approx(a, rel=1e-6)
    with pytest.raises(ValueError, match="positive seconds"):
        fit_step_model([1, 2, 3], [1, 2, 3], [1.0, 0.0, 1.0])


def test_relay_counts_the_ranks_a_step_links() -> None:
    from distlab.collectives.model.calibration import shift_schedule
    from distlab.collectives.model.cost import linked_ranks

    ring, rd = build("ring", 4, 64), build("recursive_doubling", 4, 64)
    assert [linked_ranks(s) for s in ring.steps] == [4] * 6
    assert [linked_ranks(s) for s in rd.steps] == [2, 2]
    assert linked_ranks(shift_schedule(4, 8).steps[0]) == 4
    base = cost(ring, 1e-5, 1e-9, 1e-10, 4, duplex="shared")
    assert cost(ring, 1e-5, 1e-9, 1e-10, 4, duplex="shared", relay=1e-4) == pytest.approx(
        base + 6 * 2 * 1e-4)
    assert cost(rd, 1e-5, 1e-9, 1e-10, 4, relay=1e-4) == cost(rd, 1e-5, 1e-9, 1e-10, 4)


def test_oneway_schedule_and_calibration_sizes() -> None:
    s = oneway_schedule(4, 10, 3)
    assert len(s.steps) == 3 and all(len(st.transfers) == 1 for st in s.steps)
    t = s.steps[0].transfers[0]
    assert (t.src, t.dst, t.start, t.stop, t.kind) == (0, 1, 0, 10, "copy")
    sizes = calibration_sizes([65536, 1 << 24], 2, 4)
    assert sizes[0] == 4096 and sizes[-1] == 1 << 24 and 16384 in sizes
    assert sizes == sorted(set(sizes))


@pytest.mark.multiprocess
@pytest.mark.timeout(180)
def test_round_calibrator_on_two_ranks() -> None:
    out = launch.run(round_calibration_worker, 2, timeout=150)
    # 5 points per size, then the builtin allreduce of the smallest size (the builtin's floor)
    # and of an empty tensor (the call alone)
    assert out[0]["rounds"] == 2 and out[0]["points"] == 3 * 5 + 2
    cal = out[0]["cal"]
    assert cal["builtin_floor_bytes"] == 4096 and cal["builtin_floor"] > 0
    assert cal["builtin_call"] > 0
    assert len(cal["round_seconds"]) == 2
    assert cal == out[1]["cal"]  # the fit is collective: every rank gets the same numbers
    assert cal["method"] == "rounds" and cal["duplex"] == "shared"
    assert len(cal["comm_seconds"]) == len(cal["oneway_seconds"]) == 3
    assert cal["shift_seconds"] == cal["comm_seconds"]  # 2 ranks: the shift is the exchange


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_benchmark_predicts_from_the_same_rounds() -> None:
    report = bench.BENCHMARK.run(bench.AllreduceConfig(
        world_size=2, minbytes=4096, maxbytes=16384, algorithms=("ring", "tree"), iters=2,
        warmup=1, quiet=True, timeout=240))
    res = {"calibration": report.data["calibration"], "rows": report.rows}
    cal = res["calibration"]
    assert cal["method"] == "rounds" and "handoff" in cal
    for r in res["rows"]:
        sched = build(r["algorithm"], 2, r["count"])
        want = cal["call_overhead"] + cost(sched, cal["alpha"], cal["beta"], cal["gamma"], 4,
                                           duplex="shared", handoff=cal["handoff"],
                                           relay=cal["relay"], rates=size_rates(cal))
        assert r["predicted_us"] == pytest.approx(want * 1e6)
        assert r["error_pct"] == pytest.approx(100 * (r["time_us"] - r["predicted_us"])
                                               / r["predicted_us"])
        assert len(r["seconds_per_rank"][0]) == 2


def test_nccl_step_op_list_posts_each_ring_step_as_one_batch() -> None:
    import torch

    from distlab.collectives.runtime.rank_plan import rank_plan
    from distlab.collectives.runtime.steps import step_p2p_ops

    p, n = 4, 16
    plan = rank_plan(build("ring", p, n), 1)
    assert len(plan.steps) == 2 * (p - 1)  # one batch per step
    flat, scratch = torch.arange(n, dtype=torch.float32), torch.zeros(plan.scratch)
    for rs in plan.steps:
        sends = [flat[m.ranges[0][0]:m.ranges[0][1]] for m in rs.sends]
        bufs = [flat[m.ranges[0][0]:m.ranges[0][1]] if m.offset is None
                else scratch[m.offset:m.offset + m.count] for m in rs.recvs]
        ops = step_p2p_ops(rs, sends, bufs, peer=lambda r: 10 + r, tag_base=7 << 16)
        kinds = [k for k, *_ in ops]
        assert kinds == ["recv"] * len(rs.recvs) + ["send"] * len(rs.sends) == ["recv", "send"]
        (_, rbuf, src, rtag), (_, sbuf, dst, stag) = ops
        assert (src, dst) == (10, 12)  # ring: from the left neighbour, to the right one
        assert sbuf.data_ptr() == sends[0].data_ptr() and rbuf.data_ptr() == bufs[0].data_ptr()
        assert (rtag, stag) == ((7 << 16) | rs.recvs[0].tag, (7 << 16) | rs.sends[0].tag)
