"""windows: a profile cut into shorter profiles of consecutive rounds, each priced with the
calibration of its own rounds; the whole-length window is the profile itself (refit)."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distlab.collectives.model.calibration import Calibration, restate_calibration
from distlab.collectives.model.noise import row_seconds
from distlab.judge.refit import meets_target, refit_profile
from distlab.judge.refit_summary import summary_rows
from distlab.judge.windows import window_calibration, window_rows, window_runs, window_summary
from distlab.judge.windows_command import main
from distlab.profile.load import load_profile
from helpers.cli_errors import one_error_line
from helpers.close import REL, assert_close_tree
from helpers.paths import PROFILES

LONG = PROFILES / "vm-quiet-80rounds-2026-11-23"
SHORT = PROFILES / "vm-quiet-rerun-2026-11-23"       # 20 rounds, calibration kept them
MEDIANS_ONLY = PROFILES / "vm-2026-11-23"            # calibration kept no rounds


@pytest.mark.parametrize("statistic", ["mean", "median"])
def test_the_whole_length_window_is_the_profile_priced_by_refit(statistic: str) -> None:
    whole = window_runs(LONG, 80, statistic=statistic)
    runs = refit_profile(LONG, statistic=statistic)
    assert [(w.start, w.stop, w.run.world_size) for w in whole] == \
        [(0, 80, r.world_size) for r in runs]
    for w, r in zip(whole, runs, strict=True):
        assert len(w.run.rows) == len(r.rows)
        for a, b in zip(w.run.rows, r.rows, strict=True):
            assert (a["algorithm"], a["nbytes"]) == (b["algorithm"], b["nbytes"])
            assert a["judged_us"] == pytest.approx(b["judged_us"], rel=1e-12)
            assert a["predicted_us"] == pytest.approx(b["predicted_us"], rel=REL)
            assert a["noise_pct"] == pytest.approx(b["noise_pct"], rel=REL)
        assert_close_tree(dataclasses.asdict(w.stats()), dataclasses.asdict(r.stats()))


def test_windows_tile_the_rounds_and_leave_a_short_tail_out() -> None:
    for length, starts in ((20, [0, 20, 40, 60]), (30, [0, 30]), (80, [0])):
        windows = window_runs(LONG, length)
        for ws in (2, 4):
            mine = [w for w in windows if w.run.world_size == ws]
            assert [w.start for w in mine] == starts
            assert all(w.rounds == length and w.stop == w.start + length for w in mine)
            assert len({w.run.profile for w in mine}) == len(mine)


def test_each_window_is_judged_on_its_own_rounds_only() -> None:
    stored = load_profile(LONG).allreduce_runs()
    for w in window_runs(LONG, 20):
        run = next(r for r in stored if r["world_size"] == w.run.world_size)
        cal = Calibration.from_dict(run["calibration"])
        assert w.run.calibration["round_seconds"] == cal.round_seconds[w.start:w.stop]
        for new, old in zip(w.run.rows, run["rows"], strict=True):
            slowest = np.max(np.asarray(old["seconds_per_rank"])[:, w.start:w.stop], axis=0)
            assert new["judged_us"] == pytest.approx(float(np.mean(slowest)) * 1e6, rel=1e-12)
            assert "time_us" not in new
        # later rounds changed: the window's prediction does not move
        poisoned = [dict(r, seconds_per_rank=[list(x[:w.stop]) + [9.9] * (80 - w.stop)
                                              for x in r["seconds_per_rank"]])
                    for r in run["rows"]]
        cut = window_rows(poisoned, w.start, w.stop)
        assert [row_seconds(r, "mean") for r in cut] == pytest.approx(
            [x["judged_us"] * 1e-6 for x in w.run.rows], rel=1e-12)


def test_window_calibration_of_all_rounds_is_the_restated_calibration() -> None:
    for run in load_profile(LONG).allreduce_runs():
        cal = Calibration.from_dict(run["calibration"])
        n = len(cal.round_seconds)
        for statistic in ("mean", "median"):
            expect = cal if cal.statistic == statistic else restate_calibration(cal, statistic)
            assert_close_tree(window_calibration(cal, 0, n, statistic).to_dict(),
                              expect.to_dict())


@settings(max_examples=60, deadline=None)
@given(data=st.data(), ranks=st.integers(1, 4), total=st.integers(1, 30))
def test_window_rows_keep_exactly_the_windows_rounds(data: st.DataObject, ranks: int,
                                                     total: int) -> None:
    per_rank = data.draw(st.lists(st.lists(st.floats(1e-6, 1.0), min_size=total,
                                           max_size=total), min_size=ranks, max_size=ranks))
    start = data.draw(st.integers(0, total - 1))
    stop = data.draw(st.integers(start + 1, total))
    row = {"algorithm": "ring", "nbytes": 4, "count": 1, "time_us": 1.0,
           "seconds_per_rank": per_rank}
    (cut,) = window_rows([row], start, stop)
    slowest = np.max(np.asarray(per_rank)[:, start:stop], axis=0)
    for statistic, expect in (("mean", np.mean(slowest)), ("median", np.median(slowest))):
        assert row_seconds(cut, statistic) == pytest.approx(float(expect), rel=1e-12)
    assert row["seconds_per_rank"] == per_rank and "time_us" in row   # input untouched
    with pytest.raises(ValueError, match="past the"):
        window_rows([row], start, total + 1)


def test_summary_counts_the_windows_that_meet_the_target() -> None:
    rows = window_summary(LONG, [20, 80])
    assert [(r["rounds"], r["world_size"], r["windows"]) for r in rows] == \
        [(20, 2, 4), (20, 4, 4), (80, 2, 1), (80, 4, 1)]
    for r in rows:
        stats = [w.stats() for w in window_runs(LONG, r["rounds"])
                 if w.run.world_size == r["world_size"]]
        assert r["met"] == sum(meets_target(s) for s in stats)
        assert r["worst_p90"] == max(s.p90 for s in stats)
        assert r["median_of_median"] == pytest.approx(float(np.median([s.median
                                                                       for s in stats])))
    whole = {x["world_size"]: x for x in summary_rows(refit_profile(LONG))}
    for r in rows[2:]:
        assert r["median_of_p90"] == pytest.approx(whole[r["world_size"]]["after_p90"])
        assert r["met"] == (whole[r["world_size"]]["target"] == "met")


def test_windows_need_the_rounds_and_say_which_are_missing() -> None:
    with pytest.raises(ValueError, match="rounds must be <= the 20 rounds"):
        window_runs(SHORT, 21)
    with pytest.raises(ValueError, match="same rounds; the calibration kept 0 rounds"):
        window_runs(MEDIANS_ONLY, 5)
    with pytest.raises(ValueError, match="rounds"):
        window_runs(SHORT, 0)
    with pytest.raises(ValueError, match="statistic"):
        window_runs(SHORT, 5, statistic="mode")
    cal = Calibration.from_dict(load_profile(MEDIANS_ONLY).allreduce_runs()[0]["calibration"])
    with pytest.raises(ValueError, match="kept none"):
        window_calibration(cal, 0, 1)
    with pytest.raises(ValueError, match="kept no rounds"):
        window_rows([{"algorithm": "ring", "nbytes": 4}], 0, 1)


def test_cli_prints_one_line_per_world_size_and_length(capsys) -> None:
    assert main([str(SHORT), "--rounds", "10,20"]) == 0
    out = capsys.readouterr().out.splitlines()
    body = [ln for ln in out if ln.startswith("vm-quiet-rerun-2026-11-23")]
    assert len(body) == 4 and out[0].startswith("# windows")
    assert main([str(SHORT)]) == 0      # default lengths: 5, 10, 20
    body = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("vm-")]
    assert [ln.split()[2] for ln in body] == ["5", "5", "10", "10", "20", "20"]


@pytest.mark.parametrize("argv, option", [
    (["--rounds", "0", str(SHORT)], "--rounds"),
    (["--rounds", "ten", str(SHORT)], "--rounds"),
    ([str(SHORT), "--rounds", "40"], "DIR"),
    ([str(MEDIANS_ONLY)], "DIR"),
    (["/nonexistent"], "DIR"),
    ([str(SHORT), "--statistic", "mode"], "--statistic"),
])
def test_bad_input_is_one_error_line_and_exit_2(capsys, argv, option) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    one_error_line(captured.err, option, out=captured.out)


@pytest.mark.timeout(120)
def test_runs_as_a_module() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "distlab.judge", "windows", str(SHORT),
                           "--rounds", "20"], capture_output=True, text=True, timeout=120,
                          env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("vm-quiet-rerun-2026-11-23") == 2


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys) -> None:
    import distlab.judge.windows_command as windows

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(windows, "window_summary", interrupted)
    assert main([str(SHORT)]) == 130
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("python -m distlab.judge windows: interrupted by Ctrl-C")
    assert len(captured.err.splitlines()) == 1


@pytest.mark.parametrize("error", [KeyError, TypeError, ValueError])
def test_a_bug_while_pricing_is_a_traceback_not_bad_input(monkeypatch, error) -> None:
    """The command checks its input before cutting windows; an error raised while pricing them
    is a bug and keeps its traceback (not one line and exit 2)."""
    import distlab.judge.windows as windows

    def broken(*args, **kwargs):
        raise error("planted")

    monkeypatch.setattr(windows, "refit_rows", broken)
    with pytest.raises(error, match="planted"):
        main([str(SHORT), "--rounds", "10"])
