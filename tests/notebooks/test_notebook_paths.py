"""The planner's notebooks run from wherever a reader puts them: a copy of ``notebooks/``, a
folder of their own. What they read comes from the installed package (``distlab.plan.kernels.
measured_kernels``, the published runs), never from a path built on the working directory."""

from __future__ import annotations

import re

import nbformat
import pytest

from helpers.paths import ROOT

NOTEBOOKS = ("15_pipeline_parallel.ipynb", "16_tensor_parallel.ipynb", "17_planner.ipynb",
             "18_mixture_of_experts.ipynb")
_FROM_CWD = re.compile(r"Path\.cwd\(\)|os\.getcwd\(\)|[\"']\.\./|[\"']results/|"
                       r"[\"']results[\"']")


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_no_cell_reads_a_path_from_the_working_directory(name: str) -> None:
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    found = [f"cell {i}: {line.strip()}" for i, cell in enumerate(nb.cells)
             if cell.cell_type == "code" for line in cell.source.splitlines()
             if _FROM_CWD.search(line)]
    assert found == [], f"{name} builds paths on the working directory: {found}"
