"""refit: every row of the committed profiles priced again from the profile's own stored
calibration; measured values untouched; the command's tables, JSON and bad input."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from distlab.bench.allreduce_ranks import slowest_rank_median
from distlab.judge.refit import (
    TARGET_ALGORITHMS,
    RehearsalProfileError,
    error_stats,
    meets_target,
    refit_profile,
)
from distlab.judge.refit_command import main
from distlab.judge.refit_report import PRINT_WIDTH, summary_table, summary_tables
from distlab.judge.refit_summary import calibration_source, summary_rows
from distlab.profile.load import load_profile
from distlab.vocabulary import ErrorSummary
from helpers.cli_errors import one_error_line
from helpers.close import REL
from helpers.paths import MEASURED_PROFILES, PROFILES

FULL = [p for p in MEASURED_PROFILES if not p.name.endswith("-quick")]
QUICK = PROFILES / "vm-2026-11-23-quick"
REHEARSAL = PROFILES / "rehearsal-dgx_h100_like-2026-11-25"


def test_the_committed_full_profiles_are_there() -> None:
    names = {p.name for p in FULL}
    assert {"vm-2026-11-23", "h100-2026-11-23", "vm-1core-2026-11-23"} <= names
    assert {"vm-quiet-2026-11-23", "vm-1core-quiet-2026-11-23",
            "vm-2core-quiet-2026-11-23", "vm-quiet-rerun-2026-11-23",
            "vm-1core-quiet-rerun-2026-11-23", "vm-2core-quiet-rerun-2026-11-23",
            "vm-quiet-80rounds-2026-11-23", "vm-quiet-40rounds-2026-11-23",
            "vm-quiet-run3-2026-11-23"} <= names


@pytest.fixture(scope="module", params=FULL, ids=lambda p: p.name)
def refitted(request):
    return request.param, refit_profile(request.param)


def test_every_row_is_predicted_and_the_measurements_are_the_profiles(refitted) -> None:
    path, runs = refitted
    committed = load_profile(path).allreduce_runs()
    assert [(r.backend, r.world_size) for r in runs] == [(c["backend"], c["world_size"])
                                                          for c in committed]
    for run, stored in zip(runs, committed, strict=True):
        assert len(run.rows) == len(stored["rows"])
        assert {r["algorithm"] for r in run.rows} >= set(TARGET_ALGORITHMS)
        for new, old in zip(run.rows, stored["rows"], strict=True):
            assert (new["algorithm"], new["nbytes"], new["time_us"]) == \
                (old["algorithm"], old["nbytes"], old["time_us"])
            assert new["time_us"] == pytest.approx(
                slowest_rank_median(old["seconds_per_rank"]) * 1e6, rel=1e-12)
            slowest = np.max(np.asarray(old["seconds_per_rank"]), axis=0)
            judged = np.mean(slowest) if run.statistic == "mean" else np.median(slowest)
            assert new["judged_us"] == pytest.approx(judged * 1e6, rel=1e-12)
            assert new["predicted_us"] > 0 and math.isfinite(new["predicted_us"])
            assert new["error_pct"] == pytest.approx(
                100 * (new["judged_us"] - new["predicted_us"]) / new["predicted_us"])
            assert new["stored_predicted_us"] == old["predicted_us"]


def _floored(path: Path) -> bool:
    """Whether the profile's calibrations timed the builtin's floor (made since it was)."""
    return all(r["calibration"].get("builtin_floor") for r in
               load_profile(path).allreduce_runs() if r.get("calibration"))


def _rounds_kept(path: Path) -> bool:
    """Whether the profile's calibrations kept their rounds (so they can be judged by means)."""
    return all(r["calibration"].get("round_seconds") for r in
               load_profile(path).allreduce_runs() if r.get("calibration"))


def _stored_statistic(path: Path) -> str:
    """The statistic the profile's stored calibrations were fitted on (median before it was
    recorded)."""
    (stat,) = {r["calibration"].get("statistic", "median") for r in
               load_profile(path).allreduce_runs() if r.get("calibration")}
    return stat


