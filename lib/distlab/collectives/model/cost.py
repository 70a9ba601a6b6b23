"""The alpha-beta-gamma cost of a schedule, derived from the schedule itself.

For each step and each rank ``r``:

- ``messages_r = max(#sends, #recvs)``; ``bytes_r = max(bytes sent, bytes received)`` with
  ``duplex="full"`` (the textbook model: a link sends and receives at once), or ``bytes sent + bytes
  received`` with ``duplex="half"`` (one copy engine per rank moves both ways); with
  ``duplex="shared"`` every rank of the step shares one medium, so the step's bandwidth term is
  ``beta * (bytes sent + received by all ranks)`` and its latency term ``alpha * (messages of all
  ranks)``: the model of ranks on one host, where gloo's loopback TCP is a memory copy done by the
  same few cores and memory bus (a step in which one rank receives from three others costs what its
  total traffic costs, not three times a contended per-rank exchange);
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
:class:`~distlab.collectives.runtime.rounds.RoundCalibrator` fits all three; with ``handoff``
and ``relay`` at 0 the model is the textbook one. A step takes as long as its slowest rank, and
the schedule the sum of its steps. Any new
algorithm is costed for free. For single-message steps this is exactly the textbook model, so the
closed forms hold (ring: ``2(p-1) a + 2(p-1)/p n B + (p-1)/p n C``).

Per-size prices (``rates``, a :class:`~distlab.collectives.model.rates.SizeRates` from the
calibration's per-size series): a message of ``b`` bytes then costs ``rates.beta_at(b) * b`` instead
of ``beta * b`` (counted at the sender and the receiver as above), and reducing ``b`` bytes
``rates.reduce_at(b)`` instead of ``gamma * b``, so a transport's regime switch between sizes is
priced where it happens. Everything else (steps, messages, hand-off, relay) is unchanged.

Pipelined schedules: a schedule whose ``options["in_flight"]`` is ``k >= 2`` is run by an executor
that keeps ``k`` steps in flight (gloo's own ring keeps two:
:mod:`distlab.collectives.algorithms.allreduce.gloo_ring`). Its steps overlap, so a step costs the
largest of its fixed part shared by the ``k`` steps in flight (``(handoff + alpha messages + relay)
/ k``), its bytes term and its reduction, not their sum. The pipeline starts empty and drains at the
end of each of its phases (``options["phases"]``: steps per phase, default one phase): the first
step of a phase has nothing to share its fixed part with (it pays the rest, ``(1 - 1/k)`` of it) and
the last step's reduction has no later transfer to hide behind (it is paid on top). The bytes term
and the reduction overlap only where cores are free for both: with ``cpu_overlap=False`` (ranks with
fewer than 2 cores each, whose loopback copies and reductions queue for the same cores) a step costs
the largest of its shared fixed part and its bytes term plus its reduction.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_choice, check_float, check_instance, check_int
from distlab.collectives.model.rates import SizeRates
from distlab.collectives.plan.schedule import Schedule, Step

__all__ = ["StepCost", "cost", "in_flight", "linked_ranks", "step_costs"]


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
            ``seconds``; overlapped compute is not counted; in a pipelined schedule
            ``seconds`` is the largest of the shared fixed part, the bytes term and the
            reduction, see the module docstring).
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


def _rank_cost(rank: int, stats: list[Any], alpha: float, beta: float, gamma: float,
               itemsize: int, duplex: str, shared: tuple[int, int, float | None],
               rates: SizeRates | None) -> StepCost:
    n_send, n_recv, out_e, in_e, red_e, m, out_s, in_s, red_s = stats
    msgs = max(n_send, n_recv)
    shared_bytes, shared_msgs, shared_s = shared
    if duplex == "shared":
        nbytes, msgs = shared_bytes, shared_msgs
    else:
        nbytes = itemsize * (max(out_e, in_e) if duplex == "full" else out_e + in_e)
    reduced = itemsize * red_e
    lat = alpha * msgs
    if rates is None:
        bw, comp = beta * nbytes, gamma * reduced
    else:
        bw = shared_s if duplex == "shared" else (max(out_s, in_s) if duplex == "full"
                                                  else out_s + in_s)
        comp = red_s
    if m > 1:  # all but the last reduction hide behind the transfers still arriving
        hidden = comp * (m - 1) / m
        comp = comp / m + max(0.0, hidden - bw)
    return StepCost(lat + bw + comp, rank, msgs, nbytes, reduced, lat, bw, comp)


def _step_stats(step: Step, itemsize: int, rates: SizeRates | None) -> dict[int, list[Any]]:
    """Per rank: [#sends, #recvs, elements out, elements in, elements reduced, #reduce recvs,
    and with ``rates`` the priced seconds out, in and reduced (else 0)], counted in messages (a
    packed step's transfers between two ranks are one message, priced at its whole size)."""
    stats: dict[int, list[Any]] = {}
    for src, dst, transfers in step.messages():
        s = stats.setdefault(src, [0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0])
        d = stats.setdefault(dst, [0, 0, 0, 0, 0, 0, 0.0, 0.0, 0.0])
        s[0] += 1
        d[1] += 1
        count = sum(t.count for t in transfers)
        s[2] += count
        d[3] += count
        if rates is not None:
            price = rates.message_seconds(count * itemsize)
            s[6] += price
            d[7] += price
        d[5] += any(t.kind == "reduce" for t in transfers)
        for t in transfers:
            if t.kind == "reduce":
                d[4] += t.count
                if rates is not None:
                    d[8] += rates.reduce_at(t.count * itemsize)
    return stats


def in_flight(schedule: Schedule) -> int:
    """Steps the schedule's executor keeps in flight (``options["in_flight"]``, default 1)."""
    k = schedule.options.get("in_flight", 1)
    return check_int("schedule.options['in_flight']", k, minimum=1)


def _pipelined(costs: list[StepCost], k: int, phases: list[int],
               cpu_overlap: bool = True) -> list[StepCost]:
    """Steps of a ``k``-deep pipeline (see the module docstring): each costs the largest of
    its shared fixed part, bytes term and reduction (``cpu_overlap=False``: of its shared fixed
    part and its bytes term plus its reduction); a phase's first step adds the rest of its
    fixed part and its last step its reduction."""
    out = []
    for c in costs:
        fixed = c.latency_s + c.handoff_s + c.relay_s
        busy = (c.bandwidth_s, c.compute_s) if cpu_overlap else (c.bandwidth_s + c.compute_s,)
        out.append(dataclasses.replace(c, seconds=max(fixed / k, *busy)))
    start = 0
    for n in phases:
        if n <= 0 or start >= len(out):
            continue
        first, last = start, min(start + n, len(out)) - 1
        c = out[first]
        fixed = c.latency_s + c.handoff_s + c.relay_s
        out[first] = dataclasses.replace(c, seconds=c.seconds + fixed * (1 - 1 / k))
        out[last] = dataclasses.replace(out[last],
                                        seconds=out[last].seconds + out[last].compute_s)
        start += n
    return out


def _phases(schedule: Schedule) -> list[int]:
    phases = schedule.options.get("phases", (len(schedule.steps),))
    lengths = [check_int("schedule.options['phases'][i]", n, minimum=0) for n in phases]
    if sum(lengths) != len(schedule.steps):
        raise ValueError(f"schedule.options['phases'] {list(phases)} must add up to the "
                         f"schedule's {len(schedule.steps)} steps")
    return lengths


def step_costs(schedule: Schedule, alpha: float, beta: float, gamma: float,
               itemsize: int, *, duplex: str = "full", handoff: float = 0.0,
               relay: float = 0.0, rates: SizeRates | None = None,
               cpu_overlap: bool = True) -> list[StepCost]:
    """Per-step :class:`StepCost` (slowest rank of each step). Units as in :func:`cost`."""
    check_instance("schedule", schedule, Schedule)
    a, b, g = (_check_param(n, v) for n, v in (("alpha (seconds per message)", alpha),
                                               ("beta (seconds per byte)", beta),
                                               ("gamma (seconds per reduced byte)", gamma)))
    h = _check_param("handoff (seconds per step)", handoff)
    rl = _check_param("relay (seconds per step per linked rank beyond 2)", relay)
    itemsize = check_int("itemsize (bytes per element)", itemsize, minimum=1)
    check_choice("duplex", duplex, DUPLEX)
    if rates is not None:
        check_instance("rates", rates, SizeRates)
    depth = in_flight(schedule)
    out = []
    for step in schedule.steps:
        stats = _step_stats(step, itemsize, rates)
        shared = (itemsize * sum(v[2] + v[3] for v in stats.values()), len(step.messages()),
                  sum(v[6] + v[7] for v in stats.values()))
        worst = max((_rank_cost(r, stats[r], a, b, g, itemsize, duplex, shared, rates)
                     for r in sorted(stats)), key=lambda c: c.seconds)
        extra = rl * max(0, linked_ranks(step) - 2) if rl else 0.0
        if h or extra:
            worst = dataclasses.replace(worst, seconds=worst.seconds + h + extra, handoff_s=h,
                                        relay_s=extra)
        out.append(worst)
    return _pipelined(out, depth, _phases(schedule), bool(cpu_overlap)) if depth > 1 else out


def cost(schedule: Schedule, alpha: float, beta: float, gamma: float, itemsize: int, *,
         duplex: str = "full", handoff: float = 0.0, relay: float = 0.0,
         rates: SizeRates | None = None, cpu_overlap: bool = True) -> float:
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
        rates: per-size prices of a message's bytes and of a reduction
            (:func:`~distlab.collectives.model.rates.size_rates`); ``None`` (default): ``beta`` and
            ``gamma`` for every size.
        cpu_overlap: in a pipelined schedule, whether a step's bytes term and its reduction
            run at once (default). ``False`` where both are work for the same saturated cores
            (ranks on one host with fewer than 2 cores each, where loopback TCP copies bytes
            on the CPU that reduces): they then add, and only the fixed part overlaps.
    """
    return sum(c.seconds for c in step_costs(schedule, alpha, beta, gamma, itemsize,
                                             duplex=duplex, handoff=handoff, relay=relay,
                                             rates=rates, cpu_overlap=cpu_overlap))


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
