"""Pictures of every collective's plans and costs, and the explorer of notebook 08.

    from distlab.viz.collectives import CollectiveExplorer, collective_figure, cost_figure
    collective_figure(build_plan("all_gather", "bruck", 5, 10), step=2)
    cost_figure(get_preset("nvlink4_h100"), "all_gather", world_size=8)
    CollectiveExplorer().widget        # collective / algorithm / world size / step controls

The plan picture: one row per rank, one column per buffer element (:mod:`distlab.collectives.
semantics` says which element is which). For the reductions (all-reduce, reduce, reduce-scatter,
barrier) a cell's green is how many ranks' data the element holds after the step; for the
collectives that only move data, its colour is the rank whose data it holds (one colour per
rank; white: nothing yet). A dot marks the elements the collective must fill on that rank (its
result), arrows are the step's transfers (red reduces into the receiver, blue copies over it).
Everything is computed by :mod:`distlab.collectives` (holdings, semantics, cost, compare); this
module only draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as w
import numpy as np
from matplotlib import colormaps
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogFormatter

from distlab._checks import check_int
from distlab.collectives.algorithms.registry import (
    DEFAULT_ALGORITHM,
    PLANS,
    build_plan,
    plan_options,
)
from distlab.collectives.check.holdings import contributors, holdings
from distlab.collectives.model.compare import collective_times, crossovers, scale_times, winners
from distlab.collectives.plan.schedule import Schedule
from distlab.collectives.plan.semantics import REDUCING, layout_of
from distlab.viz.allreduce import draw_transfers
from distlab.viz.collective_plan_stepper import PlanStepper, shown_step
from distlab.viz.figure import new_figure
from distlab.viz.palette import colour, colours
from distlab.vocabulary import COLLECTIVES, busbw_factor, gb_per_s, size_label

__all__ = ["CollectiveExplorer", "collective_figure", "cost_figure", "example_plan",
           "format_spans", "plan_summary", "scale_figure", "wrap_listing"]

STYLES = ("-", "--", ":", "-.")


def plt_colors(i: int) -> Any:
    """A light colour for rank ``i`` (tab20's pale half, then its dark half)."""
    tab = colormaps["tab20"]
    return tab((2 * i + 1) % 20 if i < 10 else (2 * i) % 20)


def example_plan(collective: str, algorithm: str, world_size: int, root: int = 0) -> Schedule:
    """A small plan that shows the collective's blocks clearly: 2 elements per block (per rank
    for the whole-vector collectives: ``2 p``; one token for a barrier)."""
    p = check_int("world_size", world_size, minimum=1)
    count = 1 if collective == "barrier" else 2 * p
    opts = {"root": root % p} if "root" in plan_options(collective, algorithm) else {}
    return build_plan(collective, algorithm, p, count, **opts)


def plan_summary(schedule: Schedule) -> str:
    """One line: collective/algorithm, ranks, steps, messages, elements moved."""
    return (f"{schedule.collective}/{schedule.algorithm} on {schedule.world_size} ranks: "
            f"{len(schedule.steps)} steps, {schedule.num_messages} messages, "
            f"{schedule.elements_moved()} elements moved")


def format_spans(spans: Sequence[tuple[int, int]]) -> str:
    """Element ranges as text, the stop excluded: ``[(0, 2), (6, 8)] -> "[0:2) [6:8)"``
    (``""`` for none)."""
    return " ".join(f"[{start}:{stop})" for start, stop in spans)


def wrap_listing(text: str, width: int = 100, indent: int = 8, sep: str = ", ") -> str:
    """``text`` with every line wider than ``width`` characters broken after a ``sep`` (never
    inside an item: ``format_schedule``'s ``1->2 [0:6) reduce`` stays whole), its continuation
    lines indented by ``indent`` spaces. An item wider than ``width`` on its own keeps its line."""
    width = check_int("width", width, minimum=indent + 1)
    out: list[str] = []
    for line in text.splitlines():
        items = line.split(sep)
        current = items[0]
        for item in items[1:]:
            if len(current) + len(sep) + len(item) > width:
                out.append(current + sep.rstrip())
                current = " " * indent + item
            else:
                current += sep + item
        out.append(current)
    return "\n".join(out)


def collective_figure(schedule: Schedule, step: int | None = None, *,
                      fig: Figure | None = None) -> Figure:
    """Draw ``schedule`` after ``step`` steps (0: the start; ``None``: the last step)."""
    p, n = schedule.world_size, schedule.count
    nsteps = len(schedule.steps)
    step = nsteps if step is None else check_int("step", step, minimum=0, maximum=nsteps)
    fig = fig or new_figure(figsize=(9.0, 1.1 + 0.42 * p))
    ax = fig.add_subplot(1, 1, 1)
    masks = holdings(schedule)[step] if n else np.zeros((p, 0), dtype=np.uint64)
    extent = (0, max(n, 1), p - 0.5, -0.5)
    if schedule.collective in REDUCING:
        ax.imshow(contributors(masks), cmap="Greens", vmin=0.5, vmax=p + 0.5 if p > 1 else 1.5,
                  aspect="auto", extent=extent, interpolation="nearest")
    else:  # one rank's data per element: colour by whose
        owner = np.full(masks.shape, -1.0)
        for r in range(p):
            owner[masks == np.uint64(1) << np.uint64(r)] = r
        palette = ListedColormap(["white"] + [plt_colors(i) for i in range(p)])
        ax.imshow(owner + 1, cmap=palette, vmin=-0.5, vmax=p + 0.5, aspect="auto",
                  extent=extent, interpolation="nearest")
    _, required = layout_of(schedule).expected()
    rows, cols = np.nonzero(required)
    if n * p <= 2000:
        ax.plot(cols + 0.5, rows, ".", color="black", ms=2.5, alpha=0.6)
    if step >= 1:
        draw_transfers(ax, schedule.steps[step - 1].transfers, scale=10.0, lw=1.2, alpha=0.8)
        st = schedule.steps[step - 1]
        title = f"step {step}/{nsteps}: {st.label}" + (" (packed)" if st.packed else "")
    else:
        title = "start: what each rank holds before" if nsteps else "nothing to do"
    root = schedule.options.get("root")
    rooted = "" if root is None else f", root {root}"
    ax.set_title(f"{schedule.collective}/{schedule.algorithm}, {p} ranks{rooted}; {title}",
                 fontsize=10)
    ax.set_yticks(range(p), [f"rank {r}" for r in range(p)])
    what = ("green: how many ranks' data it holds" if schedule.collective in REDUCING
            else "colour: whose data it holds")
    ax.set_xlabel(f"buffer element ({what}; dot: the result must be here; red arrow: reduce, "
                  "blue: copy)", fontsize=8)
    ax.set_xlim(0, max(n, 1))
    return fig


def cost_figure(preset: Any, collective: str, world_size: int = 8, *,
                algorithms: Sequence[str] | None = None, sizes_bytes: Sequence[int] | None = None,
                itemsize: int = 4, root: int = 0, fig: Figure | None = None) -> Figure:
    """Model time (left) and busbw (right) of ``collective``'s algorithms over the size
    (bytes of nccl-tests' count); the crossovers are marked. ``preset``: anything with
    ``alpha``, ``beta``, ``gamma`` (and optionally ``name``, ``duplex``)."""
    algos = list(algorithms or PLANS[collective])
    p = world_size
    sizes = [s for s in (sizes_bytes or [1 << k for k in range(10, 31)])
             if s // itemsize >= p]
    times = collective_times(preset, collective, p, sizes, algorithms=algos, itemsize=itemsize,
                             root=root)
    fig = fig or new_figure(figsize=(9.4, 3.8))
    ax_t, ax_b = fig.subplots(1, 2)
    factor = busbw_factor(collective, p) or 1.0
    for i, a in enumerate(algos):
        t = np.asarray(times[a])
        style = STYLES[i % len(STYLES)]
        ax_t.loglog(sizes, t * 1e6, style, label=a, color=colour(a))
        ax_b.semilogx(sizes, gb_per_s(np.asarray(sizes), np.maximum(t, 1e-30)) * factor, style,
                      label=a, color=colour(a))
    for c in crossovers(sizes, times):
        x = (c.x_before * c.x_after) ** 0.5
        ax_t.axvline(x, color="grey", ls=":", lw=1)
        ax_t.text(x, 0.98, f" {c.before} -> {c.after}", rotation=90, va="top", ha="right",
                  fontsize=7, color="dimgrey", transform=ax_t.get_xaxis_transform())
    ax_t.set_xlabel("size (bytes)")
    ax_t.set_ylabel("predicted time (us)")
    ax_b.set_xlabel("size (bytes)")
    ax_b.set_ylabel("predicted busbw (GB/s)")
    ax_t.legend(fontsize=7)
    win = winners(times)
    fig.suptitle(f"MODEL: {collective} on {p} ranks, {getattr(preset, 'name', 'a link')}; "
                 f"fastest at {sizes[0]} B: {win[0]}, at {sizes[-1]} B: {win[-1]}",
                 fontsize=10)
    return fig


def scale_figure(preset: Any, sizes_bytes: Sequence[int] = (1 << 16, 1 << 26),
                 world_sizes: Sequence[int] = (2, 4, 8, 16, 32, 64, 128), *,
                 fig: Figure | None = None) -> Figure:
    """Model time of ring, tree and double binary tree allreduce over the world size, one panel
    per message size (:func:`scale_times`)."""
    fig = fig or new_figure(figsize=(min(9.4, 4.8 * len(sizes_bytes)), 3.8))
    axes = np.atleast_1d(fig.subplots(1, len(sizes_bytes)))
    for ax, nbytes in zip(axes, sizes_bytes, strict=True):
        times = scale_times(preset, nbytes, world_sizes)
        algo_colour = colours(times)
        for i, (a, t) in enumerate(times.items()):
            ax.loglog(world_sizes, np.asarray(t) * 1e6, STYLES[i % len(STYLES)], marker="o",
                      ms=3, label=a, color=algo_colour[a])
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))  # few decades only
        ax.set_xlabel("world size (ranks)")
        ax.set_title(f"{size_label(nbytes)} allreduce", fontsize=10)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("predicted time (us)")
    fig.suptitle(f"MODEL: {getattr(preset, 'name', 'a link')}", fontsize=10)
    return fig


