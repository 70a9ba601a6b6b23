"""Notebook 07's checked outputs are the same on every machine: it opens on the reader's own
machine's profile, and no cell that nbval compares depends on which one that is.

The notebook runs twice on fresh kernels, once as the machine that measured a committed profile
and once as a machine that measured none (``DISTLAB_MACHINE_KEY`` stands in for this machine's
host name, CPU model, cores and GPUs), and both runs are compared with the stored outputs as nbval
compares them. The picks differ, so the check is not vacuous. The two kernels run at the same
time, beside the other runs of 07 this session makes (:mod:`helpers.notebook07`), each with its
own environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from distlab.profile.load import (
    MACHINE_KEY_ENV,
    MachineKey,
    choose_profile,
    list_profiles,
    load_profile,
)
from helpers.notebook07 import NOTEBOOK, Run, result
from helpers.paths import PROFILES
from helpers.stored_outputs import differences_from_stored

_PICKED = "__picked__ "
COMMITTED = [load_profile(p) for p in list_profiles(PROFILES)]
PROFILED = MachineKey.of(next(p for p in COMMITTED if p.name == "vm-2026-11-23"))
UNKNOWN = MachineKey("nowhere", "A CPU no profile was measured on", 3, ())


def _as(key: MachineKey) -> Any:
    """07 run as machine ``key``, a last cell printing the profile the picker opened on."""
    def make(folder: Path) -> Run:
        del folder
        return Run(at_end=(f"print({_PICKED!r} + choice.profile.name)",),
                   env={MACHINE_KEY_ENV: key.to_json()})
    return make


#: The runs of 07 this module reads (the session's ``notebook07`` fixture executes them).
NOTEBOOK07_RUNS = {"as the profiled machine": _as(PROFILED),
                   "as an unknown machine": _as(UNKNOWN)}


def _code_and_pick(nb: Any) -> tuple[list[dict], str]:
    """The code cells of an executed run as a browser run gives them, and the profile name the
    last (added) cell printed."""
    code = [{"source": c.source, "outputs": c.outputs} for c in nb.cells if c.cell_type == "code"]
    picked = "".join(o.get("text", "") for o in code.pop()["outputs"])
    return code, picked.removeprefix(_PICKED).strip()


@pytest.mark.timeout(600)
def test_checked_outputs_hold_on_a_profiled_machine_and_on_an_unknown_one(
        pytestconfig: pytest.Config, notebook07: dict[str, Any]) -> None:
    assert choose_profile(COMMITTED, PROFILED)[0].name == "vm-2026-11-23"
    fallback = choose_profile(COMMITTED, UNKNOWN)[0].name
    assert fallback != "vm-2026-11-23"
    for (name, key), expected in zip((("as the profiled machine", PROFILED),
                                      ("as an unknown machine", UNKNOWN)),
                                     ("vm-2026-11-23", fallback), strict=True):
        live, picked = _code_and_pick(result(notebook07, name))
        assert picked == expected, (key, picked)
        assert differences_from_stored(pytestconfig, NOTEBOOK, live) == [], key
