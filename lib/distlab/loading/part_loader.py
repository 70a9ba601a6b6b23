"""The async part loader: a producer process fills a bounded queue of parts while the trainer
trains on the current one (the seed's multi-process dataset).

A *part* is one shard file loaded whole into memory (``load_fn(shards, part_id) -> tensor``,
default :func:`load_part`: read the file, optionally sleep ``latency_s`` standing for a remote
download). ``mode="sync"`` loads each part in the trainer's own thread, so the trainer waits for
every load; ``mode="async"`` starts a spawned producer process that loads parts in order into a
``multiprocessing`` queue of ``queue_size`` parts (tensors travel through shared memory).

Timeline lanes: ``producer/load`` (async loads), ``trainer/load`` (sync loads), ``trainer/compute``
(training steps, see :func:`train_on_parts`), ``producer/startup`` (spawning the producer until it
is ready, async only: reported apart as ``startup_s``, never as loading). The trainer's idle time is
the stall of ``trainer/compute``.

Shutdown contract: leaving the ``with`` block or breaking out of the loop stops and reaps the
producer; a producer that raises surfaces as :class:`PartLoadError` naming the part; a producer
that dies surfaces as :class:`ProducerExitedError` within ``POLL_S`` plus a short drain; no
part arrives within ``timeout_s`` -> TimeoutError. KeyboardInterrupt stops the producer too.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from distlab._checks import check_choice, check_float, check_instance
from distlab._lifetime import (
    die_with_parent,
    main_module_for_ranks,
    spawned_from_main_thread,
    stop_processes,
)
from distlab.loading.core import POLL_S, check_int, check_timeout
from distlab.loading.cpuwork import burn
from distlab.loading.errors import PartLoadError, ProducerExitedError
from distlab.loading.shards import ShardSet
from distlab.timeline import Timeline, now_us

__all__ = ["MODES", "FailingLoad", "Part", "PartLoader", "PartsResult", "load_part",
           "train_on_parts"]

MODES = ("sync", "async")


@dataclass
class Part:
    """One loaded part: its id and its records as a ``uint8`` tensor ``[records, nbytes]``."""

    part_id: int
    data: torch.Tensor


def load_part(shards: ShardSet, part_id: int, latency_s: float = 0.0) -> torch.Tensor:
    """Read shard ``part_id`` whole (real file read), sleep ``latency_s``; ``[records, nbytes]``."""
    blob = shards.read_shard(part_id)
    if latency_s > 0:
        time.sleep(latency_s)
    return torch.frombuffer(bytearray(blob), dtype=torch.uint8).view(-1, shards.record_nbytes)


class FailingLoad:
    """A picklable ``load_fn`` that raises OSError on part ``fail_part`` (demos and tests of the
    failure path); other parts load normally."""

    def __init__(self, fail_part: int, latency_s: float = 0.0) -> None:
        self.fail_part, self.latency_s = fail_part, latency_s

    def __call__(self, shards: ShardSet, part_id: int) -> torch.Tensor:
        if part_id == self.fail_part:
            raise OSError(f"simulated storage failure on part {part_id}")
        return load_part(shards, part_id, self.latency_s)


def _producer_main(shards: ShardSet, part_ids: list[int], latency_s: list[float],
                   load_fn: Callable[..., torch.Tensor] | None, q: Any, stop: Any,
                   go: Any, parent: int, main_thread_spawn: bool) -> None:
    die_with_parent(parent, main_thread_spawn=main_thread_spawn)  # even a stuck load_fn dies
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the trainer handles Ctrl-C and stops us
    torch.set_num_threads(1)

    def put(msg: tuple[Any, ...]) -> bool:
        while not stop.is_set() and os.getppid() == parent:
            try:
                q.put(msg, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    q.put(("ready",))
    while not go.wait(POLL_S):  # the trainer starts the clock, then says go
        if stop.is_set() or os.getppid() != parent:
            return
    for k, pid in enumerate(part_ids):
        if stop.is_set():
            return
        t = now_us()
        try:
            data = load_fn(shards, pid) if load_fn is not None else \
                load_part(shards, pid, latency_s[k])
        except BaseException:  # noqa: BLE001 - reported to the trainer with the part id
            put(("error", pid, traceback.format_exc()))
            break
        span = {"name": f"load {pid}", "category": "io", "lane": "producer/load",
                "start_us": t, "duration_us": now_us() - t,
                "args": {"part": pid, "nbytes": int(data.numel() * data.element_size())}}
        if not put(("part", pid, data, span)):
            return
    else:
        put(("end",))
    # Tensors travel as file descriptors that this process serves until the trainer has taken
    # them: stay alive until told to stop (or the trainer is gone).
    while not stop.wait(0.5) and os.getppid() == parent:
        pass


class PartLoader:
    """Iterate parts, sync or async. Use as a context manager so the producer is always reaped.

    Args:
        shards: the parts' files.
        part_ids: which parts, in order (default: every shard once).
        mode: ``"sync"`` or ``"async"``.
        queue_size: parts the async queue holds, >= 1.
        latency_s: extra seconds per part load (remote storage), >= 0; one number, or one per
            entry of ``part_ids`` (see :func:`.model.part_load_times` for seeded jitter).
        load_fn: optional picklable ``fn(shards, part_id) -> tensor`` replacing :func:`load_part`.
        timeline: spans go here (a new Timeline if None); ``self.timeline``.
        timeout_s: seconds to wait for one part before TimeoutError.
    """

    def __init__(self, shards: ShardSet, part_ids: Sequence[int] | None = None, *,
                 mode: str = "async", queue_size: int = 2,
                 latency_s: float | Sequence[float] = 0.0,
                 load_fn: Callable[..., torch.Tensor] | None = None,
                 timeline: Timeline | None = None, timeout_s: float = 60.0) -> None:
        check_instance("shards", shards, ShardSet)
        check_choice("mode", mode, MODES)
        self.queue_size = check_int("queue_size", queue_size, 1)
        timeout_s = check_timeout(timeout_s)
        self.shards, self.mode = shards, mode
        self.part_ids = list(range(len(shards.files))) if part_ids is None else \
            [check_int("part_ids[i]", p, 0) for p in part_ids]
        if isinstance(latency_s, Sequence) and not isinstance(latency_s, str):
            if len(latency_s) != len(self.part_ids):
                raise ValueError(f"latency_s must be seconds >= 0: one number or one per part "
                                 f"({len(self.part_ids)}), got {len(latency_s)} values")
            self.latency_s = [check_float(f"latency_s[{i}]", x, minimum=0.0)
                              for i, x in enumerate(latency_s)]
        else:
            self.latency_s = [check_float("latency_s", latency_s, minimum=0.0)] * len(
                self.part_ids)
        self.load_fn, self.timeout_s = load_fn, float(timeout_s)
        self.timeline = Timeline() if timeline is None else timeline
        self._proc: Any = None
        self._q: Any = None
        self._stop: Any = None
        self._go: Any = None

    @property
    def producer_pid(self) -> int | None:
        """The producer process id while it runs (async mode), else None."""
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    def __enter__(self) -> PartLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __iter__(self) -> Iterator[Part]:
        if self.mode == "sync":
            for k, pid in enumerate(self.part_ids):
                with self.timeline.span(f"load {pid}", "io", "trainer/load", part=pid):
                    data = self.load_fn(self.shards, pid) if self.load_fn is not None else \
                        load_part(self.shards, pid, self.latency_s[k])
                yield Part(pid, data)
            return
        self.start()
        self._go.set()
        try:
            for pid in self.part_ids:
                yield Part(pid, self._receive(pid))
        except BaseException:  # an error, or the loop left early (GeneratorExit): reap now
            self.close()
            raise
        # Done: tell the producer to exit but leave the reaping (a process join) to close(),
        # which the with-block calls, so the last part's consumer is not kept waiting.
        self._stop.set()

    def start(self) -> float:
        """Spawn the producer (async mode) and wait until it is ready to load, so that process
        start-up is not counted as loading; returns the start-up seconds (0.0 if already started
        or in sync mode). Iterating starts it if needed."""
        if self.mode == "sync" or self._proc is not None:
            return 0.0
        t = now_us()
        ctx = mp.get_context("spawn")
        self._q, self._stop, self._go = ctx.Queue(self.queue_size), ctx.Event(), ctx.Event()
        self._proc = ctx.Process(target=_producer_main, daemon=True, name="distlab-producer",
                                 args=(self.shards, self.part_ids, self.latency_s, self.load_fn,
                                       self._q, self._stop, self._go, os.getpid(),
                                       spawned_from_main_thread()))
        with main_module_for_ranks():   # a script read on stdin has no file to run again
            self._proc.start()
        try:
            msg = self._receive_msg(-1)
        except BaseException:
            self.close()
            raise
        if msg[0] != "ready":  # pragma: no cover - protocol error
            self.close()
            raise RuntimeError(f"producer sent {msg[0]!r} before 'ready'")
        end = now_us()
        self.timeline.record("startup", "startup", "producer/startup", t, end - t,
                             {"pid": self._proc.pid})
        return (end - t) * 1e-6

    def _receive(self, pid: int) -> torch.Tensor:
        msg = self._receive_msg(pid)
        if msg[0] == "error":
            raise PartLoadError(msg[1], msg[2])
        if msg[0] != "part":
            raise ProducerExitedError(0, pid)
        _, got, data, span = msg
        self.timeline.extend([span])
        return data

    def _receive_msg(self, pid: int) -> tuple[Any, ...]:
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                msg = self._q.get(timeout=POLL_S)
            except OSError as exc:  # a tensor whose sender died before we could map it
                raise ProducerExitedError(self._proc.exitcode, pid) from exc
            except queue.Empty:
                if not self._proc.is_alive():
                    try:  # anything it flushed before dying is in the pipe already
                        msg = self._q.get(timeout=0.2)
                    except (queue.Empty, OSError):
                        raise ProducerExitedError(self._proc.exitcode, pid) from None
                elif time.monotonic() > deadline:
                    what = f"part {pid}" if pid >= 0 else "the producer's ready signal"
                    raise TimeoutError(f"{what} did not arrive within timeout_s="
                                       f"{self.timeout_s:g} s") from None
                else:
                    continue
            return msg

    def close(self) -> None:
        """Stop the producer, drain the queue, reap the process; idempotent."""
        proc, q, stop = self._proc, self._q, self._stop
        self._proc = self._q = self._stop = self._go = None
        if proc is None:
            return
        stop.set()
        end = time.monotonic() + 2.0
        while proc.is_alive() and time.monotonic() < end:
            try:
                q.get(timeout=POLL_S)   # unblock a producer waiting on a full queue
            except (queue.Empty, OSError, EOFError):
                pass
        proc.join(0.5)
        stop_processes([proc], grace_s=2.0)
        q.cancel_join_thread()
        q.close()


@dataclass
class PartsResult:
    """One training run over parts: its timeline and the trainer's idle time (seconds).

    ``wall_s`` and ``idle_s`` count from the moment the producer was ready (async) or the first
    load started (sync); the producer's process start-up is reported apart as ``startup_s``.
    """

    mode: str
    timeline: Timeline
    n_parts: int
    wall_s: float
    idle_s: float
    startup_s: float = 0.0

    @property
    def idle_fraction(self) -> float:
        """Trainer idle seconds over wall seconds."""
        return self.idle_s / self.wall_s if self.wall_s > 0 else 0.0


def train_on_parts(shards: ShardSet, *, mode: str = "async", queue_size: int = 2,
                   latency_s: float | Sequence[float] = 0.0, step_s: float = 0.002,
                   steps_per_part: int = 4,
                   part_ids: Sequence[int] | None = None,
                   load_fn: Callable[..., torch.Tensor] | None = None,
                   timeline: Timeline | None = None, timeout_s: float = 60.0) -> PartsResult:
    """Train ``steps_per_part`` steps of ``step_s`` seconds (real CPU work on the part's data)
    on every part; returns the timeline, wall time and trainer idle time (seconds)."""
    check_int("steps_per_part", steps_per_part, 1)
    check_float("step_s", step_s, minimum=0.0)
    tl = Timeline() if timeline is None else timeline
    loader = PartLoader(shards, part_ids, mode=mode, queue_size=queue_size, latency_s=latency_s,
                        load_fn=load_fn, timeline=tl, timeout_s=timeout_s)
    lane = "trainer/compute"
    n = 0
    with loader:
        startup = loader.start()
        start = now_us()
        for part in loader:
            rows = max(1, part.data.shape[0] // steps_per_part)
            for s in range(steps_per_part):
                with tl.span(f"step {part.part_id}.{s}", "compute", lane, part=part.part_id):
                    part.data[s * rows:(s + 1) * rows].float().mean()
                    burn(step_s)
            n += 1
        end = now_us()  # before the producer's shutdown, which is not training time
    gaps = tl.idle_gaps(lane, window=(start, end)) if n else [(start, end)]
    return PartsResult(mode, tl, n, (end - start) * 1e-6, sum(e - s for s, e in gaps) * 1e-6,
                       startup)
