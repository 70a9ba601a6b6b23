"""The pipeline bubble read off each rank's profiler trace, beside the schedule's plan.

How an action is recognised: a complete event (``ph == "X"``) named ``PP:<stage><kind><mb>``
(``PP:0F1``, ``PP:1B3``; kinds ``F``, ``B``, ``I``, ``W``), the name torch.distributed.pipelining's
runtime gives an action's ``record_function`` and the one distlab's runtime
(:mod:`distlab.pipeline_parallel.runtime.executor`) gives its compute. distlab's span holds the
compute only; torch's holds the wait for the action's receive too, so on torch's traces the
measured bubble comes out smaller than the rank's real idle time by that wait. Sends and
receives (``PP:1RECV_F0``) are not compute and are left out. A trace without such spans has no
pipeline section (:func:`run_pipeline_bubble` returns ``None``).

Per step (``ProfilerStep#N``, the span an action starts in on its rank; a trace without
ProfilerStep spans is one step) and rank:

- the step's *window* is the run's: from the first action of any rank to the end of the last
  action of any rank, on the run's clock (:func:`distlab.trace.collectives.clock_shift_us`); that
  is the step the plan's simulation times (it starts every rank at 0 and ends at the last
  action's end);
- *busy* is the union of the rank's action spans; the *bubble* is ``1 - busy / window``.

A step counts when every rank ran exactly the plan's actions in it; the rank's bubble is the mean
over counted steps.

The plan: the pipeline's size is read off the actions (ranks with actions, stages = largest
stage + 1, microbatches = largest microbatch + 1) and the schedule is the first of
:data:`~distlab.pipeline_parallel.SCHEDULES` whose plan runs, on every rank, the compute actions in
the order the trace shows (or the ``schedule`` named). The plan's per-rank bubble is
:func:`~distlab.pipeline_parallel.simulate` of that plan with each stage's mean measured forward,
input- and weight-gradient times and free transfers (``idle_s[r] / step_time_s``), beside the
closed form :func:`~distlab.pipeline_parallel.cost.bubble_fraction` (equal stages, free
transfers; ``None`` for zero-bubble schedules). The gap between measured and plan is the time
neither compute nor the plan's dependencies explain: transfers, host overhead between actions,
the profiler itself.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from distlab.trace.intervals import merge

__all__ = ["ACTION_NAME", "ActionSpan", "PipelineBubble", "RankBubble", "action_spans",
           "bubble_lines", "pipeline_bubble", "run_pipeline_bubble"]

ACTION_NAME = re.compile(r"^PP:(\d+)([FBIW])(\d+)$")
"""A compute action's profiler span name: ``PP:<stage><kind><microbatch>``."""
_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")


@dataclass(frozen=True)
class ActionSpan:
    """One compute action as a trace shows it: ``stage``, ``kind`` (``"F"``...), ``microbatch``,
    on ``rank``, ``[start_us, end_us)`` on the run's clock, in ProfilerStep ``step``."""

    rank: int
    stage: int
    kind: str
    microbatch: int
    start_us: float
    end_us: float
    step: int | None = None

    @property
    def name(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"


@dataclass
class RankBubble:
    """One rank: its mean busy and window microseconds over the counted steps, the measured
    bubble (and per step), the plan's bubble for it."""

    rank: int
    pipeline_rank: int | None
    stages: tuple[int, ...]
    busy_us: float
    window_us: float
    bubble: float
    per_step: dict[int | None, float] = field(default_factory=dict)
    plan_bubble: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "pipeline_rank": self.pipeline_rank,
                "stages": list(self.stages), "busy_us": self.busy_us,
                "window_us": self.window_us, "bubble": self.bubble,
                "per_step": {("all" if k is None else k): v for k, v in self.per_step.items()},
                "plan_bubble": self.plan_bubble}


@dataclass
class PipelineBubble:
    """The run's pipeline: its size, the schedule recognised, every rank's bubble beside the
    plan's (see the module docstring)."""

    ranks: int
    stages: int
    microbatches: int
    schedule: str | None
    steps: list[int | None]
    per_rank: dict[int, RankBubble]
    closed_form: float | None = None
    plan_overall: float | None = None
    measured_overall: float | None = None
    stage_times_us: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"ranks": self.ranks, "stages": self.stages, "microbatches": self.microbatches,
                "schedule": self.schedule,
                "steps": ["all" if s is None else s for s in self.steps],
                "closed_form_bubble": self.closed_form, "plan_bubble": self.plan_overall,
                "measured_bubble": self.measured_overall, "stage_times_us": self.stage_times_us,
                "per_rank": {r: b.as_dict() for r, b in self.per_rank.items()},
                "notes": self.notes}


def _steps(events: Iterable[Mapping[str, Any]]) -> list[tuple[float, float, int]]:
    out = []
    for e in events:
        m = _STEP.match(str(e.get("name", "")))
        if m and e.get("ph", "X") == "X" and e.get("dur") is not None:
            out.append((float(e["ts"]), float(e["ts"]) + float(e["dur"]), int(m.group(1))))
    return sorted(out)


