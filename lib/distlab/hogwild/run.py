"""Run Hogwild: ``processes`` spawned processes train one ``share_memory()`` model, with or
without a lock around the update, on the same total number of samples as one process would.

    r = run_hogwild(2, 65536, lock=False)      # Task() defaults, seeded
    r.eval_loss, r.steps_per_s, r.lost.lost, r.startup_s

Timing: every process first imports torch, rebuilds the task and attaches to the shared model,
then answers "ready"; that is ``startup_s``, apart. The run starts when the parent sets one
event for all of them, and ``wall_s`` ends with the last process's last step. ``steps_per_s``
and ``samples_per_s`` count every process's steps over ``wall_s``. The loss curve merges every
process's per-step batch loss by time (``curve``: seconds since the start, samples done by then
across processes, that step's loss). ``lock_wait_s`` and ``update_s`` sum every process's
seconds acquiring the lock and inside the update (``*_share``: per second of the processes'
training time). Lost updates: :mod:`distlab.hogwild.lost`; what a set of runs shows, in words:
:mod:`distlab.hogwild.findings`.
"""

from __future__ import annotations

import os
import queue
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.multiprocessing as tmp

from distlab._checks import check_bool, check_float, check_instance, check_int
from distlab._lifetime import spawned_from_main_thread, stop_processes
from distlab.hogwild.lost import LostUpdates, missed_elements, witness_lost
from distlab.hogwild.task import Task
from distlab.hogwild.worker import train_worker

__all__ = ["HogwildResult", "run_hogwild"]

_POLL_S = 0.1


@dataclass
class HogwildResult:
    """One Hogwild run; see the module docstring. Times in seconds."""

    processes: int
    lock: bool
    samples: int
    batch: int
    steps_per_process: int
    lr: float
    startup_s: float
    wall_s: float
    initial_eval_loss: float
    eval_loss: float
    lost: LostUpdates
    curve: list[tuple[float, int, float]] = field(repr=False)
    lock_wait_s: float = 0.0
    update_s: float = 0.0

    @property
    def steps_per_s(self) -> float:
        """Steps of all processes per second of ``wall_s``."""
        return self.processes * self.steps_per_process / self.wall_s

    @property
    def lock_wait_share(self) -> float:
        """Seconds all processes spent acquiring the lock per second of their training time
        (``processes * wall_s``); 0 without a lock."""
        return self.lock_wait_s / (self.processes * self.wall_s)

    @property
    def update_share(self) -> float:
        """Seconds all processes spent in the update (the part a lock serializes) per second of
        their training time (``processes * wall_s``)."""
        return self.update_s / (self.processes * self.wall_s)

    @property
    def samples_per_s(self) -> float:
        """Samples of all processes per second of ``wall_s``."""
        return self.samples / self.wall_s

    @property
    def label(self) -> str:
        """``"1 process"``, ``"4 processes, no lock"``, ``"4 processes, lock"``."""
        if self.processes == 1:
            return "1 process"
        return f"{self.processes} processes, {'lock' if self.lock else 'no lock'}"

    def row(self) -> dict[str, Any]:
        """A flat dict for tables and JSON (``lock_wait_share`` None without a lock)."""
        return {"run": self.label, "processes": self.processes, "lock": self.lock,
                "samples": self.samples, "steps_per_process": self.steps_per_process,
                "startup_s": self.startup_s, "wall_s": self.wall_s,
                "steps_per_s": self.steps_per_s, "samples_per_s": self.samples_per_s,
                "initial_eval_loss": self.initial_eval_loss, "eval_loss": self.eval_loss,
                "lost": self.lost.lost, "updates": self.lost.total,
                "lost_fraction": self.lost.fraction, "elements_hit": self.lost.elements_hit,
                "missed": self.lost.missed, "elements": self.lost.elements,
                "lost_mass": self.lost.mass, "lock_wait_s": self.lock_wait_s,
                "lock_wait_share": self.lock_wait_share if self.lock else None,
                "update_s": self.update_s, "update_share": self.update_share}


def _gather(procs: list[Any], results: Any, kind: str, timeout_s: float) -> dict[int, Any]:
    """One ``(kind, rank, payload)`` message per process; raises on an error or a death."""
    got: dict[int, Any] = {}
    deadline = time.monotonic() + timeout_s
    while len(got) < len(procs):
        try:
            msg = results.get(timeout=_POLL_S)
        except queue.Empty:
            dead = [k for k, p in enumerate(procs) if not p.is_alive() and k not in got]
            if dead:
                raise RuntimeError(f"Hogwild process {dead[0]} died (exit code "
                                   f"{procs[dead[0]].exitcode}) before sending {kind!r}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"Hogwild processes {sorted(set(range(len(procs))) - set(got))}"
                                   f" sent no {kind!r} within {timeout_s:g} s") from None
            continue
        if msg[0] == "error":
            raise RuntimeError(f"Hogwild process {msg[1]} failed:\n{msg[2]}")
        if msg[0] == kind:
            got[msg[1]] = msg[2]
    return got


