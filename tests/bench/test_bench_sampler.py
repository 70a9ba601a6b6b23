"""The sampler benchmark CLI: both children run, indices agree, JSON carries provenance."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from distlab.bench import sampler as bench


def test_small_run_prints_both_rows_and_writes_json(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sampler.json"
    assert bench.main(["--n", "5000", "--world-size", "3", "--rank", "2", "--epoch", "1",
                       "--json", str(out)]) == 0
    text = capsys.readouterr().out
    rows = [line.split() for line in text.splitlines() if line.split()[:1] in (["torch"],
                                                                               ["distlab"])]
    assert [r[0] for r in rows] == ["torch", "distlab"]
    assert all(r[1] == "1667" and r[-1] == "0" for r in rows)  # count, #wrong
    assert re.search(r"\d\.\d\dx (faster|slower), \d\.\d\dx (less|more) CPU time, "
                     r"\d\.\d\dx (less|more) peak RSS", text), text
    payload = json.loads(out.read_text())
    results = {r["impl"]: r for r in payload["rows"]}
    assert results["distlab"]["wrong"] == 0 and results["distlab"]["count"] == 1667
    assert payload["provenance"]["world_size"] == 3 and "torch" in payload["provenance"]
    assert results["torch"]["peak_rss_mb"] > 0
    assert payload["config"]["rank"] == 2 and payload["benchmark"] == "sampler"


def test_child_measures_one_epoch() -> None:
    res = bench.child("distlab", 100, 4, 1, True, 0, 0, False)
    assert res["count"] == 25 and res["peak_rss_mb"] >= res["base_rss_mb"] > 0
    assert res == {**res, "sha256": bench.child("torch", 100, 4, 1, True, 0, 0, False)["sha256"]}


@pytest.mark.parametrize("argv, word", [
    (["--n", "-1"], "--n"),
    (["--world-size", "0"], "--world-size"),
    (["--world-size", "2", "--rank", "2"], "--rank"),
    (["--repeats", "0"], "--repeats"),
    (["--impl", "nope"], "--impl"),
])
def test_bad_arguments_exit_with_a_message(argv: list[str], word: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        bench.main(argv)
    assert info.value.code == 2 and word in capsys.readouterr().err


def test_permutation_and_prefetch_rows_and_torch_skip(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--n", "3000", "--world-size", "4", "--impl", "all", "--prefetch"]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in text.splitlines()
            if line.split()[:1] in (["torch"], ["distlab"], ["permutation"])}
    assert sorted(rows) == ["distlab", "permutation", "torch"]
    assert all(r[1] == "750" and r[-1] == "0" for r in rows.values())
    assert "prefetch=True" in text
    assert bench.main(["--n", "3000", "--world-size", "4", "--impl", "permutation",
                       "--torch-max-n", "1000"]) == 0
    text = capsys.readouterr().out
    assert "torch skipped" in text and "\n      torch" not in text


def test_child_prefetch_gives_the_same_indices() -> None:
    plain = bench.child("distlab", 500, 2, 1, True, 0, 0, False)
    fast = bench.child("distlab", 500, 2, 1, True, 0, 0, False, prefetch=True)
    assert plain["sha256"] == fast["sha256"] and fast["start_seconds"] >= 0
