"""FSDP's exposed all-gathers: hand-made CPU and GPU events with known overlaps, the committed
gloo FSDP2 trace judged end to end, and no section without FSDP spans."""

from __future__ import annotations

import re

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from distlab.judge.fsdp_exposure import ROOT, exposure_lines, fsdp_exposure
from distlab.judge.trace_judgement import judge_trace, judgement_json
from distlab.judge.trace_report import report_lines
from helpers.paths import RESULTS

TRACES = RESULTS / "traces"
FSDP = TRACES / "gloo_fsdp2_2ranks"
MAIN, GLOO = 1, 2


def _ev(name: str, ts: float, dur: float, tid: int = MAIN, **args) -> dict:
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "tid": tid, "args": args}


def _host_step(gather: tuple[float, float], compute: list[tuple[float, float]]) -> list[dict]:
    """One step of one unit "0": forward gather issued at 0, its gloo transfer ``gather``,
    compute ``aten::mm`` spans, forward window 100..200, backward gather at 300 (transfer
    310..330, nothing under it), backward window 340..400, reduce-scatter 400..450."""
    g0, g1 = gather
    ev = [_ev("ProfilerStep#5", 0, 1000),
          _ev("FSDP::pre_forward (0)", 0, 100), _ev("FSDP::all_gather (0)", 0, 100),
          _ev("c10d::_allgather_base_", 1, 2), _ev("gloo:all_gather", g0, g1 - g0, GLOO),
          _ev("FSDP::post_forward (0)", 200, 5),
          _ev("FSDP::pre_backward (0)", 300, 40), _ev("FSDP::all_gather (0)", 300, 40),
          _ev("c10d::_allgather_base_", 301, 2), _ev("gloo:all_gather", 310, 20, GLOO),
          _ev("FSDP::post_backward_reduce (0)", 400, 50),
          _ev("c10d::_reduce_scatter_base_", 401, 2), _ev("gloo:all_reduce", 405, 30, GLOO),
          _ev("Optimizer.step#SGD.step", 500, 10)]
    return ev + [_ev("aten::mm", a, b - a) for a, b in compute]


def test_hand_made_host_exposure() -> None:
    fx = fsdp_exposure(_host_step((10, 90), [(50, 70), (120, 180), (350, 390)]), rank=3)
    assert fx is not None and fx.rank == 3 and fx.basis == "host" and fx.steps == [5]
    (u,) = fx.units
    assert u.unit == "0"
    assert (u.forward_gather_us, u.forward_exposed_us) == (80, 60)    # 20 us under aten::mm
    assert (u.backward_gather_us, u.backward_exposed_us) == (20, 20)
    assert (u.forward_compute_us, u.backward_compute_us) == (60, 40)
    assert u.reduce_scatter_us == 30 and fx.optimizer_us == 10
    assert (fx.prefetch_forward, fx.prefetch_backward) == (0, 0)
    # one unit, no prefetch: the model waits for the whole (mean) gather in each phase
    assert u.model_forward_exposed_us == pytest.approx(50)
    assert u.model_backward_exposed_us == pytest.approx(50)
    text = "\n".join(exposure_lines({3: fx}))
    assert "rank 3: 1 units, 1 step(s), host" in text
    assert re.search(r"^\s+0\s+0\.08\s+0\.06\s+0\.05\s", text, re.M)   # unit 0's forward row
    assert max(len(line) for line in text.splitlines()) <= 100


@settings(max_examples=40, deadline=None)
@given(st.floats(2, 90), st.floats(1, 60), st.lists(st.tuples(st.floats(0, 99), st.floats(0, 40)),
                                                      max_size=5))
@example(32.0, 1.0, [(0.0, 31.458043383566444), (32.0, 1.0)])  # covered to within 4e-15 us
def test_exposed_is_the_transfer_not_under_compute(g0, glen, comp) -> None:
    spans = [(a, a + d) for a, d in comp]
    fx = fsdp_exposure(_host_step((g0, g0 + glen), spans))
    u = fx.units[0]
    # brute force on a fine grid
    grid = [g0 + (k + 0.5) * glen / 2000 for k in range(2000)]
    covered = sum(1 for t in grid if any(a <= t < b for a, b in spans)) * glen / 2000
    assert 0 <= u.forward_exposed_us <= u.forward_gather_us + 1e-9
    assert abs(u.forward_exposed_us - (glen - covered)) < glen / 200 + 1e-6


def test_hand_made_gpu_exposure_and_root_unit() -> None:
    ev = [_ev("ProfilerStep#1", 0, 500),
          _ev("FSDP::all_gather", 0, 20), _ev("cudaLaunchKernel", 5, 2, correlation=7),
          _ev("ncclDevKernel_AllGather_RING_LL", 30, 40, tid=9, stream=20, correlation=7),
          _ev("sm90_gemm", 50, 100, tid=8, stream=7, correlation=8),
          _ev("Memcpy HtoD", 30, 10, tid=8, stream=7, correlation=9)]
    fx = fsdp_exposure(ev)
    assert fx is not None and fx.basis == "gpu"
    (u,) = fx.units
    assert u.unit == ROOT and u.forward_gather_us == 40 and u.forward_exposed_us == 20


def test_committed_fsdp2_trace_judged() -> None:
    j = judge_trace(FSDP)
    assert set(j.fsdp) == {0, 1} and j.pipeline is None
    for fx in j.fsdp.values():
        assert [u.unit for u in fx.units] == ["0", "1", "2", "3"]
        assert len(fx.steps) == 3 and fx.basis == "host"
        assert (fx.prefetch_forward, fx.prefetch_backward) == (0, 1)   # FSDP2's defaults
        for u in fx.units:
            assert 100 < u.forward_gather_us < 20_000 and 100 < u.backward_gather_us < 20_000
            assert u.forward_compute_us > 500 and u.backward_compute_us > 500
            # FSDP2 on gloo/CPU waits for each gather inside the span that issues it
            assert u.exposed_us > 0.9 * u.gather_us
        # the model hides the backward gathers it prefetches behind the measured compute
        assert fx.model_exposed_us < fx.exposed_us
        assert sum(u.model_backward_exposed_us for u in fx.units) < \
            0.6 * sum(u.backward_exposed_us for u in fx.units)
    text = "\n".join(report_lines(j))
    assert "## FSDP all-gathers" in text and "## pipeline" not in text
    assert re.search(r"rank 0: 4 units, 3 step\(s\), host, prefetch fwd 0 bwd 1: "
                     r"gathers \d+\.\d\d, exposed \d+\.\d\d, model \d+\.\d\d", text)
    got = judgement_json(j, rank=1)["fsdp"]
    assert set(got) == {1} and len(got[1]["units"]) == 4


def test_no_fsdp_spans_no_section() -> None:
    assert fsdp_exposure([_ev("aten::mm", 0, 5), _ev("FSDP::all_gather_copy_out (0)", 0, 1)]) \
        is None
    assert exposure_lines({}) == []
