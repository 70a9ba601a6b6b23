"""NCCL's all-gather, reduce-scatter and broadcast on one node: the candidates NCCL prices, its
choice, and the run's terms."""

from __future__ import annotations

import pytest

from distlab.evidence.nccl import fit_execution
from distlab.evidence.nccl.judged import choice_agreement
from distlab.nccl.boxes import gpu_box
from distlab.nccl.execution import ExecutionConstants, nccl_execution
from distlab.nccl.family import _candidates, nccl_collective

ZERO = ExecutionConstants(0.0, 0.0, 0.0, 0.0)


def test_all_gather_candidates_are_ring_and_nvls_with_nccls_terms() -> None:
    c = {(a, p): (lat, bw) for a, p, lat, bw in _candidates(gpu_box("h100_sxm8"), 8,
                                                             "all_gather")}
    assert set(c) == {("ring", "LL"), ("ring", "LL128"), ("ring", "Simple"), ("nvls", "Simple")}
    lat, bw = c[("ring", "Simple")]
    assert lat == pytest.approx(8.4 + 7 * 3.4)           # base + (n-1) NVLink hops
    assert bw == pytest.approx(12 * 30.0 * 8 / 7)        # nCh * bwIntra * nRanks/nsteps
    lat, bw = c[("nvls", "Simple")]
    assert lat == 25.0
    assert bw == pytest.approx(8 * 40.0 * 0.85 * 7 / 8 * 7 / 8)  # no bus-to-alg conversion


def test_broadcast_is_ring_only_with_one_hop_of_latency() -> None:
    c = _candidates(gpu_box("a100_sxm8"), 8, "broadcast")
    assert {a for a, *_ in c} == {"ring"}
    simple = next(x for x in c if x[1] == "Simple")
    assert simple[2] == pytest.approx(8.4 + 3.4) and simple[3] == pytest.approx(240.0)


def test_pcie_has_no_ll128_and_no_nvls() -> None:
    c = _candidates(gpu_box("pcie5_8"), 8, "reduce_scatter")
    assert {(a, p) for a, p, *_ in c} == {("ring", "LL"), ("ring", "Simple")}


@pytest.mark.parametrize("collective", ["all_gather", "reduce_scatter", "broadcast"])
def test_large_sizes_run_at_the_estimate_and_the_choice_is_the_cheapest(collective) -> None:
    box = gpu_box("h100_sxm8")
    runs = nccl_collective(box, 8, [1 << 16, 1 << 33], collective, constants=ZERO)
    cands = _candidates(box, 8, collective)
    for r in runs:
        best = min(lat + r.nbytes / (1e3 * bw) for _, _, lat, bw in cands)
        assert r.estimate_us == pytest.approx(best)
    assert runs[-1].seconds * 1e6 == pytest.approx(runs[-1].estimate_us, rel=0.01)
    n = 8
    factor = (n - 1) / n if collective != "broadcast" else 1.0
    assert runs[-1].busbw_gbps == pytest.approx((1 << 33) / runs[-1].seconds / 1e9 * factor)


def test_bad_collective_and_world_size() -> None:
    with pytest.raises(ValueError, match="collective"):
        nccl_collective("h100_sxm8", 8, [1 << 20], "all_to_all")
    with pytest.raises(ValueError, match="world_size"):
        nccl_collective("h100_sxm8", 1, [1 << 20], "all_gather")


def test_published_points_of_other_collectives_are_what_their_quotes_say() -> None:
    points = fit_execution.collective_points()
    assert sorted(p["collective"] for p in points) == ["all_gather", "allreduce", "allreduce",
                                                      "reduce_scatter"]
    for p in points:
        assert f"{p['busbw_gbps']:.1f}GBps" in p["quote"]
        assert p["source"].startswith("https://github.com/")
        assert len(p["source"].split("/")[6]) == 40                     # a pinned commit
        assert "-b 16G -e 16G -g 8" in p["command"] and p["nbytes"] == 16 << 30
        assert p["harness"] == "nccl-tests"                       # -g 8: one process, 8 GPUs


def test_published_seconds_use_each_collectives_busbw_factor() -> None:
    base = {"world_size": 8, "nbytes": 8 << 30, "busbw_gbps": 350.0, "time_us": None}
    t = {c: fit_execution.published_seconds({**base, "collective": c})
         for c in ("all_gather", "reduce_scatter", "allreduce", "broadcast")}
    assert t["all_gather"] == t["reduce_scatter"] == pytest.approx((8 << 30) * 7 / 8 / 350e9)
    assert t["allreduce"] == pytest.approx(2 * t["all_gather"])
    assert t["broadcast"] == pytest.approx((8 << 30) / 350e9)
    assert fit_execution.published_seconds(base) == t["allreduce"]   # no collective: allreduce


def test_other_collectives_are_judged_by_the_model_that_prices_them() -> None:
    c = fit_execution.shipped_constants()
    points = fit_execution.collective_points()
    for p, j in zip(points, fit_execution.judge_collectives(points, c), strict=True):
        if p["collective"] == "allreduce":
            e = nccl_execution(p["preset"], 8, [p["nbytes"]], harness="nccl-tests",
                               constants=c, algorithms=p["algorithms"])[0]
        else:
            e = nccl_collective(p["preset"], 8, [p["nbytes"]], p["collective"],
                                harness="nccl-tests", constants=c)[0]
        assert j.execution == e
        assert e.algorithm == p["published_algorithm"]          # the algorithm the source says ran
        pub = fit_execution.published_seconds(p)
        assert j.error_pct == pytest.approx(100 * (pub - e.seconds) / e.seconds)  # + : slower
        assert abs(j.error_pct) < 5      # 16 GiB on 8x H200: 0.5% to 2.0% today


def test_nvls_switched_off_leaves_ring_at_large_sizes() -> None:
    on = nccl_execution("h100_sxm8", 8, [16 << 30], harness="nccl-tests")[0]
    off = nccl_execution("h100_sxm8", 8, [16 << 30], harness="nccl-tests",
                         algorithms=["ring", "tree"])[0]
    assert (on.algorithm, off.algorithm) == ("nvls", "ring")
    assert off.seconds > on.seconds * 1.2


def test_the_model_makes_the_choice_a_published_nccl_log_reports() -> None:
    (stated,) = fit_execution.published_choices()
    assert stated["nccl_version"] == "2.27.7" and "Algo RING proto LL" in stated["quote"]
    agreement = choice_agreement(stated)
    assert [a[0] for a in agreement] == ["ring/LL", "nvls/Simple"]
    assert [a[1] for a in agreement] == ["32 KiB to 1 MiB", "2 MiB to 16 GiB"]
    assert all(made == said for said, _, made in agreement)
