"""Pipeline-parallel schedules drawn: the plan on its unit grid, a simulated or measured step in
seconds, a stepper through a plan and an explorer of the simulation.

- :func:`plan_gantt`: one row per rank, one column per time step of the plan's grid
  (:class:`~distlab.pipeline_parallel.plan.PipelinePlan`), each action a box coloured by its
  kind (palette names ``forward``, ``backward``, ``backward_input``, ``backward_weight``) and
  labelled with its microbatch (and its stage, ``s<stage>``, when a rank holds several), an
  overlapped step as two half boxes, idle steps shaded as ``bubble``.
- :func:`timeline_gantt`: the same boxes on a time axis, from a
  :class:`~distlab.timeline.Timeline` whose lanes are ``"rank{r}/compute"`` (what
  :meth:`~distlab.pipeline_parallel.simulate.Simulation.to_timeline` writes, and what a measured
  run records), gaps shaded as bubbles; :func:`simulation_gantt` titles it with the simulation's
  numbers and :func:`compare_gantt` draws a measured step above its simulation on one time axis.
- :class:`PipelineStepper`: schedule, ranks, stages per rank, microbatches and a step slider
  over :func:`plan_gantt`, with what each rank runs at that step and the microbatches in flight.
- :class:`PipelineExplorer`: schedule, ranks, stages per rank, microbatches and one slow stage
  -> the simulated step's Gantt, its step time, bubble (and the closed form where one exists)
  and the peak microbatches in flight.

Every figure is made with :func:`~distlab.viz.figure.new_figure` (it displays once) and fits
JupyterLab's 968 px; box labels are drawn only where they fit their box.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import ipywidgets as w
from matplotlib.patches import Patch

from distlab._checks import check_int
from distlab.pipeline_parallel.actions import Kind
from distlab.pipeline_parallel.cost import (
    bubble_fraction,
    grid_bubble_fraction,
    in_flight,
    peak_in_flight,
)
from distlab.pipeline_parallel.plan import PipelinePlan
from distlab.pipeline_parallel.schedules.registry import SCHEDULES, build_plan, schedule_info
from distlab.pipeline_parallel.simulate import (
    KIND_CATEGORY,
    P2PCost,
    Simulation,
    StageTimes,
    simulate,
)
from distlab.timeline import Timeline
from distlab.viz.axes import integer_ticks
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import message_figure, new_figure
from distlab.viz.palette import colour

__all__ = ["FIG_WIDTH_IN", "KIND_LABELS", "PipelineExplorer", "PipelineStepper",
           "bubble_curve_figure", "compare_gantt", "plan_gantt", "plans_gantt",
           "simulation_gantt", "simulations_gantt", "timeline_gantt"]

#: Figure width in inches: at the default 100 dpi the image stays within JupyterLab's 968 px.
FIG_WIDTH_IN = 9.2

#: Legend label of each compute kind: the kind's letter, then its palette name.
KIND_LABELS: dict[str, str] = {cat: f"{kind.value}: {cat}" for kind, cat in KIND_CATEGORY.items()}

_KIND_OF_LETTER = {k.value: k for k in KIND_CATEGORY}
_ROW_IN = 0.42            # inches per rank row
_BOX = 0.8                # box height, in rows
_AXES_MARGIN_IN = 1.1     # figure width the y tick labels and padding take
_DIGIT_EM = 0.64          # width of a digit in DejaVu Sans, in ems
_MAX_FONT = 7.5
_MIN_FONT = 5.5
_LABEL_PAD_PT = 2.0       # clear space each side of a box's label


def _height_in(rows: int) -> float:
    return max(2.0, _ROW_IN * rows + 1.5)


def _font_for(box_w_pt: float, box_h_pt: float, lines: Sequence[str]) -> float | None:
    """The largest font (points, <= 7.5) at which ``lines`` fit a box with ``_LABEL_PAD_PT``
    clear on each side (so the labels of neighbouring boxes never read as one number), or None
    below 5.5."""
    chars = max(len(t) for t in lines)
    size = min(_MAX_FONT, (box_w_pt - 2 * _LABEL_PAD_PT) / (_DIGIT_EM * chars),
               0.8 * box_h_pt / (1.25 * len(lines)))
    return size if size >= _MIN_FONT else None


def _label_fit(microbatch: str, stage: str | None, box_w_pt: float,
               box_h_pt: float) -> tuple[bool, float] | None:
    """``(with the stage line, font size)`` at which the labels of a plan's boxes fit, the
    stage under the microbatch where both fit, or None where not even the microbatch fits."""
    options = ([(True, [microbatch, stage])] if stage is not None else []) + \
        [(False, [microbatch])]
    for two, lines in options:
        size = _font_for(box_w_pt, box_h_pt, lines)
        if size is not None:
            return two, size
    return None


def _fitted_label(microbatch: Any, stage: Any, box_w_pt: float,
                  box_h_pt: float) -> tuple[str, float] | None:
    """The box's label and font: microbatch over ``s<stage>`` where both fit (``stage`` not
    None), else the microbatch alone, else None."""
    options = ([[str(microbatch), f"s{stage}"]] if stage is not None else []) + [[str(microbatch)]]
    for lines in options:
        size = _font_for(box_w_pt, box_h_pt, lines)
        if size is not None:
            return "\n".join(lines), size
    return None


def _legend(fig: Any, categories: Sequence[str], with_bubble: bool) -> None:
    order = [c for c in KIND_CATEGORY.values() if c in categories]
    handles = [Patch(facecolor=colour(c), edgecolor="black", linewidth=0.3,
                     label=KIND_LABELS[c]) for c in order]
    if with_bubble:
        handles.append(Patch(facecolor=colour("bubble"), edgecolor="#9a9a9a", linewidth=0.3,
                             label="bubble"))
    if handles:
        fig.legend(handles=handles, loc="outside lower center", ncol=len(handles),
                   fontsize="small", frameon=False)


def _rank_axis(ax: Any, ranks: int) -> None:
    ax.set_yticks(range(ranks), [f"rank {r}" for r in range(ranks)])
    ax.set_ylim(ranks - 0.5, -0.5)
    ax.tick_params(axis="y", length=0)


# ------------------------------------------------------------------ the plan on its grid
def _check_plan(plan: Any) -> int:
    """The plan's time steps (its longest row); ``TypeError`` for anything but a plan."""
    if not isinstance(plan, PipelinePlan):
        raise TypeError(f"plan must be a PipelinePlan, got {type(plan).__name__}")
    return max((len(row) for row in plan.grid), default=0)


