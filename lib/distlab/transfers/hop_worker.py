"""The worker side of a hop: a spawned process that makes a batch in its own memory and hands it
to the trainer on request (see :mod:`distlab.transfers.hop_paths` for the paths).

Commands arrive on ``ctl`` and answers leave on ``data`` (both ``multiprocessing`` queues of the
spawn context; torch's reducers are registered, so a tensor put on ``data`` crosses by shared
memory):

- ``("hop", seq, path, nbytes, seed, busy, die_at)``: fill a private buffer of ``nbytes`` with
  :func:`fill_pattern` (not timed), read the clock (``t0``), hand the buffer over by ``path`` and
  answer ``("hop", t0, t_ready, payload)``; ``t_ready`` is when the bytes sit in shared form on the
  worker's side (storage moved to shared memory, or written into a ring slot), None where that
  moment is not separable (pickling happens inside the queue's feeder thread; a CUDA tensor is never
  copied). ``busy``: keep the worker's main thread doing CPU work (torch matmuls, as a decode stage
  does) until the trainer has stored ``seq`` in ``received`` (a shared one-element ``int64`` tensor)
  (a counter, not a flag: a flag set and cleared again before the worker looks would keep it busy
  for ever), as a worker does that goes on with its next batch. ``die_at``: fault injection for the
  leak tests: SIGKILL itself at ``"after_share"`` (segment made, nothing sent) or ``"after_put"``
  (message flushed into the pipe, handle not yet fetched);
- ``("ring", nbytes, slots)``: keep ``slots`` (a shared ``uint8`` tensor ``[k, nbytes]`` that the
  trainer made) as the ring for that size; answer ``("ring", nbytes)``; ``("unring", nbytes)``
  drops it;
- ``("create", strategy, nbytes, repeats)``: time ``repeats`` creations of an empty shared
  storage of ``nbytes`` (segment made, not filled, then freed); answer ``("create", seconds)``;
- ``None``: exit.

Errors are answered as ``("error", traceback text)``. Clock: ``time.perf_counter`` (Linux's
``CLOCK_MONOTONIC``, one clock for every process on the host).
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as tmp

from distlab._lifetime import die_with_parent, leave_ctrl_c_to_the_parent

__all__ = ["DIE_AT", "PERIOD", "fill_pattern", "worker_main"]

#: the pattern repeats every PERIOD bytes: byte i is ``(7 i + seed) mod 251``, as
#: :func:`distlab.transfers.adapter.pattern`
PERIOD = 251
DIE_AT = ("after_share", "after_put")


def fill_pattern(out: np.ndarray, seed: int) -> np.ndarray:
    """Fill the 1-D ``uint8`` array ``out`` in place with ``(7 i + seed) mod 251`` (the same
    bytes as :func:`distlab.transfers.adapter.pattern`), in about one pass: one period, then
    doubling copies (every block length is a multiple of the period). Returns ``out``."""
    n = out.shape[0]
    base = ((np.arange(PERIOD, dtype=np.int64) * 7 + seed) % PERIOD).astype(np.uint8)
    first = min(n, PERIOD)
    out[:first] = base[:first]
    filled = first
    while filled < n:
        step = min(filled, n - filled)
        out[filled:filled + step] = out[:step]
        filled += step
    return out


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _busy(received: Any, seq: int) -> None:
    """CPU work on the main thread (128 x 128 matmuls) until the trainer has received hop
    ``seq`` (``received[0] >= seq``)."""
    a, out = torch.ones(128, 128), torch.empty(128, 128)
    while int(received[0]) < seq:
        torch.mm(a, a, out=out)


class _Worker:
    def __init__(self, ctl: Any, data: Any, received: Any, device: int | None) -> None:
        self.ctl, self.data, self.received, self.device = ctl, data, received, device
        self.rings: dict[int, torch.Tensor] = {}
        self.turn: dict[int, int] = {}
        self.keep: Any = None   # a CUDA tensor lives until the next command (torch's IPC rule)

    def private(self, path: str, nbytes: int, seed: int) -> torch.Tensor:
        t = torch.empty(nbytes, dtype=torch.uint8)
        fill_pattern(t.numpy(), seed)
        if path == "hop_cuda_ipc":
            t = t.to(torch.device("cuda", self.device))
            torch.cuda.synchronize(self.device)
        return t

    def hop(self, seq: int, path: str, nbytes: int, seed: int, busy: bool,
            die_at: str | None) -> None:
        self.keep = None
        x = self.private(path, nbytes, seed)
        t_ready: float | None = None
        t0 = time.perf_counter()
        if path in ("hop_shm_fd", "hop_shm_fs"):
            tmp.set_sharing_strategy("file_descriptor" if path == "hop_shm_fd" else "file_system")
            x.share_memory_()
            t_ready = time.perf_counter()
            if die_at == "after_share":
                _die()
            payload: Any = x
        elif path == "hop_pickle":
            payload = x.numpy()
        elif path == "hop_ring":
            slots = self.rings[nbytes]
            k = self.turn.get(nbytes, 0)
            self.turn[nbytes] = (k + 1) % slots.shape[0]
            slots[k].copy_(x)
            t_ready = time.perf_counter()
            payload = k
        else:   # hop_cuda_ipc: the tensor itself crosses by IPC handle
            payload = self.keep = x
        self.data.put(("hop", t0, t_ready, payload))
        del x, payload
        if die_at == "after_put":
            self.data.close()
            self.data.join_thread()   # the message is in the pipe: die before the fetch
            _die()
        if busy:
            _busy(self.received, seq)

    def create(self, strategy: str, nbytes: int, repeats: int) -> None:
        tmp.set_sharing_strategy(strategy)
        secs = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            s = torch.UntypedStorage._new_shared(nbytes)
            secs.append(time.perf_counter() - t0)
            del s
        self.data.put(("create", secs))

    def serve(self) -> None:
        while True:
            msg = self.ctl.get()
            if msg is None:
                return
            try:
                if msg[0] == "hop":
                    self.hop(*msg[1:])
                elif msg[0] == "ring":
                    self.rings[msg[1]], self.turn[msg[1]] = msg[2], 0
                    self.data.put(("ring", msg[1]))
                elif msg[0] == "unring":
                    self.rings.pop(msg[1], None)
                elif msg[0] == "create":
                    self.create(*msg[1:])
                else:
                    raise ValueError(f"unknown command {msg[0]!r}")
            except Exception:  # noqa: BLE001 - answered: the trainer raises it with the text
                self.data.put(("error", traceback.format_exc()))


def worker_main(ctl: Any, data: Any, received: Any, device: int | None, parent_pid: int,
                main_thread_spawn: bool) -> None:
    """Entry point of the spawned worker: die with the parent, one intra-op thread (as a
    DataLoader worker), answer ``("ready", pid)``, then serve commands until ``None``."""
    die_with_parent(parent_pid, main_thread_spawn=main_thread_spawn)
    leave_ctrl_c_to_the_parent()   # the parent handles Ctrl-C and stops us
    torch.set_num_threads(1)
    data.put(("ready", os.getpid()))
    _Worker(ctl, data, received, device).serve()
