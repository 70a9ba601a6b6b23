"""Notebook 07 executed outside the browser (``SMOKE=1``, a fresh kernel each), several runs at
the same time.

The tests of notebook 07 outside the browser run it as another machine (``DISTLAB_MACHINE_KEY``
in the kernel's environment) or pointed at another profile (a cell inserted after the picker's).
Each such run is a :class:`Run`; a test module lists the runs it reads in ``NOTEBOOK07_RUNS``
(``name -> function of a fresh folder -> Run``) and takes them from the session fixture
``notebook07`` (``tests/notebooks/conftest.py``), which executes the runs of every selected test
at once: a kernel runs one cell at a time, so two or three of them share a 2-core machine's cores
instead of queueing. Each run keeps its own environment (the kernel's, never this process's).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import nbformat
from nbclient import NotebookClient

from helpers.paths import ROOT

__all__ = ["KERNEL_STARTS", "NOTEBOOK", "Run", "execute_runs", "kernel_never_started", "result"]

NOTEBOOK = ROOT / "notebooks" / "07_profile.ipynb"


@dataclass(frozen=True)
class Run:
    """How to run 07: cells inserted right after the picker's cell (``choice.widget``) and at
    the end, and what the kernel's environment adds to this process's (``SMOKE=1`` always)."""

    after_picker: tuple[str, ...] = ()
    at_end: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)


def _notebook(run: Run) -> nbformat.NotebookNode:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    picker = next(i for i, c in enumerate(nb.cells) if c.source.strip() == "choice.widget")
    for k, source in enumerate(run.after_picker):
        nb.cells.insert(picker + 1 + k, nbformat.v4.new_code_cell(source))
    nb.cells.extend(nbformat.v4.new_code_cell(source) for source in run.at_end)
    return nb


KERNEL_STARTS = 3
"""Kernel starts a run gets. jupyter_client picks a kernel's five TCP ports free and the kernel
binds them afterwards, so another process can take one in between (these runs start their
kernels at once, beside the other test processes' ranks and kernels): the kernel fails to bind
("Address already in use") and never answers; a fresh-clone run here failed so once. Only such a
start is tried again (:func:`kernel_never_started`); a cell's failure, or a kernel that dies while
a cell runs, is raised at once."""

_NEVER_STARTED = ("Kernel didn't respond", "Kernel died before replying")
"""How jupyter_client's ``wait_for_ready`` says the kernel never answered its first request."""


def kernel_never_started(error: BaseException) -> bool:
    """Whether ``error`` is jupyter_client's word that the kernel never answered at start."""
    return isinstance(error, RuntimeError) and str(error).startswith(_NEVER_STARTED)


async def _execute(run: Run) -> nbformat.NotebookNode:
    env = {**os.environ, **run.env, "SMOKE": "1"}
    for start in range(1, KERNEL_STARTS + 1):
        nb = _notebook(run)
        client = NotebookClient(nb, timeout=300, kernel_name="python3",
                                resources={"metadata": {"path": str(NOTEBOOK.parent)}})
        try:
            await client.async_execute(env=env)   # CellExecutionError on the first failing cell
        except RuntimeError as e:
            if start == KERNEL_STARTS or not kernel_never_started(e):
                raise
            continue
        return nb
    raise AssertionError("unreachable: the last start returns or raises")


def execute_runs(runs: Mapping[str, Run]) -> dict[str, nbformat.NotebookNode | BaseException]:
    """Execute every run at the same time; ``name -> the executed notebook`` (its cells and
    outputs), or the exception its execution raised (:func:`result` raises it again)."""

    async def every() -> list[nbformat.NotebookNode | BaseException]:
        return list(await asyncio.gather(*(_execute(r) for r in runs.values()),
                                         return_exceptions=True))

    return dict(zip(runs, asyncio.run(every()), strict=True))


def result(done: Mapping[str, nbformat.NotebookNode | BaseException],
           name: str) -> nbformat.NotebookNode:
    """The executed notebook of run ``name``; what its execution raised is raised here."""
    out = done[name]
    if isinstance(out, BaseException):
        raise out
    return out
