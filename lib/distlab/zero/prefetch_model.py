"""When prefetch hides ZeRO-3's all-gathers: one step of :mod:`distlab.zero.stage3`, simulated.

Two resources, as the implementation has them: the compute thread, and one communication queue
that runs collectives one at a time in the order they are issued (first in, first out). The
simulation issues and waits exactly where :class:`distlab.zero.stage3.Stage3` does:

- forward, unit ``k`` in order: issue ``AG(k)`` unless issued; wait for it; issue the gathers
  of the next ``prefetch`` units; compute ``forward[k]``.
- backward, units in reverse: issue ``AG(k)`` unless issued; wait; issue the next
  ``prefetch`` units' gathers; compute ``backward[k]``; wait for the previous unit's
  reduce-scatter; issue ``RS(k)``.
- step: wait for the last reduce-scatter; Adam (``step_s``).

Each collective starts when it is issued and the queue is free, and takes its given seconds.
The result is the step time, the compute thread's waits (the *exposed* communication) and
every span, so a figure can draw the model's timeline beside a measured one.

:func:`unit_times` prices the collectives of units of given sizes on a link preset with the
cost model of the plans (:mod:`distlab.collectives.model.cost`), and :func:`crossover` finds the
compute time per unit at which prefetch hides the all-gathers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from distlab._checks import check_float, check_int
from distlab.collectives.algorithms.registry import DEFAULT_ALGORITHM, build_plan
from distlab.collectives.model.cost import cost
from distlab.collectives.model.presets import LinkPreset

__all__ = ["ModelSpan", "StepModel", "UnitTimes", "crossover", "measured_step", "simulate_step",
           "unit_times", "unit_times_from_spans"]


@dataclass(frozen=True)
class UnitTimes:
    """Seconds of one unit: ``forward`` and ``backward`` compute, ``all_gather`` and
    ``reduce_scatter`` on the link."""

    forward: float
    backward: float
    all_gather: float
    reduce_scatter: float


@dataclass(frozen=True)
class ModelSpan:
    """One span of the simulated step: ``lane`` ``compute``, ``comm`` or ``wait``; seconds."""

    name: str
    lane: str
    start: float
    end: float


@dataclass(frozen=True)
class StepModel:
    """A simulated step: ``step_s`` seconds, ``exposed_s`` of them the compute thread waiting
    for a gather or a reduce-scatter, ``comm_s`` the collectives' total, and the spans."""

    step_s: float
    exposed_s: float
    comm_s: float
    compute_s: float
    spans: tuple[ModelSpan, ...]


def simulate_step(units: Sequence[UnitTimes], prefetch: int = 1, step_s: float = 0.0
                  ) -> StepModel:
    """One ZeRO-3 step of ``units`` (forward order) with ``prefetch`` units gathered ahead (see
    the module docstring)."""
    prefetch = check_int("prefetch", prefetch, minimum=0)
    step_s = check_float("step_s", step_s, minimum=0.0)
    n = len(units)
    spans: list[ModelSpan] = []
    now = 0.0          # the compute thread's clock
    free = 0.0         # when the communication queue is next free
    exposed = 0.0

    def issue(name: str, seconds: float) -> float:
        nonlocal free
        start = max(now, free)
        free = start + seconds
        spans.append(ModelSpan(name, "comm", start, free))
        return free

    def wait(name: str, until: float) -> None:
        nonlocal now, exposed
        if until > now:
            spans.append(ModelSpan(name, "wait", now, until))
            exposed += until - now
            now = until

    def compute(name: str, seconds: float) -> None:
        nonlocal now
        spans.append(ModelSpan(name, "compute", now, now + seconds))
        now += seconds

    def phase(order: list[int], what: str, backward: bool) -> None:
        gathered: dict[int, float] = {}
        reduce_done: float | None = None
        for at, k in enumerate(order):
            if k not in gathered:
                gathered[k] = issue(f"all-gather unit {k} ({what})", units[k].all_gather)
            wait(f"wait unit {k} ({what})", gathered[k])
            for nxt in order[at + 1:at + 1 + prefetch]:
                if nxt not in gathered:
                    gathered[nxt] = issue(f"all-gather unit {nxt} ({what})",
                                          units[nxt].all_gather)
            compute(f"{what} unit {k}", units[k].backward if backward else units[k].forward)
            if backward:
                if reduce_done is not None:
                    wait(f"wait reduce-scatter before unit {k}", reduce_done)
                reduce_done = issue(f"reduce-scatter unit {k}", units[k].reduce_scatter)
        if reduce_done is not None:
            wait("wait last reduce-scatter", reduce_done)

    phase(list(range(n)), "forward", backward=False)
    phase(list(range(n))[::-1], "backward", backward=True)
    compute("Adam step", step_s)
    comm = sum(s.end - s.start for s in spans if s.lane == "comm")
    work = sum(s.end - s.start for s in spans if s.lane == "compute")
    return StepModel(now, exposed, comm, work, tuple(spans))


