"""Bench CLI: bad options exit 2 with one line; the JSON has provenance and NaN-free rows."""

from __future__ import annotations

import json
import math

import pytest

from distlab.bench.__main__ import main as bench_main
from distlab.bench.transfers import main, shmoo_sizes


@pytest.mark.parametrize("argv", [["-b", "0"], ["-b", "64K", "-e", "4K"], ["-f", "1"],
                                  ["--paths", "h2x"], ["--memory", "gpu"], ["--repeats", "0"],
                                  ["--paths", "h2h", "--memory", "device"], ["--preset", "x"],
                                  ["--compute-ms", "nan"], ["--batch-bytes", "0"]])
def test_bad_options_exit_2(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "argument" in err


def test_shmoo_sizes() -> None:
    s = shmoo_sizes()
    assert s[0] == 1000 and s[-1] == 64_000_000 and s == sorted(set(s))
    assert 20_000 in s and 22_000 in s and 1_100_000 not in s and 2_000_000 in s


def test_json_shape(tmp_path, capsys) -> None:
    out = tmp_path / "t.json"
    assert bench_main(["transfers", "-b", "4K", "-e", "256K", "-f", "4", "--repeats", "2",
                       "--iters", "2", "--no-progress", "--prefetch-batches", "3",
                       "--batch-bytes", "64K",
                       "--compute-ms", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "size(B)" in text and "#wrong" in text
    data = json.loads(out.read_text())
    assert {"host", "date", "command", "torch", "cuda"} <= set(data["provenance"])
    keys = {"path", "memory", "nbytes", "time_us", "gbps", "model_gbps", "wrong", "skipped"}
    assert data["rows"]
    for r in data["rows"]:
        assert keys <= set(r)
        for k in ("time_us", "gbps", "model_gbps"):
            assert r[k] is None or math.isfinite(r[k])
        assert (r["skipped"] is None) == (r["time_us"] is not None)
        assert r["wrong"] in (0, None)
    assert any(r["path"] == "h2h" and r["gbps"] for r in data["rows"])
    assert [r["mode"] for r in data["prefetch"]] == ["sequential", "prefetch"]
    assert all(r["wrong"] == 0 and math.isfinite(r["efficiency"]) for r in data["prefetch"])
