"""Each test's CPU from its pytest process's cgroup (helpers.cgroups, helpers.cpu_clock), as
tools/run_tests.py reports the run's costliest tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.cgroups import cgroup_cpu_s, make_cgroup, move_into, remove_cgroup

TESTS = Path(__file__).resolve().parent


def test_reads_cgroup_v1_and_v2_counters(tmp_path: Path) -> None:
    v1, v2, neither = tmp_path / "v1", tmp_path / "v2", tmp_path / "neither"
    for d in (v1, v2, neither):
        d.mkdir()
    (v1 / "cpuacct.usage").write_text("2500000000\n")
    (v2 / "cpu.stat").write_text("usage_usec 1250000\nuser_usec 1000000\nsystem_usec 250000\n")
    (neither / "cpu.stat").write_text("user_usec 5\n")
    assert cgroup_cpu_s(v1) == 2.5
    assert cgroup_cpu_s(v2) == 1.25
    assert cgroup_cpu_s(neither) is None
    assert cgroup_cpu_s(tmp_path / "absent") is None


def test_a_plain_folder_is_not_taken_for_a_cgroup(tmp_path: Path) -> None:
    assert make_cgroup("x", parent=tmp_path) is None
    assert not (tmp_path / "x").exists()


_PROBE = '''
import subprocess, sys, time

SPIN = "import time\\nwhile time.process_time() < 0.6: pass"

def test_spends_cpu_in_a_child():
    subprocess.run([sys.executable, "-c", SPIN], check=True)

def test_waits():
    time.sleep(0.3)
'''


def test_a_tests_cpu_counts_the_processes_it_starts(tmp_path: Path) -> None:
    """A test whose child process spins for 0.6 CPU-s is charged at least that (the child's
    CPU, which the pytest process's own clock never sees); one that sleeps is charged less."""
    inside = os.environ.get("DISTLAB_TEST_CGROUP")    # this run's own (run_tests.py): nest in it
    root = make_cgroup(f"distlab-cpu-clock-test-{os.getpid()}",
                       parent=Path(inside) if inside else None)
    if root is None:
        pytest.skip("no cgroup can be made here (needs root and cgroup v1's cpuacct or v2); "
                    "tools/run_tests.py then counts CPU by wait4 only")
    try:
        folder = make_cgroup("probe", parent=root)
        assert folder is not None
        (tmp_path / "test_probe.py").write_text(textwrap.dedent(_PROBE))
        tsv = tmp_path / "cpu.tsv"
        env = {**os.environ, "PYTHONPATH": str(TESTS), "DISTLAB_TEST_CGROUP": str(folder),
               "DISTLAB_TEST_CPU_TSV": str(tsv)}
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
             "helpers.cpu_clock", "--rootdir", str(tmp_path), str(tmp_path)],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert move_into(folder, proc.pid)
        out, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, out
        spent = {line.split("\t")[1].split("::")[-1]: float(line.split("\t")[0])
                 for line in tsv.read_text().splitlines()}
        assert spent.keys() == {"test_spends_cpu_in_a_child", "test_waits"}
        assert spent["test_spends_cpu_in_a_child"] >= 0.6
        assert spent["test_waits"] < spent["test_spends_cpu_in_a_child"] - 0.3
        assert "costliest 2 tests by CPU" in out
    finally:
        assert remove_cgroup(root)
