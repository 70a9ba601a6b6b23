"""Leak checks shared by every test that starts threads, processes or shared memory.

``no_leaks()`` checks threads named ``distlab-*``, child processes and new ``/dev/shm`` entries;
``no_leaks(fds=True, maps=True)`` also checks this process's file-descriptor table
(``/proc/self/fd``: no descriptor opened in the body may stay open) and its shared-memory
mappings (``/proc/self/maps``: no ``/dev/shm`` or ``memfd:`` file may stay mapped). Things a
process opens once and keeps by design (multiprocessing's resource tracker and resource sharer,
a connection to ``torch_shm_manager``) must be opened before the check: warm up first, or
name them in ``allow_fd`` (a predicate on the descriptor's target, e.g. ``"socket:[123]"``).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil


def _is_tracker(p: psutil.Process) -> bool:
    """multiprocessing's resource tracker and fork server (which :func:`distlab.launch.run` forks
    ranks from) live as long as their parent, by design."""
    try:
        if any("resource_tracker" in part for part in p.cmdline()):
            return True
        # a process forked by the server (a rank) shows the server's command line: the server
        # is the one whose parent is not a server
        parent = p.parent()
        return _is_forkserver(p) and (parent is None or not _is_forkserver(parent))
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


def _is_forkserver(p: psutil.Process) -> bool:
    return any("multiprocessing.forkserver" in part for part in p.cmdline())


def _shm() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:  # pragma: no cover - non-Linux
        return set()


def fd_table() -> dict[int, str]:
    """``{fd: target}`` of this process (``/proc/self/fd``); the listing's own fd drops out."""
    out: dict[int, str] = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
    return out


def shm_mappings() -> set[str]:
    """Shared-memory files this process maps: ``/dev/shm/...`` (also ``(deleted)``), ``memfd:``."""
    out = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith(("/dev/shm/", "/memfd:")):
                out.add(parts[5].strip())
    return out


@contextmanager
def no_leaks(grace_s: float = 5.0,
             shm_prefixes: tuple[str, ...] | None = ("torch", "psm_", "mp-"), *,
             fds: bool = False, maps: bool = False,
             allow_fd: Callable[[str], bool] | None = None) -> Iterator[None]:
    """Assert that the body leaves no distlab thread, child process or new /dev/shm entry
    (allowing ``grace_s`` for reaping). ``shm_prefixes=None`` counts every new /dev/shm entry.
    ``fds``: no new or changed entry in the fd table (except targets ``allow_fd`` accepts);
    ``maps``: no new shared-memory mapping (see the module docstring)."""
    me = psutil.Process()
    before_children = {p.pid for p in me.children(recursive=True)}
    before_shm = _shm()
    before_fds = fd_table() if fds else {}
    before_maps = shm_mappings() if maps else set()
    yield
    deadline = time.monotonic() + grace_s
    while True:
        threads = [t.name for t in threading.enumerate() if t.name.startswith("distlab-")]
        children = [p for p in me.children(recursive=True)
                    if p.pid not in before_children and not _is_tracker(p)]
        shm = {n for n in _shm() - before_shm
               if shm_prefixes is None or n.startswith(shm_prefixes)}
        new_fds = {k: v for k, v in fd_table().items()
                   if before_fds.get(k) != v and not (allow_fd and allow_fd(v))} if fds else {}
        new_maps = shm_mappings() - before_maps if maps else set()
        if not (threads or children or shm or new_fds or new_maps) \
                or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not threads, f"threads left behind: {threads}"
    assert not children, f"processes left behind: {[(p.pid, p.name()) for p in children]}"
    assert not shm, f"shared memory left behind: {sorted(shm)}"
    assert not new_fds, f"file descriptors left open: {new_fds}"
    assert not new_maps, f"shared memory left mapped: {sorted(new_maps)}"


def processes_with(marker: str) -> list[int]:
    """PIDs whose environment carries ``marker`` (a ``NAME=value`` or a value set in the
    environment of a command under test: it and every child it started inherit it)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and marker.encode() in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found