class CollectiveExplorer(PlanStepper):
    """Collective and algorithm dropdowns, world-size and step sliders over
    :func:`collective_figure`. Choosing another collective refills the algorithm dropdown with
    its algorithms and selects its default one.

    Attributes: ``collective``, ``algorithm``, ``world_size``, ``step`` (the controls),
    ``schedule``, ``summary`` (str), ``figure``, ``png``, ``image``, ``widget``.
    """

    def __init__(self, collective: str = "all_gather", algorithm: str | None = None,
                 world_size: int = 4, *, max_world_size: int = 12) -> None:
        self.collective = w.Dropdown(options=list(COLLECTIVES), value=collective,
                                     description="collective")
        self.algorithm = w.Dropdown(options=sorted(PLANS[collective]),
                                    value=algorithm or DEFAULT_ALGORITHM[collective],
                                    description="algorithm")
        self._listed = collective  # the collective whose algorithms the dropdown lists
        super().__init__([self.collective, self.algorithm], world_size, max_world_size,
                         dpi=None)

    def settle(self) -> None:
        """A new collective: list its algorithms and select its default; then the plan."""
        c = self.collective.value
        if c != self._listed:
            self.algorithm.options = sorted(PLANS[c])
            self.algorithm.value = DEFAULT_ALGORITHM[c]
            self._listed = c
        super().settle()

    def build(self) -> Schedule:
        return example_plan(self.collective.value, self.algorithm.value, self.world_size.value)

    def picture(self, schedule: Schedule, step: int) -> Figure:
        return collective_figure(schedule, step)

    def describe(self, schedule: Schedule, step: int) -> str:
        return f"{plan_summary(schedule)}; showing {shown_step(step, len(schedule.steps))}"
