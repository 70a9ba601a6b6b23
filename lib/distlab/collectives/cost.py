"""The alpha-beta-gamma cost of a schedule, derived from the schedule itself.

For each step and each rank ``r``:

- ``messages_r = max(#sends, #recvs)``, ``bytes_r = max(bytes sent, bytes received)``: links are
  full duplex, so sending and receiving overlap;
- ``reduced_r`` = bytes ``r`` combines into its buffer (its incoming ``"reduce"`` transfers);
- ``time_r = alpha messages_r + beta bytes_r + gamma reduced_r``, except that when ``r`` receives
  ``m > 1`` reduce messages in one step, the reductions of the first ``m - 1`` overlap the
  transfers still arriving (the executor reduces each message as it lands):
  ``time_r = alpha m + max(beta bytes_r, gamma reduced_r (m-1)/m) + gamma reduced_r / m``.

A step takes as long as its slowest rank, and the schedule the sum of its steps. Any new
algorithm is costed for free. For single-message steps this is exactly the textbook model, so the
closed forms hold (ring: ``2(p-1) a + 2(p-1)/p n B + (p-1)/p n C``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .schedule import Schedule, Step

__all__ = ["StepCost", "cost", "step_costs"]


@dataclass(frozen=True)
class StepCost:
    """The predicted time of one step and the terms of its slowest rank.

    Attributes:
        seconds: the step's predicted time (its slowest rank).
        rank: the slowest rank.
        messages: that rank's ``max(#sends, #recvs)``.
        nbytes: that rank's ``max(bytes sent, bytes received)``.
        reduced_bytes: bytes that rank reduces.
        latency_s, bandwidth_s, compute_s: the alpha, beta and gamma parts of ``seconds``
            (they add up to ``seconds``; overlapped compute is not counted).
    """

    seconds: float
    rank: int
    messages: int
    nbytes: int
    reduced_bytes: int
    latency_s: float
    bandwidth_s: float
    compute_s: float


def _check_param(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds >= 0, got {type(value).__name__} "
                        f"{value!r}")
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
    return float(value)


def _rank_cost(step: Step, rank: int, alpha: float, beta: float, gamma: float,
               itemsize: int) -> StepCost:
    sends, recvs = step.sends(rank), step.recvs(rank)
    msgs = max(len(sends), len(recvs))
    nbytes = itemsize * max(sum(t.count for t in sends), sum(t.count for t in recvs))
    reduces = [t for t in recvs if t.kind == "reduce"]
    reduced = itemsize * sum(t.count for t in reduces)
    lat, bw, comp = alpha * msgs, beta * nbytes, gamma * reduced
    m = len(reduces)
    if m > 1:  # all but the last reduction hide behind the transfers still arriving
        hidden = comp * (m - 1) / m
        exposed = comp / m + max(0.0, hidden - bw)
        comp = exposed
    return StepCost(lat + bw + comp, rank, msgs, nbytes, reduced, lat, bw, comp)


def step_costs(schedule: Schedule, alpha: float, beta: float, gamma: float,
               itemsize: int) -> list[StepCost]:
    """Per-step :class:`StepCost` (slowest rank of each step). Units as in :func:`cost`."""
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule, got {type(schedule).__name__}")
    a, b, g = (_check_param(n, v) for n, v in (("alpha", alpha), ("beta", beta), ("gamma", gamma)))
    if isinstance(itemsize, bool) or not isinstance(itemsize, int) or itemsize < 1:
        raise ValueError(f"itemsize must be an int >= 1 (bytes per element), got {itemsize!r}")
    out = []
    for step in schedule.steps:
        ranks = {t.src for t in step.transfers} | {t.dst for t in step.transfers}
        out.append(max((_rank_cost(step, r, a, b, g, itemsize) for r in sorted(ranks)),
                       key=lambda c: c.seconds))
    return out


def cost(schedule: Schedule, alpha: float, beta: float, gamma: float, itemsize: int) -> float:
    """Predicted seconds for ``schedule``.

    Args:
        schedule: the plan.
        alpha: seconds per message (latency).
        beta: seconds per byte on a link (1 / bandwidth in bytes/s).
        gamma: seconds per byte reduced locally.
        itemsize: bytes per element (4 for float32).
    """
    return sum(c.seconds for c in step_costs(schedule, alpha, beta, gamma, itemsize))