def _plan_title(plan: PipelinePlan) -> str:
    many = plan.stages_per_rank > 1
    return (f"{plan.schedule}: {plan.ranks} ranks, {plan.microbatches} microbatches"
            + (f", {plan.stages_per_rank} stages per rank" if many else "")
            + f"; grid bubble {grid_bubble_fraction(plan):.1%}")


def _draw_plan(ax: Any, plan: PipelinePlan, step: int | None, title: str) -> tuple[set[str], bool]:
    """``plan`` on its grid on ``ax``; returns the categories drawn and whether a step idles."""
    steps = max((len(row) for row in plan.grid), default=0)
    fig = ax.figure
    width_in = fig.get_size_inches()[0] - _AXES_MARGIN_IN
    cell_w_pt = 72.0 * width_in / max(steps, 1)
    cell_h_pt = 72.0 * _ROW_IN * _BOX
    many = plan.stages_per_rank > 1
    # one label style for every box (full, and half for an overlapped step): the widest
    # microbatch (and stage) must fit, or no box is labelled
    widest = (str(plan.microbatches - 1), f"s{plan.num_stages - 1}" if many else None)
    fits = [_label_fit(*widest, cell_w_pt, cell_h_pt), _label_fit(*widest, cell_w_pt,
                                                                  cell_h_pt / 2)]
    bars: dict[tuple[str, bool, float, float], list[tuple[float, float]]] = {}
    idle = False
    for r, row in enumerate(plan.grid):
        for t in range(steps):
            cell = row[t] if t < len(row) else ()
            later = step is not None and t > step
            if not cell:   # an idle step, or a row that ended before the longest
                bars.setdefault(("bubble", later, r - _BOX / 2, _BOX), []).append((t, 1))
                idle = True
                continue
            h = _BOX / len(cell)
            for k, a in enumerate(cell):
                y = r - _BOX / 2 + k * h
                bars.setdefault((KIND_CATEGORY[a.kind], later, y, h), []).append((t, 1))
                fit = fits[len(cell) > 1]
                if fit is not None:
                    text = str(a.microbatch) + (f"\ns{a.stage}" if fit[0] else "")
                    ax.text(t + 0.5, y + h / 2, text, ha="center", va="center",
                            fontsize=fit[1], linespacing=1.0, alpha=0.35 if later else 1.0,
                            color="white" if a.kind is Kind.FORWARD else "black")
    for (cat, later, y, h), xs in bars.items():
        ax.broken_barh(xs, (y, h), facecolors=colour(cat),
                       edgecolor="#9a9a9a" if cat == "bubble" else "black", linewidth=0.3,
                       alpha=0.3 if later else 1.0)
    if step is not None:
        ax.axvspan(step, step + 1, color="black", alpha=0.08, lw=0)
        ax.axvline(step + 1, color="black", lw=1.0)
    _rank_axis(ax, plan.ranks)
    ax.set_xlim(0, max(steps, 1))
    integer_ticks(ax, "x", max(steps, 1) + 1, max_ticks=12)
    ax.set_xlabel("time step (one action each)")
    ax.set_title(title, fontsize="medium")
    return {KIND_CATEGORY[a.kind] for _, a in plan.all_compute()}, idle


