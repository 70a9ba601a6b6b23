"""The rows notebook 04 shows from the committed allreduce summary: each row's error from its own
two medians, the single runs' error range apart, as a table one notebook line per row."""

from __future__ import annotations

import json

import pytest

from distlab.judge.summary import run_error_range, shown_rows
from distlab.judge.summary_report import shown_table
from helpers.figure_guard import MAX_COLUMNS
from helpers.paths import RESULTS

SUMMARY = RESULTS / "allreduce_summary.json"


def test_rows_from_min_bytes_with_the_error_of_their_medians() -> None:
    block = {"rows": [
        {"nbytes": 1024, "time_us": 10.0, "predicted_us": 8.0, "error_pct_runs": [50.0]},
        {"nbytes": 65536, "time_us": 90.0, "predicted_us": 100.0, "error_pct": 3.0,
         "error_pct_runs": [-20.0, 5.0]},
        {"nbytes": 65536, "time_us": 70.0, "predicted_us": None, "error_pct_runs": []}]}
    rows = shown_rows(block, min_bytes=1 << 16)
    assert [r["nbytes"] for r in rows] == [65536, 65536]
    assert rows[0]["error_pct"] == pytest.approx(-10.0)     # not the stored median of runs (3.0)
    assert rows[1]["error_pct"] is None
    assert block["rows"][1]["error_pct"] == 3.0             # the summary itself is untouched
    assert run_error_range(rows) == (-20.0, 5.0)
    assert run_error_range(rows[1:]) is None


def test_committed_summary_rows_read_on_their_own() -> None:
    summary = json.loads(SUMMARY.read_text())
    for block in summary["world_sizes"].values():
        for r in shown_rows(block):
            if r["predicted_us"]:
                assert r["time_us"] == pytest.approx(r["predicted_us"] * (1 + r["error_pct"] / 100))


def test_shown_table_fits_a_notebook_and_reads_on_its_own() -> None:
    """Each committed row on one line of at most MAX_COLUMNS characters; the error sits beside
    the two medians it is computed from, and vs builtin is the paired median of the runs."""
    summary = json.loads(SUMMARY.read_text())
    for block in summary["world_sizes"].values():
        rows = shown_rows(block, min_bytes=1 << 16)
        lines = shown_table(rows).splitlines()
        assert lines[0] == "# float32 sum" and len(lines) == 2 + len(rows)
        assert max(len(line) for line in lines) <= MAX_COLUMNS
        head = lines[1].split()
        assert head[2:5] == ["time(us)", "predicted(us)", "error%"]
        assert [h for h in head if h not in ("vs", "builtin(x)")] == head[:-2]
        for row, line in zip(rows, lines[2:], strict=True):
            cells = line.split()
            assert cells[:2] == [str(row["nbytes"]), row["algorithm"]]
            assert cells[-1] == f"{row['ratio_vs_builtin_paired_median']:.2f}"
