"""The trainer side of a hop: one spawned worker process, hops on request, timed and checked.

    with HopLink() as link:                      # spawns the worker; link.startup_s apart
        s = link.hop("hop_shm_fd", 1 << 20, seed=3)
        s.seconds, s.parts(), s.wrong            # put -> every byte readable; parts; #wrong

A hop is timed from the worker's hand-over (``t0``, read in the worker) to the moment the trainer
can read every byte: its ``get`` returned and one byte of every page of the received buffer was
read (so each page is mapped here), or, for a CUDA tensor, the device was synchronized. Both
processes read one clock (``time.perf_counter``: ``CLOCK_MONOTONIC``, host-wide on Linux). The
parts: ``ready`` (worker: storage moved into shared memory, or the ring slot written), ``handle``
(the rest until ``get`` returned: pickling, the pipe, fetching the descriptor or opening the
named file, mapping it) and ``map`` (touching the pages). Afterwards, untimed, every received byte
is compared with the pattern the worker wrote (``wrong`` counts the bytes that differ; the
pattern's seed changes per hop, so a stale buffer is caught).

Lifetime: the worker dies with this process however it dies (:mod:`distlab._lifetime`); a worker
that dies mid-hop raises :class:`HopWorkerDied`; :meth:`HopLink.close` reaps it, closes the
queues, drops the rings and removes ``file_system`` segments the dead worker left in
``/dev/shm`` (:func:`distlab.transfers.shm.sweep_segments`). ``startup_s`` (spawning, imports) is
reported apart from every hop.
"""

from __future__ import annotations

import os
import queue
import resource
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as tmp

from distlab._checks import check_choice, check_float, check_int
from distlab._lifetime import spawned_from_main_thread, start_ignoring_ctrl_c, stop_processes
from distlab.transfers.hop_paths import HOP_PATHS
from distlab.transfers.hop_worker import DIE_AT, fill_pattern, worker_main
from distlab.transfers.shm import sweep_segments

__all__ = ["RING_SLOTS", "HopError", "HopLink", "HopSample", "HopWorkerDied",
           "count_wrong_bytes"]

RING_SLOTS = 2          # slots per ring: one being read while the next is written
_POLL_S = 0.05
_PAGE = resource.getpagesize()


class HopError(RuntimeError):
    """The worker answered a command with an error (its traceback is in the message)."""


class HopWorkerDied(RuntimeError):
    """The worker process died during a hop (killed, crashed)."""


@dataclass(frozen=True)
class HopSample:
    """One hop: ``seconds`` from hand-over to every byte readable; the parts (None where not
    separable, see the module docstring); ``wrong`` = received bytes that differ."""

    path: str
    nbytes: int
    seconds: float
    ready_s: float | None
    handle_s: float
    map_s: float
    wrong: int

    def parts(self) -> dict[str, float | None]:
        """``{"ready": s, "handle": s, "map": s}`` (they add up to ``seconds``)."""
        return {"ready": self.ready_s, "handle": self.handle_s, "map": self.map_s}


def count_wrong_bytes(got: np.ndarray, expected: np.ndarray) -> int:
    """Bytes of ``got`` that differ from ``expected`` (both 1-D ``uint8``); a buffer of the
    wrong length counts as every expected byte wrong."""
    if got.shape != expected.shape:
        return int(expected.shape[0])
    if np.array_equal(got, expected):   # the fast path: one pass, no temporary
        return 0
    return int(np.count_nonzero(got != expected))


def _touch(x: Any) -> None:
    """Read one byte of every page of a host buffer (tensor or array): maps every page here."""
    if isinstance(x, torch.Tensor):
        x = x.numpy()
    int(x[::_PAGE].sum())


