"""pytest plugin: a notebook that a real-browser test runs is not run a second time by nbval.

A browser test marked ``@pytest.mark.notebook("06_ddp.ipynb")`` runs that notebook top to bottom
in JupyterLab and checks its outputs as nbval would (:mod:`helpers.stored_outputs`, called by
``browser.lab.run_notebook_and_check``), after checking that it opened unmodified. When such a
test is selected in this run and a Chromium is there to run it, nbval's items for the same
notebook, and the clean-open case marked ``opens_notebook(name)`` for it, are deselected, so the
notebook is opened and executed once per run instead of three times. Without a browser (the
browser tests skip outside CI), or when the browser test is deselected (``-m "not browser"``,
``-k``, a single notebook on the command line), nbval and the clean-open case run the notebook
as usual: nothing is left unchecked.

When the browser tests run in a second process beside this one (``tools/run_tests.py`` sets
:data:`ELSEWHERE` to ``"1"`` here), this run leaves them to it: the browser tests are
deselected here, and so are the nbval items and clean-open cases of the notebooks they run, as
if they ran here. The browser tests themselves may be shared out over several such processes
(:data:`SHARD`: the test files this one runs); each still collects them all, so every process
leaves the same notebooks to the browser tests.

Loaded for every run by the root ``conftest.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.chromium import chromium_executable

__all__ = ["ELSEWHERE", "SHARD", "notebooks_run_by_browser_tests"]

ELSEWHERE = "DISTLAB_BROWSER_ELSEWHERE"
"""``"1"``: the browser tests this run selects run in another process (``tools/run_tests.py``)."""

SHARD = "DISTLAB_BROWSER_SHARD"
"""Comma-separated names of browser test files (``test_browser_ddp``): of the browser tests, this
run runs only theirs, and leaves the others to another process (``tools/run_tests.py``)."""


def notebooks_run_by_browser_tests(items: list[pytest.Item]) -> set[str]:
    """The notebook file names that the selected items marked ``notebook(...)`` run."""
    return {str(arg) for item in items for mark in item.iter_markers("notebook")
            for arg in mark.args}


def _nbval_notebook(item: pytest.Item) -> str | None:
    """The notebook file name of an nbval cell item, None for any other item."""
    if type(item).__name__ != "IPyNbCell":
        return None
    return Path(str(item.path)).name


def _opened(item: pytest.Item) -> str | None:
    """The notebook of a case marked ``opens_notebook(name)`` (the clean-open check of one
    notebook, which the browser test running it makes on opening it), None for any other."""
    mark = item.get_closest_marker("opens_notebook")
    return str(mark.args[0]) if mark is not None else None


def _browser(item: pytest.Item) -> bool:
    return item.get_closest_marker("browser") is not None


@pytest.hookimpl(trylast=True)  # after -m / -k have deselected what they deselect
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if chromium_executable() is None:  # the browser tests skip: nbval runs everything
        return
    elsewhere = os.environ.get(ELSEWHERE) == "1"
    shard = os.environ.get(SHARD)
    mine = None if shard is None else {s.strip() for s in shard.split(",") if s.strip()}
    owned = notebooks_run_by_browser_tests(items)
    if not owned and not elsewhere and mine is None:
        return

    def gone(item: pytest.Item) -> bool:
        return (_nbval_notebook(item) in owned or _opened(item) in owned
                or (_browser(item) and (elsewhere or (mine is not None
                                                      and Path(str(item.path)).stem not in mine))))

    keep = [i for i in items if not gone(i)]
    dropped = [i for i in items if gone(i)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        config.stash[_OWNED] = sorted({_nbval_notebook(i) or _opened(i) or "" for i in dropped
                                       if not _browser(i)})
        config.stash[_ELSEWHERE] = elsewhere


_OWNED = pytest.StashKey[list[str]]()
_ELSEWHERE = pytest.StashKey[bool]()


def pytest_report_collectionfinish(config: pytest.Config) -> str | None:
    """Say which notebooks nbval left to the browser tests (shown under the header)."""
    owned = config.stash.get(_OWNED, [])
    where = (", running beside this run in a second process (tools/run_tests.py)"
             if config.stash.get(_ELSEWHERE, False) else "")
    if not owned:
        return None
    return (f"nbval and the clean-open check: {len(owned)} notebook(s) left to the real-browser "
            f"tests{where}, which open and run each once in JupyterLab and check it as they do")
