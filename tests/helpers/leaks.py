"""Leak checks shared by every test that starts threads, processes or shared memory."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil


def _is_tracker(p: psutil.Process) -> bool:
    """multiprocessing's resource tracker lives as long as its parent, by design."""
    try:
        return any("resource_tracker" in part for part in p.cmdline())
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return False


def _shm() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:  # pragma: no cover - non-Linux
        return set()


@contextmanager
def no_leaks(grace_s: float = 5.0,
             shm_prefixes: tuple[str, ...] | None = ("torch", "psm_", "mp-")) -> Iterator[None]:
    """Assert that the body leaves no distlab thread, child process or new /dev/shm entry
    (allowing ``grace_s`` for reaping). ``shm_prefixes=None`` counts every new /dev/shm entry."""
    me = psutil.Process()
    before_children = {p.pid for p in me.children(recursive=True)}
    before_shm = _shm()
    yield
    deadline = time.monotonic() + grace_s
    while True:
        threads = [t.name for t in threading.enumerate() if t.name.startswith("distlab-")]
        children = [p for p in me.children(recursive=True)
                    if p.pid not in before_children and not _is_tracker(p)]
        shm = {n for n in _shm() - before_shm
               if shm_prefixes is None or n.startswith(shm_prefixes)}
        if not (threads or children or shm) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not threads, f"threads left behind: {threads}"
    assert not children, f"processes left behind: {[(p.pid, p.name()) for p in children]}"
    assert not shm, f"shared memory left behind: {sorted(shm)}"
