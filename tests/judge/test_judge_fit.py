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


def test_the_planners_reserved_error_is_the_held_out_p90_of_these_runs() -> None:
    """:data:`~distlab.plan.calibration.RESERVED_ERROR_P90`, what the planner calls a tight fit
    by, computed again from the committed runs (the constant keeps two decimals)."""
    from distlab.judge.fit_grid import judge_grid, summaries
    from distlab.plan.calibration import RESERVED_ERROR_P90

    p90 = summaries(judge_grid([RESULTS]), "held_out")["reserved"].p90
    assert abs(p90 - RESERVED_ERROR_P90) <= 0.005, p90


def test_one_count_per_quantity_in_the_table_the_legend_and_notebook_17() -> None:
    """Each split's counts (runs, ran, out of memory, timed) are computed once
    (:func:`~distlab.judge.fit_grid.counts`): the table's ``n`` of the step is the runs timed,
    of the memory the runs that ran; the command's count lines, the figure's legend and
    notebook 17's prose say the same numbers for the same words."""
    import json
    import re

    import matplotlib

    matplotlib.use("Agg")
    from distlab.judge.fit_command import report_lines
    from distlab.judge.fit_grid import counts, judge_grid, summaries
    from distlab.viz.plan import fit_grid_figure

    runs = judge_grid([RESULTS])
    lines = report_lines(runs)
    legend = [t.get_text() for t in fit_grid_figure(runs).legends[0].get_texts()]
    for split, name in (("calibration", "calibration"), ("held_out", "held out")):
        c, s = counts(runs, split), summaries(runs, split)
        assert (s["step"].n, s["allocated"].n, s["reserved"].n) == (c.timed, c.ran, c.ran)
        assert c.runs == c.ran + c.out_of_memory
        line = f"{name}: {c.runs} runs, {c.ran} ran, {c.timed} timed"
        assert line in lines and line in legend
        table = {r.split()[1]: int(r.split()[2]) for r in lines[0].splitlines()[1:]
                 if r.split()[0] == split}
        assert table == {"step": c.timed, "allocated": c.ran, "reserved": c.ran}
    held = counts(runs, "held_out")
    notebook = Path(__file__).resolve().parents[2] / "notebooks" / "17_planner.ipynb"
    prose = " ".join(" ".join("".join(cell["source"]).split())
                     for cell in json.loads(notebook.read_text())["cells"]
                     if cell["cell_type"] == "markdown")
    said = re.search(r"Of the (\d+) held-out runs, (\d+) ran and (\d+) ran out of memory[^;]*; "
                     r"(\d+) ran on a free allocator and are timed", prose)
    assert said is not None, "notebook 17 names the held-out counts"
    assert tuple(map(int, said.groups())) == (held.runs, held.ran, held.out_of_memory,
                                              held.timed)
    assert not re.search(r"\b(\d+) held-out runs\b", prose.replace(said[0], "")), \
        "one place in the prose counts the held-out runs"
