"""The pipeline benchmark CLI: every bad option is one line naming it (exit 2), --help gives
every option a description and default, and a tiny run writes complete JSON with start-up
reported apart from the steady pipeline."""

from __future__ import annotations

import json
import re

import pytest

from distlab.bench import pipeline as bench
from distlab.pipeline import equal_stages

pytestmark = pytest.mark.timeout(120)

BAD = [  # (argv, option named in the error, text that must appear)
    (["--items", "0"], "--items", "0"),
    (["--items", "two"], "--items", "two"),
    (["--stages", "-1"], "--stages", "-1"),
    (["--cost-ms", "-1"], "--cost-ms", "-1"),
    (["--cost-ms", "nan"], "--cost-ms", "nan"),
    (["--cost-ms", "inf"], "--cost-ms", "inf"),
    (["--kind", "gpu"], "--kind", "gpu"),
    (["--queue-depth", "0"], "--queue-depth", "0"),
    (["--workers", "-1"], "--workers", "-1"),
    (["--repeats", "0"], "--repeats", "0"),
    (["--warmup", "-1"], "--warmup", "-1"),
    (["--overhead-items", "1.5"], "--overhead-items", "1.5"),
    (["--executors", "sync,gpu"], "--executors", "sync,gpu"),
    (["--executors", ""], "--executors", "''"),
    (["--torch-threads", "0"], "--torch-threads", "0"),
    (["--json", "/"], "--json", "folder"),
]


@pytest.mark.parametrize("argv, option, text", BAD, ids=[" ".join(a) for a, _, _ in BAD])
def test_bad_option_is_one_line_and_exit_2(argv, option, text, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        bench.main(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    lines = [ln for ln in captured.err.splitlines() if "error:" in ln]
    assert len(lines) == 1, captured.err
    assert option in lines[0] and text in lines[0], lines[0]


def test_compare_executors_rows_and_model() -> None:
    stages = equal_stages("sleep", 3, 0.001)
    cmp = bench.compare_executors(stages, 5, ["threads"], workers=2, queue_depth=2,
                                  repeats=2, warmup=0)
    assert [r["executor"] for r in cmp["rows"]] == ["sync", "threads"]
    assert set(cmp["runs"]) == {"sync", "threads"} and cmp["runs"]["threads"].n_items == 5
    assert list(cmp["costs_s"]) == ["sleep0", "sleep1", "sleep2"]
    sync, threads = cmp["rows"]
    total = sum(cmp["costs_s"].values())
    assert sync["bound_s"] == pytest.approx(5 * total)             # no overlap: n * sum
    assert threads["bound_s"] == pytest.approx(total + 4 * max(cmp["costs_s"].values()))
    for r in cmp["rows"]:
        run = cmp["runs"][r["executor"]]
        assert r["startup_s"] == (0.0 if hasattr(run, "startup_s") else None)
        assert r["efficiency"] == pytest.approx(r["bound_s"] / r["wall_s"])
        assert r["sim_err"] == pytest.approx((r["sim_s"] - r["wall_s"]) / r["wall_s"])
        assert r["wall_min_s"] <= r["wall_s"] <= r["wall_max_s"]


def test_startup_is_reported_apart() -> None:
    class Fake:
        startup_s = 1.25
    assert bench.startup_s(Fake()) == 1.25 and bench.startup_s(object()) == 0.0


def test_tiny_run_writes_json(tmp_path, capsys) -> None:
    out = tmp_path / "p.json"
    code = bench.main(["--items", "6", "--cost-ms", "1", "--repeats", "1", "--warmup", "0",
                       "--executors", "sync,threads", "--overhead-items", "50",
                       "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "executor" in text and "threads" in text and "us/item/stage" in text
    assert re.search(r"start\(s\)\s+wall\(s\)", text)
    data = json.loads(out.read_text())
    assert data["provenance"]["torch"] and data["provenance"]["command"]
    assert [r["executor"] for r in data["rows"]] == ["sync", "threads"]
    assert [r["executor"] for r in data["overhead"]] == ["sync", "threads"]
    for r in data["rows"]:
        assert r["startup_s"] in (0.0, None)        # sync/threads start no workers
        assert r["efficiency"] == pytest.approx(r["bound_s"] / r["wall_s"])
    assert data["rows"][0]["bound_s"] == pytest.approx(sum(
        data["stage_costs_s_measured_sync"].values()) * 6)
    assert {"threads_efficiency", "threads_speedup_vs_sync",
            "threads_overhead_us_per_item_per_stage"} <= set(data["targets"])
