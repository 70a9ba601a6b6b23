"""Copy model: the fit recovers known latency/bandwidth; chain and overlap bounds."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.transfers.copy_model import chain_bound, fit_copy_times, overlap_bounds


@settings(max_examples=60, deadline=None)
@given(latency=st.floats(0.0, 1e-4), gbps=st.floats(0.1, 500.0),
       noise=st.lists(st.floats(-0.01, 0.01), min_size=8, max_size=8))
def test_fit_recovers_latency_and_bandwidth(latency: float, gbps: float,
                                            noise: list[float]) -> None:
    sizes = [4096 * 4 ** k for k in range(8)]
    times = [(latency + n / (gbps * 1e9)) * (1 + e) for n, e in zip(sizes, noise, strict=True)]
    fit = fit_copy_times(sizes, times)
    assert fit.bandwidth_Bps / 1e9 == pytest.approx(gbps, rel=0.05)
    for n, t in zip(sizes, times, strict=True):
        assert fit.seconds(n) == pytest.approx(t, rel=0.05)
    assert fit.r2 > 0.99


def test_fit_exact_line_and_errors() -> None:
    fit = fit_copy_times([1e3, 1e6], [1e-6 + 1e3 / 1e10, 1e-6 + 1e6 / 1e10])
    assert fit.latency_s == pytest.approx(1e-6) and fit.bandwidth_Bps == pytest.approx(1e10)
    assert fit.gbps(1e6) == pytest.approx(1e6 / (1e-6 + 1e-4) / 1e9)
    with pytest.raises(ValueError):
        fit_copy_times([1, 1], [1.0, 2.0])
    with pytest.raises(ValueError):
        fit_copy_times([1, 2], [2.0, 1.0])      # time falls with size
    with pytest.raises(ValueError):
        fit_copy_times([1, 2], [float("nan"), 1.0])


def test_chain_and_overlap_bounds() -> None:
    assert chain_bound({"disk": 1.5, "h2h": 14.0, "h2d": 25.0}) == ("disk", 1.5)
    b = overlap_bounds(2.0, 3.0, 10)
    assert b["sequential_s"] == 50.0 and b["overlapped_s"] == 2 + 3 + 9 * 3
    assert overlap_bounds(1.0, 1.0, 1) == {"sequential_s": 2.0, "overlapped_s": 2.0}
    with pytest.raises(ValueError):
        overlap_bounds(-1, 1, 1)