def test_each_profile_is_judged_by_means_where_its_rounds_allow(refitted) -> None:
    path, runs = refitted
    want = "mean" if _rounds_kept(path) else "median"
    assert {r.statistic for r in runs} == {want}
    assert all(r.calibration.get("statistic", "median") == want for r in runs)


def test_the_stored_predictions_are_reproduced(refitted) -> None:
    """Profiles made before the per-size model stored the constant model's predictions (the
    builtin had none); profiles made since store this model's, priced with the calibration they
    were measured with (medians before the statistic was recorded, means since). The builtin
    rows of :data:`BUILTIN_PRICED_OTHERWISE` stored a price of gloo's loop this library no
    longer makes, so only their algorithm rows are compared."""
    path, _ = refitted
    runs = refit_profile(path, per_size=_floored(path), statistic=_stored_statistic(path))
    compared = 0
    for run in runs:
        for row in run.rows:
            if row["stored_predicted_us"] is None:  # builtin had none when measured
                assert row["algorithm"] == "builtin" and not _floored(path)
                continue
            if row["algorithm"] == "builtin" and path.name in BUILTIN_PRICED_OTHERWISE:
                continue
            assert row["predicted_us"] == pytest.approx(row["stored_predicted_us"], rel=REL), \
                row["algorithm"]
            compared += 1
    assert compared >= len(runs) * 20


BUILTIN_PRICED_OTHERWISE = {
    "vm-quiet-2026-11-23", "vm-1core-quiet-2026-11-23", "vm-2core-quiet-2026-11-23",
    "vm-quiet-rerun-2026-11-23", "vm-1core-quiet-rerun-2026-11-23",
    "vm-2core-quiet-rerun-2026-11-23", "vm-quiet-80rounds-2026-11-23",
    "vm-quiet-40rounds-2026-11-23"}
"""Profiles whose stored builtin predictions priced gloo's bytes at the per-size beta."""


def test_priced_with_another_profiles_calibration() -> None:
    own = refit_profile(PROFILES / "h100-2026-11-23")
    other = refit_profile(PROFILES / "h100-2026-11-23",
                          calibration_from=PROFILES / "vm-2026-11-23")
    assert {r.calibrated_on for r in other} == {"vm-2026-11-23"}
    assert [x["time_us"] for x in own[0].rows] == [x["time_us"] for x in other[0].rows]
    assert other[0].calibration["alpha"] != own[0].calibration["alpha"]
    assert [x["predicted_us"] for x in own[0].rows] != [x["predicted_us"] for x in other[0].rows]


def test_error_stats_and_summary_rows() -> None:
    rows = [{"algorithm": "ring", "nbytes": 65536 * (i + 1), "error_pct": e}
            for i, e in enumerate([-10.0, 20.0, 30.0, -40.0, None])]
    rows.append({"algorithm": "naive", "nbytes": 2**20, "error_pct": 500.0})
    rows.append({"algorithm": "ring", "nbytes": 1024, "error_pct": 500.0})
    s = error_stats(rows)
    assert (s.n, s.median, s.max) == (4, 25.0, 40.0) and s.p90 == pytest.approx(37.0)
    assert not meets_target(s) and meets_target(ErrorSummary(3, 15.0, 35.0, 99.0))
    assert error_stats(rows, algorithms=None).n == 5
    assert error_stats([]).n == 0 and not meets_target(error_stats([]))
    runs = refit_profile(PROFILES / "vm-2026-11-23") + refit_profile(QUICK)
    table = summary_rows(runs)
    assert [(r["profile"], r["world_size"]) for r in table] == [
        ("vm-2026-11-23", 2), ("vm-2026-11-23", 4), ("vm-2026-11-23", "all"),
        ("vm-2026-11-23-quick", 2), ("all", "all")]
    assert table[0]["after_n"] == 30 and table[0]["before_n"] == 24  # builtin had no prediction
    assert table[2]["after_n"] == 60