def plan_gantt(plan: PipelinePlan, *, step: int | None = None, title: str | None = None,
               ax: Any = None) -> Any:
    """The plan on its unit grid: one row per rank, one column per time step (see the module
    docstring). ``step`` (0-based) marks that time step and fades the steps after it (the
    stepper's view); ``title`` replaces the default (schedule, ranks, microbatches, stages per
    rank where more than one, and the grid's bubble fraction,
    :func:`~distlab.pipeline_parallel.cost.grid_bubble_fraction`). Returns the Figure."""
    steps = _check_plan(plan)
    if step is not None and not (isinstance(step, int) and 0 <= step < max(steps, 1)):
        raise ValueError(f"step={step!r} must be an int in 0..{max(steps - 1, 0)} or None")
    if ax is None:
        fig = new_figure(figsize=(FIG_WIDTH_IN, _height_in(plan.ranks)))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    cats, idle = _draw_plan(ax, plan, step, _plan_title(plan) if title is None else title)
    _legend(fig, sorted(cats), idle)
    return fig


def plans_gantt(plans: Sequence[PipelinePlan], *, titles: Sequence[str] | None = None) -> Any:
    """Several plans, each on its own grid (:func:`plan_gantt`'s boxes and default titles),
    stacked in one figure with one legend: the schedules side by side. ``titles`` replaces the
    default titles, one per plan. Returns the Figure.

    Raises:
        TypeError: an item is not a PipelinePlan.
        ValueError: no plans, or a number of titles other than the number of plans.
    """
    plans = list(plans)
    for plan in plans:
        _check_plan(plan)
    if not plans:
        raise ValueError("plans must hold at least one PipelinePlan, got none")
    if titles is not None and len(titles) != len(plans):
        raise ValueError(f"titles must hold one title per plan ({len(plans)}), got "
                         f"{len(titles)}")
    heights = [_ROW_IN * p.ranks + 0.75 for p in plans]
    fig = new_figure(figsize=(FIG_WIDTH_IN, sum(heights) + 0.6))
    axes = fig.subplots(len(plans), 1, squeeze=False, height_ratios=heights)[:, 0]
    cats: set[str] = set()
    idle = False
    for k, (ax, plan) in enumerate(zip(axes, plans, strict=True)):
        c, i = _draw_plan(ax, plan, None, _plan_title(plan) if titles is None else titles[k])
        cats |= c
        idle |= i
    _legend(fig, sorted(cats), idle)
    return fig


# ------------------------------------------------------------------ a step in seconds
_RANK_LANE = re.compile(r"^rank(\d+)/compute$")


def _time_unit(extent_s: float) -> tuple[str, float]:
    """(unit name, seconds per unit) for an axis spanning ``extent_s`` seconds."""
    if extent_s >= 1.0:
        return "s", 1.0
    if extent_s >= 1e-3:
        return "ms", 1e-3
    return "us", 1e-6


def _compute_spans(timeline: Timeline) -> dict[int, list[Any]]:
    """``rank -> spans`` of the lanes ``rank{r}/compute`` whose category is a compute kind."""
    if not isinstance(timeline, Timeline):
        raise TypeError(f"timeline must be a distlab.timeline.Timeline, got "
                        f"{type(timeline).__name__}")
    out: dict[int, list[Any]] = {}
    kinds = set(KIND_CATEGORY.values())
    for s in timeline.spans:
        m = _RANK_LANE.match(s.lane)
        if m and s.category in kinds:
            out.setdefault(int(m.group(1)), []).append(s)
    return out


def _tracks(spans: list[Any]) -> list[int]:
    """A sub-track per span so overlapping spans of one rank sit side by side (greedy)."""
    order = sorted(range(len(spans)), key=lambda i: (spans[i].start_us, spans[i].end_us))
    ends: list[float] = []
    track = [0] * len(spans)
    for i in order:
        s = spans[i]
        tol = 1e-9 * max(abs(s.start_us), 1.0)   # relative: seconds-long steps in microseconds
        k = next((j for j, e in enumerate(ends) if e <= s.start_us + tol), len(ends))
        if k == len(ends):
            ends.append(s.end_us)
        else:
            ends[k] = s.end_us
        track[i] = k
    return track


