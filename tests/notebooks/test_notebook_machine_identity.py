"""Notebook 07's checked outputs are the same on every machine: it opens on the reader's own
machine's profile, and no cell that nbval compares depends on which one that is.

The notebook runs twice on fresh kernels, once as the machine that measured a committed profile
and once as a machine that measured none (``DISTLAB_MACHINE_KEY`` stands in for this machine's
host name, CPU model, cores and GPUs), and both runs are compared with the stored outputs as nbval
compares them. The picks differ, so the check is not vacuous."""

from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient

from distlab.profile.load import (
    MACHINE_KEY_ENV,
    MachineKey,
    choose_profile,
    list_profiles,
    load_profile,
)
from helpers.paths import PROFILES, ROOT
from helpers.stored_outputs import differences_from_stored

NOTEBOOK = ROOT / "notebooks" / "07_profile.ipynb"
_PICKED = "__picked__ "


def _run_as(key: MachineKey) -> tuple[list[dict], str]:
    """07 executed (``SMOKE=1``) as machine ``key``: its code cells as a browser run gives them,
    and the name of the profile the picker opened on."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(f"print({_PICKED!r} + choice.profile.name)"))
    old = dict(os.environ)
    os.environ.update({"SMOKE": "1", MACHINE_KEY_ENV: key.to_json()})
    try:
        NotebookClient(nb, timeout=300, kernel_name="python3",
                       resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    code = [{"source": c.source, "outputs": c.outputs} for c in nb.cells if c.cell_type == "code"]
    picked = "".join(o.get("text", "") for o in code.pop()["outputs"])
    return code, picked.removeprefix(_PICKED).strip()


@pytest.mark.timeout(600)
def test_checked_outputs_hold_on_a_profiled_machine_and_on_an_unknown_one(pytestconfig) -> None:
    committed = [load_profile(p) for p in list_profiles(PROFILES)]
    profiled = MachineKey.of(next(p for p in committed if p.name == "vm-2026-11-23"))
    unknown = MachineKey("nowhere", "A CPU no profile was measured on", 3, ())
    assert choose_profile(committed, profiled)[0].name == "vm-2026-11-23"
    fallback = choose_profile(committed, unknown)[0].name
    assert fallback != "vm-2026-11-23"
    for key, expected in ((profiled, "vm-2026-11-23"), (unknown, fallback)):
        live, picked = _run_as(key)
        assert picked == expected, (key, picked)
        assert differences_from_stored(pytestconfig, NOTEBOOK, live) == [], key
