"""Real browser: the check that lets nbval leave a notebook to its browser test fails the run
where nbval would. A notebook whose stored output holds a line its code does not print is run in
JupyterLab, and the run fails naming the cell and the line; the cell nbval ignores does not."""

from __future__ import annotations

import dataclasses

import nbformat
import pytest

from browser.conftest import NOTEBOOKS, serve_lab
from browser.lab import run_notebook_and_check


def _cell(source: str, printed: str, tags: list[str] | None = None) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source, execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    if tags:
        cell.metadata["tags"] = tags
    return cell


def test_a_stored_output_the_run_does_not_reproduce_fails_it(tmp_path, page, pytestconfig,
                                                             chromium_path):
    del chromium_path  # skips (or fails in CI) without a browser
    nb = nbformat.v4.new_notebook()
    nb.metadata = nbformat.read(str(NOTEBOOKS / "00_start_here.ipynb"), 4).metadata  # kernel
    nb.cells = [_cell("print('same')", "same\n"),
                _cell("print('ignored')", "whatever\n", ["nbval-ignore-output"]),
                _cell("print('checked')", "checked\na line no kernel prints\n")]
    nbformat.write(nb, str(tmp_path / "planted.ipynb"))
    with serve_lab(tmp_path) as running:
        lab = dataclasses.replace(running, config=pytestconfig)
        with pytest.raises(AssertionError) as failed:
            run_notebook_and_check(page, lab, "planted.ipynb", timeout_s=120)
    message = str(failed.value)
    assert message.startswith("planted.ipynb Cell 2: cell outputs differ"), message
    assert "a line no kernel prints" in message
    assert "Cell 0" not in message and "Cell 1" not in message, message