def _draw_timeline(ax: Any, timeline: Timeline, ranks: int, origin_us: float, end_us: float,
                   unit: tuple[str, float], stage_labels: bool) -> tuple[set[str], bool]:
    """The compute spans of ``timeline`` on ``ax``; returns the categories drawn and whether
    a bubble was shaded."""
    name, per = unit
    scale = 1e-6 / per                                   # microseconds -> axis unit
    per_rank = _compute_spans(timeline)
    fig = ax.figure
    width_in = fig.get_size_inches()[0] - _AXES_MARGIN_IN
    extent = max((end_us - origin_us) * scale, 1e-12)
    pt_per_unit = 72.0 * width_in / extent
    cats: set[str] = set()
    bubble = False
    for r in range(ranks):
        spans = per_rank.get(r, [])
        tracks = _tracks(spans)
        n = max(tracks, default=0) + 1
        h = _BOX / n
        boxes: dict[str, list[tuple[float, float, float]]] = {}
        for s, k in zip(spans, tracks, strict=True):
            x, dx = (s.start_us - origin_us) * scale, s.duration_us * scale
            y = r - _BOX / 2 + k * h
            boxes.setdefault(s.category, []).append((x, dx, y))
            cats.add(s.category)
            mb = s.args.get("microbatch")
            if mb is None:
                continue
            stage = s.args.get("stage") if stage_labels else None
            label = _fitted_label(mb, stage, pt_per_unit * dx, 72.0 * _ROW_IN * h)
            if label is not None:
                ax.text(x + dx / 2, y + h / 2, label[0], ha="center", va="center",
                        fontsize=label[1], linespacing=1.0,
                        color="white" if s.category == "forward" else "black")
        for cat, items in boxes.items():
            for k in range(n):
                row = [(x, dx) for x, dx, y in items if abs(y - (r - _BOX / 2 + k * h)) < 1e-9]
                if row:
                    ax.broken_barh(row, (r - _BOX / 2 + k * h, h), facecolors=colour(cat),
                                   edgecolor="black", linewidth=0.3)
        gaps = _gaps([(s.start_us, s.end_us) for s in spans], origin_us, end_us)
        if gaps:
            bubble = True
            ax.broken_barh([((a - origin_us) * scale, (b - a) * scale) for a, b in gaps],
                           (r - _BOX / 2, _BOX), facecolors=colour("bubble"),
                           edgecolor="#9a9a9a", linewidth=0.3, zorder=0)
    _rank_axis(ax, ranks)
    ax.set_xlim(0, extent)
    ax.set_xlabel(f"time ({name})")
    ax.grid(axis="x", alpha=0.3)
    return cats, bubble


def _gaps(intervals: list[tuple[float, float]], start: float, end: float
          ) -> list[tuple[float, float]]:
    """The parts of ``[start, end]`` no interval covers (longer than 1e-9 of the window)."""
    tol = 1e-9 * max(end - start, 1e-12)
    out, cur = [], start
    for a, b in sorted(intervals):
        if a > cur + tol:
            out.append((cur, a))
        cur = max(cur, b)
    if end > cur + tol:
        out.append((cur, end))
    return out


def _ranks_of(*timelines: Timeline) -> int:
    ranks = [max(_compute_spans(t), default=-1) + 1 for t in timelines]
    return max(ranks + [1])


def _extent(timeline: Timeline) -> tuple[float, float]:
    spans = [s for v in _compute_spans(timeline).values() for s in v]
    if not spans:
        return 0.0, 0.0
    return min(s.start_us for s in spans), max(s.end_us for s in spans)


def timeline_gantt(timeline: Timeline, *, ranks: int | None = None, title: str | None = None,
                   stage_labels: bool = False, ax: Any = None) -> Any:
    """The compute spans of ``timeline`` (lanes ``"rank{r}/compute"``, categories
    ``forward``/``backward``/``backward_input``/``backward_weight``, args ``microbatch`` and
    ``stage``) as one row per rank on a time axis (s, ms or us, from the first start), each box
    labelled with its microbatch where it fits, idle time shaded as ``bubble``; overlapping
    spans of one rank sit in half rows; ``stage_labels`` adds each box's stage (``s<stage>``)
    under its microbatch. Returns the Figure.

    Raises:
        ValueError: the timeline has no such span.
    """
    if not _compute_spans(timeline):
        raise ValueError(f"timeline has no compute spans (lanes 'rank<r>/compute', categories "
                         f"{', '.join(KIND_LABELS)}) to draw; its lanes: {timeline.lanes}")
    n = _ranks_of(timeline) if ranks is None else ranks
    t0, t1 = _extent(timeline)
    if ax is None:
        fig = new_figure(figsize=(FIG_WIDTH_IN, _height_in(n)))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    cats, bubble = _draw_timeline(ax, timeline, n, t0, t1, _time_unit((t1 - t0) / 1e6),
                                  stage_labels)
    if title:
        ax.set_title(title, fontsize="medium")
    _legend(fig, sorted(cats), bubble)
    return fig


