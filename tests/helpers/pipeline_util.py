"""Shared helpers for the pipeline tests: picklable failing stages and a leak checker."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psutil

from distlab.pipeline import Stage


class FailAt(Stage):
    """Raises ValueError on item ``bad`` (picklable, so it works in worker processes)."""

    category = "cpu"

    def __init__(self, bad: int, name: str = "boom", cost_s: float = 0.0,
                 exc: type[BaseException] = ValueError) -> None:
        self.bad, self.name, self.cost_s, self.exc = bad, name, cost_s, exc

    def process(self, item: Any) -> Any:
        if self.cost_s:
            time.sleep(self.cost_s)
        if item == self.bad:
            raise self.exc(f"bad item {item}")
        return item


class Slow(Stage):
    """Sleeps ``cost_s`` per item (placement configurable)."""

    def __init__(self, cost_s: float, name: str = "slow", placement: str = "worker") -> None:
        self.cost_s, self.name, self.placement = cost_s, name, placement

    def process(self, item: Any) -> Any:
        time.sleep(self.cost_s)
        return item


def fail_on_part_two(shards: Any, part_id: int) -> Any:
    """A part loader that raises on part 2."""
    from distlab.pipeline.parts import load_part

    if part_id == 2:
        raise OSError("disk on fire while loading part 2")
    return load_part(shards, part_id)


def slow_load(shards: Any, part_id: int) -> Any:
    """A part loader that takes 0.5 s per part (to kill the producer mid-load)."""
    from distlab.pipeline.parts import load_part

    time.sleep(0.5)
    return load_part(shards, part_id)


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
def no_leaks(grace_s: float = 5.0) -> Iterator[None]:
    """Assert that the body leaves no distlab thread, child process or new /dev/shm entry
    (allowing ``grace_s`` for reaping)."""
    me = psutil.Process()
    before_children = {p.pid for p in me.children(recursive=True)}
    before_shm = _shm()
    yield
    deadline = time.monotonic() + grace_s
    while True:
        threads = [t.name for t in threading.enumerate() if t.name.startswith("distlab-")]
        children = [p for p in me.children(recursive=True)
                    if p.pid not in before_children and not _is_tracker(p)]
        shm = {n for n in _shm() - before_shm if n.startswith(("torch", "psm_", "mp-"))}
        if not (threads or children or shm) or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not threads, f"threads left behind: {threads}"
    assert not children, f"processes left behind: {[(p.pid, p.name()) for p in children]}"
    assert not shm, f"shared memory left behind: {sorted(shm)}"
