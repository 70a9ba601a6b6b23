"""Every figure a notebook cell shows is read back (its drawn artists) and the cell fails when
one name of the palette has two colours, two names share one, a legend covers data, an axis
shows one labelled tick, or the image is wider than JupyterLab shows it
(:func:`distlab.viz.layout_check.layout_problems`, run by :mod:`distlab.viz.figure`'s audit on
every figure a kernel renders, reported by ``tests/helpers/figure_guard.py``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers.paths import ROOT

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


def _run_cell(tmp_path: Path, source: str) -> subprocess.CompletedProcess:
    """pytest (nbval, the root conftest's figure guard) on a notebook of one cell."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["tags"] = ["nbval-ignore-output"]
    nb.cells = [cell]
    path = tmp_path / "artists.ipynb"
    nbformat.write(nb, path)
    env = dict(os.environ, SMOKE="1", DISTLAB_FIGURE_AUDIT="1")
    env.pop("MPLBACKEND", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(path), "-q", "-p", "no:randomly",
         "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), "-p", "helpers.figure_guard"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", list(CELLS))
def test_a_figure_a_reader_cannot_read_fails_its_cell(tmp_path: Path, case: str) -> None:
    source, expected = CELLS[case]
    run = _run_cell(tmp_path, source)
    out = run.stdout + run.stderr
    assert run.returncode == 1 and "1 failed" in out, out
    assert expected in out, out