def test_command_prints_the_table_and_writes_rows(tmp_path, capsys) -> None:
    out = tmp_path / "refit.json"
    assert main([str(QUICK), str(PROFILES / "vm-2026-11-23"), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "profile" in text and "vm-2026-11-23-quick" in text and "median%" in text
    assert "statistic" in text and "asked: mean" in text
    doc = json.loads(out.read_text())
    assert {"provenance", "summary", "runs"} <= set(doc) and doc["model"] == "per-size"
    assert doc["statistic"] == "mean" and {r["statistic"] for r in doc["runs"]} == {"median"}
    rows = [r for run in doc["runs"] for r in run["rows"]]
    assert rows and all(r["predicted_us"] > 0 for r in rows)
    assert {"nbytes", "count", "algorithm", "time_us", "predicted_us", "error_pct",
            "busbw_gbps", "wrong"} <= set(rows[0])


def _header(text: str, first_column: str) -> str:
    """The header line of the printed table whose first column is ``first_column``."""
    return next(line for line in text.splitlines() if line.split()[:1] == [first_column])


def test_every_printed_line_fits_and_the_calibration_is_said_once(capsys) -> None:
    # every committed profile, each priced with its own calibration
    assert main([str(p) for p in [*FULL, QUICK]]) == 0
    text = capsys.readouterr().out
    wide = [line for line in text.splitlines() if len(line) > PRINT_WIDTH]
    assert PRINT_WIDTH == 110 and not wide, f"{len(wide)} lines wider than 110: {wide[0]}"
    assert "# calibrated on: each profile's own; backend: gloo" in text.splitlines()
    header = _header(text, "profile")
    assert "calibrated on" not in header and "measured on" not in header
    assert "backend" not in header and "noise p90%" in header and "target" in header
    assert "median% now" in text  # the stored predictions beside this model's
    names = {p.name for p in [*FULL, QUICK]}
    profiles = {line.split()[0] for line in text.splitlines()
                if line.split()[:1] and line.split()[0] in names}
    assert profiles == names

    # priced with another profile's calibration: named once, above the tables
    assert main([str(PROFILES / "h100-2026-11-23"), str(PROFILES / "vm-2026-11-23"),
                 "--calibration-from", str(PROFILES / "vm-2026-11-23")]) == 0
    text = capsys.readouterr().out
    assert all(len(line) <= PRINT_WIDTH for line in text.splitlines())
    assert "# calibrated on: vm-2026-11-23 (--calibration-from), for every profile; backend: " \
           "gloo" in text.splitlines()
    assert "calibrated on" not in _header(text, "profile")


def test_the_calibration_column_is_printed_only_where_runs_differ_in_it() -> None:
    own = refit_profile(PROFILES / "vm-2026-11-23")
    other = refit_profile(PROFILES / "h100-2026-11-23",
                          calibration_from=PROFILES / "vm-2026-11-23")
    mixed = own + refit_profile(PROFILES / "h100-2026-11-23")
    assert calibration_source(own) == calibration_source(mixed) == "each profile's own"
    assert calibration_source(other) == "vm-2026-11-23"
    assert "calibrated on" not in summary_table(mixed)
    assert calibration_source(own + other) == "vm-2026-11-23"  # every row priced by vm's
    # vm on its own calibration beside h100 on vm-quiet's: the source differs, so rows say it
    differ = own + refit_profile(PROFILES / "h100-2026-11-23",
                                 calibration_from=PROFILES / "vm-quiet-2026-11-23")
    assert calibration_source(differ) is None
    headers = [t.columns for t in summary_tables(differ)]
    assert all([c.header for c in cols][:2] == ["profile", "calibrated on"] for cols in headers)
    # the JSON's summary keeps every field, whatever is printed
    assert {"profile", "calibrated_on", "backend", "before_n", "after_median",
            "within_noise"} <= set(summary_rows(differ)[0])


def test_the_quiet_profiles_are_judged_by_means_and_median_on_request(capsys) -> None:
    quiet = PROFILES / "vm-quiet-2026-11-23"
    by_mean = refit_profile(quiet)
    by_median = refit_profile(quiet, statistic="median")
    assert {r.statistic for r in by_mean} == {"mean"}
    assert {r.statistic for r in by_median} == {"median"}
    for mean_run, median_run in zip(by_mean, by_median, strict=True):
        assert [r["time_us"] for r in mean_run.rows] == [r["time_us"] for r in median_run.rows]
        assert [r["judged_us"] for r in median_run.rows] == pytest.approx(
            [r["time_us"] for r in median_run.rows], rel=1e-12)
        assert [r["judged_us"] for r in mean_run.rows] != [r["judged_us"] for r in
                                                           median_run.rows]
    assert main([str(quiet), "--statistic", "median"]) == 0
    text = capsys.readouterr().out
    assert "asked: median" in text and " mean " not in text


def _bad_profile(tmp_path: Path) -> Path:
    folder = tmp_path / "empty-profile"
    folder.mkdir()
    (folder / "profile.json").write_text(json.dumps({"parts": {}}))
    return folder


@pytest.mark.parametrize("make_argv, option", [
    (lambda t: [str(t / "missing")], "DIR"),
    (lambda t: [str(t)], "DIR"),
    (lambda t: [str(_bad_profile(t))], "DIR"),
    (lambda t: [str(QUICK), "--json", str(t)], "--json"),
    (lambda t: [str(QUICK), "--min-bytes", "0"], "--min-bytes"),
    (lambda t: [str(QUICK), "--algorithms", "warp"], "--algorithms"),
    (lambda t: [str(QUICK), "--statistic", "mode"], "--statistic"),
    (lambda t: [str(PROFILES / "vm-2026-11-23"), "--calibration-from", str(QUICK)], "DIR"),
    (lambda t: [str(REHEARSAL)], "DIR"),
    (lambda t: [str(QUICK), "--calibration-from", str(REHEARSAL)], "DIR"),
])
def test_bad_input_is_one_error_line_and_exit_2(tmp_path, capsys, make_argv, option) -> None:
    assert main(make_argv(tmp_path)) == 2
    captured = capsys.readouterr()
    one_error_line(captured.err, option, out=captured.out)


@pytest.mark.timeout(120)
def test_runs_as_a_module() -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run([sys.executable, "-m", "distlab.judge", "refit", str(QUICK)],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "vm-2026-11-23-quick" in proc.stdout and "RuntimeWarning" not in proc.stderr


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys) -> None:
    import distlab.judge.refit_command as refit

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(refit, "refit_profile", interrupted)
    assert main([str(QUICK)]) == 130
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("python -m distlab.judge refit: interrupted by Ctrl-C")
    assert len(captured.err.splitlines()) == 1


def test_a_rehearsal_among_measured_profiles_is_skipped_with_one_line(capsys) -> None:
    """``refit results/profiles/*`` judges the measured profiles and says which rehearsal it
    left out (gloo stood in for NCCL there: no model is judged on it)."""
    assert main([str(QUICK), str(REHEARSAL)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"# skipped {REHEARSAL}: a rehearsal, no model is judged on it"
    assert "vm-2026-11-23-quick" in out and "rehearsal-dgx" not in out.split("\n", 1)[1]
    with pytest.raises(RehearsalProfileError, match="rehearsal of box dgx_h100_like"):
        refit_profile(REHEARSAL)


@pytest.mark.parametrize("error", [KeyError, TypeError, ValueError])
def test_a_bug_while_pricing_is_a_traceback_not_bad_input(monkeypatch, error) -> None:
    """The command checks its input before pricing; an error raised while pricing is a bug and
    keeps its traceback (not one line and exit 2)."""
    import distlab.judge.refit as refit

    def broken(*args, **kwargs):
        raise error("planted")

    monkeypatch.setattr(refit, "refit_rows", broken)
    with pytest.raises(error, match="planted"):
        main([str(QUICK)])
