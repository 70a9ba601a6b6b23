"""A bounded FIFO between threads that polls a stop flag: the executors' queue.

``queue.Queue`` pays for a Python-level ``Condition`` (a fresh lock per waiter) on every blocked
``get``/``put``. :class:`Channel` builds the same bounded semantics from two C-implemented
``queue.SimpleQueue`` objects: one holds the items, the other ``depth`` capacity tokens. ``put``
takes a token (blocking while ``depth`` items are queued), ``get`` returns one. At most
``depth`` items are ever queued, exactly like ``queue.Queue(maxsize=depth)``.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

from distlab._checks import check_float, check_instance, check_int

__all__ = ["STOPPED", "Channel"]

STOPPED = object()
"""Returned by :meth:`Channel.get` when the stop flag was set while waiting."""


class Channel:
    """Bounded FIFO of ``depth`` items whose blocking calls return once ``stop`` is set.

    Args:
        depth: capacity in items, >= 1.
        stop: the flag every wait polls.
        poll_s: seconds between stop checks while blocked.
    """

    def __init__(self, depth: int, stop: threading.Event, poll_s: float = 0.05) -> None:
        depth = check_int("depth", depth, minimum=1)
        self._poll = check_float("poll_s", poll_s, minimum=0.0, exclusive_minimum=True)
        self._items: queue.SimpleQueue = queue.SimpleQueue()
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(depth):
            self._free.put(None)
        self._stop = check_instance("stop", stop, threading.Event)

    def put(self, obj: Any) -> bool:
        """Append ``obj``, waiting for room; False (nothing queued) if stopped first."""
        while True:
            try:
                self._free.get(timeout=self._poll)
                break
            except queue.Empty:
                if self._stop.is_set():
                    return False
        self._items.put(obj)
        return True

    def get(self) -> Any:
        """The oldest item, waiting for one; :data:`STOPPED` if stopped first."""
        while True:
            try:
                obj = self._items.get(timeout=self._poll)
            except queue.Empty:
                if self._stop.is_set():
                    return STOPPED
                continue
            self._free.put(None)
            return obj

    def qsize(self) -> int:
        """Items queued now (approximate while other threads run)."""
        return self._items.qsize()
