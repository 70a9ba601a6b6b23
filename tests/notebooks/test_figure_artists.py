"""Every figure a notebook cell shows is read back (its drawn artists) and the cell fails when
one name of the palette has two colours, two names share one, a legend covers data, an axis
shows one labelled tick, or the image is wider than JupyterLab shows it
(:func:`distlab.viz.layout_check.layout_problems`, run by :mod:`distlab.viz.figure`'s audit on
every figure a kernel renders, reported by ``tests/helpers/figure_guard.py``)."""

from __future__ import annotations

import nbformat
import pytest

from helpers.notebook_runs import NotebookRun, run_notebooks

HEAD = ("from distlab.viz.figure import new_figure\n"
        "from distlab.viz.palette import colour\n"
        "fig = new_figure(figsize=(6, 3))\nax = fig.add_subplot()\n")
CELLS = {
    "two colours": (HEAD + "ax.plot([1, 2], [1, 2], color=colour('ring'), label='ring')\n"
                    "ax.plot([1, 2], [2, 3], color=colour('tree'), label='ring (model)')\n"
                    "ax.legend(loc='upper left')\nfig",
                    "'ring' is drawn in 2 colours"),
    "legend over data": (HEAD + "ax.plot(range(10), [5] * 10, color=colour('ring'), "
                         "label='ring')\nax.set_ylim(0, 10)\nax.legend(loc='center')\nfig",
                         "legend 'ring' (axes 0) covers data of axes 0"),
    "too wide": ("from distlab.viz.figure import new_figure\nfig = new_figure(figsize=(13, 3))\n"
                 "fig.add_subplot().plot([1, 2], [1, 2])\nfig",
                 "JupyterLab shows 968 px"),
}


def _notebook(source: str) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["nbval-ignore-output"]
    nb.cells = [cell]
    return nb


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, NotebookRun]:
    """Each case's one-cell notebook run by pytest (nbval, the root conftest's figure guard; a
    fresh kernel each), all in one pytest process."""
    return run_notebooks(tmp_path_factory.mktemp("artists"),
                         {f"case{i}": _notebook(src) for i, (src, _) in enumerate(CELLS.values())})


@pytest.mark.parametrize("case", list(CELLS))
def test_a_figure_a_reader_cannot_read_fails_its_cell(runs: dict[str, NotebookRun],
                                                      case: str) -> None:
    expected = CELLS[case][1]
    run = runs[f"case{list(CELLS).index(case)}"]
    assert run.count("failed") == 1, run
    assert expected in run.text, run.text
