"""The figure guard (tests/helpers/figure_guard.py) fails a notebook that shows a bare Figure
repr."""

from __future__ import annotations

import nbformat
import pytest

from helpers.figure_guard import MAX_COLUMNS, bare_figure_texts, unshown_figure_lines, wide_lines
from helpers.notebook_runs import NotebookRun, run_notebooks

BARE_CELL = ("from matplotlib.figure import Figure\nfig = Figure(figsize=(4, 3))\n"
             "fig.add_subplot()\nfig")
UNSHOWN_CELL = ("from distlab.viz.figure import new_figure\nfig = new_figure(figsize=(4, 3))\n"
                "fig.add_subplot().set_title('lost')")
UNSHOWN_PYPLOT_CELL = "import matplotlib.pyplot as plt\n" + UNSHOWN_CELL
CROWDED_CELL = ("from distlab.viz.figure import new_figure\nfig = new_figure(figsize=(3, 2))\n"
                "ax = fig.add_subplot()\n"
                "ax.bar(['no-overlap', 'overlap', 'naive', 'torch', 'bucketed'], [1, 2, 3, 4, 5])\n"
                "fig")
WIDE_CELL = "print('ring ' * 40)"
DISPLAYED_CELL = ("from distlab.viz.figure import new_figure\nfig = new_figure(figsize=(4, 3))\n"
                  "fig.add_subplot()\nfig")


DISPLAY_CELL = ("import matplotlib.pyplot as plt\n" + UNSHOWN_CELL
                + "\nfrom IPython.display import display\ndisplay(fig)")

#: Every notebook these tests run: ``key -> (second cell's source, its tags)``; the first cell
#: of each is ``1 + 1``, which passes.
CASES: dict[str, tuple[str, list[str] | None]] = {
    "bare": (BARE_CELL, None),
    "bare_ignored": (BARE_CELL, ["nbval-ignore-output"]),
    "displayed": (DISPLAYED_CELL, None),
    "unshown": (UNSHOWN_CELL, ["nbval-ignore-output"]),
    "unshown_pyplot": (UNSHOWN_PYPLOT_CELL, ["nbval-ignore-output"]),
    "display_call": (DISPLAY_CELL, None),
    "crowded": (CROWDED_CELL, ["nbval-ignore-output"]),
    "wide": (WIDE_CELL, ["nbval-ignore-output"]),
}


def _notebook(source: str, tags: list[str] | None) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = tags
    nb.cells = [nbformat.v4.new_code_cell("1 + 1"), cell]
    return nb


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, NotebookRun]:
    """Every case's notebook run by pytest (this repo's root conftest and pyproject options, a
    fresh kernel each), all in one pytest process."""
    return run_notebooks(tmp_path_factory.mktemp("guarded"),
                         {k: _notebook(src, tags) for k, (src, tags) in CASES.items()})


def _fails_its_second_cell(run: NotebookRun, says: str) -> None:
    assert (run.count("failed"), run.count("passed")) == (1, 1), run
    assert run.cells[1].outcome == "failed" and says in run.text, run.text


@pytest.mark.parametrize("case", ["bare", "bare_ignored"])
def test_bare_figure_cell_fails(runs: dict[str, NotebookRun], case: str) -> None:
    _fails_its_second_cell(runs[case], "as text and no image/png")


def test_new_figure_cell_passes(runs: dict[str, NotebookRun]) -> None:
    assert runs["displayed"].count("passed") == 2, runs["displayed"].text


@pytest.mark.parametrize("case", ["unshown", "unshown_pyplot"])
def test_a_figure_made_and_never_shown_fails(runs: dict[str, NotebookRun], case: str) -> None:
    """`fig = some_figure(...)` as a cell's last line shows nothing: the audit line fails it,
    whether or not pyplot's inline backend is active."""
    _fails_its_second_cell(runs[case], "was never shown")
    assert "'lost'" in runs[case].text, runs[case].text


def test_a_figure_passed_to_display_passes(runs: dict[str, NotebookRun]) -> None:
    assert runs["display_call"].count("passed") == 2, runs["display_call"].text


def test_unshown_figure_lines() -> None:
    line = "distlab figure audit: a figure made in this cell (4x3 in, 1 axes) was never shown"
    stderr = {"output_type": "stream", "name": "stderr", "text": "warning\n" + line + "\n"}
    assert unshown_figure_lines([stderr]) == [line]
    assert unshown_figure_lines([{"output_type": "stream", "name": "stderr", "text": "x\n"}]) == []


def test_bare_figure_texts() -> None:
    bare = "<Figure size 400x300 with 1 Axes>"
    text = {"output_type": "execute_result", "data": {"text/plain": bare}}
    image = {"output_type": "display_data", "data": {"image/png": "iVBOR", "text/plain": bare}}
    stream = {"output_type": "stream", "name": "stdout",
              "text": ["<Figure size 640x480 with 0 Axes>\n"]}
    assert bare_figure_texts([text]) == ["<Figure size 400x300 with 1 Axes>"]
    assert bare_figure_texts([stream]) == ["<Figure size 640x480 with 0 Axes>"]
    assert bare_figure_texts([text, image]) == []
    number = {"output_type": "execute_result", "data": {"text/plain": "42"}}
    assert bare_figure_texts([number]) == []


def test_root_conftest_loads_the_guard(pytestconfig: pytest.Config) -> None:
    """Every run from this repository (tests and notebooks alike) has the guard active."""
    assert pytestconfig.pluginmanager.has_plugin("helpers.figure_guard")


@pytest.mark.parametrize(("case", "says"), [("crowded", "overlaps xtick"),
                                             ("wide", f"wider than {MAX_COLUMNS} characters")])
def test_colliding_labels_and_wide_lines_fail(runs: dict[str, NotebookRun], case: str,
                                              says: str) -> None:
    """A figure whose tick labels run into each other, and a printed line JupyterLab wraps, fail
    the cell that shows them, in an output-checked cell and an ignored one alike."""
    _fails_its_second_cell(runs[case], says)


def test_wide_lines_read_only_what_is_shown_as_text() -> None:
    wide = "x" * (MAX_COLUMNS + 1)
    stream = {"output_type": "stream", "name": "stdout", "text": f"ok\n{wide}\n"}
    widget = {"output_type": "display_data",
              "data": {"text/plain": wide, "application/vnd.jupyter.widget-view+json": {}}}
    html = {"output_type": "execute_result", "data": {"text/plain": wide, "text/html": "<b/>"}}
    assert wide_lines([stream, widget, html]) == [wide]
    assert wide_lines([{"output_type": "stream", "name": "stdout",
                        "text": "x" * MAX_COLUMNS}]) == []
