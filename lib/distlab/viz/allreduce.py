"""Pictures of allreduce plans and their costs, and the ipywidgets explorers of notebook 04.

    from distlab.viz.allreduce import plan_figure, cost_curves_figure, PlanExplorer
    plan_figure(build("ring", 4, 16), step=2)      # who sends what at step 2, what ranks hold
    cost_curves_figure(get_preset("nvlink4_h100"), world_size=8)   # model; crossovers marked
    PlanExplorer().widget                          # algorithm / world size / step controls

The plan picture: one row per rank, one column per element; a cell's colour is how many ranks'
data that element holds after the step (white: only its own, dark: fully reduced; the number is
written in small plans). Arrows are this step's transfers: red reduces into the receiver, blue
copies over it. Everything is computed by :mod:`distlab.collectives` (``holdings``, ``cost``,
``crossovers``); this module only draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as w
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch

from distlab._checks import check_int
from distlab.collectives import ALGORITHMS, build, step_costs
from distlab.collectives.check.holdings import contributors, holdings
from distlab.collectives.model.compare import (
    crossovers,
    predict_sizes,
    predict_world_sizes,
    winners,
)
from distlab.collectives.plan.schedule import Schedule
from distlab.viz.collective_plan_stepper import PlanStepper, shown_step
from distlab.viz.explorer import Drawing, Explorer
from distlab.viz.figure import figure_png, new_figure
from distlab.viz.measured import ALGO_COLORS, measured_vs_model_figure
from distlab.vocabulary import busbw_factor, gb_per_s

__all__ = ["ALGO_COLORS", "CostExplorer", "PlanExplorer", "cost_curves_figure",
           "cost_vs_world_size_figure", "draw_transfers", "figure_png",
           "measured_vs_model_figure", "plan_count", "plan_figure"]

KIND_COLORS = {"reduce": "tab:red", "copy": "tab:blue"}
def plan_count(algorithm: str, world_size: int) -> int:
    """A small element count that shows an algorithm's blocks clearly (4 per rank, and a
    multiple of the power of two that butterflies use)."""
    pof2 = 1 << (world_size.bit_length() - 1)
    n = 4 * world_size
    while n % pof2:
        n += world_size
    return n


def draw_transfers(ax: Any, transfers: Sequence[Any], *, scale: float = 12.0,
                   lw: float = 1.4, alpha: float = 0.85) -> None:
    """One arrow per transfer on a rank x element picture: from the sender's row to the
    receiver's at the middle of the sent elements, red for a reduce, blue for a copy."""
    for t in transfers:
        mid = (t.start + t.stop) / 2
        bend = 0.25 if t.dst > t.src else -0.25
        ax.add_patch(FancyArrowPatch((mid, t.src), (mid, t.dst), arrowstyle="-|>",
                                     mutation_scale=scale, lw=lw, alpha=alpha,
                                     color=KIND_COLORS[t.kind],
                                     connectionstyle=f"arc3,rad={bend}"))


def plan_figure(schedule: Schedule, step: int | None = None, *, fig: Figure | None = None,
                annotate: bool | None = None) -> Figure:
    """Draw ``schedule`` after ``step`` steps, counted from 1 like the title.

    ``step``: 0 is the start (every rank holds only its own data), ``k`` in ``1..len(steps)`` is the
    state after step ``k`` with step ``k``'s transfers drawn (the title reads "step k/n"), ``None``
    is the last step. Cells: contributor counts after the step (from
    :func:`~distlab.collectives.check.holdings`); arrows: the step's transfers (red reduce, blue
    copy).
    """
    p, n = schedule.world_size, schedule.count
    nsteps = len(schedule.steps)
    step = nsteps if step is None else check_int("step", step, minimum=0, maximum=nsteps)
    fig = fig or new_figure(figsize=(8.0, 1.0 + 0.45 * p))
    ax = fig.add_subplot(1, 1, 1)
    counts = contributors(holdings(schedule)[step]) if n else np.zeros((p, 0), dtype=int)
    ax.imshow(counts, cmap="Greens", vmin=0.5, vmax=p + 0.5 if p > 1 else 1.5, aspect="auto",
              extent=(0, max(n, 1), p - 0.5, -0.5), interpolation="nearest")
    if annotate is None:
        annotate = n * p <= 400
    if annotate:
        for r in range(p):
            for i in range(n):
                c = counts[r, i]
                ax.text(i + 0.5, r, str(c), ha="center", va="center", fontsize=7,
                        color="white" if c > 0.6 * p else "black")
    if step >= 1:
        draw_transfers(ax, schedule.steps[step - 1].transfers)
        label = schedule.steps[step - 1].label
        title = f"step {step}/{nsteps}: {label}"
    else:
        title = "start: every rank holds only its own data" if nsteps else \
            "nothing to do (one rank or no elements)"
    ax.set_title(f"{schedule.algorithm}, {p} ranks, {n} elements; {title}", fontsize=10)
    ax.set_yticks(range(p), [f"rank {r}" for r in range(p)])
    ax.set_xlabel("element index (cell colour: how many ranks' data it holds; "
                  "red arrow: reduce, blue: copy)")
    ax.set_xlim(0, max(n, 1))
    return fig


