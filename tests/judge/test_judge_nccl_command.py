"""``python -m distlab.judge nccl --published``: NCCL's measured-time model judged on the published
tables (in and out of sample, across nodes, other collectives, NCCL's stated choices), and one
error line with exit 2 for bad input; a bug is not reported as bad input."""

from __future__ import annotations

import pytest

from distlab.evidence.nccl.judged import ERROR_LINE
from distlab.judge.__main__ import main as judge_main


def test_published_tables_in_and_out_of_sample(capsys) -> None:
    assert judge_main(["nccl", "--published"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("# constants (us): host_us_per_gpu")
    single = out[:out.index(next(ln for ln in out if ln.startswith("# beyond one 8-GPU box")))]
    assert single[-1].split()[0] == "all" and single[-1].split()[1] == "132"
    assert sum("Azure" in ln for ln in single) == 4
    others_at = out.index(next(ln for ln in out if ln.startswith("# other collectives")))
    multi = out[len(single):others_at]
    assert "never fitted on" in multi[0]
    assert multi[-1].split()[:2] == ["all", "124"]
    assert sum(ln.startswith(("2 x 8", "3 x 8", "4 x 8")) for ln in multi) == 10
    assert sum(ln.startswith(("GB200", "4x GB200")) for ln in multi) == 4
    others = out[others_at:]
    assert others[1] == ERROR_LINE and out[1] == ERROR_LINE and multi[1] == ERROR_LINE
    rows = [ln.split() for ln in others[3:7]]
    assert [r[0] for r in rows] == ["all_gather", "reduce_scatter", "all_reduce", "all_reduce"]
    assert [r[1] for r in rows] == ["any", "any", "any", "ring+tree"]
    assert all(r[4] == r[5].split("/")[0] for r in rows)    # the algorithm the source says ran
    assert others[7].startswith("# NCCL's choice as published") and "2.27.7" in others[7]
    assert [ln.split()[0] for ln in others[8:]] == ["ring/LL", "nvls/Simple"]
    assert all(ln.split()[0] == ln.split()[-1] for ln in others[8:])   # the model agrees
    assert max(len(ln) for ln in out) <= 110


def test_published_labels_are_never_cut(capsys) -> None:
    from distlab.evidence.nccl.fit_execution import judge as judge_points
    from distlab.evidence.nccl.fit_execution import (
        multinode_points,
        shipped_constants,
        summarize,
    )

    assert judge_main(["nccl", "--published"]) == 0
    out = capsys.readouterr().out
    words = [ln[:62].split() for ln in out.splitlines()]
    shown = " ".join(w for line in words for w in line)  # the label column, lines joined
    labels = [s.label for s in summarize(judge_points(multinode_points(), shipped_constants()))]
    assert labels and all(" ".join(label.split()) in shown for label in labels)
    assert max(len(ln) for ln in out.splitlines()) <= 110


@pytest.mark.parametrize(("argv", "words"), [
    (["nccl"], "give --published or --boxes"),
    (["nccl", "--write"], "give --published"),
    (["nccl", "--boxes", "--write"], "--write refits on the published tables"),
    (["nccl", "--published", "--boxes"], "give one of --published or --boxes"),
    (["nccl", "--published", "--json", "x.json"], "--json writes the --boxes report"),
    (["nccl", "--published", "--bogus"], "unrecognized arguments: --bogus"),
    (["nccl", "h100_sxm8"], "own command now: python -m distlab.nccl h100_sxm8"),
    (["nccl", "h100_sxm8", "--nodes", "2"],
     "own command now: python -m distlab.nccl h100_sxm8 --nodes 2"),
    (["nccl", "h100_sxm8", "--json", "x.json"],
     "own command now: python -m distlab.nccl h100_sxm8 --json x.json"),
    (["nccl", "--nccl-version", "2.30"],
     "own command now: python -m distlab.nccl --nccl-version 2.30")])
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys) -> None:
    assert judge_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and err[0].endswith("(see --help)"), err


def test_boxes_is_the_inventory_judged(tmp_path, capsys) -> None:
    """``judge nccl --boxes`` prints every box, network and release with its judgement, the same
    report as ``python -m distlab.nccl --boxes``, and writes it with ``--json``."""
    from distlab.nccl.__main__ import main as nccl_main
    from distlab.report.jsonfile import read_json

    out = tmp_path / "boxes.json"
    assert judge_main(["nccl", "--boxes", "--json", str(out)]) == 0
    judged = capsys.readouterr().out
    assert nccl_main(["--boxes"]) == 0
    assert capsys.readouterr().out == judged
    assert "b200_sxm8" in judged and "efa400" in judged and "2.30" in judged
    assert "med %" in judged and "p90 %" in judged
    report = read_json(out)
    assert {b["key"] for b in report["boxes"]} >= {"b200_sxm8", "gb200_nvl72", "h200_sxm8"}


def test_the_help_points_to_the_explorer(capsys) -> None:
    assert judge_main(["nccl", "--help"]) == 0
    flat = " ".join(capsys.readouterr().out.split())
    assert "python -m distlab.nccl BOX" in flat and "--published" in flat


def test_a_bug_is_a_traceback_not_bad_input(monkeypatch) -> None:
    """A KeyError while judging is a bug: it is raised, not turned into one line and exit 2."""
    import distlab.judge.nccl_command as command

    def broken(*args, **kwargs):
        raise KeyError("planted")

    monkeypatch.setattr(command, "published_lines", broken)
    with pytest.raises(KeyError, match="planted"):
        judge_main(["nccl", "--published"])
