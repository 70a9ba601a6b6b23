"""Executors run a chain of stages over items and record every stage call into a Timeline.

- ``sync``: one thread, each item through every stage in turn (no overlap; the baseline).
- ``threads``: one thread per stage joined by bounded queues of depth ``queue_depth``; the last
  stage (the consumer, e.g. the training step) runs in the caller's thread.
- ``processes`` (:mod:`.procs`): ``workers`` spawned processes run the leading worker stages
  (like DataLoader workers), a host thread runs the middle host stages (pinning), the caller
  runs the last stage.
- ``torch`` (:mod:`.torchref`): torch's own ``DataLoader`` on the same stages, instrumented.

Every executor returns a :class:`RunResult`. Lanes are ``"<lane_prefix>/<stage name>"`` (worker
processes: ``"<lane_prefix>/worker<k>"``). The consumer lane is the last stage's lane; its idle
time between the run's start and its last item is the *stall* (where a GPU would wait).

Failure contract: a stage that raises surfaces in the caller as :class:`StageError` naming the
stage and the item within a second (queue waits poll a stop flag every ``POLL_S``); the other
stages stop, threads are joined and processes reaped. KeyboardInterrupt stops everything the same
way and is re-raised.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from distlab._checks import check_int as _shared_check_int
from ..timeline import Timeline, now_us
from .channel import STOPPED, Channel
from .errors import StageError
from .stages import Stage

__all__ = ["EXECUTORS", "Executor", "RunResult", "SyncExecutor", "ThreadExecutor",
           "make_executor", "run_pipeline"]

POLL_S = 0.05
JOIN_S = 2.0
_END = object()


@dataclass
class RunResult:
    """What one run measured. Times: seconds (wall) and microseconds (timeline)."""

    executor: str
    timeline: Timeline
    n_items: int
    start_us: float
    end_us: float
    consumer_lane: str
    outputs: list[Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    startup_s: float = 0.0
    """Seconds spent starting workers (spawn, imports, ready handshake) before the steady run;
    0.0 for executors without workers (sync, threads). Not part of ``wall_s``."""

    @property
    def wall_s(self) -> float:
        """Steady-pipeline wall time, seconds: from ``start_us`` (after worker start-up) to the
        last item consumed."""
        return (self.end_us - self.start_us) * 1e-6

    @property
    def stall_s(self) -> float:
        """Seconds the consumer lane sat idle between the run's start and its last item."""
        if not any(s.lane == self.consumer_lane for s in self.timeline.spans):
            return self.wall_s
        gaps = self.timeline.idle_gaps(self.consumer_lane, window=(self.start_us, self.end_us))
        return sum(e - s for s, e in gaps) * 1e-6

    @property
    def items_per_s(self) -> float:
        """Items consumed per second of wall time."""
        return self.n_items / self.wall_s if self.wall_s > 0 else 0.0


def check_stages(stages: Any) -> list[Stage]:
    """Validate a non-empty sequence of Stage objects with unique names; returns it as a list."""
    if isinstance(stages, Stage) or not isinstance(stages, Sequence) or not stages:
        raise ValueError(f"stages must be a non-empty list of Stage objects, got {stages!r}")
    for s in stages:
        if not isinstance(s, Stage):
            raise TypeError(f"stages must hold Stage objects, got {type(s).__name__} {s!r}; "
                            "wrap functions with FnStage")
        s.check()
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise ValueError(f"stage names must be unique, got {names}")
    return list(stages)


def check_items(items: Any) -> list[Any]:
    """``items`` as a list: an int n means ``range(n)``; else a finite sequence."""
    if isinstance(items, bool):
        raise TypeError("items must be an int >= 0 or a sequence, got a bool")
    if isinstance(items, int):
        if items < 0:
            raise ValueError(f"items must be >= 0, got {items}")
        return list(range(items))
    if isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TypeError(f"items must be an int >= 0 or a sequence, got {type(items).__name__}")
    return list(items)


def check_int(name: str, value: Any, minimum: int) -> int:
    """An int >= minimum, else TypeError/ValueError naming ``name`` (see distlab._checks)."""
    return _shared_check_int(name, value, minimum=minimum)


def call_stage(stage: Stage, idx: int, x: Any, tl: Timeline, lane: str) -> Any:
    """Run one stage on one item, record its span, wrap failures in StageError."""
    t = now_us()
    try:
        y = stage.process(x)
    except Exception as exc:
        tl.record(stage.name, stage.category, lane, t, now_us() - t,
                  {"item": idx, "error": type(exc).__name__})
        raise StageError(stage.name, idx, f"{type(exc).__name__}: {exc}",
                         traceback.format_exc()) from exc
    tl.record(stage.name, stage.category, lane, t, now_us() - t,
              {"item": idx, "skipped": stage.skipped} if stage.skipped else {"item": idx})
    return y


