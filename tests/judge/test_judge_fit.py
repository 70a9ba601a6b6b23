"""``python -m distlab.judge fit``: the planner on the committed GPU runs, per split, with the
verdicts, and bad input (one line, exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from distlab.judge.fit_command import main

RESULTS = Path(__file__).resolve().parents[2] / "results" / "gpu-h200-2026-11-27-fit"


def test_the_committed_runs_are_judged(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(RESULTS), "--runs"]) == 0
    out = capsys.readouterr().out
    assert "verdicts: 77 of 77 agree with the run; 'fits' where it ran out of memory: 0" in out
    assert "held out: step median" in out
    assert "llama3-8b s2048 mb1 op" in out and "does not fit / out of memory" in out


@pytest.mark.parametrize(("argv", "match"), [
    (["/no/such/grid"], "no such file"),
    ([str(Path(__file__))], "not a verify grid"),
])
def test_bad_input(argv: list[str], match: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert match in capsys.readouterr().err
