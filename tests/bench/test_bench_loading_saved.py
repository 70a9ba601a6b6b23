"""A committed `bench loading --json` result printed as the benchmark's own table (notebook 02)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distlab.bench.loading import COLUMNS, saved_result_text
from distlab.report.jsonfile import SchemaError, write_json
from helpers.paths import ROOT


def test_committed_result_prints_every_row_under_the_benchmarks_columns() -> None:
    path = ROOT / "results" / "pipeline_cpu.json"
    data = json.loads(path.read_text())
    lines = saved_result_text(path).splitlines()
    assert lines[0].startswith("# pipeline_cpu.json: 3 x sleep stages of 2 ms, 200 items")
    assert lines[1].split() == [w for c in COLUMNS for w in c.header.split()]
    body = lines[2:]
    assert [ln.split()[0] for ln in body] == [r["executor"] for r in data["rows"]]
    for ln, r in zip(body, data["rows"], strict=True):
        assert f"{r['wall_s']:.4f}" in ln.split() and f"{r['sim_error_pct']:+.1f}" in ln.split()


def test_not_a_result_says_so(tmp_path: Path) -> None:
    bad = write_json(tmp_path / "x.json", {"rows": []})
    with pytest.raises(ValueError, match="not a `bench loading --json` result"):
        saved_result_text(bad)
    bad.write_text(json.dumps({"rows": []}))
    with pytest.raises(SchemaError, match="x.json has no schema field"):
        saved_result_text(bad)
    with pytest.raises(ValueError, match="not a"):
        saved_result_text(tmp_path / "missing.json")
