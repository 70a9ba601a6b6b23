"""Calibrate alpha, beta, gamma and the per-step hand-off inside a benchmark's timed rounds.

A calibration taken before a benchmark measures the machine as it was then; on a shared host the
load changes by the time the collectives run, and the model is judged against a different
machine. :class:`RoundCalibrator` instead contributes a few timed exchanges to *every* round of
the benchmark (the caller runs :meth:`RoundCalibrator.run_round` next to the measured
collectives), so a burst of load hits the calibration and the measurement alike, and the fit
uses exactly the rounds the rows are medians of.

Per round and per calibration size ``s`` (bytes), each after a barrier and through the same
executor as the algorithms (:func:`~distlab.collectives.execute.run_schedule`):

- ``exchange``: a chain of ``chain`` steps in which every pair ``(2i, 2i+1)`` swaps ``s`` bytes
  (``M = 2 (p // 2)`` messages and ``B = 2 M s`` bytes through the host per step);
- ``oneway``: a chain of ``chain`` steps in which rank 0 sends ``s`` bytes to rank 1 (``M = 1``,
  ``B = 2 s``), the others idle;
- ``single``: one exchange step on its own, with the per-call peer check, as an all_reduce call
  pays it (``call_overhead`` = median over sizes of ``single`` minus the chained step time);
- ``reduce``: the executor's in-place reduction on ``s`` bytes (gamma).

Per point, the slowest rank of each round, then the median over rounds (as the benchmark takes
its rows). The per-step times of both patterns are fitted together as
``t = handoff + alpha M + beta B`` (least squares on relative error, coefficients >= 0): two
patterns with different message counts and bytes are what separate a per-step hand-off
(``handoff``, paid once per step whatever it carries) from the per-message ``alpha``. The result
is a :class:`~distlab.collectives.calibrate.Calibration` with ``duplex="shared"`` and
``method="rounds"``; nothing of the collectives being predicted enters the fit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from .calibrate import Calibration, exchange_schedule, fit_linear
from .schedule import Schedule, Step, Transfer

__all__ = ["RoundCalibrator", "calibration_sizes", "fit_step_model", "oneway_schedule"]


def oneway_schedule(world_size: int, count: int, chain: int = 1) -> Schedule:
    """``chain`` steps in which rank 0 sends ``count`` elements to rank 1 (copy); others idle."""
    steps = tuple(Step((Transfer(0, 1, 0, count, "copy"),), f"oneway {i + 1}/{chain}")
                  for i in range(chain)) if count and world_size >= 2 else ()
    return Schedule("oneway", world_size, count, steps, {"chain": chain})


def calibration_sizes(sizes: Sequence[int], world_size: int, itemsize: int) -> list[int]:
    """Message sizes (bytes) that cover what the algorithms send for buffers of ``sizes``: from
    ``min(sizes) / (2 p)`` (rabenseifner's smallest pieces) to ``max(sizes)`` (tree and recursive
    doubling send whole buffers), one point per factor of 4, plus 4 KiB to pin the latency."""
    lo = max(itemsize, min(sizes) // (2 * world_size))
    hi = max(sizes)
    out = {4096}
    s = lo
    while s < hi:
        out.add(s)
        s *= 4
    out.add(hi)
    return sorted(max(itemsize, v - v % itemsize) for v in out)


def fit_step_model(messages: Sequence[float], nbytes: Sequence[float],
                   seconds: Sequence[float]) -> tuple[float, float, float, float, float]:
    """Fit ``seconds = handoff + alpha * messages + beta * nbytes`` minimizing relative error,
    all three >= 0 (a term that would go negative is dropped and the rest refitted).

    Returns ``(handoff, alpha, beta, r2, max_rel_residual)``.
    """
    m, b, y = (np.asarray(v, dtype=float) for v in (messages, nbytes, seconds))
    if y.size < 3 or np.any(y <= 0) or not (m.size == b.size == y.size):
        raise ValueError(f"fit_step_model needs >= 3 points with positive seconds, got "
                         f"{y.size} points")
    cols = [np.ones_like(y), m, b]
    w = 1.0 / y
    active = [0, 1, 2]
    coef = np.zeros(3)
    while active:
        design = np.stack([cols[i] for i in active], axis=1) * w[:, None]
        sol, *_ = np.linalg.lstsq(design, y * w, rcond=None)
        if np.all(sol >= 0):
            coef[:] = 0
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    pred = coef[0] + coef[1] * m + coef[2] * b
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return float(coef[0]), float(coef[1]), float(coef[2]), r2, float(np.max(np.abs(pred - y) / y))


class RoundCalibrator:
    """Timed calibration exchanges, one set per benchmark round (collective: every rank).

    Args:
        sizes: calibration message sizes in bytes (>= 2; e.g. :func:`calibration_sizes`).
        dtype: torch dtype of the buffers.
        op: the reduction timed for gamma.
        group: process group (``None``: world); >= 2 ranks.
        chain: steps per chained exchange (the steady state of a multi-step schedule).
        device: where the buffers live (CPU for gloo, this rank's GPU for NCCL).
    """

    def __init__(self, sizes: Sequence[int], dtype: Any, op: str = "sum", group: Any = None,
                 chain: int = 4, device: Any = None) -> None:
        import torch
        import torch.distributed as dist

        from .execute import _group_info, _reducer

        self.rank, self.world, self.backend = _group_info(group)
        if self.world < 2:
            raise ValueError(f"calibration needs >= 2 ranks, got world_size={self.world}")
        self.group, self.chain, self.dtype = group, int(chain), dtype
        self.device = torch.device("cpu") if device is None else device
        self.itemsize = torch.empty(0, dtype=dtype).element_size()
        self.sizes = [int(s) for s in sizes]
        if len(self.sizes) < 2 or any(s < self.itemsize for s in self.sizes):
            raise ValueError(f"sizes must hold >= 2 sizes >= {self.itemsize} bytes, got {sizes}")
        self._reduce = _reducer(op)
        self._dist = dist
        self._bufs = [torch.ones(2 * (s // self.itemsize), dtype=dtype, device=self.device)
                      for s in self.sizes]
        self._xs = [torch.ones(s // self.itemsize, dtype=dtype, device=self.device)
                    for s in self.sizes]
        counts = [s // self.itemsize for s in self.sizes]
        self._plans = [(exchange_schedule(self.world, c, self.chain),
                        oneway_schedule(self.world, c, self.chain),
                        exchange_schedule(self.world, c, 1)) for c in counts]
        # per round: [exchange step, oneway step, single, reduce] per size (seconds, this rank)
        self.rounds: list[list[float]] = []

    def _sync(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def _timed(self, fn: Any) -> float:
        self._sync()
        self._dist.barrier(group=self.group)
        t0 = time.perf_counter()
        fn()
        self._sync()
        return time.perf_counter() - t0

    def run_round(self, record: bool = True) -> None:
        """Time every calibration point once (append to :attr:`rounds` when ``record``)."""
        from .execute import run_schedule

        row: list[float] = []
        for buf, x, (chained, oneway, single) in zip(self._bufs, self._xs, self._plans):
            one = buf[:oneway.count]
            row.append(self._timed(lambda: run_schedule(chained, buf, "sum", self.group,
                                                        check=False)) / self.chain)
            row.append(self._timed(lambda: run_schedule(oneway, one, "sum", self.group,
                                                        check=False)) / self.chain)
            row.append(self._timed(lambda: run_schedule(single, buf, "sum", self.group)))
            out = buf[:x.numel()]
            row.append(self._timed(lambda: self._reduce(out, x)))
            out.fill_(1)
        if record:
            self.rounds.append(row)

    def fit(self) -> Calibration:
        """Fit on the recorded rounds (collective: the slowest rank per round, then medians)."""
        import torch

        if not self.rounds:
            raise RuntimeError("RoundCalibrator.fit needs at least one recorded round")
        data = torch.tensor(self.rounds, dtype=torch.float64)
        self._dist.all_reduce(data, op=self._dist.ReduceOp.MAX, group=self.group)
        med = np.median(data.numpy(), axis=0).reshape(len(self.sizes), 4)
        exch, oneway, single, red = med[:, 0], med[:, 1], med[:, 2], med[:, 3]
        pairs = 2 * (self.world // 2)
        sizes = np.asarray(self.sizes, dtype=float)
        msgs = np.concatenate([np.full(len(sizes), pairs), np.ones(len(sizes))])
        nbytes = np.concatenate([2 * pairs * sizes, 2 * sizes])
        handoff, alpha, beta, c_r2, c_res = fit_step_model(msgs, nbytes,
                                                           np.concatenate([exch, oneway]))
        r0, gamma, r_r2, r_res = fit_linear(self.sizes, red.tolist())
        overhead = max(0.0, float(np.median(single - exch)))
        return Calibration(alpha, beta, gamma, c_r2, c_res, r_r2, r_res, list(self.sizes),
                           exch.tolist(), list(self.sizes), red.tolist(), r0, self.backend,
                           self.world, str(self.dtype).replace("torch.", ""), "exchange",
                           "shared", overhead, single.tolist(), handoff, "rounds",
                           oneway.tolist())
