"""judge.verdict: counts and ranges over judged runs (target met, value ranges, rounds kept,
how far two measurements of the same sweep differ)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from distlab.judge.refit import RefitRun, meets_target, refit_profile
from distlab.judge.refit_summary import summary_rows
from distlab.judge.verdict import (
    JUDGED_COLUMNS,
    PROFILE_COLUMNS,
    profile_facts,
    rerun_difference,
    rounds_kept,
    target_met,
    value_range,
)
from distlab.report.table import format_table
from helpers.paths import PROFILES

QUIET, RERUN = PROFILES / "vm-quiet-2026-11-23", PROFILES / "vm-quiet-rerun-2026-11-23"
OLD = PROFILES / "vm-2026-11-23"


def _run(rows: list[dict], world_size: int = 2, name: str = "a") -> RefitRun:
    return RefitRun(name, name, "gloo", world_size, rows)


def _row(algorithm: str, nbytes: int, rounds: list[float], ranks: int = 2) -> dict:
    # the slowest rank holds ``rounds``; the others are a little faster every round
    return {"algorithm": algorithm, "nbytes": nbytes, "count": nbytes // 4,
            "time_us": float(np.median(rounds)) * 1e6,
            "seconds_per_rank": [list(rounds)] + [[0.9 * s for s in rounds]] * (ranks - 1)}


def test_target_met_counts_single_runs_of_a_world_size_and_statistic() -> None:
    summary = [
        {"profile": "p", "world_size": 2, "statistic": "mean", "target": "met"},
        {"profile": "p", "world_size": 4, "statistic": "mean", "target": "missed"},
        {"profile": "p", "world_size": "all", "statistic": "mean", "target": "met"},
        {"profile": "q", "world_size": 2, "statistic": "median", "target": "missed"},
        {"profile": "q", "world_size": 4, "statistic": "median", "target": "met"},
        {"profile": "all", "world_size": "all", "statistic": "mean,median", "target": "met"},
    ]
    assert target_met(summary) == (2, 4)
    assert target_met(summary, world_size=2) == (1, 2)
    assert target_met(summary, world_size=4, statistic="median") == (1, 1)
    assert target_met(summary, statistic="mean") == (1, 2)
    assert target_met(summary, world_size=8) == (0, 0)
    with pytest.raises(ValueError, match="statistic"):
        target_met(summary, statistic="mode")


def test_target_met_agrees_with_the_summary_of_committed_profiles() -> None:
    runs = refit_profile(QUIET) + refit_profile(OLD)
    summary = summary_rows(runs)
    met, n = target_met(summary, world_size=4)
    assert n == 2
    assert met == sum(meets_target(run.stats()) for run in runs if run.world_size == 4)
    assert target_met(summary, statistic="mean")[1] == 2     # the quiet profile kept its rounds
    assert target_met(summary, statistic="median")[1] == 2   # the older one only medians


def test_value_range_selects_by_algorithm_and_size_and_skips_missing_values() -> None:
    rows = [{"algorithm": "ring", "nbytes": 1024, "error_pct": 50.0},
            {"algorithm": "ring", "nbytes": 65536, "error_pct": -10.0},
            {"algorithm": "ring", "nbytes": 1 << 20, "error_pct": 20.0},
            {"algorithm": "tree", "nbytes": 65536, "error_pct": 90.0},
            {"algorithm": "tree", "nbytes": 1 << 20, "error_pct": None},
            {"algorithm": "tree", "nbytes": 1 << 22, "error_pct": math.nan}]
    assert value_range(rows, "error_pct") == (-10.0, 90.0)
    assert value_range(rows, "error_pct", algorithms=["ring"]) == (-10.0, 50.0)
    assert value_range(rows, "error_pct", algorithms=["ring"], min_bytes=65536) == (-10.0, 20.0)
    assert value_range(rows, "error_pct", max_bytes=65536) == (-10.0, 90.0)
    assert value_range(rows, "error_pct", algorithms=["tree"]) == (90.0, 90.0)
    with pytest.raises(ValueError, match="no row"):
        value_range(rows, "error_pct", algorithms=["tree"], min_bytes=1 << 20)
    # rows without algorithm/nbytes (a summary's) are fine when no such filter is asked for
    assert value_range([{"median": 3.0}, {"median": 1.5}], "median") == (1.5, 3.0)


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=30))
def test_value_range_is_the_min_and_max_of_the_values(values: list[float]) -> None:
    rows = [{"algorithm": "ring", "nbytes": 4 * i, "v": v} for i, v in enumerate(values)]
    assert value_range(rows, "v") == (min(values), max(values))


def test_rounds_kept_is_the_fewest_rounds_of_a_row_or_none() -> None:
    assert rounds_kept(_run([_row("ring", 4096, [1e-3] * 20),
                             _row("tree", 4096, [1e-3] * 12)])) == 12
    assert rounds_kept(_run([_row("ring", 4096, [1e-3] * 20),
                             {"algorithm": "tree", "nbytes": 4096, "count": 1024,
                              "time_us": 1000.0}])) is None
    assert rounds_kept(_run([])) is None
    assert {rounds_kept(run) for run in refit_profile(QUIET)} == {20}
    assert {rounds_kept(run) for run in refit_profile(OLD)} == {20}


def test_rerun_difference_of_two_runs_pairs_rows_by_algorithm_and_size() -> None:
    first = _run([_row("ring", 1 << 16, [1.0, 1.0, 1.0, 3.0]),
                  _row("tree", 1 << 16, [2.0, 2.0, 2.0, 2.0]),
                  _row("ring", 1024, [1.0] * 4)])
    second = _run([_row("tree", 1 << 16, [3.0, 3.0, 3.0, 3.0]),
                   _row("ring", 1 << 16, [1.0, 1.0, 3.0, 3.0]),
                   _row("ring", 1024, [5.0] * 4)], name="b")
    mean = rerun_difference(first, second, "mean", algorithms=None)
    # ring: mean 1.5 -> 2.0 (+33.3%), tree 2 -> 3 (+50%); the 1 KiB row is below min_bytes
    assert mean.n == 2
    assert mean.max == pytest.approx(50.0, rel=1e-12)
    assert mean.median == pytest.approx((100 / 3 + 50.0) / 2, rel=1e-12)
    median = rerun_difference(first, second, "median", algorithms=None)
    # ring: median 1.0 -> 2.0 (+100%), tree +50%
    assert median.max == pytest.approx(100.0, rel=1e-12)
    assert rerun_difference(first, second, "mean", algorithms=["tree"]).n == 1
    assert rerun_difference(first, first, "mean", algorithms=None).max == 0.0


def test_rerun_difference_refuses_runs_that_cannot_be_compared() -> None:
    a = _run([_row("ring", 1 << 16, [1.0] * 4)])
    with pytest.raises(ValueError, match="world size"):
        rerun_difference(a, _run([_row("ring", 1 << 16, [1.0] * 4, ranks=4)], world_size=4))
    with pytest.raises(ValueError, match="no row"):
        rerun_difference(a, _run([_row("tree", 1 << 16, [1.0] * 4)]), algorithms=None)
    with pytest.raises(ValueError, match="statistic"):
        rerun_difference(a, a, "mode")


def test_two_measurements_of_the_quiet_vm_differ_less_by_means_than_by_medians() -> None:
    for first, second in zip(refit_profile(QUIET), refit_profile(RERUN), strict=True):
        by_mean = rerun_difference(first, second, "mean")
        by_median = rerun_difference(first, second, "median")
        assert by_mean.n == by_median.n == 30   # 6 sizes >= 64 KiB x 5 judged algorithms
        assert by_mean.p90 < by_median.p90


def test_profile_facts_say_what_each_judgement_rests_on() -> None:
    facts = profile_facts([QUIET, OLD, PROFILES / "vm-quiet-80rounds-2026-11-23"])
    assert [f["profile"] for f in facts] == ["vm-quiet-2026-11-23", "vm-2026-11-23",
                                             "vm-quiet-80rounds-2026-11-23"]
    assert [f["statistic"] for f in facts] == ["mean", "median", "mean"]
    assert [f["rounds"] for f in facts] == [20, 20, 80]
    assert [f["world_sizes"] for f in facts] == ["2,4"] * 3
    assert all(f["cpus"] == 2 for f in facts)
    assert facts[0]["written_at"] == "2026-11-23 17:40"
    assert all(f["collectives_seconds"] > 0 for f in facts)
    lines = format_table(facts, PROFILE_COLUMNS).splitlines()
    assert len(lines) == 4 and "judged by" in lines[0]
    with pytest.raises(ValueError):
        profile_facts([PROFILES])          # the folder of profiles is not a profile


def test_judged_columns_show_this_model_only() -> None:
    keys = [c.key for c in JUDGED_COLUMNS]
    assert not any(k.startswith("before_") for k in keys)
    assert {"after_n", "after_median", "after_p90", "target", "noise_median"} <= set(keys)
    header = format_table(summary_rows(refit_profile(QUIET)), JUDGED_COLUMNS).splitlines()[0]
    assert "after" not in header and "before" not in header and " n " in header
