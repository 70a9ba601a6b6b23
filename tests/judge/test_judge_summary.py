"""The committed allreduce summary is what `python -m distlab.judge summary` makes of the committed
runs."""

from __future__ import annotations

import json
import math

import pytest

from distlab.judge.__main__ import main as judge_main
from distlab.judge.summary import summarize_files, summarize_runs
from distlab.report.jsonfile import SCHEMA_VERSION, write_json
from helpers.paths import RESULTS


def _run(ws: int, times: dict[tuple[int, str], float], pred: float | None = 100.0) -> dict:
    rows = []
    for (nbytes, algo), t in times.items():
        busbw = nbytes / (t * 1e-6) / 1e9 * 2 * (ws - 1) / ws
        p = None if algo == "builtin" else pred
        rows.append({"nbytes": nbytes, "count": nbytes // 4, "dtype": "float32", "op": "sum",
                     "algorithm": algo, "time_us": t, "algbw_gbps": 0.0, "busbw_gbps": busbw,
                     "wrong": 0, "predicted_us": p,
                     "error_pct": None if p is None else 100 * (t - p) / p})
    return {"provenance": {"world_size": ws, "command": "x"}, "calibration": {"alpha": 1.0},
            "rows": rows}


def test_medians_and_paired_ratios() -> None:
    runs = [_run(2, {(1024, "builtin"): b, (1024, "ring"): r})
            for b, r in ((100.0, 200.0), (400.0, 400.0), (100.0, 110.0))]
    block = summarize_runs(runs, ["a", "b", "c"])
    ring = block["rows"][1]
    assert ring["time_us"] == 200.0
    assert ring["time_us_runs"] == [200.0, 400.0, 110.0]
    # per run: builtin time / ring time (same bytes, same world size)
    assert ring["ratio_vs_builtin_runs"] == [0.5, 1.0, round(100 / 110, 3)]
    assert ring["ratio_vs_builtin_paired_median"] == round(100 / 110, 3)
    assert ring["error_pct"] == pytest.approx(100.0)  # median of +100, +300, +10
    assert block["rows"][0]["error_pct_runs"] == [] and block["rows"][0]["predicted_us"] is None
    assert math.isclose(ring["algbw_gbps"], 1024 / 200e-6 / 1e9)


def test_runs_of_different_sweeps_are_refused() -> None:
    a = _run(2, {(1024, "ring"): 1.0})
    b = _run(2, {(2048, "ring"): 1.0})
    with pytest.raises(ValueError, match="rows differ"):
        summarize_runs([a, b], ["a.json", "b.json"])
    with pytest.raises(ValueError, match="world size 4"):
        summarize_runs([a, _run(4, {(1024, "ring"): 1.0})], ["a.json", "c.json"])


def test_committed_summary_is_reproduced_from_the_committed_runs() -> None:
    committed = json.loads((RESULTS / "allreduce_summary.json").read_text())
    runs = [RESULTS / name for block in committed["world_sizes"].values()
            for name in block["runs"]]
    made = summarize_files(runs, note=committed["note"])
    assert made["world_sizes"].keys() == committed["world_sizes"].keys()
    for ws, block in committed["world_sizes"].items():
        for want, got in zip(block["rows"], made["world_sizes"][ws]["rows"], strict=True):
            for key, value in want.items():
                if isinstance(value, float):
                    assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9), (ws, key)
                else:
                    assert got[key] == value, (ws, want["nbytes"], want["algorithm"], key)


def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": SCHEMA_VERSION}))
    assert judge_main(["summary", str(bad), "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "not an allreduce benchmark result" in err[-1]
    assert judge_main(["summary", str(tmp_path / "missing.json"), "--out",
                       str(tmp_path / "o.json")]) == 2
    assert not (tmp_path / "o.json").exists()
    capsys.readouterr()
    bad.write_text("{}")  # a result without a schema: one line saying how to migrate it
    assert judge_main(["summary", str(bad)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "has no schema field" in line and "migrate_results.py" in line


def test_cli_writes_the_summary(tmp_path) -> None:
    run = tmp_path / "r1.json"
    write_json(run, _run(2, {(1024, "builtin"): 10.0, (1024, "ring"): 20.0}))
    out = tmp_path / "s.json"
    assert judge_main(["summary", str(run), "--out", str(out)]) == 0
    summary = json.loads(out.read_text())
    assert summary["world_sizes"]["2"]["runs"] == ["r1.json"]


def test_a_file_whose_rows_are_not_allreduce_rows_is_one_line(tmp_path, capsys) -> None:
    other = tmp_path / "pipeline.json"
    write_json(other, {"provenance": {"world_size": 2}, "rows": [{"stage": "read"}]})
    assert judge_main(["summary", str(other)]) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "not an allreduce benchmark result (a row lacks one of" in line
    assert captured.out == ""


@pytest.mark.parametrize("error", [KeyError, TypeError, ValueError])
def test_a_bug_while_summarizing_is_a_traceback_not_bad_input(monkeypatch, tmp_path,
                                                             error) -> None:
    """The command checks its files before summarizing; an error raised while summarizing is a
    bug and keeps its traceback (not one line and exit 2)."""
    import distlab.judge.summary as summary

    def broken(*args, **kwargs):
        raise error("planted")

    run = tmp_path / "r1.json"
    write_json(run, _run(2, {(1024, "builtin"): 10.0, (1024, "ring"): 20.0}))
    monkeypatch.setattr(summary, "_median", broken)
    with pytest.raises(error, match="planted"):
        judge_main(["summary", str(run)])