def _mark_crossovers(ax: Any, xs: Sequence[float], times: dict[str, list[float]]) -> list[Any]:
    marks = crossovers(xs, times)
    for c in marks:
        x = (c.x_before * c.x_after) ** 0.5
        ax.axvline(x, color="grey", ls=":", lw=1)
        ax.text(x, 0.98, f" {c.before} -> {c.after}", rotation=90, va="top", ha="right",
                fontsize=7, color="dimgrey", transform=ax.get_xaxis_transform())
    return marks


def cost_curves_figure(preset: Any, world_size: int = 8, *,
                       algorithms: Sequence[str] | None = None,
                       sizes_bytes: Sequence[int] | None = None, itemsize: int = 4,
                       duplex: str | None = None, fig: Figure | None = None) -> Figure:
    """Model time (left) and busbw (right) versus message size; crossovers marked.

    ``preset`` is anything with ``alpha``, ``beta``, ``gamma`` (a LinkPreset or Calibration),
    optionally ``name``, ``source`` and ``duplex``.
    """
    algorithms = list(algorithms or ALGORITHMS)
    sizes = list(sizes_bytes or [1 << k for k in range(10, 31)])
    duplex = duplex or getattr(preset, "duplex", "full")
    times = predict_sizes(algorithms, world_size, sizes, preset.alpha, preset.beta, preset.gamma,
                          itemsize, duplex=duplex)
    fig = fig or new_figure(figsize=(9.4, 4.0))
    ax_t, ax_b = fig.subplots(1, 2)
    for a in algorithms:
        t = np.asarray(times[a])
        ax_t.loglog(sizes, t * 1e6, label=a, color=ALGO_COLORS.get(a))
        bus = np.where(t > 0, gb_per_s(np.asarray(sizes), np.maximum(t, 1e-30)), 0.0)
        ax_b.semilogx(sizes, bus * busbw_factor("all_reduce", world_size), label=a,
                      color=ALGO_COLORS.get(a))
    _mark_crossovers(ax_t, sizes, times)
    ax_t.set_xlabel("message size (bytes)")
    ax_t.set_ylabel("predicted time (us)")
    ax_b.set_xlabel("message size (bytes)")
    ax_b.set_ylabel("predicted busbw (GB/s)")
    ax_t.legend(fontsize=7)
    name = getattr(preset, "name", "calibrated link")
    fig.suptitle(f"MODEL (alpha-beta-gamma): {name}, {world_size} ranks; winner at 1 KiB: "
                 f"{winners(times)[0]}, at 1 GiB: {winners(times)[-1]}", fontsize=10)
    return fig


