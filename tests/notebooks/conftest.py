"""The session's runs of notebook 07 outside the browser (:mod:`helpers.notebook07`)."""

from __future__ import annotations

from typing import Any

import pytest

from helpers.notebook07 import execute_runs


@pytest.fixture(scope="session")
def notebook07(request: pytest.FixtureRequest,
               tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every run of 07 that a selected test using this fixture lists in its module's
    ``NOTEBOOK07_RUNS``, all executed at once on the first request: ``name -> executed notebook
    or the exception its execution raised`` (read it with :func:`helpers.notebook07.result`)."""
    wanted: dict[str, Any] = {}
    for item in request.session.items:
        if "notebook07" in getattr(item, "fixturenames", ()):
            wanted.update(getattr(getattr(item, "module", None), "NOTEBOOK07_RUNS", {}))
    runs = {name: make(tmp_path_factory.mktemp("nb07")) for name, make in wanted.items()}
    return execute_runs(runs)
