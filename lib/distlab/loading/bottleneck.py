"""The pipeline model: the bottleneck bound and a discrete-event simulation of a line of stations.

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

**Simulation.** :func:`simulate_pipeline` plays the system event by event in max-plus form (for item
``k`` in order, station by station: start = max(arrival, a free server, the previous item's start);
departure = max(finish, the previous item's departure, room downstream)). It returns a
:class:`~distlab.timeline.Timeline` of the predicted spans, so predicted and measured runs share
every view (Gantt, stats, Chrome trace). Simulated spans start at ``t0_us`` (default 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_choice, check_float, check_instance, check_int
from distlab.timeline import Timeline

__all__ = ["PLAN_EXECUTORS", "Station", "bottleneck", "bound_s", "check_stations", "describe",
           "measured_costs", "plan_for", "plan_for_stages", "plan_rows", "plan_rows_text",
           "station_costs", "rate_items_per_s", "simulate_pipeline", "startup_s", "sync_time_s"]


PLAN_EXECUTORS = ("sync", "threads", "processes", "torch")
HOP_THREADS = ("host", "consumer")


@dataclass(frozen=True)
class Station:
    """One station of the model: a name, seconds per item, servers, buffer depth after it."""

    name: str
    cost_s: float | Sequence[float]
    workers: int = 1
    depth: int = 2
    category: str = "cpu"


def station_costs(st: Station, n_items: int) -> list[float]:
    """The station's per-item costs (seconds), checked: finite and >= 0, one per item."""
    if isinstance(st.cost_s, Sequence) and not isinstance(st.cost_s, (str, bytes)):
        costs = [check_float(f"station {st.name!r}: cost_s[{k}]", c, minimum=0.0)
                 for k, c in enumerate(st.cost_s)]
        if len(costs) != n_items:
            raise ValueError(f"station {st.name!r}: {len(costs)} per-item costs for "
                             f"n_items={n_items}")
        return costs
    return [check_float(f"station {st.name!r}: cost_s", st.cost_s, minimum=0.0)] * n_items


def check_stations(stations: Sequence[Station], n_items: int) -> int:
    """Validate a plan: ``n_items`` (an int >= 0) and a non-empty list of valid stations;
    returns ``n_items``."""
    n_items = check_int("n_items", n_items, minimum=0)
    if isinstance(stations, (str, bytes)) or not isinstance(stations, Sequence) or not stations:
        raise ValueError(f"stations must be a non-empty list of Station, got {stations!r}")
    for st in stations:
        check_instance("stations[...]", st, Station)
        check_int(f"station {st.name!r}: workers", st.workers, minimum=1)
        check_int(f"station {st.name!r}: depth", st.depth, minimum=1)
        station_costs(st, n_items)
    return n_items


def _mean_cost(st: Station) -> float:
    if isinstance(st.cost_s, Sequence):
        c = [float(x) for x in st.cost_s]
        return sum(c) / len(c) if c else 0.0
    return float(st.cost_s)


def rate_items_per_s(stations: Sequence[Station]) -> float:
    """Bottleneck throughput: ``min_i workers_i / cost_i`` items per second (inf if all free)."""
    if not stations:
        raise ValueError("stations must be a non-empty list of Station")
    rates = [s.workers / _mean_cost(s) for s in stations if _mean_cost(s) > 0]
    return min(rates) if rates else math.inf


def bottleneck(stations: Sequence[Station]) -> Station:
    """The station that bounds the rate: the lowest ``workers / cost`` (the first of equals;
    the first station when every cost is 0)."""
    if not stations:
        raise ValueError("stations must be a non-empty list of Station")
    costly = [s for s in stations if _mean_cost(s) > 0]
    return min(costly, key=lambda s: s.workers / _mean_cost(s)) if costly else stations[0]


def bound_s(stations: Sequence[Station], n_items: int) -> float:
    """Lower bound on the makespan of ``n_items`` (seconds); see the module docstring.
    Per-item costs are replaced by their mean."""
    n_items = check_stations(stations, n_items)
    if n_items == 0:
        return 0.0
    costs = [_mean_cost(s) for s in stations]
    total = sum(costs)
    return max(total - c + math.ceil(n_items / s.workers) * c
               for s, c in zip(stations, costs, strict=True))


def sync_time_s(stations: Sequence[Station], n_items: int) -> float:
    """Makespan with no overlap at all: ``n_items * sum(cost)`` seconds."""
    n_items = check_stations(stations, n_items)
    return n_items * sum(_mean_cost(s) for s in stations)


