"""distlab.bench.ddp_overhead (structure and arithmetic; never wall-clock values) and
distlab.ddp.memory (bucket views save the separate gradient bytes)."""

from __future__ import annotations

import math

import pytest

from distlab.bench.ddp_overhead import OverheadCase, measure_overhead, summarize_overhead
from distlab.ddp.memory import measure_gradient_memory
from helpers.leaks import no_leaks

TINY = OverheadCase("tiny", layers=2, width=8, batch=2, bucket_cap_mb=25.0)
VARIANTS = ("local", "torch", "distlab", "torch-view", "distlab-view")


def test_measure_overhead_live_ranks_structure():
    with no_leaks():
        rows = measure_overhead([TINY, OverheadCase("tiny2", 3, 8, 2, 0.0001)], steps=2,
                                rounds=2, variants=VARIANTS, timeout=300)
    assert [r.case for r in rows] == ["tiny", "tiny2"]
    assert [r.params for r in rows] == [4, 6]
    for r in rows:
        assert set(r.step_s) == set(VARIANTS) and set(r.us_per_param) == set(VARIANTS) - {"local"}
        assert all(v > 0 and math.isfinite(v) for v in r.step_s.values())
        assert set(r.cpu_s) == set(VARIANTS) and all(v > 0 for v in r.cpu_s.values())
        assert set(r.cpu_us_per_param) == set(VARIANTS) - {"local"}
        assert all(lo <= r.step_s[v] <= hi for v, (lo, hi) in r.spread_s.items())
        assert r.rate_spread[0] <= r.rate_vs_torch <= r.rate_spread[1]
        assert r.rounds == 2 and all(len(s) == 2 for s in r.per_round_s.values())
        assert r.excess_us_per_param == pytest.approx(
            (r.step_s["distlab"] - r.step_s["torch"]) / r.params * 1e6)
        assert r.rate_vs_torch_view is not None and r.rate_vs_torch_view > 0
        assert r.wrong == 0  # distlab's trained parameters equal torch DDP's on every rank
        assert set(r.to_dict()) >= {"case", "rate_vs_torch", "us_per_param"}


def _result(rank, seconds, wrong=0, params=4):
    cpu = {v: [t / 2 for t in s] for v, s in seconds.items()}
    return {"rank": rank, "cases": [{"case": "tiny", "params": params, "seconds": seconds,
                                     "cpu": cpu, "wrong": wrong}]}


def test_summarize_takes_the_slowest_rank_per_round_and_pairs_rounds():
    r0 = _result(0, {"local": [1.0, 1.0, 1.0], "torch": [2.0, 4.0, 2.0],
                     "distlab": [2.0, 2.0, 4.0]})
    r1 = _result(1, {"local": [1.0, 3.0, 1.0], "torch": [3.0, 1.0, 2.0],
                     "distlab": [1.0, 2.0, 2.0]}, wrong=1)
    (row,) = summarize_overhead([r0, r1], (TINY,))
    assert row.per_round_s == {"local": [1.0, 3.0, 1.0], "torch": [3.0, 4.0, 2.0],
                               "distlab": [2.0, 2.0, 4.0]}
    assert row.step_s == {"local": 1.0, "torch": 3.0, "distlab": 2.0}
    assert row.rate_vs_torch == 1.5 and row.rate_spread == (0.5, 2.0)  # 3/2, 4/2, 2/4
    assert row.us_per_param == {"torch": 0.5e6, "distlab": 0.25e6}
    assert row.excess_us_per_param == -0.25e6 and row.wrong == 1
    assert row.cpu_s == {"local": 0.5, "torch": 1.5, "distlab": 1.0}
    assert row.cpu_us_per_param == {"torch": 0.25e6, "distlab": 0.125e6}
    with pytest.raises(RuntimeError, match="disagree"):
        summarize_overhead([r0, _result(1, r1["cases"][0]["seconds"], params=5)], (TINY,))


@pytest.mark.parametrize("kw,err,match", [
    ({"variants": ("local", "torch")}, ValueError, "variants"),
    ({"variants": ("local", "torch", "distlab", "mine")}, ValueError, "variants"),
    ({"rounds": 1}, ValueError, "rounds"),
    ({"world_size": 0}, ValueError, "world_size"),
    ({"steps": 0}, ValueError, "steps"),
    ({"cases": []}, TypeError, "cases"),
])
def test_measure_overhead_argument_checks(kw, err, match):
    with pytest.raises(err, match=match):
        measure_overhead(**{"cases": [TINY], **kw})


def test_overhead_case_checks():
    with pytest.raises(ValueError, match="layers"):
        OverheadCase("x", 0, 8, 2)
    with pytest.raises(ValueError, match="bucket_cap_mb"):
        OverheadCase("x", 1, 8, 2, 0.0)


def test_bucket_views_save_the_separate_gradient_bytes():
    with no_leaks():
        m = measure_gradient_memory(layers=2, width=64, steps=2, timeout=180)
    copy, view = m["copy"], m["view"]
    p = 2 * (64 * 64 + 64) * 4
    assert copy.param_bytes == view.param_bytes == p
    assert copy.bucket_bytes == view.bucket_bytes == p
    assert copy.separate_grad_bytes == p and copy.grads_in_buckets == 0
    assert view.separate_grad_bytes == 0 and view.grads_in_buckets == view.params == 4
    assert m["saved_bytes"] == p == copy.total_bytes - view.total_bytes


def test_gradient_memory_needs_a_distlab_ddp():
    import torch

    from distlab.ddp.memory import gradient_memory
    with pytest.raises(TypeError, match="distlab.ddp.DDP"):
        gradient_memory(torch.nn.Linear(2, 2))
