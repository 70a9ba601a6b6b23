"""One call's prediction (distlab's algorithms and the builtin), the pipelined cost of gloo's
ring, and predict_builtin for gloo calibrations and GPU boxes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives import Schedule, Step, Transfer, build, cost, predict_builtin, step_costs
from distlab.collectives.algorithms.allreduce.gloo_ring import gloo_ring
from distlab.collectives.model.calibration import fit_calibration, pattern_terms
from distlab.collectives.model.predict import (
    CallModel,
    builtin_schedule,
    builtin_step_seconds,
    call_model,
)
from distlab.collectives.model.rates import SizeRates
from distlab.nccl.tuning import predict_nccl_allreduce

A, B, G, H = 10e-6, 1e-9, 2e-10, 30e-6


def _pipe(options: dict) -> Schedule:
    steps = tuple(Step((Transfer(0, 1, 0, n, kind), Transfer(1, 0, 0, n, kind)))
                  for n, kind in ((1000, "reduce"), (10, "reduce"), (1000, "copy")))
    return Schedule("pipe", 2, 1000, steps, options)


def test_two_in_flight_overlap_fixed_bytes_and_reduction() -> None:
    plain = step_costs(_pipe({}), A, B, G, 4, duplex="half", handoff=H)
    piped = step_costs(_pipe({"in_flight": 2, "phases": (2, 1)}), A, B, G, 4, duplex="half",
                       handoff=H)
    for c, p in zip(plain, piped, strict=True):
        fixed = c.latency_s + c.handoff_s
        assert c.seconds == pytest.approx(fixed + c.bandwidth_s + c.compute_s)
        assert p.bandwidth_s == c.bandwidth_s and p.compute_s == c.compute_s
    core = [max((c.latency_s + c.handoff_s) / 2, c.bandwidth_s, c.compute_s) for c in plain]
    def first(c):  # the half of a phase's first fixed part that nothing shares
        return (c.latency_s + c.handoff_s) / 2

    # phase 1 = steps 0, 1: step 0 pays the rest of its fixed part, step 1 its reduction
    assert piped[0].seconds == pytest.approx(core[0] + first(plain[0]))
    assert piped[1].seconds == pytest.approx(core[1] + plain[1].compute_s)
    # phase 2 = step 2 alone: both, and a copy step has no reduction
    assert piped[2].seconds == pytest.approx(core[2] + first(plain[2]))
    assert sum(p.seconds for p in piped) < sum(c.seconds for c in plain)


@pytest.mark.parametrize("options, match", [
    ({"in_flight": 2, "phases": (1, 1)}, "add up"),
    ({"in_flight": 0}, "in_flight"),
])
def test_bad_pipeline_options(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        cost(_pipe(options), A, B, G, 4)


def _cal(p: int = 2, backend: str = "gloo") -> dict:
    sizes = [1024 * 4 ** k for k in range(6)]
    ex, ow, sh = ([H + A * m + B * b for m, b, _ in zip(*pattern_terms(p, sizes)[k], strict=True)]
                  for k in ("exchange", "oneway", "shift"))
    cal = fit_calibration(sizes, ex, ow, [x + 5e-6 for x in ex], [3e-6 + G * s for s in sizes],
                          sh, world_size=p, backend=backend)
    return cal.to_dict()


def test_builtin_of_a_gloo_calibration_is_gloos_ring_costed_with_it() -> None:
    cal = _cal()
    m = call_model(cal)
    sizes = [4096, 65536, 2**20, 8 * 2**20]
    got = predict_builtin(cal, 2, sizes)
    want = [m.schedule_seconds(gloo_ring(2, s // 4, itemsize=4), 4, call_overhead=False)
            for s in sizes]
    assert got == pytest.approx(want)
    assert all(t > 0 for t in got) and got == sorted(got)
    assert m.seconds("builtin", 2, 1000, 4) == m.schedule_seconds(builtin_schedule(
        "gloo", 2, 1000, 4), 4, call_overhead=False)
    assert m.call_overhead > 0  # distlab's call overhead is not the builtin's
    # float64: gloo segments by bytes, so the same bytes give the same schedule shape
    assert predict_builtin(cal, 2, [2**20], itemsize=8)[0] == pytest.approx(got[2], rel=0.05)


def test_builtin_of_a_gpu_box_is_nccls_model() -> None:
    sizes = [65536, 2**20, 2**30]
    assert predict_builtin("h100_sxm8", 8, sizes) == predict_nccl_allreduce("h100_sxm8", 8, sizes)


def test_loopback_preset_is_the_shipped_calibration() -> None:
    t = predict_builtin("loopback", 2, [4096, 2**20])
    assert 0 < t[0] < t[1]


def test_call_model_per_size_and_constant() -> None:
    cal = _cal(4)
    per_size, constant = call_model(cal), call_model(cal, per_size=False)
    assert per_size.rates is not None and constant.rates is None
    assert call_model({"alpha": 1e-6, "beta": 1e-9, "gamma": 0}).rates is None
    # exact straight-line series: both price a ring alike
    assert per_size.seconds("ring", 4, 10**6, 4) == pytest.approx(
        constant.seconds("ring", 4, 10**6, 4), rel=1e-3)
    assert constant.seconds("ring", 4, 10**6, 4) == pytest.approx(
        constant.call_overhead + cost(build("ring", 4, 10**6), constant.alpha, constant.beta,
                                      constant.gamma, 4, duplex="shared",
                                      handoff=constant.handoff, relay=constant.relay))


@pytest.mark.parametrize("preset, kwargs, exc, match", [
    ("nvlink4_h100", {}, ValueError, "gloo calibration"),
    (_cal(2, backend="nccl"), {}, ValueError, "'nccl' calibration"),
    (_cal(), {"itemsize": 3}, ValueError, "multiple of itemsize"),
    (_cal(), {"world_size": 0}, ValueError, "world_size"),
    ({"beta": 1e-9, "gamma": 0}, {}, ValueError, "alpha"),
    ({"alpha": -1, "beta": 1e-9, "gamma": 0}, {}, ValueError, "alpha must be"),
])
def test_predict_builtin_rejects(preset, kwargs, exc, match) -> None:
    ws = kwargs.pop("world_size", 2)
    with pytest.raises(exc, match=match):
        predict_builtin(preset, ws, [1024], **kwargs)


def test_call_model_rejects_non_calibrations() -> None:
    with pytest.raises(TypeError, match="Calibration"):
        call_model(3.0)
    with pytest.raises(ValueError, match="backend"):
        builtin_schedule("nccl", 2, 10, 4)


# --- the builtin priced as compiled code, from its measured floor ----------------------------

@settings(max_examples=60, deadline=None)
@given(p=st.integers(2, 8), floor_us=st.floats(50.0, 5000.0),
       floor_bytes=st.sampled_from([128, 256, 1024, 4096]),
       call_share=st.floats(0.0, 1.2))
def test_builtin_floor_is_reproduced_at_its_own_size(p: int, floor_us: float,
                                                     floor_bytes: int, call_share: float) -> None:
    """The defining property: priced at the floor's own size, the builtin costs the floor;
    the call's share of it is paid once, the rest per iteration."""
    call = call_share * floor_us * 1e-6
    cal = {**_cal(p), "builtin_floor": floor_us * 1e-6, "builtin_floor_bytes": floor_bytes,
           "builtin_call": call}
    m = call_model(cal)
    assert m.builtin_call == pytest.approx(min(call, floor_us * 1e-6))
    assert m.builtin_step is not None and m.builtin_step >= 0
    at_floor = m.seconds("builtin", p, floor_bytes // 4, 4)
    if m.builtin_step > 0:
        assert at_floor == pytest.approx(floor_us * 1e-6, rel=1e-9)
    else:  # its bytes alone cost more than the floor: nothing is left for the iterations
        assert at_floor >= floor_us * 1e-6
    # a larger buffer costs more, and what it adds is its bytes, not the executor's terms
    big = m.seconds("builtin", p, 1 << 22, 4)
    assert big > floor_us * 1e-6
    sched = builtin_schedule("gloo", p, 1 << 22, 4)
    assert big == pytest.approx(m.builtin_call + m.compiled_seconds(sched, 4, m.builtin_step))


def test_builtin_step_spreads_the_floor_over_glooss_iterations() -> None:
    cal = _cal(4)
    m = call_model(cal)
    assert m.builtin_step is None  # no floor measured: the executor's terms, as before
    sched = builtin_schedule("gloo", 4, 64, 4)
    old = m.schedule_seconds(sched, 4, call_overhead=False)
    assert m.seconds("builtin", 4, 64, 4) == old
    moved = m.compiled_seconds(sched, 4, 0.0)
    per_step = m.compiled_seconds(sched, 4, 1.0) - moved
    # 4 KiB floor on 4 ranks: 12 iterations of gloo's ring, two in flight
    assert len(sched.steps) == 12 and 6 < per_step < 12
    step = builtin_step_seconds(m, 4, moved + 7.5 * per_step, 256, 4)
    assert m.compiled_seconds(sched, 4, step) == pytest.approx(moved + 7.5 * per_step)
    assert step == pytest.approx(7.5, rel=0.2)  # two in flight: not quite linear
    # a floor its bytes alone exceed gives no negative step
    assert builtin_step_seconds(m, 4, moved / 2, 256, 4) == 0.0
    with pytest.raises(ValueError, match="floor_seconds"):
        builtin_step_seconds(m, 4, 0.0, 256, 4)
    # reductions in compiled code do not pay the torch call's fixed part
    assert m.reduce_call == pytest.approx(3e-6)
    assert m.rates is not None
    less = m.rates.without_call_cost(m.reduce_call)
    assert all(a == pytest.approx(max(1e-9, b - 3e-6))
               for a, b in zip(less.reduce_seconds, m.rates.reduce_seconds, strict=True))
    with pytest.raises(ValueError, match="call_seconds"):
        m.rates.without_call_cost(-1.0)


def test_nccl_calibration_floor_leaves_builtin_unpriced_by_gloo() -> None:
    cal = {**_cal(2, backend="nccl"), "builtin_floor": 1e-4, "builtin_floor_bytes": 256}
    assert call_model(cal).builtin_step is None


def test_call_cost_is_paid_once_and_iterations_per_iteration() -> None:
    """Two calibrations with the same floor: the one whose floor is mostly the call has cheap
    iterations; both reproduce the floor and pay the call once at any size."""
    base = {**_cal(2), "builtin_floor": 600e-6, "builtin_floor_bytes": 256}
    per_iter = call_model({**base, "builtin_call": 0.0})
    mostly_call = call_model({**base, "builtin_call": 500e-6})
    assert mostly_call.builtin_step < per_iter.builtin_step
    n = 1 << 24  # 64 MiB: 64 iterations of gloo's ring on 2 ranks, against 4 at the floor
    sched = builtin_schedule("gloo", 2, n, 4)
    assert len(sched.steps) == 64
    for m in (per_iter, mostly_call):
        assert m.seconds("builtin", 2, 64, 4) == pytest.approx(600e-6, rel=1e-9)
        assert m.seconds("builtin", 2, n, 4) == pytest.approx(
            m.builtin_call + m.compiled_seconds(sched, 4, m.builtin_step))


def test_resolution_rule_keeps_unresolved_sizes_at_the_one_beta() -> None:
    """A per-size beta is read only where a size's bytes cost more than the fit's scatter."""
    from distlab.collectives.model.rates import size_rates
    cal = _cal(2)
    sizes = cal["sizes"]
    # a slow small exchange: fitted alone it would be priced as bytes at 1 KiB
    cal = {**cal, "comm_seconds": [cal["comm_seconds"][0] * 3] + cal["comm_seconds"][1:],
           "oneway_seconds": [cal["oneway_seconds"][0] * 3] + cal["oneway_seconds"][1:],
           "comm_max_rel_residual": 0.5}
    rates = size_rates(cal)
    assert rates is not None and sizes[0] == 1024
    assert rates.beta[0] == pytest.approx(cal["beta"])  # unresolved: the one beta
    cal["comm_max_rel_residual"] = 0.0  # every size resolved: 1 KiB is fitted alone
    assert size_rates(cal).beta[0] > 10 * cal["beta"]


def test_without_free_cores_bytes_and_reduction_add_up() -> None:
    kw = {"duplex": "half", "handoff": H}
    b, g = 1e-8, 1e-8  # bytes and reductions of 1000 elements outweigh the fixed part
    plain = step_costs(_pipe({}), A, b, g, 4, **kw)
    shared = step_costs(_pipe({"in_flight": 2, "phases": (2, 1)}), A, b, g, 4, **kw)
    queued = step_costs(_pipe({"in_flight": 2, "phases": (2, 1)}), A, b, g, 4, cpu_overlap=False,
                        **kw)
    for c, s, q in zip(plain, shared, queued, strict=True):
        fixed = c.latency_s + c.handoff_s
        assert q.seconds - s.seconds == pytest.approx(
            max(fixed / 2, c.bandwidth_s + c.compute_s)
            - max(fixed / 2, c.bandwidth_s, c.compute_s), abs=1e-15)
    assert sum(q.seconds for q in queued) > sum(s.seconds for s in shared)
    # a schedule with one step in flight is the same either way
    s = build("ring", 4, 1000)
    assert cost(s, A, B, G, 4, cpu_overlap=False) == cost(s, A, B, G, 4)


@pytest.mark.parametrize("fields, cpus, per_rank, overlap", [
    ({"cpus_allowed": 16, "local_world_size": 4}, None, 4.0, True),
    ({"cpus_allowed": 2, "local_world_size": 2}, 16, 1.0, False),   # the calibration's own wins
    ({}, 2, 0.5, False),                                            # 4 ranks on a profile's 2
    ({}, 8, 2.0, True),
    ({}, None, None, True),                                         # unknown: overlap
])
def test_cores_per_rank_decide_the_overlap(fields: dict, cpus: int | None,
                                           per_rank: float | None, overlap: bool) -> None:
    m = call_model({**_cal(4), **fields}, cpus=cpus)
    assert m.cores_per_rank == per_rank and m.cpu_overlap is overlap
    sched = builtin_schedule("gloo", 4, 1 << 22, 4)
    assert m.seconds("builtin", 4, 1 << 22, 4) == pytest.approx(m.schedule_seconds(
        sched, 4, call_overhead=False))
    want = cost(sched, m.alpha, m.beta, m.gamma, 4, duplex=m.duplex, handoff=m.handoff,
                relay=m.relay, rates=m.rates, cpu_overlap=overlap)
    assert m.schedule_seconds(sched, 4, call_overhead=False) == pytest.approx(want)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 6), kib=st.sampled_from([64, 256, 1024, 4096, 16384]),
       dip=st.floats(0.1, 0.9))
