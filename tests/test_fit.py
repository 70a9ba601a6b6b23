"""The one fit (distlab.fit): exact recovery, non-negative terms by drop-and-refit, quality."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.fit import fit_line, fit_terms


def test_fit_line_recovers_a_line_and_reports_quality() -> None:
    xs = [1e3, 1e4, 1e5, 1e6, 1e7]
    f = fit_line(xs, [5e-5 + 2e-10 * x for x in xs])
    assert f.intercept_s == pytest.approx(5e-5) and f.slope_s_per_unit == pytest.approx(2e-10)
    assert f.r2 == pytest.approx(1.0) and f.max_rel_residual < 1e-9
    assert f.seconds(2e6) == pytest.approx(5e-5 + 4e-4)
    clean = [5e-5 + 2e-10 * x for x in xs]
    noisy = [t * k for t, k in zip(clean, [1.3, 0.8, 1.1, 0.9, 1.05], strict=True)]
    assert fit_line(xs, noisy).max_rel_residual > 0.1


def test_negative_terms_are_dropped_and_the_rest_refitted() -> None:
    # y = -1 + 2x: the unclipped intercept is -1, so it is 0 and the slope is refitted through
    # the origin, weighted by 1/y^2: sum(x y w^2) / sum(x^2 w^2)
    xs, ys = [1.0, 2.0, 3.0], [1.0, 3.0, 5.0]
    f = fit_line(xs, ys)
    w2 = [1 / y ** 2 for y in ys]
    assert f.intercept_s == 0.0
    xy = sum(x * y * w for x, y, w in zip(xs, ys, w2, strict=True))
    xx = sum(x * x * w for x, w in zip(xs, w2, strict=True))
    assert f.slope_s_per_unit == pytest.approx(xy / xx)
    f = fit_line(xs, [5.0, 3.0, 1.0])  # falling: slope dropped, intercept = weighted mean
    assert f.slope_s_per_unit == 0.0
    assert f.intercept_s == pytest.approx(sum(1 / y for y in (5, 3, 1)) /
                                          sum(1 / y ** 2 for y in (5, 3, 1)))


@settings(max_examples=80, deadline=None)
@given(coef=st.lists(st.floats(0.0, 1e-3), min_size=3, max_size=3),
       seed=st.integers(0, 2 ** 16))
def test_fit_terms_recovers_non_negative_coefficients(coef: list[float], seed: int) -> None:
    rng = np.random.default_rng(seed)
    cols = {"a": np.ones(12), "b": rng.uniform(1, 100, 12), "c": rng.uniform(0, 1e4, 12)}
    y = 1e-6 + sum(k * cols[n] for k, n in zip(coef, cols, strict=True))
    cols["offset"] = np.ones(12)  # absorbs the 1e-6 that keeps every time > 0
    f = fit_terms(cols, y)
    assert all(v >= 0 for v in f.coef.values())
    pred = sum(f.coef[n] * cols[n] for n in cols)
    assert np.allclose(pred, y, rtol=1e-6)
    assert list(f.coef) == ["a", "b", "c", "offset"]


def test_a_column_of_zeros_gets_zero() -> None:
    f = fit_terms({"base": [1, 1, 1], "never": [0, 0, 0], "per": [1, 2, 3]}, [2.0, 3.0, 4.0])
    assert f.coef == pytest.approx({"base": 1.0, "never": 0.0, "per": 1.0})


@pytest.mark.parametrize("call, word", [
    (lambda: fit_line([1.0, 2.0], [1.0, 0.0]), "> 0"),
    (lambda: fit_line([1.0, 1.0], [1.0, 2.0]), "distinct"),
    (lambda: fit_line([1.0], [1.0]), "distinct"),
    (lambda: fit_terms({}, [1.0]), "column"),
    (lambda: fit_terms({"a": [1, 2]}, [1.0]), "length"),
    (lambda: fit_terms({"a": [1]}, [float("nan")]), "finite"),
])
def test_bad_input_raises(call, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        call()


def test_known_part_is_subtracted_and_points_keep_their_weight() -> None:
    x = np.array([1.0, 2.0, 4.0, 8.0])
    known = np.array([5.0, 5.0, 6.0, 6.0])
    f = fit_terms({"slope": x}, known + 0.5 * x, known=known)
    assert f.coef["slope"] == pytest.approx(0.5)
    assert f.r2 == pytest.approx(1.0) and f.max_rel_residual == pytest.approx(0.0, abs=1e-12)
    # the known part already exceeds the measured time: the non-negative slope is 0
    assert fit_terms({"slope": x}, known * 0.5, known=known).coef["slope"] == 0.0
    with pytest.raises(ValueError, match="known must be finite"):
        fit_terms({"slope": x}, known, known=[1.0, 2.0])
