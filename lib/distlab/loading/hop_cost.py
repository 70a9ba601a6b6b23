"""The hop a worker's output takes into the trainer, as a cost per item for the pipeline model.

The ``processes`` and ``torch`` executors run their leading stages in worker processes; each
item's output then crosses into the trainer through a multiprocessing queue. With torch
imported, a tensor crosses by shared memory with the process's sharing strategy
(``file_descriptor`` by default: path ``hop_shm_fd`` of :mod:`distlab.transfers.hop_paths`).
:func:`measure_hop_cost` measures that hop for the item's size with
:class:`distlab.transfers.hop.HopLink`; :func:`~distlab.loading.bottleneck.plan_for` adds the
worker's part to the worker stations and the rest to the thread that takes the results back.

The hop depends on what the worker does meanwhile: with ``file_descriptor`` the trainer fetches
the descriptor from a thread in the *worker* (``multiprocessing.resource_sharer``), which has to
win the worker's GIL. ``busy=True`` (the default here) measures the hop while the worker computes,
as a pipeline's worker does when it has gone on to its next item. Units: bytes, seconds.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.multiprocessing as tmp

from distlab._checks import check_int
from distlab.loading.procs import split_stages
from distlab.loading.stage import Stage
from distlab.transfers.hop import HopLink

__all__ = ["HopCost", "executor_hop_path", "measure_hop_cost", "output_nbytes",
           "worker_output_nbytes"]


def output_nbytes(x: Any) -> int:
    """Bytes of the tensors, arrays and bytes objects in ``x`` (nested lists, tuples, dicts):
    what crosses by shared memory or by value when ``x`` is sent to another process."""
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, np.ndarray):
        return int(x.nbytes)
    if isinstance(x, (bytes, bytearray, memoryview)):
        return len(x)
    if isinstance(x, Mapping):
        return sum(output_nbytes(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return sum(output_nbytes(v) for v in x)
    return 0


def worker_output_nbytes(stages: Sequence[Stage], item: Any, workers: int = 2) -> int:
    """Bytes of what the worker stages (:func:`~.procs.split_stages`) make of ``item``, run here
    once (0 when no stage runs in a worker)."""
    wstages, _, _ = split_stages(list(stages), check_int("workers", workers, minimum=0))
    x = item
    for st in wstages:
        x = st.process(x)
    return output_nbytes(x) if wstages else 0


def executor_hop_path() -> str:
    """The hop path a tensor takes out of a worker under this process's sharing strategy."""
    return "hop_shm_fs" if tmp.get_sharing_strategy() == "file_system" else "hop_shm_fd"


@dataclass(frozen=True)
class HopCost:
    """A measured hop: median ``seconds`` of ``samples`` for ``nbytes`` by ``path``, split into
    who pays it: ``send_s`` (median of the worker's part: moving the output into shared memory)
    and ``receive_s`` (median of the rest: the handle across, the pages mapped, paid by the
    receiving thread); ``busy``: the worker computed meanwhile; ``startup_s``: the measuring
    worker's start-up (apart)."""

    nbytes: int
    path: str
    busy: bool
    seconds: float
    send_s: float
    receive_s: float
    samples: tuple[float, ...]
    startup_s: float

    def as_dict(self) -> dict[str, Any]:
        return {"nbytes": self.nbytes, "path": self.path, "busy": self.busy,
                "seconds": self.seconds, "send_s": self.send_s, "receive_s": self.receive_s,
                "samples": list(self.samples), "startup_s": self.startup_s}


def measure_hop_cost(nbytes: int, *, path: str | None = None, busy: bool = True,
                     repeats: int = 9, warmup: int = 2, seed: int = 0) -> HopCost:
    """Median seconds of ``repeats`` hops of ``nbytes`` (after ``warmup``) by ``path`` (default:
    :func:`executor_hop_path`) from a freshly spawned worker; ``nbytes == 0`` costs 0.0."""
    nbytes = check_int("nbytes", nbytes, minimum=0)
    repeats = check_int("repeats", repeats, minimum=1)
    warmup = check_int("warmup", warmup, minimum=0)
    path = path or executor_hop_path()
    if nbytes == 0:
        return HopCost(0, path, busy, 0.0, 0.0, 0.0, (), 0.0)
    with HopLink() as link:
        done = [link.hop(path, nbytes, seed=seed + k, busy=busy)
                for k in range(warmup + repeats)]
        startup = float(link.startup_s or 0.0)
    timed = done[warmup:]
    send = statistics.median(s.ready_s or 0.0 for s in timed)
    receive = statistics.median(s.handle_s + s.map_s for s in timed)
    return HopCost(nbytes, path, busy, statistics.median(s.seconds for s in timed), send,
                   receive, tuple(s.seconds for s in timed), startup)
