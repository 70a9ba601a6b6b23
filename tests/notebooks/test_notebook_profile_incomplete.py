"""Notebook 07 on a profile the profiler wrote after Ctrl-C: every cell runs, and the cells
that need a part the profile lacks say which and why instead of stopping the notebook. (The run
is executed beside the session's other runs of 07: :mod:`helpers.notebook07`.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import nbformat
import pytest

from helpers.incomplete_profile import STOPPED, incomplete_profile
from helpers.notebook07 import Run, result


def _on_a_cut_profile(folder: Path) -> Run:
    """07 with the picker pointed at an incomplete copy of a committed profile, right after the
    picker's cell."""
    cut = incomplete_profile(folder / "vm-cut")
    return Run(after_picker=(f"choice.pick({str(cut)!r})",))


#: The runs of 07 this module reads (the session's ``notebook07`` fixture executes them).
NOTEBOOK07_RUNS = {"on an incomplete profile": _on_a_cut_profile}


def _texts(cell: nbformat.NotebookNode) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", [])
                   if o.get("output_type") == "stream")


@pytest.mark.timeout(600)
def test_notebook_07_goes_on_through_an_incomplete_profile(notebook07: dict[str, Any]) -> None:
    nb = result(notebook07, "on an incomplete profile")   # raises what the first failing cell did
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
