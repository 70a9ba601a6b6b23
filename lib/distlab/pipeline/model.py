"""The pipeline model: the bottleneck bound and a discrete-event simulation.

A pipeline is a line of stations. Station ``i`` has ``workers[i]`` identical servers, each taking
``cost[i]`` seconds per item (a scalar, or one cost per item), and a bounded FIFO buffer of
``depth[i]`` items in front of station ``i + 1``. A server that finishes an item holds it until
the buffer has room (blocking after service, which is what a thread doing ``queue.put`` does).
Items enter station 0 as soon as a server is free and leave every station in order (the executors
deliver in order).

**Bound.** Items per second cannot exceed the slowest station's rate ``min_i workers_i / cost_i``;
for ``n`` items the makespan is at least
``max_j [ sum_{i != j} cost_i + ceil(n / workers_j) * cost_j ]`` (the first item must reach station
``j``, station ``j`` needs ``ceil(n / workers_j)`` rounds, the last item must then pass the rest).
With one server per station and room enough in the buffers this is exact:
``sum(cost) + (n - 1) * max(cost)``.

**Simulation.** :func:`simulate` plays the system event by event in max-plus form (for item ``k``
in order, station by station: start = max(arrival, a free server, the previous item's start);
departure = max(finish, the previous item's departure, room downstream)). It returns a
:class:`~distlab.timeline.Timeline` of the predicted spans, so predicted and measured runs share
every view (Gantt, stats, Chrome trace). Simulated spans start at ``t0_us`` (default 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..timeline import Span, Timeline

__all__ = ["Station", "bound_s", "describe", "measured_costs", "part_load_times",
           "parts_idle_fraction", "plan_for", "rate_items_per_s", "simulate", "simulate_parts",
           "sync_time_s"]


@dataclass(frozen=True)
class Station:
    """One station of the model: a name, seconds per item, servers, buffer depth after it."""

    name: str
    cost_s: float | Sequence[float]
    workers: int = 1
    depth: int = 2
    category: str = "cpu"


def _check(stations: Sequence[Station], n_items: int) -> None:
    if isinstance(n_items, bool) or not isinstance(n_items, int) or n_items < 0:
        raise ValueError(f"n_items must be an int >= 0, got {n_items!r}")
    if not stations:
        raise ValueError("stations must be a non-empty list of Station")
    for st in stations:
        if not isinstance(st, Station):
            raise TypeError(f"stations must hold Station objects, got {type(st).__name__}")
        if isinstance(st.workers, bool) or not isinstance(st.workers, int) or st.workers < 1:
            raise ValueError(f"station {st.name!r}: workers must be an int >= 1, "
                             f"got {st.workers!r}")
        if isinstance(st.depth, bool) or not isinstance(st.depth, int) or st.depth < 1:
            raise ValueError(f"station {st.name!r}: depth must be an int >= 1, got {st.depth!r}")
        costs = [st.cost_s] if isinstance(st.cost_s, (int, float)) else list(st.cost_s)
        if not isinstance(st.cost_s, (int, float)) and len(costs) != n_items:
            raise ValueError(f"station {st.name!r}: {len(costs)} per-item costs for "
                             f"n_items={n_items}")
        if any(not (isinstance(c, (int, float)) and c >= 0) for c in costs):
            raise ValueError(f"station {st.name!r}: cost_s must be >= 0 seconds, "
                             f"got {st.cost_s!r}")


def _mean_cost(st: Station) -> float:
    if isinstance(st.cost_s, (int, float)):
        return float(st.cost_s)
    c = list(st.cost_s)
    return sum(c) / len(c) if c else 0.0


def rate_items_per_s(stations: Sequence[Station]) -> float:
    """Bottleneck throughput: ``min_i workers_i / cost_i`` items per second (inf if all free)."""
    if not stations:
        raise ValueError("stations must be a non-empty list of Station")
    rates = [s.workers / _mean_cost(s) for s in stations if _mean_cost(s) > 0]
    return min(rates) if rates else math.inf


def bound_s(stations: Sequence[Station], n_items: int) -> float:
    """Lower bound on the makespan of ``n_items`` (seconds); see the module docstring.
    Per-item costs are replaced by their mean."""
    _check(stations, n_items)
    if n_items == 0:
        return 0.0
    costs = [_mean_cost(s) for s in stations]
    total = sum(costs)
    return max(total - c + math.ceil(n_items / s.workers) * c for s, c in zip(stations, costs))


def sync_time_s(stations: Sequence[Station], n_items: int) -> float:
    """Makespan with no overlap at all: ``n_items * sum(cost)`` seconds."""
    _check(stations, n_items)
    return n_items * sum(_mean_cost(s) for s in stations)


def simulate(stations: Sequence[Station], n_items: int, *, lane_prefix: str = "sim",
             t0_us: float = 0.0) -> Timeline:
    """Predicted Timeline: one span per (item, station) on lane ``"<prefix>/<name>"`` (or
    ``"<prefix>/<name><server>"`` for stations with several servers); a server blocked on a
    full buffer gets a ``"blocked"`` span. Costs in seconds, spans in microseconds."""
    _check(stations, n_items)
    m = len(stations)
    cost = [[float(s.cost_s)] * n_items if isinstance(s.cost_s, (int, float))
             else [float(c) for c in s.cost_s] for s in stations]
    start = [[0.0] * n_items for _ in range(m)]
    finish = [[0.0] * n_items for _ in range(m)]
    depart = [[0.0] * n_items for _ in range(m)]
    tl = Timeline()
    for k in range(n_items):
        for i, st in enumerate(stations):
            t = depart[i - 1][k] if i > 0 else 0.0
            if k >= st.workers:
                t = max(t, depart[i][k - st.workers])      # a server frees up
            if k > 0:
                t = max(t, start[i][k - 1])                # FIFO start order
            start[i][k] = t
            finish[i][k] = t + cost[i][k]
            d = finish[i][k]
            if k > 0:
                d = max(d, depart[i][k - 1])               # in-order departure
            if i + 1 < m and k >= st.depth:
                d = max(d, start[i + 1][k - st.depth])     # room in the buffer downstream
            depart[i][k] = d
    for i, st in enumerate(stations):
        for k in range(n_items):
            lane = f"{lane_prefix}/{st.name}" if st.workers == 1 else \
                f"{lane_prefix}/{st.name}{k % st.workers}"
            s_us = t0_us + start[i][k] * 1e6
            tl.record(st.name, st.category, lane, s_us, cost[i][k] * 1e6, {"item": k})
            if depart[i][k] > finish[i][k]:
                tl.record("blocked", "blocked", lane, t0_us + finish[i][k] * 1e6,
                          (depart[i][k] - finish[i][k]) * 1e6, {"item": k})
    return tl


def plan_for(executor: str, names: Sequence[str], costs_s: Sequence[float],
             placements: Sequence[str], *, workers: int = 2, queue_depth: int = 2,
             categories: Sequence[str] | None = None) -> list[Station]:
    """The stations an executor turns a stage list into (same split as the executors):

    - ``sync``: one station whose cost is the sum of all stages;
    - ``threads``: one station per stage, one server each, buffers of ``queue_depth``;
    - ``processes``/``torch``: the leading worker stages fused into one station with
      ``workers`` servers (in flight ``workers * queue_depth``), the middle host stages fused
      into one host-thread station, then the consumer.
    """
    cats = list(categories) if categories is not None else ["cpu"] * len(names)
    if not (len(names) == len(costs_s) == len(placements) == len(cats)) or not names:
        raise ValueError("names, costs_s, placements (and categories) must be non-empty and of "
                         f"one length, got {len(names)}, {len(costs_s)}, {len(placements)}")
    if executor == "sync":
        return [Station("+".join(names), float(sum(costs_s)), 1, 1, "cpu")]
    if executor == "threads":
        return [Station(n, float(c), 1, queue_depth, cat)
                for n, c, cat in zip(names, costs_s, cats)]
    if executor not in ("processes", "torch"):
        raise ValueError(f"executor must be sync, threads, processes or torch, got {executor!r}")
    n = 0
    if workers > 0:
        while n < len(names) - 1 and placements[n] == "worker":
            n += 1
    out: list[Station] = []
    if n:
        out.append(Station("worker", float(sum(costs_s[:n])), workers,
                           max(1, workers * queue_depth), "cpu"))
    if len(names) - 1 > n:
        out.append(Station("+".join(names[n:-1]), float(sum(costs_s[n:-1])), 1, queue_depth,
                           "copy"))
    out.append(Station(names[-1], float(costs_s[-1]), 1, queue_depth, cats[-1]))
    return out


def measured_costs(timeline: Timeline, names: Sequence[str]) -> list[float]:
    """Mean seconds per call of each named stage in a measured Timeline (0.0 if absent)."""
    out = []
    for name in names:
        d = [s.duration_us for s in timeline.spans if s.name == name]
        out.append(sum(d) / len(d) * 1e-6 if d else 0.0)
    return out


def describe(stations: Sequence[Station], n_items: int) -> dict[str, Any]:
    """Bound, rate and sync time of a plan as a dict (for tables and JSON)."""
    return {"bound_s": bound_s(stations, n_items), "rate_items_per_s": rate_items_per_s(stations),
            "sync_s": sync_time_s(stations, n_items),
            "stations": [(s.name, _mean_cost(s), s.workers, s.depth) for s in stations]}


def part_load_times(n_parts: int, mean_s: float, jitter: float = 0.0,
                    seed: int = 0) -> list[float]:
    """Seeded per-part load times (seconds): gamma-distributed with mean ``mean_s`` and
    coefficient of variation ``jitter`` (0: all equal; 1: exponential, like a flaky store)."""
    if isinstance(n_parts, bool) or not isinstance(n_parts, int) or n_parts < 0:
        raise ValueError(f"n_parts must be an int >= 0, got {n_parts!r}")
    if not (isinstance(mean_s, (int, float)) and mean_s >= 0):
        raise ValueError(f"mean_s must be a number of seconds >= 0, got {mean_s!r}")
    if not (isinstance(jitter, (int, float)) and 0 <= jitter <= 3):
        raise ValueError(f"jitter must be a number in [0, 3], got {jitter!r}")
    if jitter == 0 or mean_s == 0:
        return [float(mean_s)] * n_parts
    import numpy as np

    rng = np.random.default_rng(seed)
    shape = 1.0 / jitter**2
    return [float(x) for x in rng.gamma(shape, mean_s / shape, n_parts)]


def simulate_parts(n_parts: int, load_s: float | Sequence[float], train_s: float, *,
                   queue_size: int = 2, mode: str = "async", t0_us: float = 0.0) -> Timeline:
    """Predicted Timeline of the async part loader (lanes as :mod:`.parts` records them).

    ``async``: a producer (one server, ``load_s`` per part) feeding a queue of ``queue_size``
    parts to the trainer (``train_s`` per part), blocking while the queue is full, exactly as a
    ``multiprocessing.Queue(maxsize=queue_size)`` does. ``sync``: the trainer loads then trains,
    part after part.
    """
    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    if mode == "async":
        sim = simulate([Station("load", load_s, 1, queue_size, "io"),
                        Station("compute", train_s, 1, 1, "compute")], n_parts, t0_us=t0_us)
        lane = {"sim/load": "producer/load", "sim/compute": "trainer/compute"}
        return Timeline(Span(s.name, s.category, lane[s.lane], s.start_us, s.duration_us, s.args)
                        for s in sim.spans)
    _check([Station("load", load_s), Station("compute", train_s)], n_parts)
    loads = [float(load_s)] * n_parts if isinstance(load_s, (int, float)) else list(load_s)
    tl, t = Timeline(), t0_us
    for k in range(n_parts):
        tl.record("load", "io", "trainer/load", t, loads[k] * 1e6, {"part": k})
        t += loads[k] * 1e6
        tl.record("compute", "compute", "trainer/compute", t, train_s * 1e6, {"part": k})
        t += train_s * 1e6
    return tl


def parts_idle_fraction(n_parts: int, load_s: float | Sequence[float], train_s: float, *,
                        queue_size: int = 2, mode: str = "async") -> float:
    """Predicted trainer idle time over wall time for the part loader (0.0 for no parts)."""
    tl = simulate_parts(n_parts, load_s, train_s, queue_size=queue_size, mode=mode)
    if not len(tl) or tl.wall_us() == 0:
        return 0.0
    return tl.stall_us("trainer/compute") / tl.wall_us()