def _simulation_title(sim: Simulation, what: str = "simulated") -> str:
    plan = sim.plan
    unit, per = _time_unit(sim.step_time_s)
    many = f", {plan.stages_per_rank} stages per rank" if plan.stages_per_rank > 1 else ""
    return (f"{plan.schedule} {what}: {plan.ranks} ranks, {plan.microbatches} microbatches"
            f"{many}; step {sim.step_time_s / per:.3g} {unit}, bubble "
            f"{sim.bubble_fraction:.1%}")


def simulation_gantt(sim: Simulation, *, title: str | None = None) -> Any:
    """:func:`timeline_gantt` of a simulation's timeline, titled with its schedule, sizes, step
    time and bubble fraction. Returns the Figure."""
    if not isinstance(sim, Simulation):
        raise TypeError(f"sim must be a Simulation, got {type(sim).__name__}")
    return timeline_gantt(sim.to_timeline(), ranks=sim.plan.ranks,
                          title=_simulation_title(sim) if title is None else title,
                          stage_labels=sim.plan.stages_per_rank > 1)


def compare_gantt(measured: Timeline, simulated: Simulation | Timeline, *,
                  titles: tuple[str, str] = ("measured", "simulated")) -> Any:
    """A measured step (top) above its simulation (bottom), on one time axis from each one's
    first start, boxes in the same colours. Returns the Figure."""
    is_sim = isinstance(simulated, Simulation)
    sim_tl = simulated.to_timeline() if is_sim else simulated  # type: ignore[union-attr]
    stages = is_sim and simulated.plan.stages_per_rank > 1  # type: ignore[union-attr]
    ranks = _ranks_of(measured, sim_tl)
    m0, m1 = _extent(measured)
    s0, s1 = _extent(sim_tl)
    span_us = max(m1 - m0, s1 - s0)
    unit = _time_unit(span_us / 1e6)
    fig = new_figure(figsize=(FIG_WIDTH_IN, 2 * _ROW_IN * ranks + 2.2))
    axes = fig.subplots(2, 1, sharex=True)
    cats: set[str] = set()
    bubble = False
    for ax, tl, (a, _), title in ((axes[0], measured, (m0, m1), titles[0]),
                                  (axes[1], sim_tl, (s0, s1), titles[1])):
        c, b = _draw_timeline(ax, tl, ranks, a, a + span_us, unit, stages)
        cats |= c
        bubble |= b
        ax.set_title(title, fontsize="medium")
    axes[0].set_xlabel("")
    if is_sim:
        axes[1].set_title(_simulation_title(simulated), fontsize="medium")
    _legend(fig, sorted(cats), bubble)
    return fig


def simulations_gantt(sims: Sequence[Simulation], *, titles: Sequence[str] | None = None
                      ) -> Any:
    """Several simulated steps stacked on one time axis (each from its own start), one panel
    per simulation titled as :func:`simulation_gantt` titles it (or by ``titles``), one legend:
    schedules of the same work compared by the length of their step. Returns the Figure.

    Raises:
        TypeError: an item is not a Simulation.
        ValueError: no simulations, or a number of titles other than the number of sims.
    """
    sims = list(sims)
    for sim in sims:
        if not isinstance(sim, Simulation):
            raise TypeError(f"sims must hold Simulations, got {type(sim).__name__}")
    if not sims:
        raise ValueError("sims must hold at least one Simulation, got none")
    if titles is not None and len(titles) != len(sims):
        raise ValueError(f"titles must hold one title per simulation ({len(sims)}), got "
                         f"{len(titles)}")
    timelines = [sim.to_timeline() for sim in sims]
    extents = [_extent(tl) for tl in timelines]
    span_us = max(b - a for a, b in extents)
    unit = _time_unit(span_us / 1e6)
    heights = [_ROW_IN * sim.plan.ranks + 0.45 for sim in sims]
    fig = new_figure(figsize=(FIG_WIDTH_IN, sum(heights) + 1.0))
    axes = fig.subplots(len(sims), 1, squeeze=False, sharex=True, height_ratios=heights)[:, 0]
    cats: set[str] = set()
    bubble = False
    for k, (ax, sim, tl, (a, _)) in enumerate(zip(axes, sims, timelines, extents, strict=True)):
        c, b = _draw_timeline(ax, tl, sim.plan.ranks, a, a + span_us, unit,
                              sim.plan.stages_per_rank > 1)
        cats |= c
        bubble |= b
        ax.set_title(_simulation_title(sim) if titles is None else titles[k],
                     fontsize="medium")
        if k < len(sims) - 1:
            ax.set_xlabel("")
    _legend(fig, sorted(cats), bubble)
    return fig