def action_spans(events: Iterable[Mapping[str, Any]], rank: int,
                 shift_us: float = 0.0) -> list[ActionSpan]:
    """The compute actions among one rank's Kineto-like events (dicts with ``name``, ``ph``,
    ``ts``, ``dur``), times plus ``shift_us``, each with the ProfilerStep it starts in (None
    outside every step or in a trace without steps), in start order."""
    events = list(events)
    steps = _steps(events)
    out = []
    for e in events:
        m = ACTION_NAME.match(str(e.get("name", "")))
        if not m or e.get("ph", "X") != "X" or e.get("dur") is None:
            continue
        ts, dur = float(e["ts"]), float(e["dur"])
        step = next((n for s, t, n in steps if s <= ts < t), None)
        out.append(ActionSpan(rank, int(m.group(1)), m.group(2), int(m.group(3)),
                              ts + shift_us, ts + dur + shift_us, step))
    return sorted(out, key=lambda a: (a.start_us, a.end_us))


def _busy(spans: Sequence[ActionSpan]) -> float:
    s, e = merge(np.array([a.start_us for a in spans]), np.array([a.end_us for a in spans]))
    return float(np.sum(e - s))


def _candidates(schedule: str | None) -> list[str]:
    from distlab.pipeline_parallel.schedules.registry import SCHEDULES, schedule_name

    return [schedule_name(schedule)] if schedule else list(SCHEDULES)


