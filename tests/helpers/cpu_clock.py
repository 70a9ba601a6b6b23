"""pytest plugin: each test's CPU seconds, its own and every process it starts, from a cgroup.

The suite is bound by its CPU on CI's two cores (``tools/run_tests.py`` says how busy they
were), so what a test costs is its CPU, not its wall time: under a full machine ``--durations``
measures the neighbours as much as the test. ``tools/run_tests.py`` runs each pytest process in
a cgroup of its own (:mod:`helpers.cgroups`; root, cgroup v1's ``cpuacct`` or cgroup v2) and names
it in :data:`CGROUP`; everything the process starts stays in it (ranks forked from a fork server
that outlives the test, notebook kernels, JupyterLab, Chromium), and the process runs one test
at a time, so the cgroup's CPU counter read before and after a test is what that test cost. This
plugin reads it around every test, prints the costliest at the end of the run, and writes them
all to :data:`TSV` (seconds, then the test's id; ``tools/run_tests.py`` merges the processes'
files into one list). Without :data:`CGROUP` it does nothing.

Loaded for every run by the root ``conftest.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers.cgroups import cgroup_cpu_s

__all__ = ["CGROUP", "SHOWN", "TSV"]

CGROUP = "DISTLAB_TEST_CGROUP"
"""The folder of the cgroup this pytest process runs in (set by ``tools/run_tests.py``)."""
TSV = "DISTLAB_TEST_CPU_TSV"
"""Where this process writes every test's CPU seconds (``seconds<TAB>test id`` lines)."""
SHOWN = 15
"""How many of the costliest tests the end of a run lists."""

class _CpuClock:
    def __init__(self, folder: Path, tsv: Path | None) -> None:
        self.folder = folder
        self.tsv = tsv
        self.spent: dict[str, float] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None):  # noqa: ANN201 (hook wrapper)
        del nextitem
        before = cgroup_cpu_s(self.folder)
        yield
        after = cgroup_cpu_s(self.folder)
        if before is not None and after is not None:
            self.spent[item.nodeid] = self.spent.get(item.nodeid, 0.0) + after - before

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.spent:
            return
        ranked = sorted(self.spent.items(), key=lambda kv: -kv[1])
        total = sum(self.spent.values())
        terminalreporter.write_sep("=", f"costliest {min(SHOWN, len(ranked))} tests by CPU")
        terminalreporter.write_line(
            f"CPU s of each test and every process it started (this process's cgroup); "
            f"{total:.0f} s over {len(ranked)} tests")
        for nodeid, seconds in ranked[:SHOWN]:
            terminalreporter.write_line(f"{seconds:7.1f}s  {nodeid}")
        if self.tsv is not None:
            self.tsv.write_text("".join(f"{s:.2f}\t{n}\n" for n, s in ranked))


def pytest_configure(config: pytest.Config) -> None:
    folder = os.environ.get(CGROUP, "").strip()
    if not folder or cgroup_cpu_s(Path(folder)) is None:
        return
    tsv = os.environ.get(TSV, "").strip()
    config.pluginmanager.register(_CpuClock(Path(folder), Path(tsv) if tsv else None),
                                  "distlab_cpu_clock")