class Executor:
    """Base class: ``run(stages, items, ...) -> RunResult``; ``close()`` frees resources."""

    name = "base"

    def run(self, stages: Sequence[Stage], items: int | Sequence[Any], *,
            timeline: Timeline | None = None, lane_prefix: str = "rank0",
            collect: bool = False) -> RunResult:
        """Run every item through ``stages``; spans go into ``timeline`` (a new one if None)."""
        stages = check_stages(stages)
        values = check_items(items)
        if not isinstance(lane_prefix, str) or not lane_prefix or "/" in lane_prefix:
            raise ValueError(f"lane_prefix must be a non-empty str without '/', "
                             f"got {lane_prefix!r}")
        tl = Timeline() if timeline is None else timeline
        for s in stages:
            if s.skipped:
                tl.add_note(s.skipped)
        outputs: list[Any] | None = [] if collect else None
        t0 = now_us()
        started = self._startup(stages, values, tl, lane_prefix)
        start = now_us()
        startup_s = 0.0
        if started:
            startup_s = (start - t0) * 1e-6
            tl.record("startup", "startup", f"{lane_prefix}/startup", t0, start - t0,
                      {"executor": self.name})
        self._run(stages, values, tl, lane_prefix, outputs)
        end = now_us()
        return RunResult(self.name, tl, len(values), start, end,
                         f"{lane_prefix}/{stages[-1].name}", outputs, self.config(), startup_s)

    def _startup(self, stages: list[Stage], items: list[Any], tl: Timeline,
                 prefix: str) -> bool:
        """Start (or re-arm) workers before the steady clock starts; True when it did any work
        (then its time is ``RunResult.startup_s`` and a "startup" span). None here."""
        return False

    def _run(self, stages: list[Stage], items: list[Any], tl: Timeline, prefix: str,
             outputs: list[Any] | None) -> None:
        raise NotImplementedError

    def config(self) -> dict[str, Any]:
        """The executor's settings, for reports."""
        return {"executor": self.name}

    def close(self) -> None:
        """Release threads/processes kept between runs (none for this executor)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SyncExecutor(Executor):
    """One thread: each item runs through all stages before the next item starts."""

    name = "sync"

    def _run(self, stages: list[Stage], items: list[Any], tl: Timeline, prefix: str,
             outputs: list[Any] | None) -> None:
        lanes = [f"{prefix}/{s.name}" for s in stages]
        for idx, x in enumerate(items):
            for stage, lane in zip(stages, lanes):
                x = call_stage(stage, idx, x, tl, lane)
            if outputs is not None:
                outputs.append(x)


class ThreadExecutor(Executor):
    """A thread per stage, bounded queues of depth ``queue_depth`` between them.

    Args:
        queue_depth: items each inter-stage queue holds, >= 1.
    """

    name = "threads"

    def __init__(self, queue_depth: int = 2) -> None:
        self.queue_depth = check_int("queue_depth", queue_depth, 1)

    def config(self) -> dict[str, Any]:
        return {"executor": self.name, "queue_depth": self.queue_depth}

    def _run(self, stages: list[Stage], items: list[Any], tl: Timeline, prefix: str,
             outputs: list[Any] | None) -> None:
        stop = threading.Event()
        errors: list[BaseException] = []
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
                    if not out.put((idx, call_stage(stage, idx, x, tl, lane))):
                        return
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                errors.append(exc)
                stop.set()

        threads = [threading.Thread(target=body, args=(i,), daemon=True,
                                    name=f"distlab-{stages[i].name}")
                   for i in range(len(stages) - 1)]
        last, lane = stages[-1], f"{prefix}/{stages[-1].name}"
        try:
            for t in threads:
                t.start()
            src: Iterable[Any] = enumerate(items)
            if threads:
                src = iter(chans[-1].get, _END)
            for got in src:
                if got is STOPPED:
                    break
                idx, x = got
                y = call_stage(last, idx, x, tl, lane)
                if outputs is not None:
                    outputs.append(y)
            if errors:
                raise errors[0]
        finally:
            stop.set()
            for t in threads:
                t.join(JOIN_S)


EXECUTORS = ("sync", "threads", "processes", "torch")


def make_executor(name: str, *, queue_depth: int = 2, workers: int = 2,
                  pin_memory: bool = True, timeout_s: float = 120.0) -> Executor:
    """An executor by name (one of :data:`EXECUTORS`); bad names/values raise ValueError."""
    check_int("queue_depth", queue_depth, 1)
    check_int("workers", workers, 0)
    if name == "sync":
        return SyncExecutor()
    if name == "threads":
        return ThreadExecutor(queue_depth)
    if name == "processes":
        from .procs import ProcessExecutor
        return ProcessExecutor(workers=workers, queue_depth=queue_depth, timeout_s=timeout_s)
    if name == "torch":
        from .torchref import TorchDataLoaderExecutor
        return TorchDataLoaderExecutor(workers=workers, prefetch_factor=queue_depth,
                                       pin_memory=pin_memory, timeout_s=timeout_s)
    raise ValueError(f"executor must be one of {EXECUTORS}, got {name!r}")


def run_pipeline(stages: Sequence[Stage], items: int | Sequence[Any], executor: str = "threads",
                 *, queue_depth: int = 2, workers: int = 2, timeline: Timeline | None = None,
                 lane_prefix: str = "rank0", collect: bool = False) -> RunResult:
    """Make an executor, run once, close it (worker processes included); returns the result."""
    with make_executor(executor, queue_depth=queue_depth, workers=workers) as ex:
        return ex.run(stages, items, timeline=timeline, lane_prefix=lane_prefix,
                      collect=collect)
