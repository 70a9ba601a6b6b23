"""judge.tables: the model's judgement as text (error by size, spread, travel) and the
``travel`` command."""

from __future__ import annotations

import pytest

from distlab.judge.__main__ import main as judge_main
from distlab.judge.refit import refit_profile, refit_runs
from distlab.judge.tables import error_by_size_table, spread_table, travel_table
from helpers.paths import PROFILES

VM, QUICK = PROFILES / "vm-2026-11-23", PROFILES / "vm-2026-11-23-quick"


def test_tables_name_profiles_and_every_judged_row() -> None:
    run = refit_profile(VM)[0]
    text = error_by_size_table(run)
    assert "measured vm-2026-11-23" in text and "builtin" in text
    assert len(text.splitlines()) == 2 + len({r["nbytes"] for r in run.rows})
    spread = spread_table(run)
    assert len(spread.splitlines()) == 2 + 6 * 5  # 64 KiB..64 MiB x 5 judged algorithms
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