def unit_times(unit_params: Sequence[int], world_size: int, preset: LinkPreset, *,
               forward_s: Sequence[float], backward_s: Sequence[float] | None = None,
               itemsize: int = 4, algorithms: dict[str, str] | None = None) -> list[UnitTimes]:
    """:class:`UnitTimes` per unit: the all-gather and reduce-scatter of each unit's padded flat
    buffer (``unit_params`` elements, ``itemsize`` bytes each) priced on ``preset`` from the
    plans (default algorithms unless ``algorithms`` names others), and the given compute
    seconds (``backward_s`` default: twice ``forward_s``, a matmul's two products)."""
    world_size = check_int("world_size", world_size, minimum=1)
    chosen = {**DEFAULT_ALGORITHM, **(algorithms or {})}
    back = list(backward_s) if backward_s is not None else [2 * f for f in forward_s]
    if not len(unit_params) == len(forward_s) == len(back):
        raise ValueError(f"unit_params, forward_s and backward_s differ in length: "
                         f"{len(unit_params)}, {len(forward_s)}, {len(back)}")
    out = []
    for n, f, b in zip(unit_params, forward_s, back, strict=True):
        padded = world_size * -(-check_int("unit params", n, minimum=0) // world_size)
        secs = {}
        for collective in ("all_gather", "reduce_scatter"):
            plan = build_plan(collective, chosen[collective], world_size, padded)
            secs[collective] = (cost(plan, preset.alpha, preset.beta, preset.gamma, itemsize,
                                     duplex=preset.duplex) if world_size > 1 else 0.0)
        out.append(UnitTimes(float(f), float(b), secs["all_gather"], secs["reduce_scatter"]))
    return out


def crossover(unit: UnitTimes, units: int, prefetch: int = 1, *, tolerance: float = 0.01
              ) -> float:
    """The smallest forward compute seconds per unit (backward twice it) at which ``units``
    equal units with ``prefetch`` leave at most ``tolerance`` of the all-gathers' time exposed
    beyond what no prefetch can hide (the first gather of each phase and the last
    reduce-scatter): below it prefetch cannot hide the collectives, above it the step is
    compute bound. ``inf`` when no compute time hides them (``prefetch=0``). Bisection on
    :func:`simulate_step`."""
    units = check_int("units", units, minimum=1)

    def exposed(f: float) -> float:
        u = UnitTimes(f, 2 * f, unit.all_gather, unit.reduce_scatter)
        m = simulate_step([u] * units, prefetch)
        return m.exposed_s - 2 * unit.all_gather - unit.reduce_scatter

    target = tolerance * units * unit.all_gather
    lo, hi = 0.0, max(unit.all_gather, unit.reduce_scatter, 1e-12)
    while exposed(hi) > target:
        hi *= 2
        if hi > 1e6:
            return float("inf")
    for _ in range(60):
        mid = (lo + hi) / 2
        if exposed(mid) > target:
            lo = mid
        else:
            hi = mid
    return hi


_UNIT = re.compile(r"(forward|backward|all-gather|reduce-scatter) unit (\d+)( \((\w+)\))?$")


def unit_times_from_spans(spans: Sequence[Mapping[str, Any]]) -> tuple[list[UnitTimes], float]:
    """Per-unit seconds read off one rank's traced stage-3 step (span dicts of a
    :class:`~distlab.timeline.Timeline`, names as :mod:`distlab.zero.stage3` records them):
    ``forward unit k`` and ``backward unit k`` compute, the backward ``all-gather unit k`` and
    ``reduce-scatter unit k`` as they ran; and the Adam step's seconds. Feed them to
    :func:`simulate_step` to predict the step with another ``prefetch``."""
    got: dict[tuple[str, int], float] = {}
    adam = 0.0
    for s in spans:
        if s["name"] == "Adam step":
            adam = s["duration_us"] * 1e-6
        m = _UNIT.match(s["name"])
        if m and (m.group(1) != "all-gather" or m.group(4) == "backward"):
            got[(m.group(1), int(m.group(2)))] = s["duration_us"] * 1e-6
    n = 1 + max((k for _, k in got), default=-1)
    missing = [(w, k) for k in range(n) for w in ("forward", "backward", "all-gather",
                                                  "reduce-scatter") if (w, k) not in got]
    if missing or not n:
        raise ValueError(f"spans of a whole stage-3 step are needed; missing {missing[:4]}"
                         if n else "no stage-3 unit spans in these spans")
    return [UnitTimes(got[("forward", k)], got[("backward", k)], got[("all-gather", k)],
                      got[("reduce-scatter", k)]) for k in range(n)], adam


def measured_step(spans: Sequence[Mapping[str, Any]]) -> float:
    """Seconds of one traced step on one rank: from the first forward-phase span (a unit's
    gather, wait or forward) to the end of the Adam step."""
    starts = [s["start_us"] for s in spans if s["category"] in ("forward", "wait", "all_gather")]
    ends = [s["start_us"] + s["duration_us"] for s in spans if s["name"] == "Adam step"]
    if not starts or not ends:
        raise ValueError("spans of a whole stage-3 step (with its Adam step) are needed")
    return (max(ends) - min(starts)) * 1e-6