# ------------------------------------------------------------------ the bubble against m
def _schedule_and_stages(item: Any) -> tuple[str, int | None]:
    if isinstance(item, str):
        return item, None
    if isinstance(item, tuple) and len(item) == 2:
        return item[0], item[1]
    raise TypeError(f"each of schedules must be a name or (name, stages_per_rank), got "
                    f"{item!r:.80}")


def bubble_curve_figure(ranks: int, microbatches: Sequence[int],
                        schedules: Sequence[str | tuple[str, int]] = (
                            "1F1B", ("Interleaved1F1B", 2), ("ZBVZeroBubble", 2)), *,
                        forward_s: float = 1.0, backward_input_s: float = 1.0,
                        backward_weight_s: float = 1.0, title: str | None = None) -> Any:
    """The bubble fraction of each schedule against the number of microbatches, on ``ranks``
    ranks: markers where the schedule is simulated
    (:func:`~distlab.pipeline_parallel.simulate.simulate`: equal stages taking ``forward_s``,
    ``backward_input_s`` and ``backward_weight_s``, free transfers), a line of the same colour
    for the closed form (:func:`~distlab.pipeline_parallel.cost.bubble_fraction`) where one
    exists, and a thin line through the markers where none does. A microbatch count the
    schedule refuses (:func:`~distlab.pipeline_parallel.schedules.registry.build_plan`) is left
    out. ``schedules``: names (their default stages per rank) or ``(name, stages_per_rank)``;
    each is drawn in its palette colour. Returns the Figure.

    Raises:
        TypeError, ValueError: a schedule the registry does not know, bad sizes or times, no
            schedules or microbatch counts, or a schedule that builds no plan for any of them.
    """
    ranks = check_int("ranks", ranks, minimum=1)
    ms = [check_int(f"microbatches[{i}]", m, minimum=1) for i, m in enumerate(microbatches)]
    if not ms:
        raise ValueError("microbatches must hold at least one count, got none")
    items = [_schedule_and_stages(item) for item in schedules]
    if not items:
        raise ValueError("schedules must name at least one schedule, got none")
    names = [schedule_info(name).name for name, _ in items]
    fig = new_figure(figsize=(FIG_WIDTH_IN, 4.2))
    ax = fig.add_subplot()
    top = 0.0
    for (_, v), full in zip(items, names, strict=True):
        xs, sim_ys, form_xs, form_ys = [], [], [], []
        spr = v
        for m in ms:
            try:
                plan = build_plan(full, ranks, m, v)
            except ValueError:
                continue
            spr = plan.stages_per_rank
            sim = simulate(plan, StageTimes.equal(plan.num_stages, forward_s, backward_input_s,
                                                  backward_weight_s), p2p=P2PCost.free())
            xs.append(m)
            sim_ys.append(100 * sim.bubble_fraction)
            form = bubble_fraction(full, ranks, m, plan.stages_per_rank)
            if form is not None:
                form_xs.append(m)
                form_ys.append(100 * form)
        if not xs:
            raise ValueError(f"{full} builds no plan for ranks={ranks} and microbatches={ms}")
        stages = f"v={spr}, " if spr and spr > 1 else ""
        c = colour(full)   # labels "<schedule> (...)": the palette reads the schedule's name
        if form_xs:
            ax.plot(form_xs, form_ys, "-", color=c, lw=1.5, label=f"{full} ({stages}closed form)")
            ax.plot(xs, sim_ys, "o", color=c, ms=5, mfc="none",
                    label=f"{full} ({stages}simulated)")
        else:
            ax.plot(xs, sim_ys, "o:", color=c, ms=5, lw=1.0,
                    label=f"{full} ({stages}simulated, no closed form)")
        top = max(top, *sim_ys)
    ax.set_xlabel("microbatches m")
    ax.set_ylabel("bubble (% of all ranks' time)")
    ax.set_xlim(min(ms) - 1, max(ms) + 1)
    ax.set_ylim(0, top * 1.08 + 0.5)
    integer_ticks(ax, "x", max(ms) - min(ms) + 3, start=min(ms) - 1, max_ticks=10)
    ax.grid(alpha=0.3)
    ax.set_title(title if title is not None else
                 f"the bubble against microbatches: {ranks} ranks, equal stages, "
                 f"F {forward_s:g} : I {backward_input_s:g} : W {backward_weight_s:g}, "
                 f"free transfers", fontsize="medium")
    ax.legend(fontsize="small", loc="upper right")
    return fig


