"""Per-size rates: beta(s) and reduce(s) from a calibration's series, and the cost model using
them (a regime switch in the series is priced where it happens; a straight line changes
nothing)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from distlab.collectives import ALGORITHMS, build, cost
from distlab.collectives.model.calibration import exchange_schedule, fit_calibration, pattern_terms
from distlab.collectives.model.rates import SizeRates, rates_from_dict, size_rates

SIZES = [1024 * 4 ** k for k in range(7)]        # 1 KiB .. 4 MiB
H, A, B, R, G = 40e-6, 10e-6, 2e-10, 3e-6, 1e-10  # handoff, alpha, beta, relay, gamma


def _calibration(p: int, beta_of=lambda s: B, reduce_of=lambda s: 5e-6 + G * s):
    """A calibration fitted on series made exactly from the step model (beta per size)."""
    terms = pattern_terms(p, SIZES)
    series = {}
    for name, (msgs, nbytes, relay) in terms.items():
        series[name] = [H + A * m + beta_of(s) * b + R * k
                        for s, m, b, k in zip(SIZES, msgs, nbytes, relay, strict=True)]
    if p == 2:
        series["shift"] = series["exchange"]
    return fit_calibration(SIZES, series["exchange"], series["oneway"],
                           [x + 1e-5 for x in series["exchange"]],
                           [reduce_of(s) for s in SIZES], series["shift"], world_size=p)


@pytest.mark.parametrize("p", [2, 4, 5])
def test_a_straight_line_gives_the_constant_model_back(p: int) -> None:
    cal = _calibration(p)
    assert cal.beta == pytest.approx(B, rel=1e-6) and cal.alpha == pytest.approx(A, rel=1e-6)
    rates = size_rates(cal)
    assert rates is not None and rates.sizes == tuple(SIZES)
    assert np.allclose(rates.beta, B, rtol=1e-6)
    for algo in sorted(ALGORITHMS):
        s = build(algo, p, 300_001)
        plain = cost(s, cal.alpha, cal.beta, cal.gamma, 4, duplex="shared", handoff=cal.handoff,
                     relay=cal.relay)
        priced = cost(s, cal.alpha, cal.beta, cal.gamma, 4, duplex="shared",
                      handoff=cal.handoff, relay=cal.relay,
                      rates=SizeRates(rates.sizes, rates.beta, (1,), (cal.gamma,)))
        assert priced == pytest.approx(plain, rel=1e-6), algo


def test_a_jump_in_the_series_is_priced_at_its_size() -> None:
    jump = 64 * 1024  # per-byte cost triples above 64 KiB (a protocol switch)
    cal = _calibration(2, beta_of=lambda s: B if s <= jump else 3 * B)
    rates = size_rates(cal)
    above = [b for s, b in zip(rates.sizes, rates.beta, strict=True) if s > jump]
    assert np.allclose(above, 3 * B, rtol=0.05)   # each size priced from its own points
    assert cal.beta < 2.5 * B                      # the one beta averages the regimes away
    # the calibration's own exchange step is reproduced at every size, jump or not; where the
    # bytes are below the fit's scatter (one beta there), to within that scatter
    for s, measured in zip(SIZES, cal.comm_seconds, strict=True):
        step = exchange_schedule(2, s // 4)
        priced = cost(step, cal.alpha, cal.beta, cal.gamma, 4, duplex="shared",
                      handoff=cal.handoff, rates=rates)
        fixed = cal.handoff + 2 * cal.alpha
        unresolved = cal.beta * 4 * s < cal.comm_max_rel_residual * fixed
        tol = cal.comm_max_rel_residual * fixed / measured if unresolved else 0.02
        assert priced == pytest.approx(measured, rel=max(tol, 0.02)), s
    # a ring of 2 MiB messages (above the jump) is priced at 3 B per byte
    big = build("ring", 2, 2**20)
    priced = cost(big, cal.alpha, cal.beta, cal.gamma, 4, duplex="shared", handoff=cal.handoff,
                  rates=rates)
    truth = 2 * (H + A * 2 + 3 * B * 4 * 2**21) + rates.reduce_at(2**21)
    assert priced == pytest.approx(truth, rel=0.05)
    plain = cost(big, cal.alpha, cal.beta, cal.gamma, 4, duplex="shared", handoff=cal.handoff)
    assert plain < 0.85 * truth


def test_interpolation_is_linear_in_log_size_and_clamped() -> None:
    r = SizeRates((1000, 4000, 16000), (1.0, 3.0, 2.0), (1000, 100000), (1e-5, 1e-3))
    assert r.beta_at(10) == 1.0 and r.beta_at(1e9) == 2.0
    assert r.beta_at(2000) == pytest.approx(2.0)        # halfway in log between 1000 and 4000
    assert r.message_seconds(2000) == pytest.approx(4000.0)
    assert r.reduce_at(0) == 0.0 and r.reduce_at(10) == 1e-5          # below: the smallest
    assert r.reduce_at(10_000) == pytest.approx(1e-4)                # log-log halfway
    assert r.reduce_at(200_000) == pytest.approx(2e-3)               # above: per byte
    assert rates_from_dict(r.to_dict()) == r


def test_reduce_series_priced_per_message() -> None:
    cal = _calibration(4, reduce_of=lambda s: 5e-6 + (G if s < 65536 else 4 * G) * s)
    rates = size_rates(cal)
    assert rates.reduce_at(4 * 2**20) == pytest.approx(5e-6 + 4 * G * 4 * 2**20)
    assert rates.reduce_at(4096) == pytest.approx(5e-6 + G * 4096)


def test_no_series_means_no_rates() -> None:
    assert size_rates({"alpha": 1e-5, "beta": 1e-10, "gamma": 1e-10, "comm_r2": 1,
                       "comm_max_rel_residual": 0, "reduce_r2": 1,
                       "reduce_max_rel_residual": 0}) is None
    d = _calibration(2).to_dict()
    d["oneway_seconds"] = []  # an older calibration without the one-way series
    assert size_rates(d) is None


@pytest.mark.parametrize("args, match", [
    (((), (), (1,), (1.0,)), "sizes needs"),
    (((2, 1), (1.0, 1.0), (1,), (1.0,)), "increasing"),
    (((1,), (-1.0,), (1,), (1.0,)), "beta must"),
    (((1,), (1.0,), (1,), (0.0,)), "reduce_seconds must"),
    (((1,), (math.nan,), (1,), (1.0,)), "beta must"),
])
def test_bad_rates(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SizeRates(*args)


def test_size_rates_needs_a_calibration() -> None:
    with pytest.raises(TypeError, match="Calibration"):
        size_rates([1, 2, 3])
