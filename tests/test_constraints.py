"""tools/constraints.py: the tested stack is pinned exactly, torch and what only torch needs are
left to torch's own pin, and make install uses the file unless STACK=latest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.tools import load_tool

ROOT = Path(__file__).resolve().parents[1]


tool = load_tool("constraints")


def test_the_stack_leaves_torch_and_what_only_torch_needs_to_torch() -> None:
    here = tool.stack()
    assert "torch" not in here and "distlab" not in here
    assert "sympy" not in here and "mpmath" not in here      # torch's alone
    assert {"jupyterlab", "ipywidgets", "nbval", "playwright", "pytest"} <= set(here)
    assert "jinja2" in here                                   # torch's and JupyterLab's: pinned
    assert not any(name.startswith("nvidia-") for name in here)


def test_written_file_reads_back_and_bad_lines_are_named(tmp_path: Path) -> None:
    pins = {"jupyterlab": "4.6.6", "nbval": "0.11.0"}
    path = tmp_path / "c.txt"
    path.write_text(tool.render(pins))
    assert tool.read(path) == pins
    path.write_text("jupyterlab>=4\n")
    with pytest.raises(ValueError, match=r"c.txt:1: expected name==version"):
        tool.read(path)


def test_differences_name_each_side() -> None:
    found = tool.differences({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"})
    assert found == ["b: constraints 2, installed 3", "c: constraints absent, installed 4"]


def test_the_committed_file_is_what_tools_constraints_writes() -> None:
    text = (ROOT / "constraints.txt").read_text()
    pins = tool.read(ROOT / "constraints.txt", every=True)
    marks = {n: tool.python_marker(tool.requires_python(n)) for n in pins}
    body = tool.render(pins, marks).split("\n", tool.HEADER.count("\n"))[-1]
    assert text.endswith(body)   # same lines, same order, the same markers
    assert "torch" not in pins and pins == dict(sorted(pins.items()))


def test_a_pin_that_needs_a_newer_python_carries_its_floor_as_a_marker(tmp_path: Path) -> None:
    """soupsieve 4.1.3 needs Python 3.11.5; Debian 12's python3 is 3.11.2: pinned as it was,
    the whole install failed there ("no matching distributions"). With the marker, pip leaves
    it to the newest release that runs on the older Python."""
    from packaging.markers import Marker

    assert tool.python_marker(">=3.11.5") == 'python_full_version >= "3.11.5"'
    assert tool.python_marker(">=3.9") == "" and tool.python_marker(None) == ""
    assert tool.python_marker("!=3.14.1,>=3.11") == \
        'python_full_version != "3.14.1" and python_full_version >= "3.11"'
    marker = Marker(tool.python_marker(">=3.11.5"))
    assert not marker.evaluate({"python_full_version": "3.11.2"})
    assert marker.evaluate({"python_full_version": "3.11.7"})
    path = tmp_path / "c.txt"
    path.write_text(tool.render({"a": "1", "b": "2"}, {"b": 'python_full_version >= "9.0"'}))
    assert tool.read(path) == {"a": "1"} and tool.read(path, every=True) == {"a": "1", "b": "2"}
    line = next(ln for ln in (ROOT / "constraints.txt").read_text().splitlines()
                if ln.startswith("soupsieve=="))
    assert line.endswith('; python_full_version >= "3.11.5"')


@pytest.mark.skipif(os.environ.get("STACK", "tested") == "latest",
                    reason="STACK=latest: this run tests today's newest releases, not "
                           "constraints.txt")
def test_this_environment_holds_the_tested_stack() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "constraints.py"), "check"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_make_passes_the_stack_choice_to_install_and_tests() -> None:
    make = (ROOT / "Makefile").read_text()
    assert "STACK ?= tested" in make and 'STACK="$(STACK)"' in make
    install = (ROOT / "tools" / "install.sh").read_text()
    assert '-c "$CONSTRAINTS"' in install
    done = subprocess.run(["bash", str(ROOT / "tools" / "install.sh")], cwd=ROOT,
                          env={**os.environ, "PY": sys.executable, "STACK": "newest"},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "STACK must be tested or latest" in done.stderr


@pytest.mark.timeout(300)
def test_the_constraints_never_make_pip_replace_the_installed_torch(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--no-build-isolation", "--quiet",
         "--report", str(report), "-e", f"{ROOT}[test]", "-c", str(ROOT / "constraints.txt")],
        capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    planned = [i["metadata"]["name"].lower() for i in json.loads(report.read_text())["install"]]
    assert "torch" not in planned and "distlab" in planned, planned
