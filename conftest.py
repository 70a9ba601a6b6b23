"""Project-wide pytest setup (repository root, so it applies to tests/ and notebooks/ alike).

- ``SMOKE=1`` is the default for every test run (notebook kernels and the browser test's
  JupyterLab inherit it), so notebooks use their CI sizes; ``SMOKE=0 make test`` runs them at
  full size.
- Matplotlib uses the non-interactive Agg backend in the test process only (set through the API,
  not MPLBACKEND, so notebook kernels keep their inline backend).
"""

from __future__ import annotations

import os

import matplotlib

os.environ.setdefault("SMOKE", "1")
matplotlib.use("Agg")


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