def simulate_pipeline(stations: Sequence[Station], n_items: int, *, lane_prefix: str = "sim",
             t0_us: float = 0.0) -> Timeline:
    """Predicted Timeline: one span per (item, station) on lane ``"<prefix>/<name>"`` (or
    ``"<prefix>/<name><server>"`` for stations with several servers); a server blocked on a
    full buffer gets a ``"blocked"`` span. Costs in seconds, spans in microseconds."""
    n_items = check_stations(stations, n_items)
    m = len(stations)
    cost = [station_costs(s, n_items) for s in stations]
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
             categories: Sequence[str] | None = None, hop_s: float = 0.0,
             hop_send_s: float = 0.0, hop_in: str | None = None) -> list[Station]:
    """The stations an executor turns a stage list into (same split as the executors):

    - ``sync``: one station whose cost is the sum of all stages;
    - ``threads``: one station per stage, one server each, buffers of ``queue_depth``;
    - ``processes``/``torch``: the leading worker stages fused into one station with
      ``workers`` servers (in flight ``workers * queue_depth``), the middle host stages fused
      into one host-thread station, then the consumer.

    Costs in seconds (finite, >= 0). For a list of :class:`~.stages.Stage` objects use
    :func:`plan_for_stages`, which reads names, placements and categories from the stages.

    The hop of a worker's output into the trainer process
    (:func:`distlab.loading.hop_cost.measure_hop_cost`; 0: left out) is paid on both sides, and
    only by ``processes`` and ``torch`` with stages in workers: ``hop_send_s`` seconds per item by
    the worker (moving the output into shared memory: added to the worker station), ``hop_s``
    by the thread that takes the results back (``hop_in``): ``"host"`` (the default for
    ``processes``: its host thread, so the host-stage station, or a station ``"hop"`` of its own
    when there is no host stage) or ``"consumer"`` (the default for ``torch``: the thread
    iterating a DataLoader without a pin thread).
    """
    executor = check_choice("executor", executor, PLAN_EXECUTORS)
    workers = check_int("workers", workers, minimum=0)
    queue_depth = check_int("queue_depth", queue_depth, minimum=1)
    names = list(names)
    costs = [check_float(f"costs_s[{i}]", c, minimum=0.0) for i, c in enumerate(costs_s)]
    placements = list(placements)
    cats = list(categories) if categories is not None else ["cpu"] * len(names)
    if not (len(names) == len(costs) == len(placements) == len(cats)) or not names:
        raise ValueError("names, costs_s, placements (and categories) must be non-empty and of "
                         f"one length, got {len(names)}, {len(costs)}, {len(placements)}, "
                         f"{len(cats)}")
    if executor == "sync":
        return [Station("+".join(names), float(sum(costs)), 1, 1, "cpu")]
    if executor == "threads":
        return [Station(n, c, 1, queue_depth, cat)
                for n, c, cat in zip(names, costs, cats, strict=True)]
    hop = check_float("hop_s (seconds)", hop_s, minimum=0.0)
    send = check_float("hop_send_s (seconds)", hop_send_s, minimum=0.0)
    where = check_choice("hop_in", hop_in, HOP_THREADS) if hop_in is not None else \
        ("host" if executor == "processes" else "consumer")
    n = 0
    if workers > 0:
        while n < len(names) - 1 and placements[n] == "worker":
            n += 1
    if not n:
        hop = send = 0.0   # nothing crosses between processes
    out: list[Station] = []
    if n:
        out.append(Station("worker", float(sum(costs[:n])) + send, workers,
                           max(1, workers * queue_depth), "cpu"))
    host_hop = hop if where == "host" else 0.0
    if len(names) - 1 > n:
        out.append(Station("+".join(names[n:-1]), float(sum(costs[n:-1])) + host_hop, 1,
                           queue_depth, "copy"))
    elif host_hop:
        out.append(Station("hop", host_hop, 1, queue_depth, "copy"))
    out.append(Station(names[-1], costs[-1] + (hop if where == "consumer" else 0.0), 1,
                       queue_depth, cats[-1]))
    return out