# ------------------------------------------------------------------ widgets
def _plan_controls(schedule: str, ranks: int, stages_per_rank: int | None, microbatches: int,
                   max_ranks: int, max_microbatches: int) -> tuple[Any, Any, Any, Any]:
    st = {"description_width": "120px"}
    info = schedule_info(schedule)
    spr = info.default_stages_per_rank if stages_per_rank is None else stages_per_rank
    return (w.Dropdown(options=list(SCHEDULES), value=info.name, description="schedule",
                       style=st),
            w.IntSlider(value=ranks, min=1, max=max_ranks, description="ranks",
                        continuous_update=False, style=st),
            w.IntSlider(value=spr, min=1, max=4, description="stages per rank",
                        continuous_update=False, style=st),
            w.IntSlider(value=microbatches, min=1, max=max_microbatches,
                        description="microbatches", continuous_update=False, style=st))


class _PlanControls(Explorer):
    """Schedule, ranks, stages per rank and microbatches; the plan they decide (or why none)."""

    schedule: Any
    ranks: Any
    stages_per_rank: Any
    microbatches: Any

    def _init_plan(self) -> None:
        self.plan: PipelinePlan | None = None
        self.error = ""
        self._plan_key: Any = None
        self._last_schedule = self.schedule.value

    def _settle_plan(self) -> bool:
        """Rebuild the plan when its controls changed; True when it did. A change of schedule
        moves ``stages per rank`` to that schedule's default."""
        if self.schedule.value != self._last_schedule:
            self._last_schedule = self.schedule.value
            self.stages_per_rank.value = schedule_info(
                self.schedule.value).default_stages_per_rank
        key = (self.schedule.value, self.ranks.value, self.stages_per_rank.value,
               self.microbatches.value)
        if key == self._plan_key:
            return False
        self._plan_key = key
        try:
            self.plan, self.error = build_plan(self.schedule.value, self.ranks.value,
                                               self.microbatches.value,
                                               self.stages_per_rank.value), ""
        except ValueError as exc:
            self.plan, self.error = None, str(exc)
        return True


class PipelineStepper(_PlanControls):
    """A plan on its grid, one time step at a time (see the module docstring).

    Args:
        schedule, ranks, microbatches, stages_per_rank: the first plan
            (:func:`~distlab.pipeline_parallel.schedules.registry.build_plan`; stages per rank
            default to the schedule's).
        step: the first time step shown (0-based).
        max_ranks, max_microbatches: the sliders' maxima.

    Attributes: the ``schedule``, ``ranks``, ``stages_per_rank``, ``microbatches`` and ``step``
    controls; ``plan`` (None, with ``error`` saying why, where the registry refuses the
    combination) and the :class:`~distlab.viz.explorer.Explorer` attributes.
    """

    def __init__(self, schedule: str = "1F1B", ranks: int = 4, microbatches: int = 8,
                 stages_per_rank: int | None = None, *, step: int = 0, max_ranks: int = 8,
                 max_microbatches: int = 16) -> None:
        (self.schedule, self.ranks, self.stages_per_rank,
         self.microbatches) = _plan_controls(schedule, ranks, stages_per_rank, microbatches,
                                             max_ranks, max_microbatches)
        self.step = w.IntSlider(value=step, min=0, max=max(step, 0), description="time step",
                                style={"description_width": "120px"})
        self._init_plan()
        controls = [self.schedule, self.ranks, self.stages_per_rank, self.microbatches,
                    self.step]
        super().__init__(controls, rows=[w.HBox([self.schedule, self.ranks]),
                                         w.HBox([self.stages_per_rank, self.microbatches]),
                                         self.step])

    @property
    def steps(self) -> int:
        """Time steps of the current plan's grid (0 without a plan)."""
        return 0 if self.plan is None else max((len(r) for r in self.plan.grid), default=0)

    def settle(self) -> None:
        """A new plan when its controls changed; the step kept within its steps."""
        if self._settle_plan():
            with self.step.hold_trait_notifications():
                self.step.max = max(self.steps - 1, 0)
                self.step.value = min(self.step.value, self.step.max)

    def describe(self, step: int) -> str:
        """What each rank runs at ``step`` and the microbatches it holds after it."""
        plan = self.plan
        assert plan is not None
        held = in_flight(plan)
        parts = []
        for r, row in enumerate(plan.grid):
            cell = row[step] if step < len(row) else ()
            now = "+".join(map(str, cell)) or "idle"
            count = sum(held[r][min(step, len(row) - 1)].values()) if row else 0
            parts.append(f"r{r} {now} ({count})")
        return (f"time step {step} of 0..{self.steps - 1}: " + ", ".join(parts)
                + "  [rN action (microbatches in flight)]")

    def draw(self) -> Drawing:
        if self.plan is None:
            return Drawing(message_figure(self.error, width_in=FIG_WIDTH_IN), self.error)
        step = self.step.value
        return Drawing(plan_gantt(self.plan, step=step), self.describe(step))