def _curve(done: dict[int, Any], t0: float, batch: int) -> list[tuple[float, int, float]]:
    events = sorted((t, loss) for d in done.values()
                    for t, loss in zip(d["times"], d["losses"], strict=True))
    return [(t - t0, (k + 1) * batch, loss) for k, (t, loss) in enumerate(events)]


def _lost(model: torch.nn.Module, initial: list[torch.Tensor], witnesses: list[torch.Tensor],
          done: dict[int, Any], updates: int) -> LostUpdates:
    lost = hit = missed = elements = 0
    mass = total_mass = 0.0
    for i, (p, p0) in enumerate(zip(model.parameters(), initial, strict=True)):
        applied = torch.from_numpy(sum(d["applied"][i] for d in done.values()))
        magnitude = torch.from_numpy(sum(d["magnitude"][i] for d in done.values()))
        m, extra = missed_elements(p0, p.detach(), applied, magnitude, updates)
        missed, mass, elements = missed + m, mass + extra, elements + p.numel()
        total_mass += float(magnitude.sum())
        if witnesses:
            n, h = witness_lost(witnesses[i], updates)
            lost, hit = lost + n, hit + h
    total = updates * elements if witnesses else 0
    return LostUpdates(lost, total, hit, missed, elements,
                       mass / total_mass if total_mass else 0.0)


def run_hogwild(processes: int, samples: int, *, task: Task | None = None, batch: int = 32,
                lr: float = 0.05, lock: bool = False, witness: bool = True,
                timeout_s: float = 600.0) -> HogwildResult:
    """Train ``task``'s model on ``samples`` samples split over ``processes`` spawned processes
    that update one shared model (see the module docstring).

    Args:
        processes: >= 1 (1: the single-process reference, run the same way).
        samples: total samples, a multiple of ``processes * batch``.
        task: the task (default ``Task()``: its seed fixes data, teacher and initial weights).
        batch: samples per step per process.
        lr: SGD learning rate, > 0.
        lock: hold one ``multiprocessing`` lock around every update (the comparison).
        witness: also count lost updates on witness tensors (:mod:`distlab.hogwild.lost`).
        timeout_s: longest wait for start-up and for the training, each, seconds.
    """
    processes = check_int("processes", processes, minimum=1)
    batch = check_int("batch", batch, minimum=1)
    samples = check_int("samples", samples, minimum=processes * batch)
    if samples % (processes * batch):
        raise ValueError(f"samples must be a multiple of processes * batch = "
                         f"{processes * batch}, got {samples}")
    lr = check_float("lr", lr, minimum=0.0)
    if lr == 0:
        raise ValueError("lr must be > 0, got 0")
    lock, witness = check_bool("lock", lock), check_bool("witness", witness)
    task = Task() if task is None else check_instance("task", task, Task)
    timeout_s = check_float("timeout_s (seconds)", timeout_s, minimum=1e-3)
    steps = samples // (processes * batch)
    if witness and processes * steps > 2 ** 24:
        raise ValueError(f"processes * steps = {processes * steps} is over 2**24: the float32 "
                         "witness would no longer count exactly (witness=False to skip it)")

    model = task.model().share_memory()
    initial = [p.detach().clone() for p in model.parameters()]
    initial_loss = task.eval_loss(model)
    witnesses = [torch.zeros(p.shape).share_memory_() for p in model.parameters()] \
        if witness else []
    ctx = tmp.get_context("spawn")
    results, start = ctx.Queue(), ctx.Event()
    the_lock = ctx.Lock() if lock else None
    me, main = os.getpid(), spawned_from_main_thread()
    procs: list[Any] = []
    try:
        t_spawn = time.perf_counter()
        for rank in range(processes):
            p = ctx.Process(target=train_worker, name=f"distlab-hogwild{rank}", daemon=True,
                            args=(rank, task, model, witnesses, the_lock, start, results,
                                  steps, batch, lr, me, main))
            p.start()
            procs.append(p)
        _gather(procs, results, "ready", max(timeout_s, 120.0))
        t0 = time.perf_counter()
        start.set()
        done = _gather(procs, results, "done", timeout_s)
        for p in procs:
            p.join(10.0)
    finally:
        stop_processes(procs)
        results.cancel_join_thread()
        results.close()
    wall = max(d["end"] for d in done.values()) - t0
    return HogwildResult(processes, lock, samples, batch, steps, lr, t0 - t_spawn, wall,
                         initial_loss, task.eval_loss(model),
                         _lost(model, initial, witnesses, done, processes * steps),
                         _curve(done, t0, batch),
                         lock_wait_s=sum(d["lock_wait_s"] for d in done.values()),
                         update_s=sum(d["update_s"] for d in done.values()))
