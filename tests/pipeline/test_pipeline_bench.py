"""The pipeline benchmark CLI: bad arguments are refused, a tiny run writes complete JSON."""

from __future__ import annotations

import json

import pytest

from distlab.bench import pipeline as bench

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("argv", [["--items", "0"], ["--executors", "sync,gpu"],
                                  ["--cost-ms", "-1"], ["--workers", "-1"],
                                  ["--queue-depth", "0"]])
def test_bad_arguments_exit_2(argv, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        bench.main(argv)
    assert info.value.code == 2
    assert "must" in capsys.readouterr().err


def test_tiny_run_writes_json(tmp_path, capsys) -> None:
    out = tmp_path / "p.json"
    code = bench.main(["--items", "6", "--cost-ms", "1", "--repeats", "1", "--warmup", "0",
                       "--executors", "sync,threads", "--overhead-items", "50",
                       "--json", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "executor" in text and "threads" in text and "us/item/stage" in text
    data = json.loads(out.read_text())
    assert data["provenance"]["torch"] and data["provenance"]["command"]
    assert [r["executor"] for r in data["rows"]] == ["sync", "threads"]
    for r in data["rows"]:
        assert r["wall_s"] > 0 and r["bound_s"] > 0 and r["efficiency"] > 0
    assert data["rows"][0]["bound_s"] == pytest.approx(sum(
        data["stage_costs_s_measured_sync"].values()) * 6)
    assert {"threads_efficiency", "threads_speedup_vs_sync",
            "threads_overhead_us_per_item_per_stage"} <= set(data["targets"])
