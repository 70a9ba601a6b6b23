"""Calibrate the cost model inside a benchmark's timed rounds (or before them: :func:`calibrate`).

A calibration taken before a benchmark measures the machine as it was then; on a shared host the
load changes by the time the collectives run, and the model is judged against a different
machine. :class:`RoundCalibrator` instead contributes a few timed exchanges to *every* round of
the benchmark (the caller runs :meth:`RoundCalibrator.run_round` next to the measured
collectives), so a burst of load hits the calibration and the measurement alike, and the fit
uses exactly the rounds the rows are medians of. The patterns and the fit are described in
:mod:`distlab.collectives.model.calibration`; per point, the slowest rank of each round, then the
median over rounds (as the benchmark takes its rows). Nothing of the collectives being
predicted enters the fit, with one stated exception: each round also times the backend's own
allreduce of the *smallest* calibration size (``builtin_floor``: what a call of the backend's
compiled loop costs when it moves almost no bytes) and of an empty tensor (``builtin_call``:
the call alone, handed to the process group's worker and back, with no iteration of its loop),
the two costs of the builtin that no pattern run through distlab's executor can show (see
:mod:`distlab.collectives.model.predict`).

:func:`calibrate` is the same calibrator run on its own (``warmup`` unrecorded rounds, then
``iters`` recorded ones), for callers that have no rounds of their own (the DDP lab).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from distlab import launch
from distlab._checks import check_int
from distlab.clock import sync_device, synced_seconds
from distlab.collectives.model.calibration import (
    Calibration,
    exchange_schedule,
    fit_rounds,
    oneway_schedule,
    shift_schedule,
)
from distlab.collectives.plan.ops import check_op
from distlab.collectives.runtime.execute import run_schedule
from distlab.collectives.runtime.group import builtin_all_reduce, group_info, reducer
from distlab.envinfo import cpus_allowed

__all__ = ["DEFAULT_SIZES", "RoundCalibrator", "calibrate", "calibrate_local", "calibrate_rank"]

DEFAULT_SIZES: tuple[int, ...] = tuple(4 ** k * 1024 for k in range(0, 9))      # 1 KiB .. 64 MiB


class RoundCalibrator:
    """Timed calibration exchanges, one set per benchmark round (collective: every rank).

    Args:
        sizes: calibration message sizes in bytes (>= 2; e.g.
            :func:`~distlab.collectives.model.calibration.calibration_sizes`).
        dtype: torch dtype of the buffers.
        op: the reduction timed for gamma.
        group: process group (``None``: world); >= 2 ranks.
        chain: steps per chained exchange (the steady state of a multi-step schedule).
        device: where the buffers live (CPU for gloo, this rank's GPU for NCCL).
        check: whether the lone ``single`` exchange pays the per-call peer check (so
            ``call_overhead`` includes it): match what the predicted calls do.
    """

    def __init__(self, sizes: Sequence[int], dtype: Any, op: str = "sum", group: Any = None,
                 chain: int = 4, device: Any = None, check: bool = False) -> None:
        self.rank, self.world, self.backend = group_info(group)
        if self.world < 2:
            raise ValueError(f"calibration needs >= 2 ranks, got world_size={self.world}")
        self.group, self.dtype, self.check = group, dtype, bool(check)
        self.chain = check_int("chain", chain, minimum=1)
        self.device = torch.device("cpu") if device is None else device
        self.itemsize = torch.empty(0, dtype=dtype).element_size()
        self.sizes = [int(s) for s in sizes]
        if len(self.sizes) < 2 or any(s < self.itemsize for s in self.sizes):
            raise ValueError(f"sizes must hold >= 2 sizes >= {self.itemsize} bytes, got "
                             f"{list(sizes)}")
        self._reduce = reducer(check_op(op))
        counts = [s // self.itemsize for s in self.sizes]
        self._bufs = [torch.ones(2 * c, dtype=dtype, device=self.device) for c in counts]
        self._xs = [torch.ones(c, dtype=dtype, device=self.device) for c in counts]
        self._plans = [(exchange_schedule(self.world, c, self.chain),
                        oneway_schedule(self.world, c, self.chain),
                        exchange_schedule(self.world, c, 1),
                        shift_schedule(self.world, c, self.chain)) for c in counts]
        self._shift = [torch.ones(self.world * c, dtype=dtype, device=self.device)
                       for c in counts] if self.world > 2 else []
        self._floor_buf = torch.ones(min(counts), dtype=dtype, device=self.device)
        self._empty = torch.ones(0, dtype=dtype, device=self.device)
        # per round: per size [exchange step, oneway step, single, reduce, shift step] seconds,
        # then the builtin allreduce of the smallest size and of an empty tensor
        self.rounds: list[list[float]] = []

    def _timed(self, fn: Callable[..., Any], *args: Any) -> float:
        """Seconds of ``fn(*args)`` after a barrier, the device's queued work included."""
        sync_device(self.device)
        dist.barrier(group=self.group)
        t0 = synced_seconds(self.device)
        fn(*args)
        return synced_seconds(self.device) - t0

    def _run(self, schedule: Any, buf: torch.Tensor, check: bool = False) -> None:
        run_schedule(schedule, buf, "sum", self.group, check=check)

    def run_round(self, record: bool = True) -> None:
        """Time every calibration point once (append to :attr:`rounds` when ``record``)."""
        row: list[float] = []
        for i, (buf, x, plans) in enumerate(zip(self._bufs, self._xs, self._plans, strict=True)):
            chained, oneway, single, shift = plans
            one = buf[:oneway.count]
            row.append(self._timed(self._run, chained, buf) / self.chain)
            row.append(self._timed(self._run, oneway, one) / self.chain)
            row.append(self._timed(self._run, single, buf, self.check))
            out = buf[:x.numel()]
            row.append(self._timed(self._reduce, out, x))
            out.fill_(1)
            if self._shift:  # with 2 ranks the shift is the exchange already timed
                sbuf = self._shift[i]
                row.append(self._timed(self._run, shift, sbuf) / self.chain)
            else:
                row.append(row[-4])
        row.append(self._timed(builtin_all_reduce, self._floor_buf, "sum", self.group))
        self._floor_buf.fill_(1)  # repeated sums would overflow over many rounds
        row.append(self._timed(builtin_all_reduce, self._empty, "sum", self.group))
        if record:
            self.rounds.append(row)

    def fit(self, method: str = "rounds", statistic: str = "median") -> Calibration:
        """Fit on the recorded rounds (collective: the slowest rank per round, then each point's
        ``statistic`` over rounds: ``"median"`` or ``"mean"``, see
        :func:`~distlab.collectives.model.calibration.fit_rounds`)."""
        if not self.rounds:
            raise RuntimeError("RoundCalibrator.fit needs at least one recorded round")
        data = torch.tensor(self.rounds, dtype=torch.float64)
        dist.all_reduce(data, op=dist.ReduceOp.MAX, group=self.group)
        return fit_rounds(self.sizes, data.numpy().tolist(), statistic=statistic,
                          builtin_floor_bytes=self._floor_buf.numel() * self.itemsize,
                          world_size=self.world, backend=self.backend,
                          dtype=str(self.dtype).replace("torch.", ""), method=method,
                          cpus_allowed=cpus_allowed() or os.cpu_count() or 1,
                          local_world_size=_local_world_size(self.world))


def _local_world_size(world: int) -> int:
    """Ranks on this host: torchrun's ``LOCAL_WORLD_SIZE``, else the whole group (one host)."""
    value = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(value) if value.isdigit() and int(value) > 0 else world


def calibrate(sizes: Sequence[int] = DEFAULT_SIZES, *, iters: int = 10, warmup: int = 3,
              group: Any = None, dtype: Any = None, op: str = "sum", chain: int = 4,
              device: Any = None, statistic: str = "median") -> Calibration:
    """Measure and fit the cost model on this process group (collective: every rank).

    A :class:`RoundCalibrator` over ``sizes`` (bytes), ``warmup`` unrecorded then ``iters`` recorded
    rounds, fitted on each point's ``statistic`` over rounds (``method="upfront"``). ``dtype``
    defaults to float32; ``device`` to the CPU. Returns the same :class:`Calibration` on every rank.
    """
    iters = check_int("iters", iters, minimum=1)
    warmup = check_int("warmup", warmup, minimum=0)
    cal = RoundCalibrator(sizes, torch.float32 if dtype is None else dtype, op, group, chain,
                          device)
    for i in range(warmup + iters):
        cal.run_round(record=i >= warmup)
    return cal.fit(method="upfront", statistic=statistic)


def calibrate_rank(rank: int, world_size: int, **kwargs: Any) -> dict[str, Any]:
    """:func:`calibrate` on this rank (a :func:`distlab.launch.run` rank function); returns
    ``Calibration.to_dict()``. A string ``dtype`` names a torch dtype."""
    if isinstance(kwargs.get("dtype"), str):
        kwargs["dtype"] = getattr(torch, kwargs["dtype"])
    return calibrate(**kwargs).to_dict()


def calibrate_local(world_size: int = 2, *, timeout: float = 120.0, **kwargs: Any) -> Calibration:
    """Launch ``world_size`` gloo ranks with :func:`distlab.launch.run` and :func:`calibrate`."""
    return Calibration.from_dict(launch.run(calibrate_rank, world_size, kwargs=kwargs,
                                            timeout=timeout)[0])

