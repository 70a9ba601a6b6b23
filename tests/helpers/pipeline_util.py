"""Shared helpers for the pipeline tests: picklable failing stages and a leak checker."""

from __future__ import annotations

import time
from typing import Any


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
