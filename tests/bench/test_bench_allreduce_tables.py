"""bench.allreduce's text for a notebook: the short table and the calibration lines fit the
notebook's output area (no line a reader must reassemble), and still carry the numbers."""

from __future__ import annotations

import json

import pytest

from distlab.bench.allreduce import (
    SHORT_COLUMNS,
    SHORT_WIDTH,
    calibration_lines,
    short_table,
)
from helpers.figure_guard import MAX_COLUMNS
from helpers.paths import RESULTS

RUNS = sorted(RESULTS.glob("allreduce_ws*_run*.json"))


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
def test_short_table_of_a_committed_run_fits_a_notebook(path) -> None:
    run = json.loads(path.read_text())
    rows = run["rows"]
    rows = rows + [dict(rows[0], mean_us=1234567.8, algorithm="double_binary_tree")]
    text = short_table(rows)
    lines = text.splitlines()
    assert SHORT_WIDTH <= MAX_COLUMNS and _widest(text) <= SHORT_WIDTH
    assert lines[0] == "# float32 sum; distlab's algorithms on the python executor"
    assert len(lines) == 2 + len(rows), "one line per row"
    assert lines[1].split() == [w for c in SHORT_COLUMNS if c.key != "executor"
                                for w in c.header.split()]
    ring = next(ln for ln in lines[2:] if " ring " in ln)
    row = next(r for r in rows if r["algorithm"] == "ring")
    assert f"{row['time_us']:.1f}" in ring and f"{row['predicted_us']:.1f}" in ring


def test_short_table_without_means_drops_that_column() -> None:
    rows = json.loads(RUNS[0].read_text())["rows"]
    assert "mean(us)" in short_table(rows).splitlines()[1]
    medians = [{k: v for k, v in r.items() if k != "mean_us"} for r in rows]
    assert "mean(us)" not in short_table(medians).splitlines()[1]


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.name)
def test_calibration_lines_fit_a_notebook_and_keep_every_constant(path) -> None:
    cal = json.loads(path.read_text())["calibration"]
    lines = calibration_lines(cal)
    assert all(len(line) <= SHORT_WIDTH for line in lines)
    text = " ".join(lines)
    assert f"alpha {cal['alpha'] * 1e6:.1f} us" in text
    assert f"hand-off {cal['handoff'] * 1e6:.1f} us/step" in text
    assert f"per-call overhead {cal['call_overhead'] * 1e6:.1f} us" in text
    assert f"reduce {cal['reduce_r2']:.3f}" in text


def test_calibration_lines_mark_missing_fields() -> None:
    lines = calibration_lines({"alpha": 1e-6, "beta": 1e-10, "gamma": 0.0})
    assert "relay ? us/step/rank" in " ".join(lines) and len(lines) == 4


def test_short_table_names_the_executor_once_or_per_row_when_raced() -> None:
    rows = json.loads(RUNS[0].read_text())["rows"]
    one = [dict(r, executor="builtin" if r["algorithm"] == "builtin" else "compiled")
           for r in rows]
    text = short_table(one)
    assert text.splitlines()[0] == "# float32 sum; distlab's algorithms on the compiled executor"
    assert "executor" not in text.splitlines()[1].split()
    one += [dict(one[0], mean_us=1234567.8, algorithm="double_binary_tree")]  # the widest row
    raced = one + [dict(r, executor="python") for r in one if r["algorithm"] != "builtin"]
    lines = short_table(raced).splitlines()
    assert lines[0] == "# float32 sum" and "executor" in lines[1].split()
    assert sum(" python " in ln for ln in lines) == len(raced) - len(one)
    assert _widest("\n".join(lines)) <= SHORT_WIDTH
