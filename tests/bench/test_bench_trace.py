"""bench trace: the replicated trace is a valid, bigger trace whose breakdown scales with it, and
one small run measures distlab and HTA side by side with the same idle time (#wrong 0)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from distlab.bench.trace import TraceBenchConfig, _load, main, replicate_trace, source_path
from distlab.trace.breakdown import analyze_run
from distlab.trace.torch_trace import read_run
from helpers.paths import RESULTS

SOURCE = RESULTS / "traces" / "hta_a100_2ranks_rank0"


def test_replicated_trace_is_bigger_and_consistent(tmp_path) -> None:
    doc = _load(SOURCE)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    one, n1 = replicate_trace(doc, 1, tmp_path / "a" / "rank0.json")
    three, n3 = replicate_trace(doc, 3 * one, tmp_path / "b" / "rank0.json")
    assert n1 == len(doc["traceEvents"]) and three >= 3 * one
    meta = sum(1 for e in doc["traceEvents"] if e.get("ph") == "M")
    assert 2.9 * n1 < n3 <= 3 * n1 - 2 * meta  # the third copy is cut where the size is reached
    rt = read_run(tmp_path / "b").ranks[0]
    kernels = rt.stream >= 0
    corr = rt.correlation[kernels & (rt.correlation >= 0)]
    assert len(np.unique(corr)) == len(corr)  # copies never share a correlation
    a1 = analyze_run(read_run(tmp_path / "a"))[0]
    a3 = analyze_run(read_run(tmp_path / "b"))[0]
    assert 2 * len(a1.steps) < len(a3.steps) <= 3 * len(a1.steps)
    assert a3.whole.compute_us > 2 * a1.whole.compute_us


def test_small_run_against_hta(tmp_path, capsys) -> None:
    pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis (test extra) is "
                                                     "the reference the benchmark runs")
    out = tmp_path / "b.json"
    assert main(["--source", str(SOURCE), "--sizes", "1", "--ranks", "2", "--json",
                 str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["impl"] for r in doc["rows"]] == ["hta", "distlab"]
    assert all(r["wrong"] == 0 and r["seconds"] > 0 and r["peak_mb"] >= 0 for r in doc["rows"])
    out = capsys.readouterr().out
    assert "distlab" in out and "2 ranks" in out
    assert "where 1 MB was asked: one copy" in out
    assert all(("met)" in ln) != ("MISSED)" in ln) for ln in out.splitlines()
               if "(targets:" in ln)


def test_help_says_what_wrong_counts(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "#wrong" in capsys.readouterr().out


def test_missing_source_is_one_line(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--source", str(tmp_path / "nope")])
    assert e.value.code == 2
    assert "--source" in capsys.readouterr().err


def _bad_sources(tmp: Path) -> dict[str, Path]:
    gz = (SOURCE / "nccl_data.json.gz").read_bytes()
    files = {"notrace.json": b'{"hello": 1}', "truncated.json.gz": gz[: len(gz) // 2],
             "list.json": b"[1, 2]", "text.json": b"not json"}
    out = {}
    for name, data in files.items():
        out[name] = tmp / name
        out[name].write_bytes(data)
    (tmp / "empty").mkdir()
    out["empty"] = tmp / "empty"
    out["gloo"] = RESULTS / "traces" / "gloo_ddp_2ranks"     # CPU-only: HTA cannot break it down
    return out


@pytest.mark.parametrize("name, says", [("notrace.json", "not a trace"),
                                        ("truncated.json.gz", "not a readable trace"),
                                        ("list.json", "not a trace"),
                                        ("text.json", "not a readable trace"),
                                        ("empty", "holds no .json"),
                                        ("gloo", "no GPU kernels")])
def test_a_source_that_is_no_gpu_trace_is_one_line(tmp_path, capsys, name: str,
                                                   says: str) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--source", str(_bad_sources(tmp_path)[name])])
    assert e.value.code == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "--source" in lines[0] and says in lines[0], err


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "100,x", ""])
def test_a_size_that_is_not_positive_names_its_own_option(capsys, value: str) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--sizes", value])
    assert e.value.code == 2
    assert "argument --sizes: " in capsys.readouterr().err


def test_the_default_source_is_found_from_any_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    found = source_path(TraceBenchConfig().source)
    assert found.is_absolute() and found.resolve() == SOURCE.resolve()
