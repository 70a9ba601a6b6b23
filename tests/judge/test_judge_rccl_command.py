"""``python -m distlab.judge rccl``: RCCL's model judged as ``judge nccl`` judges NVIDIA's, the
same report as ``python -m distlab.rccl --judge`` / ``--boxes``, bad input one line and exit 2."""

from __future__ import annotations

import json

import pytest

from distlab.judge.__main__ import main as judge_main
from distlab.judge.rccl_command import main as rccl_judge
from distlab.rccl.__main__ import main as rccl_main


@pytest.mark.parametrize(("ours", "theirs"), [(["--published"], ["--judge"]),
                                              (["--boxes"], ["--boxes"])])
def test_the_same_report_as_the_models_own_command(ours, theirs, capsys, tmp_path) -> None:
    assert rccl_judge([*ours, "--json", str(tmp_path / "a.json")]) == 0
    text = capsys.readouterr().out
    assert rccl_main([*theirs, "--json", str(tmp_path / "b.json")]) == 0
    assert capsys.readouterr().out == text and text.strip()
    assert json.loads((tmp_path / "a.json").read_text()) == \
        json.loads((tmp_path / "b.json").read_text())


def test_dispatched_by_judge(capsys) -> None:
    assert judge_main(["rccl", "--published"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# the execution model on published rccl-tests allreduce tables")
    assert judge_main(["--help"]) == 0
    assert "rccl     --published: RCCL's execution model" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "words"), [
    ([], "give one of --published or --boxes"),
    (["--published", "--boxes"], "give one of --published or --boxes"),
    (["--judge"], "unrecognized arguments: --judge")])
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys) -> None:
    assert rccl_judge(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