class HopLink:
    """A spawned worker process and the two queues to it.

    Args:
        timeout_s: longest wait for one answer of the worker, seconds > 0 (start-up waits at
            least 120 s: spawning imports torch).
        device: the CUDA device index for ``hop_cuda_ipc`` (None: no CUDA in the worker).
    """

    def __init__(self, *, timeout_s: float = 60.0, device: int | None = None) -> None:
        self.timeout_s = check_float("timeout_s (seconds)", timeout_s, minimum=1e-3)
        self.device = None if device is None else check_int("device", device, minimum=0)
        self.startup_s: float | None = None
        self.worker_pid: int | None = None
        self.swept: list[str] = []
        self._proc: Any = None
        self._ctl: Any = None
        self._data: Any = None
        self._received: Any = None
        self._rings: dict[int, torch.Tensor] = {}
        self._expected: dict[int, np.ndarray] = {}
        self._seq = 0

    # -- lifetime -------------------------------------------------------------------------
    def start(self) -> float:
        """Spawn the worker and wait until it is ready; returns (and keeps) ``startup_s``."""
        if self._proc is not None:
            return float(self.startup_s or 0.0)
        ctx = tmp.get_context("spawn")
        t0 = time.perf_counter()
        self._ctl, self._data = ctx.Queue(), ctx.Queue()
        # the last hop this side has every byte of: a shared tensor, released with the link (a
        # RawValue would keep an arena of multiprocessing's heap, and its descriptor, for ever)
        self._received = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._proc = ctx.Process(
            target=worker_main, name="distlab-hop-worker", daemon=True,
            args=(self._ctl, self._data, self._received, self.device, os.getpid(),
                  spawned_from_main_thread()))
        ok = False
        try:
            start_ignoring_ctrl_c(self._proc)
            msg = self._answer(max(self.timeout_s, 120.0))
            if msg[0] != "ready":
                raise HopError(f"the hop worker sent {msg[0]!r} instead of 'ready'")
            self.worker_pid = int(msg[1])
            ok = True
        finally:
            if not ok:
                self.close()
        self.startup_s = time.perf_counter() - t0
        return self.startup_s

    def close(self) -> None:
        """Stop and reap the worker, close the queues, drop the rings, remove what a dead worker
        left in ``/dev/shm``; idempotent."""
        proc, self._proc = self._proc, None
        self._rings.clear()
        if proc is None:
            self._received = None
            return
        try:
            self._received[0] = self._seq   # a worker busy after a failed hop stops
            if proc.is_alive():
                self._ctl.put(None)
                proc.join(2.0)
        except Exception:  # noqa: BLE001 - a broken queue: stop_processes still reaps it
            pass
        stop_processes([proc], grace_s=2.0)
        for q in (self._ctl, self._data):
            q.cancel_join_thread()
            q.close()
        # dropping the queues unlinks their named semaphores (/dev/shm/sem.mp-*) now, not when
        # this object happens to be collected
        self._ctl = self._data = self._received = None
        if self.worker_pid is not None:
            self.swept += sweep_segments(self.worker_pid)

    def __enter__(self) -> HopLink:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- talking to the worker ------------------------------------------------------------
    def _answer(self, timeout_s: float | None = None) -> tuple[Any, ...]:
        """The worker's next message; raises HopWorkerDied / HopError / TimeoutError."""
        deadline = time.monotonic() + (timeout_s or self.timeout_s)
        while True:
            try:
                msg = self._data.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._proc.is_alive():
                    raise HopWorkerDied(f"the hop worker (pid {self._proc.pid}) died, exit "
                                        f"code {self._proc.exitcode}") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the hop worker sent nothing within "
                                       f"{timeout_s or self.timeout_s:g} s") from None
                continue
            except Exception as exc:   # unpickling failed: a handle whose sender is gone
                self._proc.join(1.0)
                if not self._proc.is_alive():
                    raise HopWorkerDied(f"the hop worker (pid {self._proc.pid}) died mid-hop "
                                        f"(exit code {self._proc.exitcode}): {exc!r}") from exc
                raise
            if msg[0] == "error":
                raise HopError(f"the hop worker failed:\n{msg[1]}")
            return msg

    def _send(self, *msg: Any) -> None:
        if self._proc is None:
            raise RuntimeError("the HopLink is not started (use start() or a with block)")
        self._ctl.put(msg)

    def _ring(self, nbytes: int) -> torch.Tensor:
        """The ring for ``nbytes`` (made and sent to the worker on first use)."""
        if nbytes not in self._rings:
            slots = torch.zeros(RING_SLOTS, nbytes, dtype=torch.uint8).share_memory_()
            self._send("ring", nbytes, slots)
            self._answer()
            self._rings[nbytes] = slots
        return self._rings[nbytes]

    def ring_setup_seconds(self, nbytes: int) -> float:
        """Seconds to make a fresh ring of :data:`RING_SLOTS` slots of ``nbytes`` in shared
        memory and hand it to the worker (a one-off cost of ``hop_ring``); the ring is kept."""
        nbytes = check_int("nbytes", nbytes, minimum=1)
        if nbytes in self._rings:
            self._send("unring", nbytes)
            del self._rings[nbytes]
        t0 = time.perf_counter()
        self._ring(nbytes)
        return time.perf_counter() - t0

    def segment_create_seconds(self, strategy: str, nbytes: int, repeats: int = 3
                               ) -> list[float]:
        """Seconds per creation of an empty shared storage of ``nbytes`` in the worker with
        sharing ``strategy`` (the segment alone: no byte copied, then freed)."""
        check_choice("strategy", strategy, sorted(tmp.get_all_sharing_strategies()))
        self._send("create", strategy, check_int("nbytes", nbytes, minimum=1),
                   check_int("repeats", repeats, minimum=1))
        return list(self._answer()[1])

    def _expected_bytes(self, nbytes: int, seed: int) -> np.ndarray:
        buf = self._expected.get(nbytes)
        if buf is None:
            self._expected = {nbytes: np.empty(nbytes, dtype=np.uint8)}  # one size at a time
            buf = self._expected[nbytes]
        return fill_pattern(buf, seed)

    def hop(self, path: str, nbytes: int, *, seed: int = 0, busy: bool = False,
            die_at: str | None = None) -> HopSample:
        """One hop of ``nbytes`` by ``path`` (see :mod:`distlab.transfers.hop_paths`).

        Args:
            seed: the pattern's seed (byte i is ``(7 i + seed) mod 251``).
            busy: the worker keeps its main thread busy (torch matmuls) until this side has
                every byte, as a worker that goes on with its next batch.
            die_at: fault injection: the worker kills itself ``"after_share"`` or
                ``"after_put"``; the call raises :class:`HopWorkerDied`.
        """
        check_choice("path", path, list(HOP_PATHS))
        nbytes = check_int("nbytes", nbytes, minimum=1)
        seed = check_int("seed", seed, minimum=0)
        if die_at is not None:
            check_choice("die_at", die_at, DIE_AT)
        if path == "hop_cuda_ipc" and self.device is None:
            raise ValueError("path 'hop_cuda_ipc' needs HopLink(device=<CUDA index>)")
        if path == "hop_ring":
            slots = self._ring(nbytes)
        self._seq += 1
        self._send("hop", self._seq, path, nbytes, seed, bool(busy), die_at)
        _, t0, t_ready, payload = self._answer()
        t_got = time.perf_counter()
        if path == "hop_ring":
            payload = slots[payload]
        if path == "hop_cuda_ipc":
            torch.cuda.synchronize(payload.device)
        else:
            _touch(payload)
        t_done = time.perf_counter()
        self._received[0] = self._seq
        got = payload.cpu() if path == "hop_cuda_ipc" else payload
        got = got.numpy() if isinstance(got, torch.Tensor) else got
        wrong = count_wrong_bytes(got, self._expected_bytes(nbytes, seed))
        del got, payload
        start = t_ready if t_ready is not None else t0
        return HopSample(path, nbytes, t_done - t0, None if t_ready is None else t_ready - t0,
                         t_got - start, t_done - t_got, wrong)
