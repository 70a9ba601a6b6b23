"""The ``processes`` executor: worker processes for the CPU stages, a host thread for pinning.

Layout (like torch's DataLoader with ``num_workers=k``):

- the leading stages whose ``placement`` is ``"worker"`` (never the last stage) run in ``workers``
  spawned processes; item ``j`` goes to worker ``j % workers``; at most ``workers * queue_depth``
  items are in flight; lanes ``"<prefix>/worker<k>"``;
- a host thread takes results back *in order*, runs the middle host stages (pinning) on lanes
  ``"<prefix>/<stage>"``, and fills a bounded queue of depth ``queue_depth``;
- the caller's thread runs the last stage (the consumer).

Workers are spawned once and kept across runs (persistent, like ``persistent_workers=True``)
until :meth:`ProcessExecutor.close`. Any failure (a stage raising, a worker dying, a timeout,
KeyboardInterrupt) shuts the pool down: workers are asked to exit, then terminated, then killed,
and always reaped. Worker spans travel back with each result and are merged into the Timeline
(one host-wide monotonic clock, so no offset is needed).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import threading
import time
import traceback
from typing import Any

import cloudpickle
import torch

from distlab._lifetime import (
    die_with_parent,
    leave_ctrl_c_to_the_parent,
    main_module_for_ranks,
    spawned_from_main_thread,
    start_ignoring_ctrl_c,
    stop_processes,
)
from distlab.loading.channel import STOPPED, Channel
from distlab.loading.core import (
    ABANDON_JOIN_S,
    DEFAULT_TIMEOUT_S,
    JOIN_S,
    POLL_S,
    REARMED,
    STARTED,
    Executor,
    SlotProgress,
    Watch,
    call_stage,
    check_int,
    check_timeout,
    drive,
)
from distlab.loading.errors import (
    PipelineError,
    PipelineTimeoutError,
    StageError,
    WorkerExitedError,
)
from distlab.loading.stage import Stage
from distlab.timeline import Timeline, now_us

__all__ = ["ProcessExecutor", "split_stages"]


def split_stages(stages: list[Stage], workers: int) -> tuple[list[Stage], list[Stage], Stage]:
    """(worker stages, host-thread stages, consumer stage) for a process-based executor."""
    n = 0
    if workers > 0:
        while n < len(stages) - 1 and stages[n].placement == "worker":
            n += 1
    return stages[:n], stages[n:-1], stages[-1]


def _worker_main(wid: int, prefix: str, inq: Any, outq: Any, shared: Any, parent_pid: int,
                 main_thread_spawn: bool) -> None:
    """Worker process loop: ("stages", run, blob) | ("item", run, idx, x) | None -> exit.

    First it arranges to die with the parent: a stage stuck in a call cannot poll, so however
    the parent dies (SIGKILL included) the worker is killed within about a second."""
    die_with_parent(parent_pid, main_thread_spawn=main_thread_spawn)
    leave_ctrl_c_to_the_parent()  # the parent handles Ctrl-C and stops us

    torch.set_num_threads(1)
    stages: list[Stage] = []
    progress: SlotProgress | None = None
    lane = f"{prefix}/worker{wid}"
    outq.put(("ready", 0, wid))  # imports done: the parent's start-up clock stops on these
    while True:
        msg = inq.get()
        if msg is None:
            return
        if msg[0] == "stages":
            try:
                stages, lane = pickle.loads(msg[2]), f"{msg[3]}/worker{wid}"
                progress = SlotProgress(shared, 0, wid, [st.name for st in stages])
            except BaseException:  # noqa: BLE001 - reported: the stages cannot be rebuilt here
                outq.put(("loaderror", msg[1], wid, traceback.format_exc()))
                continue
            outq.put(("loaded", msg[1], wid))
            continue
        _, run, idx, x = msg
        tl = Timeline()
        try:
            for st in stages:
                x = call_stage(st, idx, x, tl, lane, progress)
        except StageError as exc:
            outq.put(("error", run, idx, exc.stage, exc.cause, exc.traceback_text))
            continue
        except BaseException as exc:  # noqa: BLE001 - reported, never swallowed silently
            outq.put(("error", run, idx, "?", repr(exc), traceback.format_exc()))
            continue
        try:
            outq.put(("ok", run, idx, x, tl.to_dicts()))
        except Exception as exc:  # unpicklable output
            outq.put(("error", run, idx, stages[-1].name if stages else "?",
                      f"output cannot be sent to the parent: {exc!r}", ""))


def _dump_stages(stages: list[Stage]) -> bytes:
    """The worker stages as bytes for the workers (cloudpickle: functions that cannot be imported
    in a fresh process, such as lambdas, closures, notebook-cell functions, go by value)."""

    try:
        return cloudpickle.dumps(stages)
    except Exception as exc:  # pickling raises many types (PicklingError, TypeError, ...)
        names = [st.name for st in stages]
        raise TypeError(
            f"the worker stages {names} cannot be sent to worker processes: "
            f"{type(exc).__name__}: {exc}. Lambdas, closures and notebook-cell functions are "
            "fine, but what they capture must be picklable: create locks, open files, sockets "
            "and generators inside the stage (or define the stage in an importable module and "
            "build such state in process()), or use the threads executor") from exc


class ProcessExecutor(Executor):
    """``workers`` spawned processes for the worker stages plus a host (pin) thread.

    Args:
        workers: worker processes, >= 0 (0: the worker stages run in the host thread).
        queue_depth: in-flight items per worker and depth of the host->consumer queue, >= 1.
        timeout_s: longest one stage call may take, seconds > 0; beyond it the run raises
            :class:`PipelineTimeoutError` naming the stage and item, and the pool is shut down
            (the stuck worker is terminated). Start-up waits max(timeout_s, 120 s).

    Worker stages travel to the workers with cloudpickle: lambdas, closures and functions
    defined in a notebook cell or ``__main__`` work; what they capture must be picklable.
    """

    name = "processes"

    def __init__(self, workers: int = 2, queue_depth: int = 2,
                 timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.workers = check_int("workers", workers, 0)
        self.queue_depth = check_int("queue_depth", queue_depth, 1)
        self.timeout_s = check_timeout(timeout_s)
        self._shared: Any = None
        self._wnames: list[str] = []
        self._procs: list[Any] = []
        self._inqs: list[Any] = []
        self._outq: Any = None
        self._run_id = 0

    def config(self) -> dict[str, Any]:
        return {"executor": self.name, "workers": self.workers, "queue_depth": self.queue_depth}

    @property
    def pids(self) -> list[int]:
        """Process ids of the live worker processes."""
        return [p.pid for p in self._procs if p.is_alive()]

    def _startup(self, stages: list[Stage], items: list[Any], tl: Timeline,
                 prefix: str) -> str | None:
        """Spawn the workers if needed and wait for each one's "ready" (imports done), then send
        this run's worker stages and wait for each worker's "loaded". Returns ``STARTED`` when
        it spawned them (all of it is the workers' start-up), ``REARMED`` when they were live,
        None when no stage runs in a worker."""
        wstages, _, _ = split_stages(stages, self.workers)
        if not wstages:
            return None
        ok, phase = False, REARMED
        try:
            if not self._procs:
                phase = STARTED
                self._start(prefix)
                self._await_all("ready", 0)
            self._run_id += 1
            blob = _dump_stages(wstages)
            self._wnames = [st.name for st in wstages]
            for q in self._inqs:
                q.put(("stages", self._run_id, blob, prefix))
            self._await_all("loaded", self._run_id)
            ok = True
        finally:
            if not ok:
                self.close()
        return phase

    def _await_all(self, kind: str, run: int) -> None:
        """Wait for one ``(kind, run, wid)`` message from every worker (start-up handshake)."""
        waiting = set(range(self.workers))
        limit_s = max(self.timeout_s, DEFAULT_TIMEOUT_S)  # start-up is not a stage call
        deadline = now_us() + limit_s * 1e6
        while waiting:
            try:
                msg = self._outq.get(timeout=POLL_S)
            except queue.Empty:
                for k, p in enumerate(self._procs):
                    if not p.is_alive():
                        raise WorkerExitedError(k, p.exitcode,
                                                during_startup=kind == "ready") from None
                if now_us() > deadline:
                    raise TimeoutError(f"workers {sorted(waiting)} sent no {kind!r} within "
                                       f"{limit_s:g} s of start-up") from None
                continue
            if msg[0] == "loaderror" and msg[1] == run:
                raise PipelineError(
                    f"worker {msg[2]} could not rebuild the worker stages:\n{msg[3].rstrip()}")
            if msg[0] == kind and msg[1] == run:
                waiting.discard(msg[2])

    def _start(self, prefix: str) -> None:
        if self._procs:
            return
        ctx = mp.get_context("spawn")
        self._outq = ctx.Queue()
        self._shared = ctx.RawArray("d", 3 * self.workers)
        SlotProgress.clear(self._shared, 0, self.workers)
        me, main = os.getpid(), spawned_from_main_thread()
        for k in range(self.workers):
            q = ctx.Queue()
            p = ctx.Process(target=_worker_main,
                            args=(k, prefix, q, self._outq, self._shared, me, main),
                            daemon=True, name=f"distlab-worker{k}")
            with main_module_for_ranks():   # a script read on stdin has no file to run again
                start_ignoring_ctrl_c(p)
            self._inqs.append(q)
            self._procs.append(p)

    def close(self) -> None:
        """Stop and reap every worker process; idempotent."""
        procs, self._procs = self._procs, []
        for q in self._inqs:
            try:
                q.put(None)
            except Exception:  # noqa: BLE001 - queue may already be broken
                pass
        deadline = time.monotonic() + JOIN_S / 2
        for p in procs:  # asked to exit: give them a moment before terminate -> kill
            p.join(max(0.0, deadline - time.monotonic()))
        stop_processes(procs, grace_s=JOIN_S)
        for q in [*self._inqs, self._outq]:
            if q is not None:
                q.cancel_join_thread()
                q.close()
        self._inqs, self._outq = [], None

    def _run(self, stages: list[Stage], items: list[Any], tl: Timeline, prefix: str,
             outputs: list[Any] | None) -> None:
        wstages, hstages, last = split_stages(stages, self.workers)
        if not wstages:
            hstages = [*stages[:-1]]
        stop = threading.Event()
        errors: list[BaseException] = []
        watch = Watch()
        if wstages:
            SlotProgress.clear(self._shared, 0, self.workers)
            watch.add_slots(self._shared, 0, self.workers, self._wnames)
        handoff = Channel(self.queue_depth, stop, POLL_S)
        host = threading.Thread(target=self._host, daemon=True, name="distlab-pin",
                                args=(items, wstages, hstages, tl, prefix, stop, errors, handoff,
                                      watch))
        lane = f"{prefix}/{last.name}"

        def consume() -> None:
            while True:
                got = handoff.get()
                if got is None or got is STOPPED:
                    break
                idx, x = got
                y = call_stage(last, idx, x, tl, lane, watch)
                if outputs is not None:
                    outputs.append(y)

        ok, join_s = False, JOIN_S
        try:
            host.start()
            drive(consume, name=f"{last.name}-consumer", stop=stop, errors=errors, watch=watch,
                  timeout_s=self.timeout_s, executor=self.name)
            ok = True
        except PipelineTimeoutError:
            join_s = ABANDON_JOIN_S  # the host thread may be the stuck one: abandoned
            raise
        finally:
            stop.set()
            if not ok:
                self.close()  # first: a host thread waiting on a worker result sees it die
            host.join(join_s)

    def _host(self, items: list[Any], wstages: list[Stage], hstages: list[Stage], tl: Timeline,
              prefix: str, stop: threading.Event, errors: list[BaseException],
              handoff: Channel, watch: Watch) -> None:
        """Dispatch items, reorder results, run host stages, feed the consumer."""
        try:
            n, sent, pending = len(items), 0, {}
            window = max(1, self.workers) * self.queue_depth
            for idx in range(n):
                if wstages:
                    while sent < n and sent - idx < window:
                        self._inqs[sent % self.workers].put(("item", self._run_id, sent,
                                                             items[sent]))
                        sent += 1
                    x = self._next_result(idx, pending, tl, stop, watch)
                    if x is STOPPED:
                        return
                else:
                    x = items[idx]
                for st in hstages:
                    x = call_stage(st, idx, x, tl, f"{prefix}/{st.name}", watch)
                if not handoff.put((idx, x)):
                    return
            handoff.put(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            errors.append(exc)
            stop.set()

    def _next_result(self, idx: int, pending: dict[int, Any], tl: Timeline,
                     stop: threading.Event, watch: Watch) -> Any:
        # a worker may run queue_depth earlier items (each < timeout_s) before this one
        deadline = now_us() + self.timeout_s * (self.queue_depth + 1) * 1e6
        while idx not in pending:
            if stop.is_set():
                return STOPPED
            try:
                msg = self._outq.get(timeout=POLL_S)
            except queue.Empty:
                for k, p in enumerate(self._procs):
                    if not p.is_alive():
                        raise WorkerExitedError(k, p.exitcode) from None
                if now_us() > deadline:  # backstop; the caller's watch normally fires first
                    hit = watch.overdue(self.timeout_s)
                    stage, item = (hit[0], hit[1]) if hit else ("/".join(self._wnames), idx)
                    raise PipelineTimeoutError(stage, item, self.timeout_s, self.name) from None
                continue
            if msg[1] != self._run_id or msg[0] not in ("ok", "error"):
                continue  # a straggler from an earlier, failed run
            if msg[0] == "error":
                _, _, i, stage, cause, tb = msg
                raise StageError(stage, i, cause, tb)
            _, _, i, x, spans = msg
            tl.extend(spans)
            pending[i] = x
        return pending.pop(idx)

