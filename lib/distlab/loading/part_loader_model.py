"""The async part loader's model: a producer filling a bounded queue of parts for the trainer.

Built on the station model of :mod:`.bottleneck` (a producer station feeding a trainer station
through a queue of ``queue_size`` parts); lanes are those :mod:`.part_loader` records, so a
predicted run and a measured one share every view. Seconds in, microseconds in the Timeline.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distlab._checks import check_choice, check_float, check_int
from distlab.loading.bottleneck import Station, check_stations, simulate_pipeline, station_costs
from distlab.timeline import Span, Timeline

__all__ = ["part_load_times", "parts_idle_fraction", "simulate_parts"]


def part_load_times(n_parts: int, mean_s: float, jitter: float = 0.0,
                    seed: int = 0) -> list[float]:
    """Seeded per-part load times (seconds): gamma-distributed with mean ``mean_s`` and
    coefficient of variation ``jitter`` (0: all equal; 1: exponential, like a flaky store)."""
    n_parts = check_int("n_parts", n_parts, minimum=0)
    mean_s = check_float("mean_s", mean_s, minimum=0.0)
    jitter = check_float("jitter", jitter, minimum=0.0, maximum=3.0)
    seed = check_int("seed", seed)
    if jitter == 0 or mean_s == 0:
        return [float(mean_s)] * n_parts
    rng = np.random.default_rng(seed)
    shape = 1.0 / jitter**2
    return [float(x) for x in rng.gamma(shape, mean_s / shape, n_parts)]


def simulate_parts(n_parts: int, load_s: float | Sequence[float], train_s: float, *,
                   queue_size: int = 2, mode: str = "async", t0_us: float = 0.0) -> Timeline:
    """Predicted Timeline of the async part loader (lanes as :mod:`.part_loader` records them).

    ``async``: a producer (one server, ``load_s`` per part) feeding a queue of ``queue_size``
    parts to the trainer (``train_s`` per part), blocking while the queue is full, exactly as a
    ``multiprocessing.Queue(maxsize=queue_size)`` does. ``sync``: the trainer loads then trains,
    part after part.
    """
    check_choice("mode", mode, ("sync", "async"))
    train_s = check_float("train_s", train_s, minimum=0.0)
    if mode == "async":
        sim = simulate_pipeline([Station("load", load_s, 1, queue_size, "io"),
                        Station("compute", train_s, 1, 1, "compute")], n_parts, t0_us=t0_us)
        lane = {"sim/load": "producer/load", "sim/compute": "trainer/compute"}
        return Timeline(Span(s.name, s.category, lane[s.lane], s.start_us, s.duration_us, s.args)
                        for s in sim.spans)
    n_parts = check_stations([Station("load", load_s), Station("compute", train_s)], n_parts)
    loads = station_costs(Station("load", load_s), n_parts)
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
