"""One thread that runs a rank's collectives in the order they were issued, so they overlap compute.

ZeRO stage 3 gathers a unit's parameters *ahead* of the compute that needs them (prefetch) and
reduce-scatters its gradients while backward goes on. On GPUs that concurrency comes from a
second CUDA stream; on CPU ranks it comes from here: :class:`CommQueue` is a one-worker
:class:`concurrent.futures.ThreadPoolExecutor` that runs submitted calls one at a time, first in
first out, and the caller gets a :class:`Pending` (a future with the call's name and times) to
wait on. Because one thread runs every call of a group in submission order, every rank issues
the same collectives in the same order (the order their main threads submitted them), which is
what collectives require.

A call that raises is re-raised, with its traceback, by :meth:`Pending.wait` in the waiting
thread, and every call queued after it fails without running (the group is no longer in step).
Collectives that should not wait forever run on a group with a backend timeout (a dead peer ends
the call); :meth:`Pending.wait` takes a bound too, as a backstop.
"""

from __future__ import annotations

import concurrent.futures as cf
from collections.abc import Callable
from typing import Any

from distlab.timeline import Timeline, now_us

__all__ = ["CLOSE_WAIT_S", "CommQueue", "Pending"]

#: Seconds :meth:`CommQueue.close` waits for the calls queued so far; a call still running then
#: goes on in the thread (its collective is bounded by its group's own timeout).
CLOSE_WAIT_S = 5.0


class Pending:
    """A submitted call: :meth:`wait` returns once it ran (re-raising what it raised).
    ``start_us`` and ``end_us`` say when it ran (0 until it has)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.future: cf.Future[Any] = cf.Future()   # replaced by the executor's on submit
        self.start_us = 0.0
        self.end_us = 0.0

    @property
    def done(self) -> bool:
        """Whether the call has finished (successfully or not)."""
        return self.future.done()

    def wait(self, timeout: float | None = None) -> float:
        """Block until the call finished; returns the microseconds this wait blocked.

        Raises:
            TimeoutError: not finished within ``timeout`` seconds.
            Exception: what the call raised.
        """
        t0 = now_us()
        try:
            self.future.result(timeout)
        except cf.TimeoutError:
            raise TimeoutError(f"{self.what}: not finished after {timeout:g} s") from None
        return now_us() - t0


class CommQueue:
    """A FIFO of calls run on one worker thread (see the module docstring).

    Args:
        lane: timeline lane prefix (``rank{r}``); each call's span goes on ``{lane}/{kind}``.
    """

    def __init__(self, lane: str) -> None:
        self.lane = lane
        self._pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"{lane}-comm")
        self._failed: BaseException | None = None
        self._last: Pending | None = None
        self._closed = False

    def submit(self, what: str, kind: str, fn: Callable[[], Any],
               args: dict[str, Any] | None = None, timeline: Timeline | None = None) -> Pending:
        """Queue ``fn()``; ``what`` names it in spans and errors, ``kind`` is its lane and span
        category (``all_gather``, ``reduce_scatter``), ``args`` the span's args; ``timeline``
        gets the span (start and end as it really ran; its args add ``issued_us``, when it was
        submitted).

        Raises:
            RuntimeError: the queue was closed.
        """
        if self._closed:
            raise RuntimeError("the communication thread has stopped (close() was called)")
        span_args = {**(args or {}), "issued_us": now_us()}
        p = Pending(what)

        def run() -> None:
            p.start_us = now_us()
            try:
                if self._failed is not None:
                    raise RuntimeError(f"{what}: not run, an earlier collective failed "
                                       f"({self._failed})") from self._failed
                fn()
            except BaseException as exc:
                self._failed = self._failed or exc
                raise
            finally:
                p.end_us = now_us()
            if timeline is not None:
                timeline.record(what, kind, f"{self.lane}/{kind}", p.start_us,
                                max(0.0, p.end_us - p.start_us), span_args)

        p.future = self._pool.submit(run)
        self._last = p
        return p

    def close(self) -> None:
        """Stop the thread once the calls queued so far have run (waits
        :data:`CLOSE_WAIT_S` at most for them; later submits raise)."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False)
        if self._last is not None:
            cf.wait([self._last.future], CLOSE_WAIT_S)
