"""What a drawn figure shows a reader, checked: text that collides, and colours that disagree.

Pure functions of a matplotlib ``Figure`` that has been drawn (they draw it themselves when it
has not). Tests call them on every figure builder's output, and :mod:`distlab.viz.figure` runs
:func:`layout_problems` on every figure a notebook displays when ``DISTLAB_FIGURE_AUDIT=1`` (the
test command sets it), so a figure whose labels overlap fails its notebook cell.

What counts as a collision: the window extents (pixels) of two visible, non-empty texts (titles,
the suptitle, axis labels, major tick labels inside the view, annotations and ``ax.text``) or of a
text and a legend's frame overlap by more than :data:`TOLERANCE_PX` in both directions. The
texts inside a legend are judged as the legend's frame; tick labels are compared only with texts
that are not tick labels of the same axis direction of other axes when those share the axis.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.colors as mcolors
from matplotlib.axes import Axes
from matplotlib.collections import Collection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import Bbox

__all__ = ["TOLERANCE_PX", "Item", "colours_by_label", "drawn_items", "layout_problems",
           "overlapping_items"]

#: Two boxes overlap when they share more than this many pixels in x and in y (at the figure's
#: dpi): anti-aliasing and font padding make boxes that merely touch share a pixel or two.
TOLERANCE_PX = 2.0


@dataclass(frozen=True)
class Item:
    """One thing a reader reads: ``kind`` (title, suptitle, xlabel, ylabel, xtick, ytick, text,
    legend), its text (a legend's first entries), the index of its axes (-1: the figure) and its
    window extent in pixels."""

    kind: str
    text: str
    axes: int
    box: Bbox

    def describe(self) -> str:
        where = "figure" if self.axes < 0 else f"axes {self.axes}"
        return f"{self.kind} {self.text!r} ({where})"


def _renderer(fig: Figure) -> Any:
    fig.draw_without_rendering()
    return fig._get_renderer()  # the renderer matplotlib itself uses for tight layout


def _visible_text(t: Text | None) -> bool:
    return t is not None and t.get_visible() and bool(t.get_text().strip())


def _legend_item(leg: Legend, axes: int, renderer: Any) -> Item:
    names = [t.get_text() for t in leg.get_texts()][:3]
    return Item("legend", ", ".join(names), axes, leg.get_window_extent(renderer))


def _tick_items(ax: Axes, index: int, renderer: Any) -> Iterable[Item]:
    for kind, axis in (("xtick", ax.xaxis), ("ytick", ax.yaxis)):
        if not axis.get_visible():
            continue
        lo, hi = sorted(axis.get_view_interval())
        for tick in axis.get_major_ticks():
            loc = tick.get_loc()
            if not lo - 1e-12 * max(1.0, abs(lo)) <= loc <= hi + 1e-12 * max(1.0, abs(hi)):
                continue
            for label in (tick.label1, tick.label2):
                if _visible_text(label):
                    yield Item(kind, label.get_text(), index, label.get_window_extent(renderer))


def drawn_items(fig: Figure) -> list[Item]:
    """Every text and legend a reader of ``fig`` reads, with its window extent (pixels)."""
    renderer = _renderer(fig)
    items: list[Item] = []
    suptitle = getattr(fig, "_suptitle", None)
    if _visible_text(suptitle):
        items.append(Item("suptitle", suptitle.get_text(), -1,
                          suptitle.get_window_extent(renderer)))
    for t in fig.texts:
        if t is not suptitle and _visible_text(t):
            items.append(Item("text", t.get_text(), -1, t.get_window_extent(renderer)))
    for leg in fig.legends:
        if leg.get_visible():
            items.append(_legend_item(leg, -1, renderer))
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison and not ax.texts and ax.get_legend() is None:
            continue
        for loc in ("center", "left", "right"):
            title = ax._left_title if loc == "left" else (
                ax._right_title if loc == "right" else ax.title)
            if _visible_text(title):
                items.append(Item("title", title.get_text(), i, title.get_window_extent(renderer)))
        if ax.axison:
            for kind, label in (("xlabel", ax.xaxis.label), ("ylabel", ax.yaxis.label)):
                if _visible_text(label):
                    items.append(Item(kind, label.get_text(), i, label.get_window_extent(renderer)))
            items.extend(_tick_items(ax, i, renderer))
        for t in ax.texts:
            if _visible_text(t):
                items.append(Item("text", t.get_text(), i, t.get_window_extent(renderer)))
        leg = ax.get_legend()
        if leg is not None and leg.get_visible():
            items.append(_legend_item(leg, i, renderer))
    return items


def _overlap(a: Bbox, b: Bbox, tol: float) -> bool:
    dx = min(a.x1, b.x1) - max(a.x0, b.x0)
    dy = min(a.y1, b.y1) - max(a.y0, b.y0)
    return dx > tol and dy > tol


def overlapping_items(items: Sequence[Item], *, tolerance_px: float = TOLERANCE_PX,
                      ) -> list[tuple[Item, Item]]:
    """The pairs of ``items`` whose boxes overlap by more than ``tolerance_px`` both ways."""
    pairs = []
    for i, a in enumerate(items):
        for b in items[i + 1:]:
            if _overlap(a.box, b.box, tolerance_px):
                pairs.append((a, b))
    return pairs


def layout_problems(fig: Figure, *, tolerance_px: float = TOLERANCE_PX) -> list[str]:
    """One line per collision in ``fig`` (empty when every text and legend has its own room)."""
    return [f"{a.describe()} overlaps {b.describe()}"
            for a, b in overlapping_items(drawn_items(fig), tolerance_px=tolerance_px)]


def _hex(colour: Any) -> str:
    return mcolors.to_hex(colour, keep_alpha=False)


def colours_by_label(ax: Axes, names: Sequence[str]) -> dict[str, set[str]]:
    """For each name in ``names``: the colours (hex, alpha dropped) of every line and collection
    of ``ax`` whose label contains that name as a word (``"bruck"`` matches ``"bruck (model)"``).

    One colour per name across its dots and its lines is what a legend promises; a name drawn
    by several artists in different colours returns a set of more than one.
    """
    import re

    found: dict[str, set[str]] = {n: set() for n in names}
    for artist in [*ax.lines, *ax.collections]:
        label = str(artist.get_label())
        for name in names:
            if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", label):
                continue
            if isinstance(artist, Line2D):
                colours = {artist.get_color()}
                if artist.get_marker() not in (None, "", "None", " "):
                    face = artist.get_markerfacecolor()
                    if not mcolors.same_color(face, "none"):
                        colours.add(face)
            elif isinstance(artist, Collection):
                colours = {tuple(c) for c in artist.get_facecolors() if c[3] > 0} or \
                          {tuple(c) for c in artist.get_edgecolors()}
            else:  # pragma: no cover - only lines and collections are listed
                continue
            found[name] |= {_hex(c) for c in colours}
    return found
