"""nbval's check applied to outputs produced elsewhere (tests/helpers/stored_outputs.py), and the
plugin that leaves a notebook to the browser test that runs it (tests/helpers/notebook_owner.py).

The comparison is fed a notebook's own stored outputs (nbval passes them), then the same with one
change nbval would fail on, or one it ignores."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import pytest

from helpers.paths import ROOT
from helpers.stored_outputs import differences_from_stored

NOTEBOOK = ROOT / "notebooks" / "00_start_here.ipynb"


def _as_run(path: Path) -> list[dict[str, Any]]:
    """The notebook's code cells as a browser run that reproduced every stored output gives."""
    cells = nbformat.read(str(path), as_version=4).cells
    return [{"source": c.source, "outputs": copy.deepcopy(c.outputs)}
            for c in cells if c.cell_type == "code"]


def _checked_index(live: list[dict[str, Any]]) -> int:
    """A code cell of 00 whose stdout nbval compares (it carries no nbval-ignore-output tag)."""
    stored = [c for c in nbformat.read(str(NOTEBOOK), as_version=4).cells
              if c.cell_type == "code"]
    return next(i for i, c in enumerate(stored)
                if "nbval-ignore-output" not in c.metadata.get("tags", [])
                and any(o.get("name") == "stdout" for o in c.outputs))


def test_the_stored_outputs_themselves_pass(pytestconfig):
    assert differences_from_stored(pytestconfig, NOTEBOOK, _as_run(NOTEBOOK)) == []


def test_a_changed_line_fails_naming_the_cell_and_the_text(pytestconfig):
    live = _as_run(NOTEBOOK)
    i = _checked_index(live)
    out = next(o for o in live[i]["outputs"] if o.get("name") == "stdout")
    out["text"] = out["text"] + "a line the file does not hold\n"
    (found,) = differences_from_stored(pytestconfig, NOTEBOOK, live)
    assert f"00_start_here.ipynb Cell {i}: cell outputs differ" in found
    assert "a line the file does not hold" in found


def test_a_missing_output_an_error_and_other_source_each_fail(pytestconfig):
    live = _as_run(NOTEBOOK)
    i = _checked_index(live)
    live[i]["outputs"] = []
    assert "Missing output fields" in differences_from_stored(pytestconfig, NOTEBOOK, live)[0]
    live = _as_run(NOTEBOOK)
    live[i]["outputs"].append({"output_type": "error", "ename": "ValueError",
                               "evalue": "planted", "traceback": []})
    assert differences_from_stored(pytestconfig, NOTEBOOK, live) == [
        f"00_start_here.ipynb Cell {i}: ValueError: planted"]
    live = _as_run(NOTEBOOK)
    live[i]["source"] += "\n# edited"
    assert "other source" in differences_from_stored(pytestconfig, NOTEBOOK, live)[0]
    assert "code cells ran" in differences_from_stored(pytestconfig, NOTEBOOK, live[:-1])[0]


def test_what_nbval_ignores_is_ignored_and_the_figure_audit_is_not(pytestconfig):
    live = _as_run(NOTEBOOK)
    stored = [c for c in nbformat.read(str(NOTEBOOK), as_version=4).cells
              if c.cell_type == "code"]
    ignored = next(i for i, c in enumerate(stored)
                   if "nbval-ignore-output" in c.metadata.get("tags", []))
    live[ignored]["outputs"] = [{"output_type": "stream", "name": "stdout",
                                 "text": "anything at all\n"}]
    assert differences_from_stored(pytestconfig, NOTEBOOK, live) == []
    live[ignored]["outputs"] = [{"output_type": "stream", "name": "stdout",
                                 "text": "ring " * 40 + "\n"}]
    (found,) = differences_from_stored(pytestconfig, NOTEBOOK, live)
    assert f"Cell {ignored}: prints a line wider than 110 characters" in found


_OWNED_TEST = '''
import pytest

@pytest.mark.notebook("tiny.ipynb")
def test_runs_tiny():
    pass
'''


def _pytest(folder: Path, *args: str, chromium: str) -> subprocess.Popen[str]:
    """Start pytest with nbval and the owner plugin in ``folder`` (:func:`_output` waits for it
    and reads its combined output)."""
    env = dict(os.environ, DISTLAB_CHROMIUM=chromium,
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests"),
                                           os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "helpers.notebook_owner",
         "--nbval", "-o", "markers=notebook(name): runs it", "-q", *args, str(folder)],
        cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _output(proc: subprocess.Popen[str]) -> str:
    try:
        return proc.communicate(timeout=180)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


@pytest.mark.timeout(240)
def test_nbval_leaves_a_notebook_to_its_browser_test_only_when_a_browser_runs_it(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("1 + 1")]
    nbformat.write(nb, tmp_path / "tiny.ipynb")
    (tmp_path / "test_owner.py").write_text(_OWNED_TEST)
    (tmp_path / "conftest.py").write_text("")
    # the three runs share the folder only to read it (no cache provider; Python replaces
    # bytecode files atomically), so they run at once
    runs = [_pytest(tmp_path, chromium=sys.executable),
            _pytest(tmp_path, chromium=str(tmp_path / "no-such-chromium")),
            _pytest(tmp_path, "-k", "not test_runs_tiny", chromium=sys.executable)]
    try:
        with_browser, without, test_deselected = (_output(p) for p in runs)
    finally:
        for p in runs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert "1 passed, 1 deselected" in with_browser, with_browser
    assert "1 notebook(s) left to the real-browser tests" in with_browser
    assert "2 passed" in without and "deselected" not in without, without
    assert "1 passed, 1 deselected" in test_deselected, test_deselected
    assert "left to the real-browser" not in test_deselected, "nbval must run the notebook"
