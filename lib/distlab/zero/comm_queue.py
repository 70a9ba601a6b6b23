"""One thread that runs a rank's collectives in the order they were issued, so they overlap compute.

ZeRO stage 3 gathers a unit's parameters *ahead* of the compute that needs them (prefetch) and
reduce-scatters its gradients while backward goes on. On GPUs that concurrency comes from a
second CUDA stream; on CPU ranks it comes from here: :class:`CommQueue` runs submitted calls one
at a time, first in first out, on one daemon thread, and the caller gets a :class:`Pending` to
wait on. Because one thread runs every call of a group in submission order, every rank issues
the same collectives in the same order (the order their main threads submitted them), which is
what collectives require.

A call that raises is re-raised, with its traceback, by :meth:`Pending.wait` in the waiting
thread, and every call queued after it fails with the same error (the group is no longer in
step). Collectives that should not wait forever run on a group with a backend timeout (a dead
peer ends the call); :meth:`Pending.wait` takes a bound too, as a backstop.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from distlab.timeline import Timeline, now_us

__all__ = ["CommQueue", "Pending"]


class Pending:
    """A submitted call: :meth:`wait` returns once it ran (re-raising what it raised)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._done = threading.Event()
        self._error: BaseException | None = None
        self.start_us = 0.0
        self.end_us = 0.0

    @property
    def done(self) -> bool:
        """Whether the call has finished (successfully or not)."""
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> float:
        """Block until the call finished; returns the microseconds this wait blocked.

        Raises:
            TimeoutError: not finished within ``timeout`` seconds.
            Exception: what the call raised.
        """
        t0 = now_us()
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self.what}: not finished after {timeout:g} s")
        if self._error is not None:
            raise self._error
        return now_us() - t0


_Call = tuple[Pending, str, dict[str, Any], Callable[[], Any], Timeline | None]


class CommQueue:
    """A FIFO of calls run on one daemon thread (see the module docstring).

    Args:
        lane: timeline lane prefix (``rank{r}``); each call's span goes on ``{lane}/{kind}``.
    """

    def __init__(self, lane: str) -> None:
        self.lane = lane
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._failed: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name=f"{lane}-comm", daemon=True)
        self._thread.start()

    def submit(self, what: str, kind: str, fn: Callable[[], Any],
               args: dict[str, Any] | None = None, timeline: Timeline | None = None) -> Pending:
        """Queue ``fn()``; ``what`` names it in spans and errors, ``kind`` is its lane and span
        category (``all_gather``, ``reduce_scatter``), ``args`` the span's args; ``timeline``
        gets the span (start and end as it really ran; its args add ``issued_us``, when it was
        submitted)."""
        if not self._thread.is_alive():
            raise RuntimeError("the communication thread has stopped (close() was called)")
        p = Pending(what)
        self._calls.put((p, kind, {**(args or {}), "issued_us": now_us()}, fn, timeline))
        return p

    def _loop(self) -> None:
        while True:
            item = self._calls.get()
            if item is None:
                return
            p, kind, args, fn, timeline = item
            p.start_us = now_us()
            try:
                if self._failed is not None:
                    raise RuntimeError(f"{p.what}: not run, an earlier collective failed "
                                       f"({self._failed})") from self._failed
                fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                self._failed = self._failed or exc
                p._error = exc
            p.end_us = now_us()
            if timeline is not None and p._error is None:
                timeline.record(p.what, kind, f"{self.lane}/{kind}", p.start_us,
                                max(0.0, p.end_us - p.start_us), args)
            # drop this call before blocking on the next: its closure holds the call's buffers
            del item, fn
            p._done.set()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread once the calls queued so far have run (waits ``timeout`` s at
        most)."""
        if self._thread.is_alive():
            self._calls.put(None)
            deadline = time.monotonic() + timeout
            self._thread.join(max(0.0, deadline - time.monotonic()))
