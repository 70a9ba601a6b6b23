"""The bootstrap interval of a row's median round, and what refit reports from it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives.model.noise import RowNoise, bootstrap_interval, row_noise, slowest_rounds
from distlab.judge.refit import RefitRun, refit_rows
from distlab.judge.refit_summary import summary_rows


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=40), st.integers(0, 2**31))
def test_interval_holds_the_median_and_lies_within_the_samples(xs: list[float],
                                                               seed: int) -> None:
    low, high = bootstrap_interval(xs, seed=seed, resamples=300)
    assert min(xs) <= low <= high <= max(xs)
    med = float(np.median(xs))
    assert low <= med * (1 + 1e-12) and high >= med * (1 - 1e-12)
    assert bootstrap_interval(xs, seed=seed, resamples=300) == (low, high)  # reproducible


def test_identical_rounds_have_no_noise_and_two_regimes_much() -> None:
    steady = RowNoise(1.0, *bootstrap_interval([1.0] * 20))
    assert steady.noise_pct == 0.0 and steady.holds(1.0) and not steady.holds(1.01)
    # half the rounds one scheduler tick late: the median could land in either regime
    rng = np.random.default_rng(1)
    mixed = np.where(rng.random(20) < 0.5, 0.5e-3, 4.5e-3)
    noise = RowNoise(float(np.median(mixed)), *bootstrap_interval(mixed))
    assert noise.noise_pct > 100.0
    # the same regimes, rarely slow: the median is the fast regime, known tightly
    rare = np.r_[np.full(18, 0.5e-3) + rng.random(18) * 1e-5, [4.5e-3, 4.4e-3]]
    assert RowNoise(float(np.median(rare)), *bootstrap_interval(rare)).noise_pct < 3.0


def test_more_rounds_narrow_the_interval() -> None:
    rng = np.random.default_rng(2)
    widths = []
    for n in (20, 80, 320):
        x = rng.lognormal(0.0, 0.3, n)
        low, high = bootstrap_interval(x)
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]


def test_slowest_rounds_and_rows_without_rounds() -> None:
    row = {"seconds_per_rank": [[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]]}
    assert slowest_rounds(row) == [3.0, 5.0, 2.5]
    n = row_noise(row)
    assert n is not None and n.value_s == 3.0
    assert slowest_rounds({}) is None and row_noise({"seconds_per_rank": []}) is None
    with pytest.raises(ValueError, match="seconds_per_rank"):
        slowest_rounds({"seconds_per_rank": [1.0, 2.0]})


@pytest.mark.parametrize("bad, match", [([], "non-empty"), ([1.0, float("nan")], "finite"),
                                        ([[1.0], [2.0]], "non-empty")])
def test_bad_samples(bad: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        bootstrap_interval(bad)


@pytest.mark.parametrize("conf", [0.0, 1.0, -0.5, 2.0])
def test_bad_confidence(conf: float) -> None:
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_interval([1.0, 2.0], confidence=conf)


class _Fixed:
    """A call model that predicts a fixed time (seconds) for every row."""

    def __init__(self, seconds: float) -> None:
        self.s = seconds

    def seconds(self, *args: object, **kwargs: object) -> float:
        return self.s


def test_refit_marks_rows_inside_their_noise_and_counts_them() -> None:
    rounds = [[1e-3, 1.1e-3, 0.9e-3, 1.05e-3, 0.95e-3] * 4, [0.5e-3] * 20]
    rows = [{"algorithm": "ring", "nbytes": 1 << 20, "count": 1 << 18, "time_us": 1000.0,
             "options": {}, "seconds_per_rank": rounds},
            {"algorithm": "ring", "nbytes": 1 << 22, "count": 1 << 20, "time_us": 1000.0,
             "options": {}}]
    inside = refit_rows(rows, 2, _Fixed(1.0e-3))
    assert inside[0]["within_noise"] is True and 0 < inside[0]["noise_pct"] < 10
    assert inside[1]["within_noise"] is None and inside[1]["noise_pct"] is None
    outside = refit_rows(rows, 2, _Fixed(2.0e-3))
    assert outside[0]["within_noise"] is False

    (row,) = summary_rows([RefitRun("p", "p", "gloo", 2, outside)])
    assert row["within_noise"] == "0/1" and row["noise_median"] == outside[0]["noise_pct"]
