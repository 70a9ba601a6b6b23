"""The rows notebook 04 shows from the committed allreduce summary: each row's error from its own
two medians, the single runs' error range apart."""

from __future__ import annotations

import json

import pytest

from distlab.judge.summary import run_error_range, shown_rows
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
