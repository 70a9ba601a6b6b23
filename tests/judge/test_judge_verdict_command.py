"""``python -m distlab.judge verdict DIR``: one line per judged row, ``low`` on a copy of the H100
profile with its h2d rates halved, one error line and exit 2 on a bad folder, 130 on Ctrl-C."""

from __future__ import annotations

import json
import shutil

import pytest

from distlab.judge.__main__ import main as judge_main
from distlab.judge.verdict_command import main
from helpers.cli_errors import one_error_line
from helpers.paths import PROFILES

H100 = PROFILES / "h100-2026-11-23"


def _row_line(out: str, row: str) -> list[str]:
    lines = [ln.split() for ln in out.splitlines() if row in ln]
    assert len(lines) == 1, out
    return lines[0]


def test_h100_h2d_pinned_is_ok(capsys) -> None:
    assert judge_main(["verdict", str(H100)]) == 0
    out = capsys.readouterr().out
    assert "part" in out and "measured" in out and "verdict" in out
    line = _row_line(out, "h2d/pinned peak")
    assert line[0] == "transfers" and line[-1] == "ok" and line[-5] == "55.23"
    assert line[-3] == "GB/s"
    assert max(len(ln) for ln in out.splitlines()) <= 110


def test_halved_h2d_is_low(tmp_path, capsys) -> None:
    copy = shutil.copytree(H100, tmp_path / "halved")
    doc = json.loads((copy / "transfers.json").read_text())
    for dev in doc["devices"]:
        for row in dev["rows"]:
            if row["path"] == "h2d" and row.get("gbps"):
                row["gbps"] /= 2
    (copy / "transfers.json").write_text(json.dumps(doc))
    assert main([str(copy), "--low"]) == 0
    out = capsys.readouterr().out
    line = _row_line(out, "h2d/pinned peak")
    assert line[-1] == "low" and float(line[-2]) == pytest.approx(0.5, abs=0.02)
    assert "d2h/pinned" not in out                      # --low: only the low rows
    rows = [ln for ln in out.splitlines() if not ln.startswith("#")][1:]  # after the header
    assert rows and all(ln.split()[-1] == "low" for ln in rows)


def test_every_committed_profile_gets_a_verdict(capsys) -> None:
    folders = sorted(p for p in PROFILES.iterdir() if (p / "profile.json").is_file())
    assert main([str(p) for p in folders]) == 0
    out = capsys.readouterr().out
    assert out.count("rows with an expectation") == len(folders)
    assert max(len(ln) for ln in out.splitlines()) <= 110


def test_the_quick_profile_is_unsure_where_five_rounds_cannot_judge(capsys) -> None:
    """The committed --quick profile: 5 rounds per row; a row beyond a threshold whose rounds
    reach back inside is unsure, and the listing leads with what is off."""
    assert main([str(PROFILES / "vm-2026-11-23-quick")]) == 0
    out = capsys.readouterr().out
    verdicts = [ln.split()[-1] for ln in out.splitlines() if ln.startswith("collectives")]
    assert "unsure" in verdicts and "low" not in verdicts and "high" not in verdicts
    order = {"low": 0, "high": 1, "unsure": 2, "ok": 3}
    assert [order[v] for v in verdicts] == sorted(order[v] for v in verdicts)


def _bad_profile(tmp):
    (tmp / "bad").mkdir()
    (tmp / "bad" / "profile.json").write_text("{not json")
    return tmp / "bad"


@pytest.mark.parametrize("make_argv", [lambda t: [str(t / "missing")], lambda t: [str(t)],
                                       lambda t: [str(_bad_profile(t))], lambda t: []])
def test_bad_input_is_one_error_line_and_exit_2(tmp_path, capsys, make_argv) -> None:
    assert main(make_argv(tmp_path)) == 2
    captured = capsys.readouterr()
    one_error_line(captured.err, out=captured.out)


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys) -> None:
    import distlab.judge.verdict_command as command

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(command, "profile_verdicts", interrupted)
    assert main([str(H100)]) == 130
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("python -m distlab.judge verdict: interrupted by Ctrl-C")


@pytest.mark.parametrize("error", [KeyError, TypeError, ValueError])
def test_a_bug_while_judging_is_a_traceback_not_bad_input(monkeypatch, error) -> None:
    """The command checks that each folder's JSON reads; an error raised while judging its rows
    is a bug and keeps its traceback (not one line and exit 2)."""
    import distlab.judge.verdict_command as command

    def broken(*args, **kwargs):
        raise error("planted")

    monkeypatch.setattr(command, "profile_verdicts", broken)
    with pytest.raises(error, match="planted"):
        main([str(H100)])