def _match_plan(by_rank: Mapping[int, Sequence[ActionSpan]], n_ranks: int, stages: int,
                microbatches: int, schedule: str | None) -> tuple[Any, dict[int, int]] | None:
    """The first registry plan whose every rank runs the trace's compute order; and the map
    trace rank -> pipeline rank."""
    from distlab.pipeline_parallel.schedules.registry import build_plan

    if stages % n_ranks:
        return None
    for name in _candidates(schedule):
        try:
            plan = build_plan(name, n_ranks, microbatches, stages // n_ranks)
        except (ValueError, TypeError):
            continue
        mapping: dict[int, int] = {}
        for r, spans in by_rank.items():
            held = tuple(sorted({a.stage for a in spans}))
            p = next((p for p in range(plan.ranks) if plan.stages_of(p) == held), None)
            if p is None or [str(a) for a in plan.compute(p)] != [a.name for a in spans]:
                break
            mapping[r] = p
        else:
            return plan, mapping
    return None


def pipeline_bubble(actions: Mapping[int, Sequence[ActionSpan]], *,
                    schedule: str | None = None) -> PipelineBubble | None:
    """Every rank's bubble from its :class:`ActionSpan` s (trace rank -> spans, on one clock),
    beside the plan's; None when no rank has an action. ``schedule``: the schedule's name, else
    recognised from the order of the actions (module docstring)."""
    from distlab.pipeline_parallel.cost import bubble_fraction
    from distlab.pipeline_parallel.simulate import P2PCost, StageTimes, simulate

    actions = {r: list(v) for r, v in actions.items() if v}
    if not actions:
        return None
    every = [a for v in actions.values() for a in v]
    n_stages = 1 + max(a.stage for a in every)
    n_mb = 1 + max(a.microbatch for a in every)
    n_ranks = len(actions)
    steps_seen = sorted({a.step for a in every}, key=lambda s: -1 if s is None else s)
    by_step: dict[int | None, dict[int, list[ActionSpan]]] = {
        s: {r: [a for a in v if a.step == s] for r, v in actions.items()} for s in steps_seen}
    notes: list[str] = []
    matched = None
    counted: list[int | None] = []
    for s in steps_seen:
        got = _match_plan(by_step[s], n_ranks, n_stages, n_mb, schedule)
        if got is not None:
            if matched is None or got[0].schedule == matched[0].schedule:
                matched = matched or got
                counted.append(s)
    if matched is None:
        notes.append("no schedule of distlab.pipeline_parallel.SCHEDULES runs these actions in "
                      "this order on every rank: no plan beside the measurement; every step with "
                      "actions counted")
        counted = list(steps_seen)
    elif len(counted) < len(steps_seen):
        left = [s for s in steps_seen if s not in counted]
        notes.append(f"{len(left)} step(s) whose actions are not the plan's left out: "
                     + ", ".join("(outside steps)" if s is None else f"#{s}" for s in left))
    plan, mapping = matched if matched is not None else (None, {})
    per_step_bubble: dict[int, dict[int | None, float]] = defaultdict(dict)
    busy_sum: dict[int, float] = defaultdict(float)
    window_sum = 0.0
    for s in counted:
        spans = [a for v in by_step[s].values() for a in v]
        t0, t1 = min(a.start_us for a in spans), max(a.end_us for a in spans)
        window = t1 - t0
        window_sum += window
        for r, v in by_step[s].items():
            busy = _busy(v) if v else 0.0
            busy_sum[r] += busy
            per_step_bubble[r][s] = 1.0 - busy / window if window > 0 else 0.0
    k = max(1, len(counted))
    per_rank = {r: RankBubble(r, mapping.get(r), tuple(sorted({a.stage for a in actions[r]})),
                              busy_sum[r] / k, window_sum / k,
                              statistics.fmean(per_step_bubble[r].values())
                              if per_step_bubble[r] else float("nan"), per_step_bubble[r])
                for r in sorted(actions)}
    out = PipelineBubble(n_ranks, n_stages, n_mb, plan.schedule if plan else None, counted,
                         per_rank, notes=notes)
    out.measured_overall = statistics.fmean(b.bubble for b in per_rank.values())
    if plan is None:
        return out
    out.closed_form = bubble_fraction(plan.schedule, plan.ranks, plan.microbatches,
                                      plan.stages_per_rank)
    seen: dict[tuple[int, str], list[float]] = defaultdict(list)
    for s in counted:
        for v in by_step[s].values():
            for a in v:
                seen[(a.stage, a.kind)].append((a.end_us - a.start_us) * 1e-6)

    def mean(stage: int, kind: str) -> float:
        return statistics.fmean(seen[(stage, kind)]) if seen.get((stage, kind)) else 0.0

    n = plan.num_stages
    f = tuple(mean(s, "F") for s in range(n))
    b = [mean(s, "B") for s in range(n)]
    i = [mean(s, "I") for s in range(n)]
    w = [mean(s, "W") for s in range(n)]
    times = StageTimes(f, tuple(bs or is_ for bs, is_ in zip(b, i, strict=True)),
                       tuple(0.0 if bs else ws for bs, ws in zip(b, w, strict=True)))
    out.stage_times_us = {"forward": [x * 1e6 for x in f],
                          "backward": [x * 1e6 for x in b] if any(b) else [],
                          "backward_input": [x * 1e6 for x in i] if any(i) else [],
                          "backward_weight": [x * 1e6 for x in w] if any(w) else []}
    sim = simulate(plan, times, p2p=P2PCost.free())
    out.plan_overall = sim.bubble_fraction
    for r, rb in per_rank.items():
        p = mapping[r]
        rb.plan_bubble = (sim.idle_s[p] / sim.step_time_s) if sim.step_time_s > 0 else 0.0
    return out


def run_pipeline_bubble(run: Any, *, schedule: str | None = None) -> PipelineBubble | None:
    """:func:`pipeline_bubble` of a :class:`~distlab.trace.torch_trace.Run`; None (at the cost
    of one pass over the names) when no rank's trace holds a ``PP:<action>`` span."""
    from distlab.trace.collectives import clock_shift_us

    if not any(any(ACTION_NAME.match(n) for n in rt.names) for rt in run.ranks.values()):
        return None
    shift = clock_shift_us(run)
    actions = {}
    for r, rt in run.ranks.items():
        keep = np.array([bool(ACTION_NAME.match(n) or _STEP.match(n)) for n in rt.names],
                        dtype=bool)
        idx = np.flatnonzero(keep[rt.name] & ~np.isnan(rt.dur)) if len(rt.names) else []
        events = [{"name": rt.names[rt.name[i]], "ph": "X", "ts": float(rt.ts[i]),
                   "dur": float(rt.dur[i])} for i in idx]
        actions[r] = action_spans(events, r, shift[r])
    return pipeline_bubble(actions, schedule=schedule)


def _pct(x: float | None) -> str:
    return "-" if x is None or x != x else f"{100 * x:.1f}%"


def bubble_lines(pb: PipelineBubble | None, rank: int | None = None) -> list[str]:
    """The report's pipeline section (none without a pipeline): a heading with the schedule, its
    size and the plan's bubble, then ``pipeline: rank r bubble X% (plan Y%)`` per rank."""
    if pb is None:
        return []
    steps = ", ".join("all" if s is None else f"#{s}" for s in pb.steps)
    lines = [f"## pipeline: {pb.schedule or 'schedule unknown'}, {pb.ranks} ranks, {pb.stages} "
             f"stages, {pb.microbatches} microbatches (PP:<action> spans; steps {steps})",
             "bubble = 1 - busy / step window"]
    if pb.schedule:
        lines[-1] += (f"; plan: closed form {_pct(pb.closed_form)}, simulated "
                      f"{_pct(pb.plan_overall)}; measured {_pct(pb.measured_overall)} (mean)")
        lines.append("  (the plan simulated with the measured stage times and free transfers)")
    for r, b in pb.per_rank.items():
        if rank is not None and r != rank:
            continue
        lines.append(f"pipeline: rank {r} bubble {_pct(b.bubble)} (plan {_pct(b.plan_bubble)})"
                     f"; busy {b.busy_us / 1000:.2f} of {b.window_us / 1000:.2f} ms per step, "
                     f"stages {', '.join(map(str, b.stages))}")
    lines += [f"  note: {n}" for n in pb.notes]
    return lines
