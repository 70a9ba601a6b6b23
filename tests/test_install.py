"""``make lab`` / ``make test`` on a distribution's python3 with its own old pip: the install step
brings pip up to date before it resolves anything, so pip 23.0.1's resolver (Debian 12's, which
backtracks for more than 20 minutes on constraints.txt) never runs the install.

The test makes two venvs whose pip is pinned to 23.0.1 (from the registry), then runs
``tools/install.sh`` on both at once with ``INSTALL_DRY_RUN`` (pip brought up to date as it
would be, then only a ``pip install --dry-run --report`` of what ``make install`` installs:
torch, distlab and its test stack under constraints.txt). pip writes its own version into the
report, so a case fails if the resolve ran on pip 23.0.1 (the upgrade step removed), and the
subprocess timeout bounds the resolve: where the registry makes 23.0.1 backtrack, it runs out first.

- one as an environment the user made (an active venv or conda env): its pip stays 23.0.1, and a
  newer pip from a temporary folder resolves the same install;
- the other as the project venv (``PY`` is ``$VENV/bin/python``): pip is upgraded in place,
  first.
"""

from __future__ import annotations

import ensurepip
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

pytestmark = [pytest.mark.timeout(RESOLVE_BOUND_S + 360),
              pytest.mark.skipif(not sys.platform.startswith("linux"),
                                 reason="tools/install.sh is the Linux set-up")]


def _pip_version(python: Path) -> str:
    out = subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return out.split()[1]


def _run_all(commands: list[list[str]], *, timeout: float,
             envs: list[dict[str, str]] | None = None) -> list[subprocess.CompletedProcess[str]]:
    """Run ``commands`` (``envs``: each one's environment) at the same time (each waits on the
    registry more than on the CPU); their results, in order. Every one still running at
    ``timeout`` is killed."""
    procs = [subprocess.Popen(c, cwd=ROOT, env=None if envs is None else envs[i],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i, c in enumerate(commands)]
    out = []
    try:
        for c, p in zip(commands, procs, strict=True):
            stdout, stderr = p.communicate(timeout=timeout)
            out.append(subprocess.CompletedProcess(c, p.returncode, stdout, stderr))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return out


@pytest.fixture
def old_pip_venvs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two fresh venvs of this Python whose pip is 23.0.1, as a distribution's python3 makes
    one (two, made at once, so that the two installs can run at once)."""
    venvs = [tmp_path_factory.mktemp("oldpip") / "venv" for _ in range(2)]
    for made in _run_all([[sys.executable, "-m", "venv", "--without-pip", str(v)]
                          for v in venvs], timeout=120):
        assert made.returncode == 0, made.stderr[-2000:]
    # What ensurepip would put there (its bundled setuptools; pip at 23.0.1), installed by this
    # Python's pip into each venv: ensurepip's own pip, installed and then replaced, cost
    # ~4 CPU-s a venv for the same result.
    bundled = Path(ensurepip.__file__).parent / "_bundled"
    for got in _run_all([[sys.executable, "-m", "pip", "--python", str(v / "bin" / "python"),
                          "install", "--quiet", "--disable-pip-version-check", f"pip=={OLD_PIP}",
                          *map(str, bundled.glob("setuptools-*.whl"))] for v in venvs],
                        timeout=180):
        assert got.returncode == 0, got.stderr[-2000:]
    assert [_pip_version(v / "bin" / "python") for v in venvs] == [OLD_PIP, OLD_PIP]
    return venvs[0], venvs[1]


def _install_env(python: Path, venv_arg: str, report: Path) -> dict[str, str]:
    env = {**os.environ, "PY": str(python), "VENV": venv_arg, "INSTALL_DRY_RUN": str(report),
           "STACK": "tested", "TORCH_VERSION": "2.13.0"}
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    return env


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


def test_an_old_pip_never_resolves_the_install(old_pip_venvs: tuple[Path, Path],
                                                tmp_path: Path) -> None:
    """Two venvs with pip 23.0.1, installed into at once: one as an environment the user made
    (its pip stays; a newer one from a temporary folder resolves), the other as the project
    venv (its pip is upgraded first, then it resolves)."""
    theirs_venv, ours_venv = old_pip_venvs
    theirs, ours = theirs_venv / "bin" / "python", ours_venv / "bin" / "python"
    reports = tmp_path / "theirs.json", tmp_path / "ours.json"
    script = ["bash", str(ROOT / "tools" / "install.sh")]
    done = _run_all([script, script], timeout=RESOLVE_BOUND_S, envs=[
        _install_env(theirs, str(tmp_path / "not-this-venv"), reports[0]),  # PY not $VENV's
        _install_env(ours, str(ours_venv), reports[1])])                     # PY $VENV's: ours
    for d in done:
        assert d.returncode == 0, (d.stdout + d.stderr)[-3000:]
    outputs = [d.stdout for d in done]

    said = [ln for ln in outputs[0].splitlines() if ln.startswith("install:")]
    assert said[0].startswith(f"install: this environment's pip {OLD_PIP} is older than 23.2")
    assert "from a temporary folder and leaving the environment's own pip as it is" in said[0]
    assert _pip_version(theirs) == OLD_PIP       # the environment's own pip is untouched
    _check_resolved(reports[0])

    said = [ln for ln in outputs[1].splitlines() if ln.startswith("install:")]
    assert said[0].startswith(f"install: upgrading pip {OLD_PIP} in {ours_venv} (older than "
                              "23.2")
    assert said[1].startswith("install: resolving only (INSTALL_DRY_RUN)")
    major, minor = (int(x) for x in _pip_version(ours).split(".")[:2])
    assert (major, minor) >= (23, 2)
    _check_resolved(reports[1])
