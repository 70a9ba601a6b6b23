"""The install story: pyproject is the single source, environment.yml agrees, torch is kept."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import ROOT

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _makefile_torch_pin() -> str:
    match = re.search(r"^TORCH_VERSION \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)
    assert match, "the Makefile must define an overridable TORCH_VERSION ?= pin"
    return match.group(1)


def test_environment_yml_installs_the_pyproject_and_nothing_else():
    text = (ROOT / "environment.yml").read_text()
    lines = [ln.split("#")[0].strip() for ln in text.splitlines()]
    pip_lines = [ln[2:].strip() for ln in lines if ln.startswith("- ") and not ln.endswith(":")]
    conda_pip = next(i for i, ln in enumerate(pip_lines) if re.fullmatch(r"pip(>=[\d.]+)?", ln))
    pip_section = pip_lines[conda_pip + 1:]
    floor = re.search(r'^PIP_MIN="([\d.]+)"$', (ROOT / "tools" / "install.sh").read_text(), re.M)
    assert floor and pip_lines[conda_pip] == f"pip>={floor.group(1)}", \
        "environment.yml's pip must be at least tools/install.sh's PIP_MIN"
    extras = sorted(PYPROJECT["project"]["optional-dependencies"])
    assert f"-e .[{','.join(extras)}]" in pip_section, \
        f"environment.yml must pip-install the project with extras {extras}: {pip_section}"
    assert f"torch=={_makefile_torch_pin()}" in pip_section, \
        "environment.yml must pin torch like the Makefile"
    others = [ln for ln in pip_section if not ln.startswith(("-e ", "torch=="))]
    assert others == [], f"dependencies belong in pyproject.toml, not environment.yml: {others}"
    py = re.search(r"python=(\d+\.\d+)", text)
    assert py, "environment.yml must name a python version"
    floor = re.match(r">=(\d+)\.(\d+)", PYPROJECT["project"]["requires-python"])
    assert floor and tuple(map(int, py.group(1).split("."))) >= tuple(map(int, floor.groups()))


def test_torch_requirement_admits_the_installed_torch():
    import torch
    from packaging.requirements import Requirement

    reqs = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]]
    torch_req = next(r for r in reqs if r.name == "torch")
    assert not torch_req.specifier or torch_req.specifier.contains(
        torch.__version__.split("+")[0], prereleases=True), \
        f"{torch_req} would make pip replace the installed torch {torch.__version__}"
    assert "<" not in str(torch_req.specifier) and "==" not in str(torch_req.specifier), \
        "an upper bound or exact pin on torch would replace users' own CUDA builds"


@pytest.mark.timeout(300)
def test_project_install_never_replaces_the_installed_torch(tmp_path):
    """pip's own resolver, asked to install the project here, plans no torch install."""
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-build-isolation",
         "--quiet", "--report", str(report), "-e",
         f"{ROOT}[test]"],
        capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    installs = json.loads(report.read_text())["install"]
    planned = [item["metadata"]["name"].lower() for item in installs]
    assert "torch" not in planned, f"pip would (re)install torch: {planned}"
    assert "distlab" in planned


def test_readme_opens_with_exactly_two_commands():
    text = (ROOT / "README.md").read_text()
    first_block = re.search(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
    assert first_block, "README must open with a code block of commands"
    commands = [ln for ln in first_block.group(1).splitlines()
                if ln.strip() and not ln.strip().startswith("#")]
    assert commands == ["make lab", "make test"], commands
    ci = (ROOT / ".ci" / "run").read_text()
    assert "make test" in ci, ".ci/run must call the README's test command"


def test_committed_notebooks_are_clean():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "nbtool.py"), "check"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.timeout(180)
def test_make_lab_serves_the_start_here_notebook(tmp_path):
    """The README's first command starts JupyterLab on notebooks/ with 00_start_here in it."""
    import os
    import signal
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    token = "distlab-test-token"
    env = dict(os.environ, VIRTUAL_ENV=sys.prefix, JUPYTER_RUNTIME_DIR=str(tmp_path),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "ws"))
    env.pop("CONDA_PREFIX", None)
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "lab", f"LAB_PORT={port}",
         f"LAB_ARGS=--no-browser --IdentityProvider.token={token}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True)
    url = f"http://127.0.0.1:{port}/api/contents/00_start_here.ipynb?token={token}&content=0"
    try:
        deadline = time.monotonic() + 150
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as resp:
                    info = json.loads(resp.read())
                break
            except OSError:
                assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
                assert time.monotonic() < deadline, "make lab did not serve within 150 s"
                time.sleep(0.5)
        assert info["name"] == "00_start_here.ipynb" and info["type"] == "notebook"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.mark.timeout(240)
def test_wheel_ships_the_data_the_library_reads(tmp_path):
    """A wheel, installed with ``pip install --target`` (not editable), loads the loopback preset
    from the package data, with no source checkout on ``sys.path``."""
    import shutil
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "lib", src / "lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    wheels = tmp_path / "wheels"
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                           "--no-build-isolation", "--quiet", "-w", str(wheels), str(src)],
                          capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = wheels.glob("distlab-*.whl")
    shipped = zipfile.ZipFile(wheel).namelist()
    data = [n for n in shipped if n.startswith("distlab/data/")]
    assert "distlab/data/allreduce_calibration.json" in data, data
    pyproject_globs = PYPROJECT["tool"]["setuptools"]["package-data"]["distlab"]
    for glob in pyproject_globs:  # every declared glob matches something real
        assert list((ROOT / "lib" / "distlab").glob(glob)), f"package-data {glob} matches nothing"
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                           "--quiet", "--target", str(target), str(wheel)],
                          capture_output=True, text=True, timeout=200, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import distlab, json; "
            "from distlab.collectives import get_preset, loopback_preset, preset_names; "
            "p = loopback_preset(); "
            "print(json.dumps({'file': distlab.__file__, 'names': preset_names(), "
            "'alpha': None if p is None else p.alpha, 'source': None if p is None else p.source}))")
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(info["file"]).resolve().is_relative_to(target.resolve()), info["file"]
    assert "loopback" in info["names"]
    shipped_cal = json.loads((ROOT / "lib/distlab/data/allreduce_calibration.json").read_text())
    assert info["alpha"] == shipped_cal["calibration"]["alpha"]
    assert "allreduce_calibration.json" in info["source"]


PUBLIC_COLLECTIVES = (
    "ALGORITHMS", "COLLECTIVES", "DEFAULT_ALGORITHM", "OPS", "PLANS", "PRESETS", "Calibration",
    "CollectiveMismatchError", "LinkPreset", "Schedule", "Step", "StepCost", "Transfer",
    "all_gather", "all_reduce", "all_to_all", "barrier", "best_pieces", "broadcast", "build",
    "build_plan", "calibrate", "calibrate_local", "call_model", "chunk_bounds", "contributors",
    "cost", "crossovers", "format_schedule", "gather", "get_preset", "holdings", "layout",
    "loopback_preset", "options_of", "pieces_curve", "plan_options", "predict_builtin",
    "predict_sizes", "predict_world_sizes", "preset_names", "reduce", "reduce_scatter",
    "run_schedule", "scatter", "simulate", "step_costs", "use_calibration", "winners")
"""Every name ``distlab.collectives`` exported before its modules moved into sub-packages."""


def test_every_public_name_of_collectives_stays_importable_from_the_package() -> None:
    import distlab.collectives as C

    assert [n for n in PUBLIC_COLLECTIVES if not hasattr(C, n)] == []
    assert set(PUBLIC_COLLECTIVES) <= set(C.__all__)
