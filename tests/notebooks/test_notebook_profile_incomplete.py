"""Notebook 07 on a profile the profiler wrote after Ctrl-C: every cell runs, and the cells
that need a part the profile lacks say which and why instead of stopping the notebook."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from helpers.incomplete_profile import STOPPED, incomplete_profile
from helpers.paths import ROOT

NOTEBOOK = ROOT / "notebooks" / "07_profile.ipynb"


def _texts(cell: nbformat.NotebookNode) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


@pytest.mark.timeout(600)
def test_notebook_07_goes_on_through_an_incomplete_profile(tmp_path: Path) -> None:
    cut = incomplete_profile(tmp_path / "vm-cut")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    picker = next(i for i, c in enumerate(nb.cells) if c.source.strip() == "choice.widget")
    nb.cells.insert(picker + 1, nbformat.v4.new_code_cell(f"choice.pick({str(cut)!r})"))
    env = {**os.environ, "SMOKE": "1"}
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    old = dict(os.environ)
    os.environ.update(env)
    try:
        client.execute()   # raises CellExecutionError on the first cell that fails
    finally:
        os.environ.clear()
        os.environ.update(old)
    cells = [c for c in nb.cells if c.cell_type == "code"]
    said = "\n".join(_texts(c) for c in cells)
    assert f"vm-cut is INCOMPLETE ({STOPPED})" in said
    reads = [c for c in cells if "prof = choice.use()" in c.source]
    assert reads and all("profile: vm-cut" in _texts(c) for c in reads)
    needs = [c for c in reads if 'vp.has(prof, "collectives")' in c.source]
    assert len(needs) >= 4
    assert all(f"vm-cut has no collectives part (interrupted: {STOPPED}): nothing to show here"
               in _texts(c) for c in needs)
    assert "ddp: not in this profile" in said
