"""judge.verdict.judged_table: the refit summary that judges the model, narrow enough for a
notebook, with the calibration and backend columns only where they say something."""

from __future__ import annotations

from distlab.judge.refit import refit_profile
from distlab.judge.refit_summary import summary_rows
from distlab.judge.verdict import JUDGED_COLUMNS, judged_table
from helpers.figure_guard import MAX_COLUMNS
from helpers.paths import MEASURED_PROFILES, PROFILES

COMMITTED = MEASURED_PROFILES
VM, H100 = PROFILES / "vm-quiet-2026-11-23", PROFILES / "h100-2026-11-23"


def test_summary_of_every_committed_profile_fits_a_notebook() -> None:
    runs = [run for path in COMMITTED for run in refit_profile(path)]
    summary = summary_rows(runs)
    lines = judged_table(summary).splitlines()
    assert len(lines) == 1 + len(summary), "one line per summary row"
    assert max(len(line) for line in lines) <= MAX_COLUMNS
    head = lines[0].split()
    assert head[:4] == ["profile", "ws", "by", "n"] and "calibrated" not in head
    assert "backend" not in head, "one backend: named nowhere in the columns"
    assert [c.header for c in JUDGED_COLUMNS][-1] == "in noise"


def test_another_calibration_is_shown_where_it_priced_the_rows() -> None:
    runs = refit_profile(VM, calibration_from=H100)
    lines = judged_table(summary_rows(runs)).splitlines()
    assert lines[0].split()[:3] == ["profile", "calibrated", "on"]
    assert all("h100-2026-11-23" in line for line in lines[1:])
    assert max(len(line) for line in lines) <= MAX_COLUMNS
