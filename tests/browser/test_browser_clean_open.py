"""Real browser: every notebook opens in JupyterLab unmodified (no dirty dot on its tab), and
stays so through a kernel restart and code run in the kernel outside the notebook's cells
(:func:`browser.clean_open.check_opens_unmodified`).

The browser test that runs a notebook checks this too, on the same page, before Run All
(:func:`browser.lab.run_notebook_and_check`); where that test is selected, the case here for the
same notebook is left to it (``tests/helpers/notebook_owner.py``), so a run opens each notebook
once. ``DISTLAB_CLEAN_OPEN_DIR=/some/folder`` runs the same checks on the notebooks of another
folder (its own JupyterLab serves it), e.g. copies cleaned with ``tools/nbtool.py clean``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from browser.clean_open import check_opens_unmodified
from browser.conftest import NOTEBOOKS, serve_lab
from browser.lab import Lab, open_notebook

FOLDER = Path(os.environ.get("DISTLAB_CLEAN_OPEN_DIR") or NOTEBOOKS)
OWN_NOTEBOOKS = FOLDER.resolve() == NOTEBOOKS.resolve()


def _notebooks() -> list:
    """One case per notebook; those of notebooks/ are marked so that the browser test that
    runs the same notebook (and checks this on opening it) takes it over."""
    return [pytest.param(p.name, marks=[pytest.mark.opens_notebook(p.name)] if OWN_NOTEBOOKS
                         else []) for p in sorted(FOLDER.glob("*.ipynb"))]


@pytest.fixture(scope="module")
def served(request: pytest.FixtureRequest) -> Iterator[Lab]:
    """The lab serving ``FOLDER``: the session's lab for notebooks/, else one of its own."""
    if OWN_NOTEBOOKS:
        yield request.getfixturevalue("lab")
        return
    request.getfixturevalue("chromium_path")  # skip (or fail in CI) without a browser
    with serve_lab(FOLDER) as running:
        yield running


@pytest.mark.parametrize("name", _notebooks())
def test_notebook_opens_unmodified(served, page, name):
    open_notebook(page, served, name)
    why_not_dirty_flag = check_opens_unmodified(page, FOLDER, name)
    if why_not_dirty_flag:
        pytest.skip(why_not_dirty_flag)
