"""Run several small notebooks under nbval and the figure guard in one pytest subprocess.

The tests of the figure guard and of the figure audit each need a notebook run the way a
notebook test runs here (this repository's root conftest and pyproject options, a fresh kernel,
no matplotlib backend forced). Starting pytest is the slow part (it imports torch for the
header), so the cases of a test module share subprocesses: nbval gives each notebook file its
own kernel, so the cases do not see each other's state. The notebooks are split into two halves,
each run by its own pytest at the same time (one per core of a 2-core machine: a kernel runs one
cell at a time). The result per notebook is read from each pytest's JUnit XML, whose test cases
come in the order of the files on its command line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import nbformat

from helpers.paths import ROOT

__all__ = ["CellRun", "NotebookRun", "run_notebooks"]


@dataclass(frozen=True)
class CellRun:
    """One code cell as nbval ran it: ``"passed"``, ``"failed"`` or ``"skipped"``, and the
    failure's text ("" when it passed)."""

    outcome: str
    message: str


@dataclass(frozen=True)
class NotebookRun:
    """The cells of one notebook, in order, as nbval ran them."""

    cells: tuple[CellRun, ...]

    def count(self, outcome: str) -> int:
        return sum(c.outcome == outcome for c in self.cells)

    @property
    def text(self) -> str:
        """Every failure's text, joined (what the test looks for)."""
        return "\n".join(c.message for c in self.cells if c.message)


def _code_cells(nb: nbformat.NotebookNode) -> int:
    return sum(c.cell_type == "code" for c in nb.cells)


def run_notebooks(folder: Path, notebooks: Mapping[str, nbformat.NotebookNode],
                  timeout_s: float = 400.0) -> dict[str, NotebookRun]:
    """Write each notebook as ``folder/<key>.ipynb``, run pytest on them (two processes at once,
    half of the notebooks each) and return each key's :class:`NotebookRun`.

    Raises:
        AssertionError: a pytest did not report one test case per code cell of its notebooks
            (its output is in the message).
    """
    paths = []
    for key, nb in notebooks.items():
        path = folder / f"{key}.ipynb"
        nbformat.write(nb, path)
        paths.append(path)
    env = dict(os.environ, SMOKE="1", DISTLAB_FIGURE_AUDIT="1")
    env.pop("MPLBACKEND", None)  # a fresh kernel, no backend forced
    half = (len(paths) + 1) // 2
    groups = [g for g in (paths[:half], paths[half:]) if g]
    procs = []
    for i, group in enumerate(groups):
        report = folder / f"junit{i}.xml"
        log = open(folder / f"pytest{i}.log", "w+")  # closed below, once the pytest is done
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", *map(str, group), "-q", "-p", "no:randomly",
             "--rootdir", str(ROOT), "-c", str(ROOT / "pyproject.toml"), "-p",
             "helpers.figure_guard", "--junitxml", str(report)],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        procs.append((proc, report, log, group))
    cells: list[CellRun] = []
    wanted = [_code_cells(nb) for nb in notebooks.values()]
    try:
        for proc, report, log, group in procs:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            log.seek(0)
            output = log.read()
            found = _cell_runs(report)
            want = sum(_code_cells(notebooks[p.stem]) for p in group)
            assert len(found) == want, (f"pytest reported {len(found)} cells, the notebooks "
                                        f"{[p.name for p in group]} hold {want}:\n"
                                        f"{output[-5000:]}")
            cells.extend(found)
    finally:
        for proc, _, log, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    out, start = {}, 0
    for key, n in zip(notebooks, wanted, strict=True):
        out[key] = NotebookRun(tuple(cells[start:start + n]))
        start += n
    return out


def _cell_runs(report: Path) -> list[CellRun]:
    """Every test case of a JUnit XML report as a :class:`CellRun`, in order (none when pytest
    wrote no report)."""
    cases = ET.parse(report).getroot().iter("testcase") if report.exists() else iter(())
    cells = []
    for case in cases:
        failed = case.find("failure")
        if failed is None:
            failed = case.find("error")
        skipped = case.find("skipped") is not None
        cells.append(CellRun("failed" if failed is not None else
                             "skipped" if skipped else "passed",
                             "" if failed is None else (failed.text or failed.get("message", ""))))
    return cells