def test_builtin_bytes_pay_the_one_beta_and_the_algorithms_the_per_size_one(
        p: int, kib: int, dip: float) -> None:
    """gloo's loop pays its bytes at the calibration's one beta (the streaming rate), even where
    the per-size beta(s) dips; distlab's algorithms, run by the executor the per-size series
    was read with, pay beta(s). Reductions are per size for both."""
    sizes = (1024, 65536, 262144, 1 << 20, 1 << 22)
    rates = SizeRates(sizes, (B, B, B * dip, B * dip, B), (1024, 1 << 22), (2e-6, 4e-3))
    m = CallModel(alpha=A, beta=B, gamma=G, handoff=H, duplex="shared", rates=rates,
                  reduce_call=1e-6, builtin_step=2 * H, builtin_call=H)
    count = kib * 256
    sched = builtin_schedule("gloo", p, count, 4)
    streaming = rates.without_call_cost(1e-6).with_beta(B)
    assert m.seconds("builtin", p, count, 4) == pytest.approx(
        H + cost(sched, 0.0, B, G, 4, duplex="shared", handoff=2 * H, rates=streaming))
    assert streaming.reduce_seconds == rates.without_call_cost(1e-6).reduce_seconds
    assert set(streaming.beta) == {B}
    # the algorithms keep beta(s): the same ring priced with the dip is cheaper than without
    flat = CallModel(alpha=A, beta=B, gamma=G, handoff=H, duplex="shared",
                     rates=rates.with_beta(B))
    segment = 4 * count // p
    if sizes[1] < segment < sizes[-1]:
        assert m.seconds("ring", p, count, 4) < flat.seconds("ring", p, count, 4)
    with pytest.raises(ValueError, match="beta"):
        rates.with_beta(-1.0)
