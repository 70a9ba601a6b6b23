"""Cgroups that count the CPU of a process and everything it starts (``tools/run_tests.py``
puts each pytest process in one; :mod:`helpers.cpu_clock` reads them around every test).

Only where this process may make one: root, with cgroup v1's ``cpuacct`` hierarchy or cgroup
v2 mounted at ``/sys/fs/cgroup``. Not a pytest plugin, so ``tools/run_tests.py`` imports it
before pytest runs.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["cgroup_cpu_s", "make_cgroup", "move_into", "remove_cgroup"]

_V1_ROOT = Path("/sys/fs/cgroup/cpuacct")
_V2_ROOT = Path("/sys/fs/cgroup")


def _v2_own() -> Path | None:
    """This process's own cgroup v2 folder (new ones go under it, inside its limits)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return _V2_ROOT / line[3:].lstrip("/")
    except OSError:
        pass
    return None


def cgroup_cpu_s(folder: Path) -> float | None:
    """CPU seconds used so far by every process that has run in the cgroup ``folder`` (v1:
    ``cpuacct.usage``, nanoseconds; v2: ``cpu.stat``'s ``usage_usec``); None where neither
    can be read."""
    try:
        return int((folder / "cpuacct.usage").read_text()) / 1e9
    except (OSError, ValueError):
        pass
    try:
        for line in (folder / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
    except (OSError, ValueError):
        pass
    return None


def make_cgroup(name: str, parent: Path | None = None) -> Path | None:
    """A new cgroup ``name`` whose CPU can be read (:func:`cgroup_cpu_s`): under ``parent``,
    else under cgroup v1's ``cpuacct`` hierarchy or this process's own cgroup v2; None where
    this machine lets this process make none (not root, no such hierarchy)."""
    bases = (parent,) if parent is not None else (_V1_ROOT, _v2_own())
    for base in bases:
        if base is None:
            continue
        folder = base / name
        try:
            folder.mkdir()
        except OSError:
            continue
        if (folder / "cgroup.procs").exists() and cgroup_cpu_s(folder) is not None:
            return folder
        try:                    # a plain folder (a tmpfs above a v1 hierarchy), not a cgroup
            folder.rmdir()
        except OSError:
            pass
    return None


def move_into(folder: Path, pid: int) -> bool:
    """Put process ``pid`` (and what it starts from now on) into the cgroup ``folder``."""
    try:
        (folder / "cgroup.procs").write_text(str(pid))
    except OSError:
        return False
    return True


def remove_cgroup(folder: Path) -> bool:
    """Remove the cgroup ``folder`` and those under it; False where one still holds a process
    (the kernel refuses: a leaked process of the run, left for the leak checks to name)."""
    done = True
    for child in sorted((p for p in folder.iterdir() if p.is_dir()), reverse=True) \
            if folder.is_dir() else ():
        done = remove_cgroup(child) and done
    try:
        folder.rmdir()
    except OSError:
        return False
    return done