class PipelineExplorer(_PlanControls):
    """A schedule simulated: its Gantt in seconds, step time, bubble and peak in flight.

    Each rank's share of the model takes ``forward_s`` forward and ``backward_s`` backward
    (split evenly into ``I`` and ``W``) per microbatch, cut into ``stages_per_rank`` equal
    stages; the ``slow stage`` takes ``imbalance`` times as long as the others.

    Args:
        schedule, ranks, microbatches, stages_per_rank: the first plan.
        imbalance: the slow stage's time factor (1: all stages equal).
        slow_stage: which stage is slow.
        forward_s, backward_s: seconds of one rank's share of the model per microbatch.
        p2p: the link between ranks (default :meth:`P2PCost.free`: compute only, the closed
            forms' model); ``boundary_nbytes``: bytes crossing each stage boundary.

    Attributes: the controls (``schedule``, ``ranks``, ``stages_per_rank``, ``microbatches``,
    ``imbalance``, ``slow_stage``), ``plan``, ``simulation`` (None where there is no plan,
    ``error`` saying why) and the :class:`~distlab.viz.explorer.Explorer` attributes.
    """

    def __init__(self, schedule: str = "1F1B", ranks: int = 4, microbatches: int = 8,
                 stages_per_rank: int | None = None, *, imbalance: float = 1.0,
                 slow_stage: int = 0, forward_s: float = 1e-3, backward_s: float = 2e-3,
                 p2p: P2PCost | None = None, boundary_nbytes: int = 0, max_ranks: int = 8,
                 max_microbatches: int = 16) -> None:
        st = {"description_width": "120px"}
        (self.schedule, self.ranks, self.stages_per_rank,
         self.microbatches) = _plan_controls(schedule, ranks, stages_per_rank, microbatches,
                                             max_ranks, max_microbatches)
        self.imbalance = w.FloatSlider(value=imbalance, min=0.5, max=4.0, step=0.25,
                                       description="imbalance", continuous_update=False,
                                       style=st)
        self.slow_stage = w.IntSlider(value=slow_stage, min=0, max=max(slow_stage, 31),
                                      description="slow stage", continuous_update=False,
                                      style=st)
        self.forward_s, self.backward_s = forward_s, backward_s
        self.p2p = P2PCost.free() if p2p is None else p2p
        self.boundary_nbytes = boundary_nbytes
        self.simulation: Simulation | None = None
        self._init_plan()
        controls = [self.schedule, self.ranks, self.stages_per_rank, self.microbatches,
                    self.imbalance, self.slow_stage]
        super().__init__(controls, rows=[w.HBox([self.schedule, self.ranks]),
                                         w.HBox([self.stages_per_rank, self.microbatches]),
                                         w.HBox([self.imbalance, self.slow_stage])])

    def times(self) -> StageTimes:
        """The stage times of the current controls."""
        assert self.plan is not None
        v = self.plan.stages_per_rank
        base = StageTimes.equal(self.plan.num_stages, self.forward_s / v,
                                self.backward_s / (2 * v), self.backward_s / (2 * v))
        return base.with_imbalance(self.slow_stage.value, self.imbalance.value)

    def settle(self) -> None:
        """A new plan when its controls changed; the slow stage kept among its stages."""
        self._settle_plan()
        if self.plan is not None:
            with self.slow_stage.hold_trait_notifications():
                self.slow_stage.max = self.plan.num_stages - 1
                self.slow_stage.value = min(self.slow_stage.value, self.slow_stage.max)

    def draw(self) -> Drawing:
        if self.plan is None:
            self.simulation = None
            return Drawing(message_figure(self.error, width_in=FIG_WIDTH_IN), self.error)
        plan = self.plan
        sim = simulate(plan, self.times(), boundary_nbytes=self.boundary_nbytes, p2p=self.p2p)
        self.simulation = sim
        unit, per = _time_unit(sim.step_time_s)
        form = bubble_fraction(plan.schedule, plan.ranks, plan.microbatches,
                               plan.stages_per_rank)
        closed = ("no closed form" if form is None else
                  f"closed form for equal stages {form:.1%}")
        summary = (f"step {sim.step_time_s / per:.4g} {unit}, bubble {sim.bubble_fraction:.1%} "
                   f"({closed}), peak microbatches in flight per rank "
                   f"{list(peak_in_flight(plan))}")
        return Drawing(simulation_gantt(sim), summary)
