"""How a calibration point summarizes its rounds: the median or the mean, refitted offline from
the rounds a calibration keeps (fit_rounds, restate_calibration, round_statistic)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives.model.calibration import (
    STATISTICS,
    Calibration,
    fit_rounds,
    restate_calibration,
    round_statistic,
)
from distlab.collectives.model.noise import row_seconds
from distlab.profile.load import list_profiles, load_profile
from helpers.close import assert_close_tree
from helpers.paths import PROFILES

KEPT = [p for p in list_profiles(PROFILES)
        if all(r["calibration"].get("round_seconds") for r in load_profile(p).allreduce_runs()
               if r.get("calibration"))]


def test_three_committed_profiles_kept_their_calibration_rounds() -> None:
    assert {p.name for p in KEPT} >= {"vm-quiet-2026-11-23", "vm-1core-quiet-2026-11-23",
                                      "vm-2core-quiet-2026-11-23"}


def _runs(path):
    return [r for r in load_profile(path).allreduce_runs() if r.get("calibration")]


@pytest.mark.parametrize("path", KEPT, ids=lambda p: p.name)
def test_the_rounds_refit_give_the_stored_calibration(path) -> None:
    """Profiles made before the statistic was recorded stored medians; the ones since, the
    statistic they name (the mean)."""
    for run in _runs(path):
        stored = run["calibration"]
        c = Calibration.from_dict(stored)
        again = fit_rounds(c.sizes, c.round_seconds, statistic=c.statistic,
                           builtin_floor_bytes=c.builtin_floor_bytes, world_size=c.world_size,
                           backend=c.backend, dtype=c.dtype, method=c.method,
                           cpus_allowed=c.cpus_allowed, local_world_size=c.local_world_size)
        assert_close_tree(again.to_dict(), {**stored, "statistic": c.statistic})


@pytest.mark.parametrize("path", KEPT, ids=lambda p: p.name)
def test_restated_by_means_every_series_is_the_mean_of_its_rounds(path) -> None:
    for run in _runs(path):
        c = Calibration.from_dict(run["calibration"])
        m = restate_calibration(c, "mean")
        rounds = np.asarray(c.round_seconds)
        n = len(c.sizes)
        per_size = rounds[:, :5 * n].reshape(len(rounds), n, 5).mean(axis=0)
        assert m.statistic == "mean" and m.round_seconds == c.round_seconds
        for j, series in enumerate((m.comm_seconds, m.oneway_seconds, m.single_seconds,
                                    m.reduce_seconds, m.shift_seconds)):
            assert series == pytest.approx(per_size[:, j].tolist(), rel=1e-12)
        assert m.builtin_floor == pytest.approx(rounds[:, -2].mean(), rel=1e-12)
        assert m.builtin_call == pytest.approx(rounds[:, -1].mean(), rel=1e-12)
        assert restate_calibration(m, "mean") is m
        median = restate_calibration(m, "median")
        assert median.statistic == "median"
        assert median.comm_seconds == pytest.approx(np.median(
            rounds[:, :5 * n].reshape(len(rounds), n, 5), axis=0)[:, 0].tolist(), rel=1e-12)
        assert_close_tree(restate_calibration(median, "mean").to_dict(), m.to_dict())


def test_a_calibration_without_rounds_cannot_be_restated() -> None:
    old = _runs(PROFILES / "vm-2026-11-23")[0]["calibration"]
    assert "round_seconds" not in old
    with pytest.raises(ValueError, match="kept none"):
        restate_calibration(old, "mean")
    assert restate_calibration(old, "median").alpha == old["alpha"]  # already medians
    with pytest.raises(ValueError, match="statistic"):
        restate_calibration(old, "mode")


def test_fit_rounds_rejects_rounds_of_the_wrong_shape() -> None:
    with pytest.raises(ValueError, match="12 values"):
        fit_rounds([1024, 4096], [[1.0] * 11], world_size=2)
    with pytest.raises(ValueError, match="12 values"):
        fit_rounds([1024, 4096], [], world_size=2)
    with pytest.raises(ValueError, match="statistic"):
        fit_rounds([1024, 4096], [[1e-3] * 12], world_size=2, statistic="mode")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=40), st.sampled_from(STATISTICS))
def test_round_statistic_is_numpys_and_lies_within_the_rounds(xs, statistic) -> None:
    value = round_statistic(xs, statistic)
    assert value == pytest.approx(np.median(xs) if statistic == "median" else np.mean(xs))
    assert min(xs) * (1 - 1e-12) <= value <= max(xs) * (1 + 1e-12)
    row = {"time_us": 1.0, "seconds_per_rank": [xs, [0.0] * len(xs)]}
    assert row_seconds(row, statistic) == pytest.approx(value)


def test_a_two_regime_row_mean_follows_the_share_of_slow_rounds() -> None:
    """10 fast and 10 slow rounds: the median is anywhere between the regimes; one round more
    or less in the slow one moves it by the whole gap, the mean by a twentieth of it."""
    fast, slow = [1e-3] * 10, [3e-3] * 10
    more_slow = fast[:-1] + slow + [3e-3]
    assert round_statistic(fast[:-1] + slow + [1e-3], "median") == pytest.approx(2e-3)
    assert round_statistic(more_slow, "median") == pytest.approx(3e-3)
    assert round_statistic(more_slow, "mean") - round_statistic(fast + slow, "mean") \
        == pytest.approx(1e-4)


def test_row_seconds_of_a_row_without_rounds() -> None:
    assert row_seconds({"time_us": 250.0}, "median") == pytest.approx(250e-6)
    with pytest.raises(ValueError, match="rounds"):
        row_seconds({"time_us": 250.0}, "mean")
