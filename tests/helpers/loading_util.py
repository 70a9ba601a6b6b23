"""Shared helpers for the pipeline tests: picklable failing stages and a leak checker."""

from __future__ import annotations

import threading
import time
from typing import Any

from distlab.loading import Stage

_RELEASE = threading.Event()
"""Set by :func:`release_hangs`: every :class:`HangAt` of this process stops waiting."""


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


class HangAt(Stage):
    """Sleeps ``hang_s`` on item ``bad`` (a stage that does not return in time); other items pass
    through at once. Picklable, so it also hangs inside worker processes. In the process that
    called :func:`release_hangs` since its last :func:`arm_hangs`, it returns at once instead of
    sleeping on (a worker process has its own, never released)."""

    category = "cpu"

    def __init__(self, bad: int, name: str = "stuck", hang_s: float = 30.0,
                 placement: str = "worker") -> None:
        self.bad, self.name, self.hang_s, self.placement = bad, name, hang_s, placement

    def process(self, item: Any) -> Any:
        if item == self.bad:
            _RELEASE.wait(self.hang_s)
        return item


def arm_hangs() -> None:
    """:class:`HangAt` stages of this process sleep their whole ``hang_s`` again."""
    _RELEASE.clear()


def release_hangs() -> None:
    """Every :class:`HangAt` of this process still sleeping returns now (an abandoned stage
    thread then ends as it would at the end of its ``hang_s``)."""
    _RELEASE.set()


def fail_on_part_two(shards: Any, part_id: int) -> Any:
    """A part loader that raises on part 2."""
    from distlab.loading.part_loader import load_part

    if part_id == 2:
        raise OSError("disk on fire while loading part 2")
    return load_part(shards, part_id)


def slow_load(shards: Any, part_id: int) -> Any:
    """A part loader that takes 0.5 s per part (to kill the producer mid-load)."""
    from distlab.loading.part_loader import load_part

    time.sleep(0.5)
    return load_part(shards, part_id)


def hang_load(shards: Any, part_id: int) -> Any:
    """A part loader that never finishes in test time (60 s): the producer is stuck in it."""
    time.sleep(60)
    raise AssertionError("hang_load was not killed")


def children_outlive_parent(code: str, grace_s: float = 30.0) -> list[Any]:
    """Run ``code`` in a parent Python process (cwd ``tests/``, so ``helpers`` imports); the code
    must print the pids of the children it started on one line, space-separated, and then block.
    SIGKILL the parent and return the children still alive ``grace_s`` seconds later (the test
    asserts the list is empty; it returns as soon as none is). The grace is long because a child
    may still be importing torch when its parent dies, on a loaded machine for seconds, and only
    then reaches the code that sees its parent gone; any survivors are killed before
    returning."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    import psutil

    parent = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).parent.parent,
                              stdout=subprocess.PIPE, env=os.environ.copy())
    children: list[Any] = []
    try:
        line = parent.stdout.readline().decode().split()
        assert line, f"the parent printed no child pids (exit code {parent.poll()})"
        children = [psutil.Process(int(p)) for p in line]
        time.sleep(0.5)  # the children are inside their (stuck) work now
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)

        def living() -> list[Any]:
            out = []
            for c in children:   # a zombie has exited: nobody reaps an orphan here at once
                try:
                    if c.is_running() and c.status() != psutil.STATUS_ZOMBIE:
                        out.append(c)
                except psutil.NoSuchProcess:
                    continue
            return out

        deadline = time.monotonic() + grace_s
        while living() and time.monotonic() < deadline:
            time.sleep(0.1)
        return living()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        for c in children:
            try:
                c.kill()
            except psutil.NoSuchProcess:
                pass
