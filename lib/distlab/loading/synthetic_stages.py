"""Synthetic stages that stand for work of a known cost: sleep (I/O), burn (CPU), identity
(nothing: executor overhead) and a wrapped function."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from distlab.loading.cpuwork import burn
from distlab.loading.stage import Stage
from distlab.loading.stage import stage_cost as _cost

__all__ = ["BurnStage", "FnStage", "IdentityStage", "SleepStage"]


class SleepStage(Stage):
    """Sleeps ``cost_s`` per item: stands for I/O latency (releases the GIL)."""

    category = "io"

    def __init__(self, cost_s: float, name: str = "sleep") -> None:
        self.cost_s = _cost("cost_s", cost_s)
        self.name = name

    def process(self, item: Any) -> Any:
        time.sleep(self.cost_s)
        return item


class BurnStage(Stage):
    """``cost_s`` seconds of real CPU work per item (torch matmuls, GIL released per op);
    ``fixed_work`` as in :func:`burn` (False: ``cost_s`` of wall time; True: a calibrated
    amount of work that slows down when CPUs are shared)."""

    category = "cpu"

    def __init__(self, cost_s: float, name: str = "burn", fixed_work: bool = False) -> None:
        self.cost_s = _cost("cost_s", cost_s)
        self.name, self.fixed_work = name, bool(fixed_work)

    def process(self, item: Any) -> Any:
        burn(self.cost_s, fixed_work=self.fixed_work)
        return item


class IdentityStage(Stage):
    """Does nothing (zero cost): measures the executor's own per-item overhead."""

    def __init__(self, name: str = "identity", placement: str = "worker") -> None:
        self.name, self.placement, self.cost_s = name, placement, 0.0

    def process(self, item: Any) -> Any:
        return item


class FnStage(Stage):
    """Wraps a function ``fn(item) -> item`` as a stage (module-level for worker processes)."""

    def __init__(self, fn: Callable[[Any], Any], name: str | None = None, category: str = "cpu",
                 placement: str = "worker", cost_s: float | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        self.fn, self.category, self.placement = fn, category, placement
        self.name = name or getattr(fn, "__name__", "fn")
        self.cost_s = None if cost_s is None else _cost("cost_s", cost_s)

    def process(self, item: Any) -> Any:
        return self.fn(item)
