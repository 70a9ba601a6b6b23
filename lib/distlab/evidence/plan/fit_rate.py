"""Fit the planner's :class:`~distlab.plan.calibration.ComputeRate` on published runs.

The parameters: one efficiency per GPU architecture and compute dtype
(:func:`~distlab.plan.calibration.rate_key`), the width scale and the attention's rate. The
loss is the sum over runs of ``|log(measured step / model step)|`` (an L1 loss: each
efficiency lands on the median of its runs, and a run the model cannot explain, a framework's
own slowness, moves it no more than any other run). Coordinate descent: each efficiency by a
golden-section search on its own runs, then the width scale and the attention's rate on a
grid over all runs, until a round changes nothing (at most six rounds), and the efficiencies
once more after the grids' last choice. Each run is priced with the pipeline's closed-form fill and
drain (:func:`~distlab.plan.step.step_time` ``simulate_pipeline=False``) to keep the fit fast.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from distlab.evidence.plan.runs import RunInputs, measured_step_s
from distlab.plan.calibration import KERNEL_SPEED, ComputeRate, rate_key
from distlab.plan.step import step_time

__all__ = ["ATTENTION_GRID", "WIDTH_GRID", "fit_rate", "rate_loss"]

WIDTH_GRID = (0.0, 128.0, 256.0, 384.0, 512.0, 768.0, 1024.0, 1536.0)
ATTENTION_GRID = tuple(round(0.15 + 0.05 * i, 2) for i in range(22))


def _log_error(inputs: RunInputs, rate: ComputeRate) -> float:
    model = step_time(inputs.model, inputs.layout, inputs.hardware, rate=rate,
                      simulate_pipeline=False).step_s
    return abs(math.log(measured_step_s(inputs)[0] / model))


def rate_loss(runs: Sequence[RunInputs], rate: ComputeRate) -> float:
    """Sum of ``|log(measured / model)|`` of the runs' step times."""
    return sum(_log_error(r, rate) for r in runs)


def _golden(f: Callable[[float], float], lo: float, hi: float, tol: float = 2e-3) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    while b - a > tol:
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return round((a + b) / 2, 3)


def fit_rate(runs: Sequence[RunInputs], *, rounds: int = 6, source: str = "fitted",
             kernel_speed: dict[str, float] | None = None) -> ComputeRate:
    """The :class:`ComputeRate` that minimises :func:`rate_loss` on ``runs``, with the
    attention kernels' measured ``kernel_speed`` (default
    :data:`~distlab.plan.calibration.KERNEL_SPEED`) held fixed."""
    if not runs:
        raise ValueError("fit_rate needs at least one published run")
    groups: dict[str, list[RunInputs]] = {}
    for r in runs:
        groups.setdefault(rate_key(r.hardware, r.layout.compute_dtype), []).append(r)
    def efficiencies(rate: ComputeRate) -> ComputeRate:
        for key, members in groups.items():
            def loss(e: float, key: str = key, members: list[RunInputs] = members,
                     base: ComputeRate = rate) -> float:
                return rate_loss(members, replace(base, efficiency={**base.efficiency,
                                                                    key: e}))
            rate = replace(rate, efficiency={**rate.efficiency,
                                             key: _golden(loss, 0.1, 1.6)})
        return rate

    speed = dict(KERNEL_SPEED if kernel_speed is None else kernel_speed)
    rate = ComputeRate({key: 0.6 for key in groups}, 512.0, 1.0, source, speed)
    for _ in range(rounds):
        before = rate
        rate = efficiencies(rate)
        rate = min((replace(rate, width_scale=w) for w in WIDTH_GRID),
                   key=lambda r: rate_loss(runs, r))
        rate = min((replace(rate, attention=a) for a in ATTENTION_GRID),
                   key=lambda r: rate_loss(runs, r))
        if rate == before:
            return rate
    return efficiencies(rate)   # each efficiency the best for the grids' last choice