def plan_for_stages(executor: str, stages: Sequence[Any], *, workers: int = 2,
                    queue_depth: int = 2, costs_s: Sequence[float] | None = None,
                    hop_s: float = 0.0, hop_send_s: float = 0.0,
                    hop_in: str | None = None) -> list[Station]:
    """The one place a stage list becomes a model plan (benchmark, widgets, notebooks).

    ``stages``: objects with ``name``, ``placement``, ``category`` and ``cost_s`` (the
    :class:`~.stages.Stage` interface). ``costs_s``: seconds per item for each stage (e.g.
    :func:`measured_costs` of a sync run); default: each stage's nominal ``cost_s``, 0.0 when
    unknown. ``hop_s``, ``hop_send_s``, ``hop_in``: the hop between processes, as
    :func:`plan_for` takes them.
    Returns :func:`plan_for`'s stations.
    """
    stages = list(stages)
    if not stages:
        raise ValueError("stages must be a non-empty list of Stage")
    costs = [s.cost_s or 0.0 for s in stages] if costs_s is None else list(costs_s)
    if len(costs) != len(stages):
        raise ValueError(f"costs_s must give one cost per stage: {len(costs)} for "
                         f"{len(stages)} stages")
    return plan_for(executor, [s.name for s in stages], costs, [s.placement for s in stages],
                    workers=workers, queue_depth=queue_depth,
                    categories=[s.category for s in stages], hop_s=hop_s,
                    hop_send_s=hop_send_s, hop_in=hop_in)


def plan_rows(stages: Sequence[Any], n_items: int, *, workers: int, queue_depth: int,
              executors: Sequence[str] = PLAN_EXECUTORS) -> list[dict[str, Any]]:
    """Per executor: its stations (``plan``, :func:`plan_for_stages`), the model's bound
    (``bound_s``, :func:`bound_s`) and the simulated makespan (``sim_s``,
    :func:`simulate_pipeline`) for the stages' nominal ``cost_s``, all in seconds."""
    rows = []
    for ex in executors:
        plan = plan_for_stages(ex, stages, workers=workers, queue_depth=queue_depth)
        rows.append({"executor": ex, "plan": plan, "bound_s": bound_s(plan, n_items),
                     "sim_s": simulate_pipeline(plan, n_items).wall_us() * 1e-6})
    return rows


def _station_pieces(st: Station) -> list[str]:
    """A station as ``name ms`` (``xN`` when ``N > 1`` servers share it), split after every
    ``+`` of a fused name so a long fused station can continue on the next line."""
    servers = f" x{st.workers}" if st.workers != 1 else ""
    parts = st.name.split("+")
    return [p + "+" for p in parts[:-1]] + [f"{parts[-1]} {_mean_cost(st) * 1e3:g}{servers}"]


def plan_rows_text(rows: Sequence[dict[str, Any]], width: int = 110) -> str:
    """:func:`plan_rows` as a text table: per executor its bound and simulated makespan (ms)
    and its stations (``name ms``, ``xN`` for a station with ``N`` servers, ``|`` between
    stations). No line is wider than ``width`` characters (at least 72) unless one part of a
    station name is: a station list that does not fit continues on the next line, under the
    stations column, broken only between stations or after a ``+`` of a fused name."""
    width = check_int("width", width, minimum=72)
    left = max([9] + [len(str(r["executor"])) for r in rows])
    lead = left + 1 + 9 + 1 + 13 + 2
    lines = [f"{'executor':{left}} {'bound ms':>9} {'simulated ms':>13}  "
             "stations (name ms, xN: N servers)"]
    for r in rows:
        current = f"{r['executor']:{left}} {r['bound_s'] * 1e3:9.1f} {r['sim_s'] * 1e3:13.1f}  "
        fresh = True
        for j, st in enumerate(r["plan"]):
            for k, piece in enumerate(_station_pieces(st)):
                sep = " | " if j and not k else ""
                if not fresh and len(current) + len(sep) + len(piece) > width:
                    lines.append(current + sep.rstrip())
                    current, sep = " " * lead, ""
                current += sep + piece
                fresh = False
        lines.append(current)
    return "\n".join(lines)


def measured_costs(timeline: Timeline, names: Sequence[str]) -> list[float]:
    """Mean seconds per call of each named stage in a measured Timeline (0.0 if absent)."""
    out = []
    for name in names:
        d = [s.duration_us for s in timeline.spans if s.name == name]
        out.append(sum(d) / len(d) * 1e-6 if d else 0.0)
    return out


def startup_s(result: Any) -> float:
    """Worker start-up seconds of a measured run (``RunResult.startup_s``: spawning worker
    processes, 0.0 for sync and threads), which the model leaves out: it models the steady
    pipeline only. 0.0 for results that do not report it."""
    return float(getattr(result, "startup_s", 0.0) or 0.0)


def describe(stations: Sequence[Station], n_items: int) -> dict[str, Any]:
    """Bound, rate and sync time of a plan as a dict (for tables and JSON)."""
    return {"bound_s": bound_s(stations, n_items), "rate_items_per_s": rate_items_per_s(stations),
            "sync_s": sync_time_s(stations, n_items),
            "stations": [(s.name, _mean_cost(s), s.workers, s.depth) for s in stations]}
