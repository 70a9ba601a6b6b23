"""One rule at every boundary of timeline, collectives, samplers, transfers, ddp and launch.

NumPy integers are accepted wherever an int is; bools are rejected (TypeError); NaN and
infinities are rejected (ValueError) wherever a finite number is; every message names the
argument.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab import launch as _launch
from distlab._checks import check_instance, check_str, check_window
from distlab.collectives import build, cost, format_schedule, get_preset, holdings, simulate
from distlab.collectives.plan.ops import check_op
from distlab.ddp import DDP
from distlab.samplers.assignment import assign
from distlab.samplers.libstdcxx import shuffle_targets
from distlab.samplers.mt19937 import MT19937, seed_state
from distlab.timeline import Timeline
from distlab.transfers.copy_model import overlap_bounds
from distlab.transfers.cuda import burst_seconds
from distlab.transfers.cuda_prefetch import run_cuda
from distlab.transfers.host import HostAdapter
from distlab.transfers.paths import pin_cost_seconds
from distlab.transfers.prefetch import run_loop

NP_INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
NON_FINITE = [math.nan, math.inf, -math.inf, np.float64("nan"), np.float32("inf")]
ALGOS = ["naive", "tree", "recursive_doubling", "rabenseifner", "ring", "segmented_ring",
         "hierarchical"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(ALGOS), st.integers(1, 9), st.integers(0, 40), st.sampled_from(NP_INTS))
def test_numpy_ints_build_the_same_schedule(algo, p, n, np_int) -> None:
    want = build(algo, p, n)
    got = build(algo, np_int(p), np_int(n))
    assert [s.transfers for s in got.steps] == [s.transfers for s in want.steps]
    a = cost(want, 1e-6, 1e-9, 1e-10, 4)
    assert cost(got, np.float32(1e-6), np.float64(1e-9), 1e-10, np_int(4)) == pytest.approx(a)


@pytest.mark.parametrize("np_int", NP_INTS)
def test_numpy_ints_as_options(np_int) -> None:
    assert build("hierarchical", 6, 12, group_size=np_int(3)).options == \
        build("hierarchical", 6, 12, group_size=3).options
    assert build("segmented_ring", 4, 40, segment_size=np_int(3)).steps == \
        build("segmented_ring", 4, 40, segment_size=3).steps
    s = build("ring", 3, 6)
    assert format_schedule(s, max_steps=np_int(1)) == format_schedule(s, max_steps=1)


@pytest.mark.parametrize("call", [
    lambda: build("ring", True, 4),
    lambda: build("ring", 4, False),
    lambda: build("hierarchical", 4, 8, group_size=True),
    lambda: build("segmented_ring", 4, 8, segment_size=True),
    lambda: cost(build("ring", 2, 4), 1e-6, 1e-9, 1e-10, True),
    lambda: cost(build("ring", 2, 4), True, 1e-9, 1e-10, 4),
    lambda: Timeline().record("n", "c", "l", True, 1.0),
    lambda: Timeline().record("n", "c", "l", 0.0, False),
    lambda: Timeline().efficiency(True),
    lambda: format_schedule(build("ring", 2, 4), max_steps=True),
], ids=["world_size", "count", "group_size", "segment_size", "itemsize", "alpha", "start_us",
        "duration_us", "bound_s", "max_steps"])
def test_bools_are_rejected_with_type_error(call) -> None:
    with pytest.raises(TypeError, match="got bool"):
        call()


@pytest.mark.parametrize("bad", NON_FINITE)
@pytest.mark.parametrize("where", ["alpha", "beta", "gamma"])
def test_cost_rejects_non_finite(bad, where) -> None:
    params = {"alpha": 1e-6, "beta": 1e-9, "gamma": 1e-10, where: bad}
    with pytest.raises(ValueError, match=where):
        cost(build("ring", 2, 4), params["alpha"], params["beta"], params["gamma"], 4)


@pytest.mark.parametrize("bad", NON_FINITE)
@pytest.mark.parametrize("where", ["start_us", "duration_us"])
def test_timeline_rejects_non_finite(bad, where) -> None:
    kw = {"start_us": 0.0, "duration_us": 1.0, where: bad}
    tl = Timeline()
    with pytest.raises(ValueError, match=where):
        tl.record("n", "c", "rank0/x", **kw)
    with pytest.raises(ValueError, match=where):
        tl.extend([{"name": "n", "category": "c", "lane": "rank0/x", **kw}])
    assert len(tl) == 0


@pytest.mark.parametrize("bad", NON_FINITE)
def test_timeline_stats_reject_non_finite(bad) -> None:
    tl = Timeline()
    tl.record("n", "c", "l", 0.0, 10.0)
    with pytest.raises(ValueError, match="bound_s"):
        tl.efficiency(bad)
    with pytest.raises(ValueError, match="window"):
        tl.lane_stats((0.0, bad))
    with pytest.raises(ValueError, match="min_gap_us"):
        tl.idle_gaps("l", min_gap_us=bad)


@settings(max_examples=60, deadline=None)
@given(st.integers(-10**6, 10**6), st.integers(0, 10**6), st.sampled_from([np.int32, np.int64,
                                                                          np.float32, np.float64]))
def test_timeline_accepts_numpy_numbers(start, dur, kind) -> None:
    tl = Timeline()
    s = tl.record("n", "c", "l", kind(start), kind(dur))
    assert s.start_us == float(kind(start)) and s.duration_us == float(kind(dur))
    assert type(s.start_us) is float


def test_window_must_be_an_ordered_pair() -> None:
    tl = Timeline()
    tl.record("n", "c", "l", 0.0, 10.0)
    with pytest.raises(ValueError, match=r"window\[1\] \(end\) must be a finite number >= 5"):
        tl.lane_stats((5.0, 1.0))
    with pytest.raises(TypeError, match="window must be a"):
        tl.lane_stats(3.0)
    assert check_window("w", (np.int64(1), np.float32(2))) == (1.0, 2.0)


def test_holdings_and_simulate_name_their_arguments() -> None:
    with pytest.raises(TypeError, match="schedule must be a Schedule, got list"):
        holdings([])
    with pytest.raises(TypeError, match="schedule must be a Schedule"):
        simulate("ring", [])
    with pytest.raises(ValueError, match=r"world_size .* must be an int in \[1, 64\], got 65"):
        holdings(build("ring", 65, 2))
    with pytest.raises(TypeError, match="inputs must be a list of per-rank arrays, got int"):
        simulate(build("ring", 2, 2), 3)


def test_choices_and_strings() -> None:
    assert check_op("SUM") == "sum"
    with pytest.raises(TypeError, match="op must be a str"):
        check_op(1)
    with pytest.raises(ValueError, match="preset must be one of"):
        get_preset("token_ring")
    with pytest.raises(ValueError,
                       match="duplex must be one of .full., .half., .shared., got None"):
        cost(build("ring", 2, 4), 1e-6, 1e-9, 1e-10, 4, duplex=None)
    with pytest.raises(ValueError, match="lane must be a non-empty str"):
        Timeline().record("n", "c", "", 0.0, 1.0)
    assert check_str("x", "") == "" and check_instance("x", 3, int) == 3
    with pytest.raises(TypeError, match="x must be a int or str, got float"):
        check_instance("x", 1.5, (int, str))


# ------------------------------------------------ samplers, transfers, ddp, launch: one rule


def _noop(rank: int, world_size: int) -> None:
    return None


def _ddp(**kw):
    """DDP's arguments are checked before it needs a process group: reaching that error means
    the arguments passed."""
    try:
        DDP(torch.nn.Linear(2, 2), **kw)
    except ValueError as exc:
        if "process group has not been initialized" not in str(exc):
            raise
    return "checked"



# name -> (call taking the value under test, a good value); each call checks its argument
# before doing any work (no process group, GPU or copy is needed to reach the check).
INT_ARGS = {
    "mt19937 seed": (lambda v: seed_state(v), 5489),
    "mt19937 count": (lambda v: MT19937(1).next_raw(v), 3),
    "shuffle_targets n": (lambda v: shuffle_targets(v, MT19937(1)), 5),
    "assign length": (lambda v: assign(v, 2), 10),
    "assign num_replicas": (lambda v: assign(10, v), 2),
    "allocate nbytes": (lambda v: HostAdapter().allocate("pageable", v), 16),
    "time_copies count": (lambda v: HostAdapter().time_copies(
        HostAdapter().allocate("pageable", 8), HostAdapter().allocate("pageable", 8), v), 2),
    "burst_seconds count": (lambda v: burst_seconds(1.0, v), 2),
    "overlap_bounds batches": (lambda v: overlap_bounds(0.1, 0.2, v), 3),
    "run_loop batches": (lambda v: run_loop(HostAdapter(), mode="sequential", batches=v,
                                            nbytes=64, compute_s=0.0), 2),
}
FLOAT_ARGS = {
    "burst_seconds elapsed_ms": (lambda v: burst_seconds(v, 2), 1.0),
    "overlap_bounds copy_s": (lambda v: overlap_bounds(v, 0.2, 3), 0.1),
    "overlap_bounds compute_s": (lambda v: overlap_bounds(0.1, v, 3), 0.2),
    "run_loop compute_s": (lambda v: run_loop(HostAdapter(), mode="sequential", batches=1,
                                              nbytes=64, compute_s=v), 0.0),
    "DDP bucket_cap_mb": (lambda v: _ddp(bucket_cap_mb=v), 1.0),
}
# checked before anything else runs: a valid value would need a GPU or a process group
NEEDS_MORE_INT = {
    "run_cuda batches": lambda v: run_cuda(None, mode="prefetch", batches=v, nbytes=8,
                                           compute_s=0.0),
}
CHOICE_ARGS = {
    "mt19937 engine": lambda v: MT19937(1, engine=v),
    "allocate kind": lambda v: HostAdapter().allocate(v, 8),
    "run_loop mode": lambda v: run_loop(HostAdapter(), mode=v, batches=1, nbytes=8,
                                        compute_s=0.0),
    "run_cuda mode": lambda v: run_cuda(None, mode=v, batches=1, nbytes=8, compute_s=0.0),
    "pin_cost_seconds method": lambda v: pin_cost_seconds(HostAdapter(), v, 8),
    "assign layout": lambda v: assign(10, 2, layout=v),
    "launch backend": lambda v: _launch.run(_noop, 1, backend=v),
}
BOOL_ARGS = {
    "DDP overlap": lambda v: _ddp(overlap=v),
    "DDP naive": lambda v: _ddp(naive=v),
    "DDP gradient_as_bucket_view": lambda v: _ddp(gradient_as_bucket_view=v),
}


@pytest.mark.parametrize("np_int", [np.int32, np.int64, np.uint16])
@pytest.mark.parametrize("name", sorted(INT_ARGS))
def test_numpy_ints_accepted_like_ints(name, np_int) -> None:
    call, good = INT_ARGS[name]
    want, got = call(good), call(np_int(good))
    if isinstance(want, np.ndarray):
        assert np.array_equal(want, got)
    elif isinstance(want, dict):
        assert want == got
    else:
        assert type(want) is type(got)


@pytest.mark.parametrize("bad, exc", [(True, TypeError), (False, TypeError), (2.0, TypeError),
                                      ("3", TypeError), (None, TypeError), (-1, ValueError)])
@pytest.mark.parametrize("name", sorted(INT_ARGS) + sorted(NEEDS_MORE_INT))
def test_int_arguments_reject_bools_floats_and_range(name, bad, exc) -> None:
    call = INT_ARGS[name][0] if name in INT_ARGS else NEEDS_MORE_INT[name]
    arg = name.split()[-1]
    if name == "mt19937 seed" and bad == -1:  # any int seed is valid (taken modulo 2**32)
        call(bad)
        return
    with pytest.raises(exc, match=arg):
        call(bad)


@pytest.mark.parametrize("bad, exc", [(math.inf, ValueError), (-math.inf, ValueError),
                                      (math.nan, ValueError), (np.float32("nan"), ValueError),
                                      (np.float64("inf"), ValueError), (True, TypeError),
                                      ("1.0", TypeError), (-1.0, ValueError)])
@pytest.mark.parametrize("name", sorted(FLOAT_ARGS))
def test_finite_arguments_reject_inf_nan_bools(name, bad, exc) -> None:
    call, good = FLOAT_ARGS[name]
    call(np.float32(good))  # NumPy floats are numbers too
    with pytest.raises(exc, match=name.split()[-1]):
        call(bad)


@pytest.mark.parametrize("name", sorted(CHOICE_ARGS))
def test_choices_type_error_for_non_str_value_error_for_unknown(name) -> None:
    call = CHOICE_ARGS[name]
    arg = name.split()[-1]
    with pytest.raises(TypeError, match=f"{arg} must be a str"):
        call(3)
    with pytest.raises(ValueError, match=f"{arg} must be one of"):
        call("no-such-choice")


@pytest.mark.parametrize("name", sorted(BOOL_ARGS))
def test_bool_arguments(name) -> None:
    with pytest.raises(TypeError, match=f"{name.split()[-1]} must be a bool"):
        BOOL_ARGS[name](1)
    BOOL_ARGS[name](np.bool_(True))
