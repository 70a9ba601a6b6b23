"""``bench transfers --paths peer,host-to-all``: one skipped line each without a GPU, the
rehearsal's rows and matrices labelled as such, bad combinations one error line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distlab.bench.__main__ import main as bench_main
from helpers.figure_guard import MAX_COLUMNS


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what a box without CUDA prints")
def test_without_a_gpu_each_path_is_one_skipped_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["transfers", "--paths", "gpus", "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["# skipped peer: no CUDA device (torch.cuda.is_available() is False)",
                   "# skipped host-to-all: no CUDA device (torch.cuda.is_available() is False)"]


def test_rehearsal_rows_are_labelled_and_written(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    out_json = tmp_path / "gpus.json"
    assert bench_main(["transfers", "--paths", "peer,host-to-all", "--rehearse",
                       "pcie_two_switches", "-b", "4", "-e", "64K", "--repeats", "1",
                       "--iters", "1", "--warmup", "0", "--no-progress",
                       "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    assert "rehearsal:pcie_two_switches: host memory stands in" in text
    assert "GPU-to-GPU GB/s, one way, 65536 B (rehearsal" in text
    assert max(len(ln) for ln in text.splitlines()) <= MAX_COLUMNS
    doc = json.loads(out_json.read_text())
    gpus = doc["gpus"]
    assert gpus["box"] == {"box": "rehearsal:pcie_two_switches", "gpus": 4, "rehearsal": True}
    assert len(gpus["peer"]) == 2 * (12 + 6) and all(r["rehearsal"] for r in gpus["peer"])
    assert {r["run"] for r in gpus["host_to_all"]} == {"local", "remote"}
    assert doc["rows"] == gpus["peer"]          # the first table is the matrix's rows


@pytest.mark.parametrize("argv, says", [
    (["--paths", "h2h", "--rehearse", "dgx_h100_like"], "used with --paths peer"),
    (["--paths", "gpus", "--rehearse", "dgx_b200"], "invalid choice: 'dgx_b200'"),
    (["--paths", "peers"], "invalid value 'peers'"),
])
def test_bad_input_is_one_line_and_exit_2(argv: list[str], says: str,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["transfers", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0]
