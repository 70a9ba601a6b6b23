"""Executors run a chain of stages over items and record every stage call into a Timeline.

- ``sync``: each item through every stage in turn (no overlap; the baseline).
- ``threads``: one thread per stage joined by bounded queues of depth ``queue_depth``; the last
  stage (the consumer, e.g. the training step) runs in its own thread too, so that the caller
  can enforce ``timeout_s`` (see :mod:`.core`).
- ``processes`` (:mod:`.procs`): ``workers`` spawned processes run the leading worker stages
  (like DataLoader workers), a host thread runs the middle host stages (pinning), a consumer
  thread runs the last stage.
- ``torch`` (:mod:`.torchref`): torch's own ``DataLoader`` on the same stages, instrumented.

Every executor returns a :class:`~.core.RunResult`. Lanes are ``"<lane_prefix>/<stage name>"``
(worker processes: ``"<lane_prefix>/worker<k>"``). The consumer lane is the last stage's lane; its
idle time between the run's start and its last item is the *stall* (where a GPU would wait).
Worker start-up is not part of the run: it is ``RunResult.startup_s`` (one figure for every run
on the same workers: the time the run that started them took) and a "startup" span.

This module also holds the executor registry (:data:`FACTORIES`, a name -> factory table;
:data:`EXECUTORS` is its keys), :func:`make_executor` and :func:`run_pipeline`. The executors
themselves depend only on :mod:`.core`, never on this registry.

Failure contract: a stage that raises surfaces in the caller as :class:`StageError` naming the
stage and the item within a second (queue waits poll a stop flag every ``POLL_S``); a stage call
longer than ``timeout_s`` surfaces as :class:`PipelineTimeoutError` naming the stage and the item;
the other stages stop, threads are joined (a stuck one abandoned) and processes reaped.
KeyboardInterrupt stops everything the same way and is re-raised.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from distlab._checks import check_bool, check_choice
from distlab.loading.channel import STOPPED, Channel
from distlab.loading.core import (
    ABANDON_JOIN_S,
    DEFAULT_TIMEOUT_S,
    JOIN_S,
    POLL_S,
    Executor,
    RunResult,
    Watch,
    call_stage,
    check_int,
    check_items,
    check_stages,
    check_timeout,
    drive,
)
from distlab.loading.errors import PipelineTimeoutError
from distlab.loading.procs import ProcessExecutor
from distlab.loading.stage import Stage
from distlab.loading.torchref import TorchDataLoaderExecutor
from distlab.timeline import Timeline

__all__ = ["DEFAULT_TIMEOUT_S", "EXECUTORS", "FACTORIES", "Executor", "RunResult",
           "SyncExecutor", "ThreadExecutor", "make_executor", "run_pipeline"]

# Re-exported for callers that imported them from here before :mod:`.core` existed.
_COMPAT = (JOIN_S, POLL_S, call_stage, check_int, check_items, check_stages)

_END = object()


class SyncExecutor(Executor):
    """Each item runs through all stages before the next item starts (one worker thread, so the
    caller can enforce ``timeout_s``: a stage call longer than that raises
    :class:`PipelineTimeoutError` and the stuck thread is abandoned).

    Args:
        timeout_s: longest one stage call may take, seconds > 0.
    """

    name = "sync"

    def __init__(self, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.timeout_s = check_timeout(timeout_s)

    def _run(self, stages: list[Stage], items: list[Any], tl: Timeline, prefix: str,
             outputs: list[Any] | None) -> None:
        lanes = [f"{prefix}/{s.name}" for s in stages]
        stop, errors, watch = threading.Event(), [], Watch()

        def body() -> None:
            for idx, x in enumerate(items):
                for stage, lane in zip(stages, lanes, strict=True):
                    if stop.is_set():
                        return
                    x = call_stage(stage, idx, x, tl, lane, watch)
                if outputs is not None:
                    outputs.append(x)

        drive(body, name="sync", stop=stop, errors=errors, watch=watch,
              timeout_s=self.timeout_s, executor=self.name)


class ThreadExecutor(Executor):
    """A thread per stage, bounded queues of depth ``queue_depth`` between them.

    Args:
        queue_depth: items each inter-stage queue holds, >= 1.
        timeout_s: longest one stage call may take, seconds > 0 (a stuck thread is abandoned).
    """

    name = "threads"

    def __init__(self, queue_depth: int = 2, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.queue_depth = check_int("queue_depth", queue_depth, 1)
        self.timeout_s = check_timeout(timeout_s)

    def config(self) -> dict[str, Any]:
        return {"executor": self.name, "queue_depth": self.queue_depth}

    def _run(self, stages: list[Stage], items: list[Any], tl: Timeline, prefix: str,
             outputs: list[Any] | None) -> None:
        stop = threading.Event()
        errors: list[BaseException] = []
        watch = Watch()
        chans = [Channel(self.queue_depth, stop, POLL_S) for _ in stages[:-1]]

        def body(i: int) -> None:
            stage, lane = stages[i], f"{prefix}/{stages[i].name}"
            src = iter(enumerate(items)) if i == 0 else None
            out = chans[i]
            try:
                while True:
                    got = next(src, _END) if src is not None else chans[i - 1].get()
                    if got is STOPPED or stop.is_set():
                        return
                    if got is _END:
                        out.put(_END)
                        return
                    idx, x = got
                    if not out.put((idx, call_stage(stage, idx, x, tl, lane, watch))):
                        return
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                errors.append(exc)
                stop.set()

        threads = [threading.Thread(target=body, args=(i,), daemon=True,
                                    name=f"distlab-{stages[i].name}")
                   for i in range(len(stages) - 1)]
        last, lane = stages[-1], f"{prefix}/{stages[-1].name}"

        def consume() -> None:
            src: Iterable[Any] = enumerate(items)
            if threads:
                src = iter(chans[-1].get, _END)
            for got in src:
                if got is STOPPED or stop.is_set():
                    break
                idx, x = got
                y = call_stage(last, idx, x, tl, lane, watch)
                if outputs is not None:
                    outputs.append(y)

        join_s = JOIN_S
        try:
            for t in threads:
                t.start()
            drive(consume, name=f"{last.name}-consumer", stop=stop, errors=errors, watch=watch,
                  timeout_s=self.timeout_s, executor=self.name)
        except PipelineTimeoutError:
            join_s = ABANDON_JOIN_S  # one thread is stuck in a stage: abandoned
            raise
        finally:
            stop.set()
            for t in threads:
                t.join(join_s)


def _sync(queue_depth: int, workers: int, pin_memory: bool, timeout_s: float) -> Executor:
    return SyncExecutor(timeout_s=timeout_s)


def _threads(queue_depth: int, workers: int, pin_memory: bool, timeout_s: float) -> Executor:
    return ThreadExecutor(queue_depth, timeout_s=timeout_s)


def _processes(queue_depth: int, workers: int, pin_memory: bool, timeout_s: float) -> Executor:
    return ProcessExecutor(workers=workers, queue_depth=queue_depth, timeout_s=timeout_s)


def _torch(queue_depth: int, workers: int, pin_memory: bool, timeout_s: float) -> Executor:
    return TorchDataLoaderExecutor(workers=workers, prefetch_factor=queue_depth,
                                   pin_memory=pin_memory, timeout_s=timeout_s)


Factory = Callable[[int, int, bool, float], Executor]
FACTORIES: dict[str, Factory] = {
    "sync": _sync,
    "threads": _threads,
    "processes": _processes,
    "torch": _torch,
}
"""The executor registry: name -> ``factory(queue_depth, workers, pin_memory, timeout_s)``."""

EXECUTORS: tuple[str, ...] = tuple(FACTORIES)
"""Executor names, in registry order (baseline first)."""


def make_executor(name: str, *, queue_depth: int = 2, workers: int = 2,
                  pin_memory: bool = True, timeout_s: float = DEFAULT_TIMEOUT_S) -> Executor:
    """An executor by name (one of :data:`EXECUTORS`); bad names/values raise ValueError or
    TypeError naming the argument."""
    check_choice("executor", name, EXECUTORS)
    return FACTORIES[name](check_int("queue_depth", queue_depth, 1),
                           check_int("workers", workers, 0),
                           check_bool("pin_memory", pin_memory), check_timeout(timeout_s))


def run_pipeline(stages: Sequence[Stage], items: int | Sequence[Any], executor: str = "threads",
                 *, queue_depth: int = 2, workers: int = 2, timeline: Timeline | None = None,
                 lane_prefix: str = "rank0", collect: bool = False,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> RunResult:
    """Make an executor, run once, close it (worker processes included); returns the result.

    ``timeout_s``: longest one stage call may take, seconds; beyond it the run raises
    :class:`PipelineTimeoutError` naming the stage and the item."""
    with make_executor(executor, queue_depth=queue_depth, workers=workers,
                       timeout_s=timeout_s) as ex:
        return ex.run(stages, items, timeline=timeline, lane_prefix=lane_prefix,
                      collect=collect)
