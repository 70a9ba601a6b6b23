"""The training loop of one Hogwild process (spawned by :func:`distlab.hogwild.run.run_hogwild`).

Each step: draw a batch from the worker's own stream, compute the loss and the gradients of the
*shared* parameters (read while other processes may be writing them), then update them in place
with ``p.add_(-lr * g)`` (under the lock, when there is one), then add ``1.0`` to every element
of the witnesses (see :mod:`distlab.hogwild.lost`). The worker keeps, in ``float64``, the sum of
the deltas it applied and of their magnitudes, one ``(time, loss)`` record per step, and the
seconds it spent waiting for the lock (``lock_wait_s``: acquiring it; 0 without one) and
in the update itself (``update_s``: parameters and witnesses, the part the lock serializes).

Messages on ``results``: ``("ready", rank)`` once set up, then, after ``start`` is set,
``("done", rank, payload)`` or ``("error", rank, traceback)``.
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from typing import Any

import torch
from torch import nn

from distlab._lifetime import die_with_parent
from distlab.hogwild.task import Task

__all__ = ["train_worker"]


def _train(rank: int, task: Task, model: nn.Module, witnesses: list[torch.Tensor],
           lock: Any, steps: int, batch: int, lr: float) -> dict[str, Any]:
    params = list(model.parameters())
    applied = [torch.zeros(p.shape, dtype=torch.float64) for p in params]
    magnitude = [torch.zeros(p.shape, dtype=torch.float64) for p in params]
    gen = task.stream(rank)
    times, losses = [], []
    lock_wait = update = 0.0
    for _ in range(steps):
        x, y = task.batch(batch, gen)
        loss = nn.functional.mse_loss(model(x), y)
        grads = torch.autograd.grad(loss, params)
        deltas = [g.mul(-lr) for g in grads]
        if lock is not None:
            t_wait = time.perf_counter()
            lock.acquire()
            lock_wait += time.perf_counter() - t_wait
        t_update = time.perf_counter()
        try:
            with torch.no_grad():
                for p, d in zip(params, deltas, strict=True):
                    p.add_(d)
                for w in witnesses:
                    w.add_(1.0)
        finally:
            if lock is not None:
                lock.release()
        update += time.perf_counter() - t_update
        for a, m, d in zip(applied, magnitude, deltas, strict=True):
            a.add_(d.double())
            m.add_(d.double().abs())
        times.append(time.perf_counter())
        losses.append(float(loss.detach()))
    end = time.perf_counter()
    # NumPy arrays cross by value: a tensor would cross by a descriptor this process must stay
    # alive to hand over, and it exits right after sending
    return {"times": times, "losses": losses, "applied": [a.numpy() for a in applied],
            "magnitude": [m.numpy() for m in magnitude], "end": end,
            "lock_wait_s": lock_wait, "update_s": update}


def train_worker(rank: int, task: Task, model: nn.Module, witnesses: list[torch.Tensor],
                 lock: Any, start: Any, results: Any, steps: int, batch: int, lr: float,
                 parent_pid: int, main_thread_spawn: bool) -> None:
    """Entry point of a spawned Hogwild process: die with the parent, one intra-op thread,
    answer "ready", wait for ``start``, train ``steps`` steps, answer "done"."""
    die_with_parent(parent_pid, main_thread_spawn=main_thread_spawn)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)
    try:
        results.put(("ready", rank, os.getpid()))
        start.wait()
        results.put(("done", rank, _train(rank, task, model, witnesses, lock, steps, batch,
                                          lr)))
    except Exception:  # noqa: BLE001 - answered: the parent raises it with the text
        results.put(("error", rank, traceback.format_exc()))
