"""Project-wide pytest setup (repository root, so it applies to tests/ and notebooks/ alike).

- ``SMOKE=1`` is the default for every test run (notebook kernels and the browser test's
  JupyterLab inherit it), so notebooks use their CI sizes; ``SMOKE=0 make test`` runs them at
  full size.
- Matplotlib uses the non-interactive Agg backend in the test process only (set through the API,
  not MPLBACKEND, so notebook kernels keep their inline backend).
- Every notebook cell nbval runs fails if it shows a figure only as its ``<Figure size ...>`` text
  repr without an image, or made a figure it never showed (``DISTLAB_FIGURE_AUDIT=1`` is set
  for the kernels: ``distlab.viz.figure``; ``tests/helpers/figure_guard.py``).
- What the run's child processes (notebook kernels, ranks, JupyterLab) write to the temporary
  folder (``TMPDIR``) goes to one folder of the run's own, removed when the run ends. nbval
  stops its kernels with SIGKILL, so a kernel's own ``atexit`` clean-up (``distlab.scratch``)
  never runs under it; without this every run would leave the notebooks' shard folders behind.
  The pytest process itself keeps the system's folder.
- The compiled plan executor is built (or loaded) once, in the pytest process, before any rank
  starts; the header says whether collectives run on it or on the Python executor.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import matplotlib

os.environ.setdefault("SMOKE", "1")
os.environ.setdefault("DISTLAB_FIGURE_AUDIT", "1")
matplotlib.use("Agg")

pytest_plugins = ["helpers.cpu_clock", "helpers.figure_guard", "helpers.notebook_owner"]

tempfile.gettempdir()  # this process keeps the system's (cached before TMPDIR changes): its
# own multiprocessing folder is removed by a finalizer that runs after pytest_unconfigure
_RUN_TMP = tempfile.mkdtemp(prefix="distlab-tests-")
os.environ["TMPDIR"] = _RUN_TMP  # what every child (kernel, rank, JupyterLab) inherits


def pytest_report_header(config):  # noqa: ANN001 (pytest hook)
    """Build (or load) the compiled plan executor in this process, before any rank starts (a
    first build takes about a minute on 2 cores; ranks then load it), and say which runs."""
    del config
    from distlab.collectives.runtime import compiled

    return f"distlab collectives executor: {compiled.status()}"


def pytest_unconfigure(config):  # noqa: ANN001 (pytest hook)
    """The run's temporary folder goes with the run."""
    del config
    shutil.rmtree(_RUN_TMP, ignore_errors=True)


def pytest_collection_modifyitems(config, items):  # noqa: ANN001 (pytest hook)
    """Tests marked ``cuda`` skip, with the reason, where torch sees no CUDA device."""
    import pytest
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU: torch.cuda.is_available() is False here")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)