def cost_vs_world_size_figure(preset: Any, nbytes: int = 1 << 20, *,
                              algorithms: Sequence[str] | None = None,
                              world_sizes: Sequence[int] = tuple(range(2, 65)),
                              itemsize: int = 4, duplex: str | None = None,
                              fig: Figure | None = None) -> Figure:
    """Model time versus world size for one message size, and which algorithm is fastest.

    The fastest algorithm changes often along the world size (the butterflies win at powers of
    two and lose just above them), so instead of one label per crossover a strip under the
    curves is coloured, at each world size, with the winner's colour (the legend's colours), and
    each winner is named once in the strip's label.
    """
    algorithms = list(algorithms or ALGORITHMS)
    xs = list(world_sizes)
    duplex = duplex or getattr(preset, "duplex", "full")
    times = predict_world_sizes(algorithms, xs, nbytes, preset.alpha,
                                preset.beta, preset.gamma, itemsize, duplex=duplex)
    fig = fig or new_figure(figsize=(8.6, 4.6))
    ax, strip = fig.subplots(2, 1, sharex=True, height_ratios=[8, 1])
    for a in algorithms:
        ax.semilogy(xs, np.asarray(times[a]) * 1e6, label=a, color=ALGO_COLORS.get(a))
    win = winners(times)
    for x, a in zip(xs, win, strict=False):
        strip.bar(x, 1.0, width=1.0, color=ALGO_COLORS.get(a), edgecolor="none")
    strip.set_yticks([])
    strip.set_ylim(0, 1)
    strip.set_ylabel("fastest", rotation=0, ha="right", va="center", fontsize=8)
    strip.set_xlabel("world size (ranks); strip colour: fastest algorithm there ("
                     + ", ".join(dict.fromkeys(win)) + ")", fontsize=8)
    ax.set_ylabel("predicted time (us)")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              borderaxespad=0.0)   # beside the curves, never over them
    ax.set_title(f"MODEL: {getattr(preset, 'name', 'calibrated link')}, {nbytes} B message",
                 fontsize=10)
    return fig


class PlanExplorer(PlanStepper):
    """Algorithm dropdown, world-size slider and step slider over :func:`plan_figure`.

    The step slider counts like the picture's title: 0 is the start, ``k`` shows "step k/n".

    Attributes: ``algorithm``, ``world_size``, ``step`` (the controls), ``schedule`` (the
    current plan), ``summary`` (str), ``figure`` and ``png`` (the last drawing), ``image``,
    ``widget`` (the box to display).
    """

    def __init__(self, algorithm: str = "ring", world_size: int = 4, *, max_world_size: int = 16,
                 alpha: float = 5e-6, beta: float = 1 / 25e9, gamma: float = 1 / 500e9) -> None:
        self.params = (alpha, beta, gamma)
        self.algorithm = w.Dropdown(options=sorted(ALGORITHMS), value=algorithm,
                                    description="algorithm")
        super().__init__([self.algorithm], world_size, max_world_size)

    def build(self) -> Schedule:
        p = self.world_size.value
        return build(self.algorithm.value, p, plan_count(self.algorithm.value, p))

    def picture(self, schedule: Schedule, step: int) -> Figure:
        return plan_figure(schedule, step)

    def describe(self, schedule: Schedule, step: int) -> str:
        s = schedule
        costs = step_costs(s, *self.params, 4)
        return (f"{s.algorithm} on {s.world_size} ranks: {len(s.steps)} steps, "
                f"{s.num_transfers} messages, {s.elements_moved()} elements moved; "
                f"slowest-rank messages per step: {[c.messages for c in costs]}; showing "
                + shown_step(step, len(s.steps)))


class CostExplorer(Explorer):
    """Preset dropdown and world-size slider over :func:`cost_curves_figure` (a model); the
    summary names the preset's source.

    Attributes: ``preset``, ``world_size`` (the controls), ``presets`` (name -> preset),
    ``summary``, ``figure``, ``png``, ``image``, ``widget``.
    """

    def __init__(self, presets: dict[str, Any], preset: str | None = None,
                 world_size: int = 8) -> None:
        self.presets = dict(presets)
        self.preset = w.Dropdown(options=list(self.presets), value=preset or next(iter(presets)),
                                 description="link")
        self.world_size = w.IntSlider(value=world_size, min=2, max=64, description="world size")
        super().__init__([self.preset, self.world_size])

    def draw(self) -> Drawing:
        preset = self.presets[self.preset.value]
        return Drawing(cost_curves_figure(preset, self.world_size.value),
                       f"source: {getattr(preset, 'source', '')}")
