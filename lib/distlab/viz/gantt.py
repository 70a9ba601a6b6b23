"""Gantt chart of a :class:`~distlab.timeline.Timeline`: one row per lane, colours by category."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from matplotlib.patches import Patch

from distlab.timeline import Timeline
from distlab.viz.figure import new_figure
from distlab.viz.palette import colours

__all__ = ["gantt"]


def gantt(timeline: Timeline, ax: Any = None, *, origin_us: float | None = None,
          lanes: list[str] | None = None, highlight_idle: str | None = None,
          title: str | None = None, colors: Mapping[str, Any] | None = None) -> Any:
    """A matplotlib Gantt chart: one row per lane (top to bottom in ``lanes`` order, default
    first appearance; spans on other lanes are not drawn), bars coloured by category
    (:mod:`distlab.viz.palette`'s colour of a category it names; ``colors`` overrides), x axis
    in milliseconds from ``origin_us`` (default: the earliest start of a drawn span).
    ``highlight_idle`` names a lane (the consumer) whose idle gaps from ``origin_us`` to its
    last span are shaded red across the chart. The legend names every category drawn, and
    only those, and the shading. Returns the Figure."""
    if ax is None:
        rows = max(2, len(lanes or timeline.lanes))
        entries = len(timeline.categories) + (highlight_idle is not None)
        height = max(0.45 * rows + 1.2, 0.2 * entries + 0.9)   # the legend fits beside the bars
        fig = new_figure(figsize=(9.4, height))
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    rows = list(lanes) if lanes is not None else timeline.lanes
    y_of = {lane: i for i, lane in enumerate(rows)}
    spans = [s for s in timeline.spans if s.lane in y_of]   # the drawn ones
    t0 = origin_us if origin_us is not None else min((s.start_us for s in spans), default=0.0)
    cats = list(dict.fromkeys(s.category for s in spans))
    color_of: dict[str, Any] = colours(cats)
    if colors:
        color_of.update(colors)
    per: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for s in spans:
        per.setdefault((s.lane, s.category), []).append(
            ((s.start_us - t0) / 1e3, max(s.duration_us / 1e3, 1e-6)))
    for (lane, cat), bars in per.items():
        ax.broken_barh(bars, (y_of[lane] - 0.4, 0.8), facecolors=color_of[cat],
                       edgecolor="black", linewidth=0.3)
    handles = [Patch(color=color_of[c], label=c) for c in cats]
    lane_end = max((s.end_us for s in spans if s.lane == highlight_idle), default=None)
    if highlight_idle is not None and lane_end is not None and lane_end > t0:
        for gs, ge in timeline.idle_gaps(highlight_idle, window=(t0, lane_end)):
            ax.axvspan((gs - t0) / 1e3, (ge - t0) / 1e3, color="red", alpha=0.12, lw=0,
                       zorder=0)   # behind the bars: they keep their legend colours
        handles.append(Patch(color="red", alpha=0.25, label=f"{highlight_idle} idle"))
    ax.set_yticks(range(len(rows)), rows)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xlabel("time (ms)")
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.005, 1.0),
                  fontsize="small", framealpha=0.8, borderaxespad=0.0)
    if title:
        ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    return fig
