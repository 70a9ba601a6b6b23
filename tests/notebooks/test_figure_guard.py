"""The figure guard (tests/helpers/figure_guard.py) fails a notebook that shows a bare Figure
repr."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers.figure_guard import MAX_COLUMNS, bare_figure_texts, unshown_figure_lines, wide_lines
from helpers.paths import ROOT

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


def _run_notebook(tmp_path: Path, source: str,
                  tags: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run pytest (this repo's root conftest and pyproject options) on a one-cell notebook."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(source)
    if tags:
        cell.metadata["tags"] = tags
    nb.cells = [nbformat.v4.new_code_cell("1 + 1"), cell]
    path = tmp_path / "guarded.ipynb"
    nbformat.write(nb, path)
    # a fresh kernel, no backend forced
    env = dict(os.environ, SMOKE="1", MPLBACKEND="", DISTLAB_FIGURE_AUDIT="1")
    env.pop("MPLBACKEND")
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(path), "-q", "-p", "no:randomly",
         "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), "-p", "helpers.figure_guard"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("tags", [None, ["nbval-ignore-output"]])
def test_bare_figure_cell_fails(tmp_path: Path, tags: list[str] | None) -> None:
    run = _run_notebook(tmp_path, BARE_CELL, tags)
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "as text and no image/png" in out, out
    assert "1 failed, 1 passed" in out, out


@pytest.mark.timeout(300)
def test_new_figure_cell_passes(tmp_path: Path) -> None:
    run = _run_notebook(tmp_path, DISPLAYED_CELL)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out
    assert "2 passed" in out, out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("source", [UNSHOWN_CELL, UNSHOWN_PYPLOT_CELL])
def test_a_figure_made_and_never_shown_fails(tmp_path: Path, source: str) -> None:
    """`fig = some_figure(...)` as a cell's last line shows nothing: the audit line fails it,
    whether or not pyplot's inline backend is active."""
    run = _run_notebook(tmp_path, source, ["nbval-ignore-output"])
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert "was never shown" in out and "'lost'" in out, out
    assert "1 failed, 1 passed" in out, out


@pytest.mark.timeout(300)
def test_a_figure_passed_to_display_passes(tmp_path: Path) -> None:
    run = _run_notebook(tmp_path, "import matplotlib.pyplot as plt\n" + UNSHOWN_CELL
                        + "\nfrom IPython.display import display\ndisplay(fig)")
    out = run.stdout + run.stderr
    assert run.returncode == 0, out


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


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("source", "says"), [(CROWDED_CELL, "overlaps xtick"),
                                               (WIDE_CELL, f"wider than {MAX_COLUMNS} characters")])
def test_colliding_labels_and_wide_lines_fail(tmp_path: Path, source: str, says: str) -> None:
    """A figure whose tick labels run into each other, and a printed line JupyterLab wraps, fail
    the cell that shows them, in an output-checked cell and an ignored one alike."""
    run = _run_notebook(tmp_path, source, ["nbval-ignore-output"])
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert says in out and "1 failed, 1 passed" in out, out


def test_wide_lines_read_only_what_is_shown_as_text() -> None:
    wide = "x" * (MAX_COLUMNS + 1)
    stream = {"output_type": "stream", "name": "stdout", "text": f"ok\n{wide}\n"}
    widget = {"output_type": "display_data",
              "data": {"text/plain": wide, "application/vnd.jupyter.widget-view+json": {}}}
    html = {"output_type": "execute_result", "data": {"text/plain": wide, "text/html": "<b/>"}}
    assert wide_lines([stream, widget, html]) == [wide]
    assert wide_lines([{"output_type": "stream", "name": "stdout",
                        "text": "x" * MAX_COLUMNS}]) == []
