"""judge.tables: the model's judgement as text (error by size, spread, travel, windows) and the
``travel`` command."""

from __future__ import annotations

import numpy as np
import pytest

from distlab.judge.__main__ import main as judge_main
from distlab.judge.refit import refit_profile, refit_runs
from distlab.judge.tables import (
    SPREAD_COLUMNS,
    TRAVEL_COLUMNS,
    error_by_size_table,
    run_line,
    spread_rows,
    spread_table,
    travel_rows,
    travel_table,
)
from distlab.report.table import format_table
from helpers.figure_guard import MAX_COLUMNS
from helpers.paths import MEASURED_PROFILES, PROFILES

VM, QUICK = PROFILES / "vm-2026-11-23", PROFILES / "vm-2026-11-23-quick"


def test_tables_name_profiles_and_every_judged_row() -> None:
    run = refit_profile(VM)[0]
    text = error_by_size_table(run)
    assert text.startswith("# vm-2026-11-23, gloo ws 2, own calibration") and "builtin" in text
    assert len(text.splitlines()) == 3 + len({r["nbytes"] for r in run.rows})
    spread = spread_table(run)
    assert len(spread.splitlines()) == 3 + 6 * 5  # 64 KiB..64 MiB x 5 judged algorithms
    travel = travel_table([VM, QUICK])
    lines = travel.splitlines()
    # VM ws2, ws4 by both calibrations where the world size exists; the quick one only ws2
    assert len(lines) == 1 + 2 + 1 + 1 + 1
    assert any("vm-2026-11-23-quick" in ln and "vm-2026-11-23 " in ln for ln in lines)


def test_refit_runs_needs_a_profile() -> None:
    with pytest.raises(ValueError, match="at least one"):
        refit_runs([])


def test_travel_command_prints_the_table_and_rejects_a_folder_without_profile(capsys,
                                                                           tmp_path) -> None:
    assert judge_main(["travel", str(VM), str(QUICK)]) == 0
    out = capsys.readouterr().out
    assert travel_table([VM, QUICK]) in out
    assert judge_main(["travel", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "must be a folder holding profile.json" in err[-1]


def test_travel_rows_are_the_travel_table_with_each_profiles_cpus() -> None:
    one_core = PROFILES / "vm-1core-2026-11-23"
    rows = travel_rows([VM, one_core])
    assert len(rows) == 2 * 2 * 2        # measured x calibrated x world sizes 2 and 4
    assert travel_table([VM, one_core]) == format_table(rows, TRAVEL_COLUMNS)
    cpus = {(r["measured"], r["calibrated"]): (r["measured_cpus"], r["calibrated_cpus"])
            for r in rows}
    assert cpus[("vm-2026-11-23", "vm-1core-2026-11-23")] == (2, 1)
    assert cpus[("vm-1core-2026-11-23", "vm-1core-2026-11-23")] == (1, 1)
    own = [r for r in rows if r["measured"] == r["calibrated"] == "vm-2026-11-23"]
    for r in own:
        s = refit_profile(VM)[[2, 4].index(r["world_size"])].stats()
        assert (r["n"], r["median"], r["p90"]) == (s.n, pytest.approx(s.median, rel=1e-12),
                                                   pytest.approx(s.p90, rel=1e-12))


def test_travel_loads_each_profile_once(monkeypatch) -> None:
    import distlab.judge.refit as refit
    import distlab.judge.tables as tables
    loads: list[str] = []

    def counting(path, *args, **kwargs):
        loads.append(str(path))
        return load(path, *args, **kwargs)

    load = tables.load_profile
    monkeypatch.setattr(tables, "load_profile", counting)
    monkeypatch.setattr(refit, "load_profile", counting)
    profiles = [VM, QUICK, PROFILES / "vm-1core-2026-11-23"]
    rows = travel_rows(profiles)
    assert sorted(loads) == sorted(str(p) for p in profiles)   # not once per pair
    assert {(r["measured"], r["calibrated"]) for r in rows} >= {("vm-2026-11-23",
                                                                 "vm-1core-2026-11-23")}


def test_spread_rows_count_the_rounds_slower_than_twice_the_fastest() -> None:
    run = refit_profile(VM)[0]
    rows = spread_rows(run)
    assert len(rows) == 6 * 5
    assert all(0.0 <= r["slow_pct"] <= 100.0 for r in rows)
    # 20 rounds: every share is a whole number of rounds
    assert all(abs(r["slow_pct"] / 5.0 - round(r["slow_pct"] / 5.0)) < 1e-9 for r in rows)
    first = rows[0]
    rounds = np.asarray(first["seconds_per_rank"]).max(axis=0)
    assert first["slow_pct"] == pytest.approx(100 * np.mean(rounds > 2 * rounds.min()),
                                              rel=1e-12)
    assert spread_table(run).splitlines()[2:] == format_table(rows, SPREAD_COLUMNS).splitlines()


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_tables_of_every_committed_profile_fit_a_notebook() -> None:
    """No line of the judgement's tables wraps in a notebook: the head names the run on its own
    line, whatever the profile's name (the longest committed one is 31 characters)."""
    profiles = MEASURED_PROFILES
    longest = max(profiles, key=lambda p: len(p.name))
    assert len(longest.name) >= 31
    for path in profiles:
        for run in refit_profile(path):
            assert _widest(error_by_size_table(run)) <= MAX_COLUMNS, run.profile
            assert _widest(spread_table(run)) <= MAX_COLUMNS, run.profile
    assert _widest(travel_table([longest, VM])) <= MAX_COLUMNS


def test_run_line_says_whose_calibration_priced_the_run() -> None:
    own = refit_profile(VM)[0]
    assert run_line(own) == "# vm-2026-11-23, gloo ws 2, own calibration, judged by the median"
    (other, *_) = refit_profile(VM, calibration_from=QUICK, skip_missing=True)
    assert "calibrated on vm-2026-11-23-quick" in run_line(other)
    assert len(run_line(other)) <= MAX_COLUMNS


@pytest.mark.parametrize("error", [KeyError, TypeError, ValueError])
def test_a_bug_in_travel_is_a_traceback_not_bad_input(monkeypatch, error) -> None:
    """``judge travel`` checks its profiles before pricing; an error raised while pricing is a
    bug and keeps its traceback (not one line and exit 2)."""
    import distlab.judge.tables as tables

    def broken(*args, **kwargs):
        raise error("planted")

    monkeypatch.setattr(tables, "error_stats", broken)
    with pytest.raises(error, match="planted"):
        judge_main(["travel", str(VM), str(QUICK)])
