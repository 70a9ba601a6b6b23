"""What every executor shares: the run result, the base class, the instrumented stage call, the
progress watch that names a stuck stage, and the caller-side driver that enforces ``timeout_s``.

This module imports no executor, so the executors (:mod:`.executors`, :mod:`.procs`,
:mod:`.torchref`) and the part loader all depend on it and never on each other's registry.

Timeout contract: every executor takes ``timeout_s`` (seconds, > 0). A stage call that has been
running longer than that raises :class:`~.errors.PipelineTimeoutError` in the caller, naming the
stage and the item, within about ``POLL_S`` seconds. The caller never runs a stage itself: the
stages run in daemon threads (and worker processes) while the caller waits, polling a
:class:`Watch`. A stuck *thread* cannot be killed in Python: it is abandoned (a daemon thread, it
dies with the interpreter, and the stage's eventual result is discarded). Stuck *processes* are
terminated with the pool.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from distlab._checks import check_float, check_str
from distlab._checks import check_int as _check_int
from distlab.loading.errors import PipelineTimeoutError, StageError
from distlab.loading.stage import Stage
from distlab.timeline import Timeline, now_us

__all__ = ["ABANDON_JOIN_S", "DEFAULT_TIMEOUT_S", "JOIN_S", "POLL_S", "REARMED", "STARTED",
           "Executor", "RunResult", "SlotProgress", "Watch", "call_stage", "check_items",
           "check_stages", "check_timeout", "drive"]

POLL_S = 0.05
"""Seconds between checks of a stop flag / the watch while a thread waits."""
JOIN_S = 2.0
"""Seconds to wait for a thread or process to finish after it was asked to stop."""
ABANDON_JOIN_S = 4 * POLL_S
"""Seconds to wait for threads after a timeout: enough for a polling thread, not for the stuck
one."""
DEFAULT_TIMEOUT_S = 120.0
"""Default ``timeout_s`` of every executor: longest one stage call may take, seconds."""
STARTED = "startup"
"""What :meth:`Executor._startup` returns when it started workers (also the span's name)."""
REARMED = "rearm"
"""What :meth:`Executor._startup` returns when it handed live workers a run's stages."""


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
    """Worker start-up, seconds: from asking for the workers until every one is ready with the
    stages (spawn, imports, ready handshake, stages loaded), timed by the run that started them.
    Later runs of the same executor reuse the workers (persistent, as DataLoader's
    ``persistent_workers=True``) and carry the same figure, so every run of an executor reports
    one start-up; 0.0 for executors without workers (sync, threads). Never part of ``wall_s``:
    the model covers the steady pipeline only (:func:`~.bottleneck.startup_s` reads it)."""

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
    if isinstance(items, (str, bytes)) or not (isinstance(items, Iterable) or hasattr(
            items, "__index__")):
        raise TypeError(f"items must be an int >= 0 or a sequence, got {type(items).__name__}")
    if isinstance(items, Iterable):
        return list(items)
    return list(range(_check_int("items", items, minimum=0)))


def check_int(name: str, value: Any, minimum: int) -> int:
    """An int >= minimum, else TypeError/ValueError naming ``name`` (see distlab._checks)."""
    return _check_int(name, value, minimum=minimum)


def check_timeout(value: Any, name: str = "timeout_s") -> float:
    """A finite number of seconds > 0."""
    return check_float(name, value, minimum=0.0, exclusive_minimum=True)


class Watch:
    """Which stage call is running where and since when, so a timeout can name it.

    Local calls (threads of this process) register through :meth:`begin`/:meth:`end`; worker
    processes write to shared slots (:class:`SlotProgress`) that :meth:`add_slots` makes visible.
    Times are :func:`~distlab.timeline.now_us` (one host-wide monotonic clock).
    """

    def __init__(self) -> None:
        self._active: dict[int, tuple[str, int, float]] = {}
        self._slots: list[tuple[Any, int, list[str]]] = []

    def begin(self, stage: str, idx: int) -> None:
        """The calling thread starts ``stage`` on item ``idx``."""
        self._active[threading.get_ident()] = (stage, idx, now_us())

    def end(self) -> None:
        """The calling thread's stage call returned (or raised)."""
        self._active.pop(threading.get_ident(), None)

    def add_slots(self, shared: Any, offset: int, n: int, names: list[str]) -> None:
        """Also watch ``n`` :class:`SlotProgress` slots of ``shared`` from ``offset`` on, whose
        stage indices refer to ``names``."""
        self._slots = [s for s in self._slots if s[0] is not shared]
        self._slots.extend((shared, offset + 3 * k, names) for k in range(n))

    def overdue(self, timeout_s: float) -> tuple[str, int, float] | None:
        """(stage, item, seconds running) of a call running longer than ``timeout_s``, or None."""
        now = now_us()
        limit = timeout_s * 1e6
        for stage, idx, t in list(self._active.values()):
            if now - t > limit:
                return stage, idx, (now - t) * 1e-6
        for shared, base, names in self._slots:
            si, idx, t = int(shared[base + 1]), int(shared[base]), shared[base + 2]
            if 0 <= si < len(names) and now - t > limit:
                return names[si], idx, (now - t) * 1e-6
        return None


class SlotProgress:
    """A worker process's progress slot in a shared ``RawArray('d')``: ``[item, stage index
    (-1 idle), start_us]`` at ``3 * slot + offset``; same ``begin``/``end`` as :class:`Watch`."""

    def __init__(self, shared: Any, offset: int, slot: int, names: list[str]) -> None:
        self.shared, self.base = shared, offset + 3 * slot
        self.index = {n: i for i, n in enumerate(names)}

    @staticmethod
    def clear(shared: Any, offset: int, n: int) -> None:
        """Mark ``n`` slots idle (a fresh RawArray is all zeros, i.e. "stage 0 since t=0")."""
        for k in range(n):
            shared[offset + 3 * k + 1] = -1.0

    def begin(self, stage: str, idx: int) -> None:
        b = self.base
        self.shared[b] = idx
        self.shared[b + 2] = now_us()
        self.shared[b + 1] = self.index.get(stage, -1)

    def end(self) -> None:
        self.shared[self.base + 1] = -1.0


def call_stage(stage: Stage, idx: int, x: Any, tl: Timeline, lane: str,
               watch: Watch | SlotProgress | None = None) -> Any:
    """Run one stage on one item, record its span, wrap failures in StageError; ``watch`` (if
    given) knows the call is in progress while it runs."""
    if watch is not None:
        watch.begin(stage.name, idx)
    t = now_us()
    try:
        y = stage.process(x)
    except Exception as exc:
        tl.record(stage.name, stage.category, lane, t, now_us() - t,
                  {"item": idx, "error": type(exc).__name__})
        raise StageError(stage.name, idx, f"{type(exc).__name__}: {exc}",
                         traceback.format_exc()) from exc
    finally:
        if watch is not None:
            watch.end()
    tl.record(stage.name, stage.category, lane, t, now_us() - t,
              {"item": idx, "skipped": stage.skipped} if stage.skipped else {"item": idx})
    return y


def drive(body: Callable[[], None], *, name: str, stop: threading.Event,
          errors: list[BaseException], watch: Watch, timeout_s: float, executor: str) -> None:
    """Run ``body`` in a daemon thread named ``distlab-<name>`` while the caller waits.

    The caller polls every ``POLL_S``: an exception from ``body`` (or one another thread put in
    ``errors``) is re-raised here; a stage call in ``watch`` running longer than ``timeout_s``
    raises :class:`PipelineTimeoutError`; KeyboardInterrupt in the caller propagates. In every
    case ``stop`` is set on the way out and the thread gets ``JOIN_S`` to finish: a thread stuck
    in a stage is abandoned.
    """
    done = threading.Event()

    def target() -> None:
        try:
            body()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            errors.append(exc)
            stop.set()
        finally:
            done.set()

    t = threading.Thread(target=target, daemon=True, name=f"distlab-{name}")
    t.start()
    join_s = JOIN_S
    try:
        while not done.wait(POLL_S):
            if errors:
                break
            hit = watch.overdue(timeout_s)
            if hit is not None:
                stage, idx, ran = hit
                join_s = ABANDON_JOIN_S  # it may be the stuck one: do not wait for it
                raise PipelineTimeoutError(stage, idx, timeout_s, executor, ran)
        if errors:
            raise errors[0]
    finally:
        stop.set()
        t.join(join_s)


class Executor:
    """Base class: ``run(stages, items, ...) -> RunResult``; ``close()`` frees resources.

    Subclasses set ``timeout_s`` (see the module's timeout contract) and implement ``_run``;
    those with workers implement ``_startup``. An executor with workers reports one start-up
    for all its runs (``RunResult.startup_s``): the time the run that started them took.
    """

    name = "base"
    timeout_s = DEFAULT_TIMEOUT_S
    _startup_s = 0.0   # the live workers' start-up, seconds, set by the run that started them

    def run(self, stages: Sequence[Stage], items: int | Sequence[Any], *,
            timeline: Timeline | None = None, lane_prefix: str = "rank0",
            collect: bool = False) -> RunResult:
        """Run every item through ``stages``; spans go into ``timeline`` (a new one if None).

        Worker start-up (see ``_startup``) happens first, before the steady clock starts: a run
        that starts workers records it as a "startup" span on ``"<lane_prefix>/startup"``, and
        ``RunResult.startup_s`` of this and every later run on those workers is its length; a
        run on live workers records handing them its stages as a "rearm" span on that lane
        (milliseconds, in neither the wall nor the start-up)."""
        stages = check_stages(stages)
        values = check_items(items)
        check_str("lane_prefix", lane_prefix, nonempty=True, example="rank0")
        if "/" in lane_prefix:
            raise ValueError(f"lane_prefix must be a non-empty str without '/', "
                             f"got {lane_prefix!r}")
        tl = Timeline() if timeline is None else timeline
        for s in stages:
            if s.skipped:
                tl.add_note(s.skipped)
        outputs: list[Any] | None = [] if collect else None
        t0 = now_us()
        phase = self._startup(stages, values, tl, lane_prefix)
        start = now_us()
        if phase not in (None, STARTED, REARMED):
            raise TypeError(f"{type(self).__name__}._startup() must return None, {STARTED!r} or "
                            f"{REARMED!r}, got {phase!r}")
        if phase == STARTED:
            self._startup_s = (start - t0) * 1e-6
        if phase is not None:
            tl.record(phase, "startup", f"{lane_prefix}/startup", t0, start - t0,
                      {"executor": self.name})
        self._run(stages, values, tl, lane_prefix, outputs)
        end = now_us()
        return RunResult(self.name, tl, len(values), start, end,
                         f"{lane_prefix}/{stages[-1].name}", outputs, self.config(),
                         self._startup_s if phase is not None else 0.0)

    def _startup(self, stages: list[Stage], items: list[Any], tl: Timeline,
                 prefix: str) -> str | None:
        """Start or re-arm workers before the steady clock starts. Returns :data:`STARTED`
        when it started workers (their start-up is then ``RunResult.startup_s``),
        :data:`REARMED` when it handed live workers this run's stages, None when this run
        needs no workers (here: never)."""
        return None

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
