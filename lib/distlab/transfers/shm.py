"""Shared-memory bookkeeping for the hop: what this process maps and holds open, and the
``/dev/shm`` files a dead worker left behind.

torch's ``file_system`` strategy names each segment ``/dev/shm/torch_<pid>_<random>_<n>`` after
the process that made it, and ``torch_shm_manager`` unlinks the segments of its clients only when
it exits, which is when its *last* client disconnects: a trainer that once received a tensor
this way stays connected for its whole life. A worker killed between making a segment and the
trainer releasing it therefore leaves the file behind until the trainer exits.
:func:`sweep_segments` removes them once the worker is dead. (``file_descriptor`` segments are
unlinked as soon as they are made: they vanish with the last descriptor and mapping.)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from distlab._checks import check_int

__all__ = ["SHM_DIR", "fd_table", "mapped_shm", "segments_of", "sweep_segments"]

SHM_DIR = Path("/dev/shm")
_TORCH_NAME = re.compile(r"torch_(\d+)_")


def fd_table(pid: int | str = "self") -> dict[int, str]:
    """``{fd: target}`` of process ``pid`` (``/proc/<pid>/fd``; empty where there is no /proc)."""
    base = Path(f"/proc/{pid}/fd")
    out: dict[int, str] = {}
    try:
        names = os.listdir(base)
    except OSError:
        return out
    for name in names:
        try:
            out[int(name)] = os.readlink(base / name)
        except OSError:   # closed while listing (the listing's own descriptor, for one)
            continue
    return out


def mapped_shm(pid: int | str = "self") -> set[str]:
    """Paths of the shared-memory files process ``pid`` maps (``/dev/shm/...``, with a
    ``(deleted)`` suffix for unlinked ones, and ``memfd:`` files), from ``/proc/<pid>/maps``."""
    try:
        text = Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return set()
    out = set()
    for line in text.splitlines():
        parts = line.split(maxsplit=5)
        if len(parts) == 6 and (parts[5].startswith(str(SHM_DIR) + "/")
                                or parts[5].startswith("/memfd:")):
            out.add(parts[5])
    return out


def segments_of(pid: int) -> list[str]:
    """Names in ``/dev/shm`` of the ``file_system`` segments process ``pid`` made."""
    pid = check_int("pid", pid, minimum=1)
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return []
    return sorted(n for n in names if (m := _TORCH_NAME.match(n)) and int(m.group(1)) == pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:   # a zombie has exited: its segments are orphans too
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def sweep_segments(pid: int) -> list[str]:
    """Unlink the ``file_system`` segments of the *dead* process ``pid`` that this process does
    not map (a segment still mapped here is in use: torch unlinks it when the last tensor on it
    goes). Returns the names removed. Raises ``ValueError`` if ``pid`` is still running."""
    pid = check_int("pid", pid, minimum=1)
    if _alive(pid):
        raise ValueError(f"pid {pid} is still running: only a dead process's segments are "
                         "orphans")
    mine = {p.split()[0] for p in mapped_shm()}
    removed = []
    for name in segments_of(pid):
        if str(SHM_DIR / name) in mine:
            continue
        try:
            os.unlink(SHM_DIR / name)
            removed.append(name)
        except FileNotFoundError:   # the manager got there first
            continue
    return removed
