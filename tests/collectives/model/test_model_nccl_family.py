"""NCCL's all-gather, reduce-scatter and broadcast on one node: the candidates NCCL prices, its
choice, and the run's terms."""

from __future__ import annotations

import pytest

from distlab.collectives.model.nccl.boxes import gpu_box
from distlab.collectives.model.nccl.execution import ExecutionConstants
from distlab.collectives.model.nccl.family import _candidates, nccl_collective

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
