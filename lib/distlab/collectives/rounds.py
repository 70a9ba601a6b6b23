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
- ``single``: one exchange step on its own (with the per-call peer check if ``check``, as the
  predicted calls run) (``call_overhead`` = median over sizes of ``single`` minus the chained step time);
- ``reduce``: the executor's in-place reduction on ``s`` bytes (gamma);
- ``shift`` (more than 2 ranks): a chain of ring-shift steps, every rank sending ``s`` bytes to
  ``r + 1`` (``M = p``, ``B = 2 p s``, all ``p`` ranks linked in one cycle, as in a ring step).

Per point, the slowest rank of each round, then the median over rounds (as the benchmark takes
its rows). The per-step times of the three patterns are fitted together as
``t = handoff + alpha M + beta B + relay (linked ranks - 2)`` (least squares on relative error,
coefficients >= 0): patterns with different message counts are what separate a per-step
hand-off (``handoff``, paid once per step whatever it carries) from the per-message ``alpha``,
and the ring shift against the pairwise exchange gives ``relay``, what a step costs for every
extra rank its chain of dependencies passes through (0 with 2 ranks). The result
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

__all__ = ["RoundCalibrator", "calibration_sizes", "fit_step_model", "oneway_schedule",
           "shift_schedule"]


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


def shift_schedule(world_size: int, count: int, chain: int = 1) -> Schedule:
    """``chain`` ring-shift steps: rank ``r`` sends chunk ``r`` (``count`` elements of a buffer
    of ``world_size * count``) to ``r + 1``, which receives it in place: the communication
    pattern of a ring step (every rank linked in one cycle) without its reduction. With 2 ranks
    it is the pairwise exchange."""
    p = world_size
    transfers = tuple(Transfer(r, (r + 1) % p, r * count, (r + 1) * count, "copy")
                      for r in range(p))
    steps = tuple(Step(transfers, f"shift {i + 1}/{chain}") for i in range(chain)) \
        if count and p >= 2 else ()
    return Schedule("shift", world_size, p * count, steps, {"chain": chain})


def fit_step_model(messages: Sequence[float], nbytes: Sequence[float],
                   seconds: Sequence[float], relay_ranks: Sequence[float] | None = None
                   ) -> tuple[float, float, float, float, float, float]:
    """Fit ``seconds = handoff + alpha messages + beta nbytes + relay relay_ranks`` minimizing
    relative error, all >= 0 (a term that would go negative is dropped and the rest refitted).
    ``relay_ranks`` is ``max(0, linked ranks - 2)`` per point (default all 0: no relay term).

    Returns ``(handoff, alpha, beta, relay, r2, max_rel_residual)``.
    """
    m, b, y = (np.asarray(v, dtype=float) for v in (messages, nbytes, seconds))
    k = np.zeros_like(y) if relay_ranks is None else np.asarray(relay_ranks, dtype=float)
    if y.size < 3 or np.any(y <= 0) or not (m.size == b.size == y.size == k.size):
        raise ValueError(f"fit_step_model needs >= 3 points with positive seconds, got "
                         f"{y.size} points")
    cols = [np.ones_like(y), m, b, k]
    w = 1.0 / y
    active = [i for i in range(4) if np.any(cols[i] != 0)]
    coef = np.zeros(4)
    while active:
        design = np.stack([cols[i] for i in active], axis=1) * w[:, None]
        sol, *_ = np.linalg.lstsq(design, y * w, rcond=None)
        if np.all(sol >= 0):
            coef[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    pred = coef[0] + coef[1] * m + coef[2] * b + coef[3] * k
    ss_res = float(np.sum((y - pred) ** 2))
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    return (float(coef[0]), float(coef[1]), float(coef[2]), float(coef[3]), r2,
            float(np.max(np.abs(pred - y) / y)))


class RoundCalibrator:
    """Timed calibration exchanges, one set per benchmark round (collective: every rank).

    Args:
        sizes: calibration message sizes in bytes (>= 2; e.g. :func:`calibration_sizes`).
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
        import torch
        import torch.distributed as dist

        from .execute import _group_info, _reducer

        self.rank, self.world, self.backend = _group_info(group)
        if self.world < 2:
            raise ValueError(f"calibration needs >= 2 ranks, got world_size={self.world}")
        self.group, self.chain, self.dtype, self.check = group, int(chain), dtype, bool(check)
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
                        exchange_schedule(self.world, c, 1),
                        shift_schedule(self.world, c, self.chain)) for c in counts]
        self._shift = [torch.ones(self.world * c, dtype=dtype, device=self.device)
                       for c in counts] if self.world > 2 else []
        # per round and size: [exchange step, oneway step, single, reduce, shift step] seconds
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
        for i, (buf, x, plans) in enumerate(zip(self._bufs, self._xs, self._plans)):
            chained, oneway, single, shift = plans
            one = buf[:oneway.count]
            row.append(self._timed(lambda: run_schedule(chained, buf, "sum", self.group,
                                                        check=False)) / self.chain)
            row.append(self._timed(lambda: run_schedule(oneway, one, "sum", self.group,
                                                        check=False)) / self.chain)
            row.append(self._timed(lambda: run_schedule(single, buf, "sum", self.group,
                                                        check=self.check)))
            out = buf[:x.numel()]
            row.append(self._timed(lambda: self._reduce(out, x)))
            out.fill_(1)
            if self._shift:  # with 2 ranks the shift is the exchange already timed
                sbuf = self._shift[i]
                row.append(self._timed(lambda: run_schedule(shift, sbuf, "sum", self.group,
                                                            check=False)) / self.chain)
            else:
                row.append(row[-4])
        if record:
            self.rounds.append(row)

    def fit(self) -> Calibration:
        """Fit on the recorded rounds (collective: the slowest rank per round, then medians)."""
        import torch

        if not self.rounds:
            raise RuntimeError("RoundCalibrator.fit needs at least one recorded round")
        data = torch.tensor(self.rounds, dtype=torch.float64)
        self._dist.all_reduce(data, op=self._dist.ReduceOp.MAX, group=self.group)
        med = np.median(data.numpy(), axis=0).reshape(len(self.sizes), 5)
        exch, oneway, single, red, shift = (med[:, i] for i in range(5))
        pairs, p, n = 2 * (self.world // 2), self.world, len(self.sizes)
        sizes = np.asarray(self.sizes, dtype=float)
        msgs = np.concatenate([np.full(n, pairs), np.ones(n), np.full(n, p)])
        nbytes = np.concatenate([2 * pairs * sizes, 2 * sizes, 2 * p * sizes])
        relay_ranks = np.concatenate([np.zeros(2 * n), np.full(n, max(0, p - 2))])
        handoff, alpha, beta, relay, c_r2, c_res = fit_step_model(
            msgs, nbytes, np.concatenate([exch, oneway, shift]), relay_ranks)
        r0, gamma, r_r2, r_res = fit_linear(self.sizes, red.tolist())
        overhead = max(0.0, float(np.median(single - exch)))
        return Calibration(alpha, beta, gamma, c_r2, c_res, r_r2, r_res, list(self.sizes),
                           exch.tolist(), list(self.sizes), red.tolist(), r0, self.backend,
                           self.world, str(self.dtype).replace("torch.", ""), "exchange",
                           "shared", overhead, single.tolist(), handoff, "rounds",
                           oneway.tolist(), relay, shift.tolist())
