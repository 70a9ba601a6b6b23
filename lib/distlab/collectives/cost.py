"""The alpha-beta-gamma cost of a schedule, derived from the schedule itself.

For each step and each rank ``r``:

- ``messages_r = max(#sends, #recvs)``; ``bytes_r = max(bytes sent, bytes received)`` with
  ``duplex="full"`` (the textbook model: a link sends and receives at once), or
  ``bytes sent + bytes received`` with ``duplex="half"`` (one copy engine per rank moves both
  ways); with ``duplex="shared"`` every rank of the step shares one medium, so the step's
  bandwidth term is ``beta * (bytes sent + received by all ranks)`` and its latency term
  ``alpha * (messages of all ranks)``: the model of ranks on one host, where gloo's loopback TCP is a memory copy done by the same few cores and memory bus
  (a step in which one rank receives from three others costs what its total traffic costs, not
  three times a contended per-rank exchange);
- ``reduced_r`` = bytes ``r`` combines into its buffer (its incoming ``"reduce"`` transfers);
- ``time_r = alpha messages_r + beta bytes_r + gamma reduced_r``, except that when ``r`` receives
  ``m > 1`` reduce messages in one step, the reductions of the first ``m - 1`` overlap the
  transfers still arriving (the executor reduces each message as it lands):
  ``time_r = alpha m + max(beta bytes_r, gamma reduced_r (m-1)/m) + gamma reduced_r / m``.

A step takes as long as its slowest rank plus ``handoff`` (seconds per step, default 0): the
fixed cost of one step of the executor whatever its message count (posting the step's
operations, waiting on them, and the hand-off to the next step, which cannot start before this
one's last receive has landed and been reduced). ``handoff`` is distinct from ``alpha``, which is
paid per message; and ``relay`` (seconds per step and per rank beyond two in the step's largest
set of ranks linked by its transfers): a ring step links all ``p`` ranks in one chain of
dependencies (rank ``r`` sends what it has just received and reduced), so a delay of any rank
holds up the step for all, where a pairwise exchange step only waits for one partner.
:class:`~distlab.collectives.rounds.RoundCalibrator` fits all three. With
``handoff=0`` (an older calibration) predictions are what they were. A step takes as long as
its slowest rank, and the schedule the sum of its steps. Any new
algorithm is costed for free. For single-message steps this is exactly the textbook model, so the
closed forms hold (ring: ``2(p-1) a + 2(p-1)/p n B + (p-1)/p n C``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_choice, check_float, check_instance, check_int

from .schedule import Schedule, Step

__all__ = ["StepCost", "cost", "linked_ranks", "step_costs"]


@dataclass(frozen=True)
class StepCost:
    """The predicted time of one step and the terms of its slowest rank.

    Attributes:
        seconds: the step's predicted time (its slowest rank).
        rank: the slowest rank.
        messages: that rank's ``max(#sends, #recvs)`` (``"shared"``: all messages of the step).
        nbytes: the bytes its beta term counts (see ``duplex`` in :func:`cost`).
        reduced_bytes: bytes that rank reduces.
        latency_s, bandwidth_s, compute_s, handoff_s: the alpha, beta, gamma and per-step
            hand-off parts of ``seconds``, and ``relay_s`` the relay part (they add up to
            ``seconds``; overlapped compute is not counted).
    """

    seconds: float
    rank: int
    messages: int
    nbytes: int
    reduced_bytes: int
    latency_s: float
    bandwidth_s: float
    compute_s: float
    handoff_s: float = 0.0
    relay_s: float = 0.0


def _check_param(name: str, value: Any) -> float:
    return check_float(name, value, minimum=0)


DUPLEX = ("full", "half", "shared")


def _rank_cost(rank: int, stats: list[int], alpha: float, beta: float, gamma: float,
               itemsize: int, duplex: str, shared_bytes: int, shared_msgs: int) -> StepCost:
    n_send, n_recv, out_e, in_e, red_e, m = stats
    msgs = max(n_send, n_recv)
    if duplex == "shared":
        nbytes, msgs = shared_bytes, shared_msgs
    else:
        nbytes = itemsize * (max(out_e, in_e) if duplex == "full" else out_e + in_e)
    reduced = itemsize * red_e
    lat, bw, comp = alpha * msgs, beta * nbytes, gamma * reduced
    if m > 1:  # all but the last reduction hide behind the transfers still arriving
        hidden = comp * (m - 1) / m
        comp = comp / m + max(0.0, hidden - bw)
    return StepCost(lat + bw + comp, rank, msgs, nbytes, reduced, lat, bw, comp)


def _step_stats(step: Step) -> dict[int, list[int]]:
    """Per rank: [#sends, #recvs, elements out, elements in, elements reduced, #reduce recvs]."""
    stats: dict[int, list[int]] = {}
    for t in step.transfers:
        s = stats.setdefault(t.src, [0, 0, 0, 0, 0, 0])
        s[0] += 1
        s[2] += t.count
        d = stats.setdefault(t.dst, [0, 0, 0, 0, 0, 0])
        d[1] += 1
        d[3] += t.count
        if t.kind == "reduce":
            d[4] += t.count
            d[5] += 1
    return stats


def step_costs(schedule: Schedule, alpha: float, beta: float, gamma: float,
               itemsize: int, *, duplex: str = "full", handoff: float = 0.0,
               relay: float = 0.0) -> list[StepCost]:
    """Per-step :class:`StepCost` (slowest rank of each step). Units as in :func:`cost`."""
    check_instance("schedule", schedule, Schedule)
    a, b, g = (_check_param(n, v) for n, v in (("alpha (seconds per message)", alpha),
                                               ("beta (seconds per byte)", beta),
                                               ("gamma (seconds per reduced byte)", gamma)))
    h = _check_param("handoff (seconds per step)", handoff)
    rl = _check_param("relay (seconds per step per linked rank beyond 2)", relay)
    itemsize = check_int("itemsize (bytes per element)", itemsize, minimum=1)
    check_choice("duplex", duplex, DUPLEX)
    out = []
    for step in schedule.steps:
        stats = _step_stats(step)
        shared = itemsize * sum(v[2] + v[3] for v in stats.values())
        worst = max((_rank_cost(r, stats[r], a, b, g, itemsize, duplex, shared,
                                len(step.transfers))
                     for r in sorted(stats)), key=lambda c: c.seconds)
        extra = rl * max(0, linked_ranks(step) - 2) if rl else 0.0
        if h or extra:
            worst = dataclasses.replace(worst, seconds=worst.seconds + h + extra, handoff_s=h,
                                        relay_s=extra)
        out.append(worst)
    return out


def cost(schedule: Schedule, alpha: float, beta: float, gamma: float, itemsize: int, *,
         duplex: str = "full", handoff: float = 0.0, relay: float = 0.0) -> float:
    """Predicted seconds for ``schedule``.

    Args:
        schedule: the plan.
        alpha: seconds per message (latency).
        beta: seconds per byte on a link (1 / bandwidth in bytes/s).
        gamma: seconds per byte reduced locally.
        itemsize: bytes per element (4 for float32).
        duplex: ``"full"`` (beta per ``max(sent, received)`` bytes of a rank in a step),
            ``"half"`` (beta per ``sent + received`` bytes of a rank) or ``"shared"`` (beta per
            byte sent or received by any rank in the step); see the module docstring.
        handoff: seconds per step on top of its slowest rank (default 0: the classic model).
        relay: seconds per step per rank beyond 2 in its largest linked set of ranks
            (:func:`linked_ranks`; default 0).
    """
    return sum(c.seconds for c in step_costs(schedule, alpha, beta, gamma, itemsize,
                                             duplex=duplex, handoff=handoff, relay=relay))


def linked_ranks(step: Step) -> int:
    """Ranks in the largest set that the step's transfers connect (as an undirected graph):
    2 for pairwise exchanges, ``p`` for a ring step, 0 for an empty step."""
    parent: dict[int, int] = {}

    def root(r: int) -> int:
        while parent.setdefault(r, r) != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for t in step.transfers:
        parent[root(t.src)] = root(t.dst)
    sizes: dict[int, int] = {}
    for r in list(parent):
        sizes[root(r)] = sizes.get(root(r), 0) + 1
    return max(sizes.values(), default=0)
