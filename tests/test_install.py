"""``make lab`` / ``make test`` on a distribution's python3 with its own old pip: the install step
brings pip up to date before it resolves anything, so pip 23.0.1's resolver (Debian 12's, which
backtracks for more than 20 minutes on constraints.txt) never runs the install.

The test makes a venv whose pip is pinned to 23.0.1 (from the registry), then runs
``tools/install.sh`` on it with ``INSTALL_DRY_RUN`` (pip brought up to date as it would be, then
only a ``pip install --dry-run --report`` of what ``make install`` installs: torch, distlab and
its test stack under constraints.txt). pip writes its own version into the report, so a case
fails if the resolve ran on pip 23.0.1 (the upgrade step removed), and the subprocess timeout
bounds the resolve: where the registry makes 23.0.1 backtrack, it runs out first.

- as an environment the user made (an active venv or conda env): its pip stays 23.0.1, and a
  newer pip from a temporary folder resolves the same install;
- then as the project venv (``PY`` is ``$VENV/bin/python``): pip is upgraded in place, first.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import ROOT
from helpers.tools import load_tool

OLD_PIP = "23.0.1"
RESOLVE_BOUND_S = 420
"""Past this the resolver is backtracking (a fresh resolve takes well under a minute here)."""

pytestmark = [pytest.mark.timeout(2 * RESOLVE_BOUND_S + 240),
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="tools/install.sh is the Linux set-up")]


def _pip_version(python: Path) -> str:
    out = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return out.split()[1]


@pytest.fixture
def old_pip_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv of this Python whose pip is 23.0.1, as a distribution's python3 makes one."""
    venv = tmp_path_factory.mktemp("oldpip") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    got = subprocess.run([str(python), "-m", "pip", "install", "--quiet",
                          "--disable-pip-version-check", f"pip=={OLD_PIP}"],
                         capture_output=True, text=True, timeout=180)
    assert got.returncode == 0, got.stderr[-2000:]
    assert _pip_version(python) == OLD_PIP
    return venv


def _install(python: Path, venv_arg: str, report: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PY": str(python), "VENV": venv_arg, "INSTALL_DRY_RUN": str(report),
           "STACK": "tested", "TORCH_VERSION": "2.13.0"}
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    return subprocess.run(["bash", str(ROOT / "tools" / "install.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=RESOLVE_BOUND_S)


def _planned(report: Path) -> dict[str, str]:
    return {i["metadata"]["name"].lower(): i["metadata"]["version"]
            for i in json.loads(report.read_text())["install"]}


def _constraints() -> dict[str, str]:
    """The pins that hold on this Python (``tools/constraints.py``'s reader: markers read)."""
    return load_tool("constraints").read(ROOT / "constraints.txt")


def _check_resolved(report: Path) -> None:
    """The report of a resolve pip >= 23.2 made (pip writes its own version in it: with the
    upgrade step gone, 23.0.1 would, wherever its backtracking happens to end in time), of
    torch, distlab and the tested stack."""
    resolver = json.loads(report.read_text())["pip_version"]
    assert tuple(int(x) for x in re.findall(r"\d+", resolver)[:2]) >= (23, 2), resolver
    planned = _planned(report)
    assert "distlab" in planned and "torch" in planned
    pinned = _constraints()
    normal = {re.sub(r"[-_.]+", "-", k): v for k, v in planned.items()}
    for name in ("jupyterlab", "ipywidgets", "nbval", "pytest", "hypothesis"):
        assert normal[name] == pinned[name], name   # the tested stack, as constraints.txt says


def test_an_old_pip_never_resolves_the_install(old_pip_venv: Path, tmp_path: Path) -> None:
    """One venv with pip 23.0.1, installed into twice: first as an environment the user made
    (its pip stays; a newer one from a temporary folder resolves), then as the project venv
    (its pip is upgraded first, then it resolves)."""
    python = old_pip_venv / "bin" / "python"
    report = tmp_path / "theirs.json"
    done = _install(python, str(tmp_path / "not-this-venv"), report)  # PY is not $VENV's
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    said = [ln for ln in done.stdout.splitlines() if ln.startswith("install:")]
    assert said[0].startswith(f"install: this environment's pip {OLD_PIP} is older than 23.2")
    assert "from a temporary folder and leaving the environment's own pip as it is" in said[0]
    assert _pip_version(python) == OLD_PIP       # the environment's own pip is untouched
    _check_resolved(report)

    report = tmp_path / "ours.json"
    done = _install(python, str(old_pip_venv), report)  # PY is $VENV/bin/python: ours
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    said = [ln for ln in done.stdout.splitlines() if ln.startswith("install:")]
    assert said[0].startswith(f"install: upgrading pip {OLD_PIP} in {old_pip_venv} (older than "
                              "23.2")
    assert said[1].startswith("install: resolving only (INSTALL_DRY_RUN)")
    major, minor = (int(x) for x in _pip_version(python).split(".")[:2])
    assert (major, minor) >= (23, 2)
    _check_resolved(report)
