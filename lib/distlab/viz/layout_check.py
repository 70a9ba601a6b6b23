"""What a drawn figure shows a reader, checked: text that collides, legends over data, axes
with one labelled tick, figures wider than JupyterLab shows, and colours that disagree.

Pure functions of a matplotlib ``Figure`` that has been drawn (they draw it themselves when it
has not). Tests call them on every figure builder's output, and :mod:`distlab.viz.figure` runs
:func:`layout_problems` on every figure a notebook displays when ``DISTLAB_FIGURE_AUDIT=1`` (the
test command sets it), so a figure whose labels overlap fails its notebook cell.

What counts as a collision: the window extents (pixels) of two visible, non-empty texts (titles,
the suptitle, axis labels, major tick labels inside the view, annotations and ``ax.text``) or of a
text and a legend's frame overlap by more than :data:`TOLERANCE_PX` in both directions. The
texts inside a legend are judged as the legend's frame; tick labels are compared only with texts
that are not tick labels of the same axis direction of other axes when those share the axis.

What else :func:`layout_problems` reports (each its own function):

- :func:`legend_problems`: a legend's frame covers data: a point of a line (its vertices and
  points along its segments), a scatter dot or a bar drawn in data coordinates of any axes.
  Lines and spans drawn across a whole axes (``axhline``, ``axvspan``) are not data here.
- :func:`tick_problems`: a numeric axis (not one whose ticks were fixed, e.g. categories) shows
  fewer than :data:`MIN_TICK_LABELS` labelled ticks, major and minor together: one tick gives
  no scale.
- :func:`width_problems`: the figure's image (tight bounding box at its dpi, as shown) is wider
  than :data:`JUPYTERLAB_WIDTH_PX`, so JupyterLab shrinks it and its text with it.
- :func:`colour_problems`: a name of :mod:`distlab.viz.palette` drawn in a colour that is not
  its palette colour, in two colours, or in the colour of another name of the same figure.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.colors as mcolors
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import Collection
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.lines import Line2D
from matplotlib.text import Text
from matplotlib.transforms import Bbox

__all__ = ["JUPYTERLAB_WIDTH_PX", "LEGEND_PLACES", "MIN_TICK_LABELS", "TOLERANCE_PX", "Item",
           "colour_problems", "colours_by_label", "drawn_items", "collision_problems",
           "layout_problems", "legend_clear_of_data", "legend_problems", "named_colours",
           "overlapping_items", "tick_problems", "width_problems"]

#: Two boxes overlap when they share more than this many pixels in x and in y (at the figure's
#: dpi): anti-aliasing and font padding make boxes that merely touch share a pixel or two.
TOLERANCE_PX = 2.0

#: The width (pixels) of JupyterLab's output area in a 1400-px window with the file browser
#: open; a wider image is scaled down to it, its text with it.
JUPYTERLAB_WIDTH_PX = 968

#: The fewest labelled ticks a numeric axis may show.
MIN_TICK_LABELS = 2


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
    return _drawn_items(fig, _renderer(fig))


def _drawn_items(fig: Figure, renderer: Any) -> list[Item]:
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


def collision_problems(fig: Figure, *, tolerance_px: float = TOLERANCE_PX) -> list[str]:
    """One line per collision of texts in ``fig`` (empty when every text and legend has its
    own room)."""
    return _collision_problems(fig, _renderer(fig), tolerance_px)


def _collision_problems(fig: Figure, renderer: Any, tolerance_px: float) -> list[str]:
    return [f"{a.describe()} overlaps {b.describe()}"
            for a, b in overlapping_items(_drawn_items(fig, renderer), tolerance_px=tolerance_px)]


def layout_problems(fig: Figure, *, tolerance_px: float = TOLERANCE_PX) -> list[str]:
    """One line per problem a reader of ``fig`` meets (see the module doc): colliding texts,
    legends over data, axes with too few labelled ticks, an image wider than JupyterLab's
    output area, colours that disagree with the palette or with each other. The figure is drawn
    once, and every check reads that drawing (each public check alone draws it itself)."""
    renderer = _renderer(fig)
    return [*_collision_problems(fig, renderer, tolerance_px),
            *_legend_problems(fig, renderer, tolerance_px), *_tick_problems(fig, MIN_TICK_LABELS),
            *_width_problems(fig, renderer, JUPYTERLAB_WIDTH_PX), *colour_problems(fig)]


def _is_data(artist: Any, ax: Axes) -> bool:
    return artist.get_visible() and artist.get_transform() == ax.transData


def _data_points(ax: Axes) -> np.ndarray:
    """Pixel positions of the data a reader reads in ``ax``: line vertices and 8 points along
    each segment between them, scatter dots (their offsets); bars are handled apart."""
    pts: list[np.ndarray] = []
    for line in ax.lines:
        if not _is_data(line, ax):
            continue
        xy = np.column_stack(line.get_data()).astype(float)
        xy = xy[np.all(np.isfinite(xy), axis=1)]
        if not len(xy):
            continue
        disp = ax.transData.transform(xy)
        if line.get_linestyle() not in ("None", "", " ", "none") and len(disp) > 1:
            t = np.linspace(0.0, 1.0, 9)[:, None, None]
            disp = np.concatenate([disp, (disp[:-1] + t * (disp[1:] - disp[:-1])).reshape(-1, 2)])
        pts.append(disp)
    for coll in ax.collections:
        if coll.get_visible() and coll.get_offset_transform() == ax.transData:
            offs = np.asarray(coll.get_offsets(), dtype=float).reshape(-1, 2)
            offs = offs[np.all(np.isfinite(offs), axis=1)]
            if len(offs):
                pts.append(ax.transData.transform(offs))
    return np.concatenate(pts) if pts else np.empty((0, 2))


def _bar_boxes(ax: Axes, renderer: Any) -> list[Bbox]:
    from matplotlib.patches import Rectangle

    clip = ax.get_window_extent(renderer)
    boxes = [Bbox.intersection(p.get_window_extent(renderer), clip) for p in ax.patches
             if isinstance(p, Rectangle) and p.get_visible()
             and p.get_data_transform() == ax.transData and p.get_width() and p.get_height()]
    return [b for b in boxes if b is not None]   # the part a reader sees, inside the axes


def legend_problems(fig: Figure, *, tolerance_px: float = TOLERANCE_PX) -> list[str]:
    """One line per legend of ``fig`` whose frame covers data of any of its axes: how many
    points (and bars) of which axes lie under it."""
    return _legend_problems(fig, _renderer(fig), tolerance_px)


def _legend_problems(fig: Figure, renderer: Any, tolerance_px: float) -> list[str]:
    legends = [(f"figure legend {_legend_item(leg, -1, renderer).text!r}", leg)
               for leg in fig.legends if leg.get_visible()]
    legends += [(f"legend {_legend_item(ax.get_legend(), i, renderer).text!r} (axes {i})",
                 ax.get_legend()) for i, ax in enumerate(fig.axes)
                if ax.get_legend() is not None and ax.get_legend().get_visible()]
    out = []
    for what, leg in legends:
        box = leg.get_window_extent(renderer).expanded(1.0, 1.0)
        inner = Bbox.from_extents(box.x0 + tolerance_px, box.y0 + tolerance_px,
                                  box.x1 - tolerance_px, box.y1 - tolerance_px)
        for i, ax in enumerate(fig.axes):
            if not ax.get_visible():
                continue
            clip = ax.get_window_extent(renderer)
            pts = _data_points(ax)
            x0, x1 = max(inner.x0, clip.x0), min(inner.x1, clip.x1)
            y0, y1 = max(inner.y0, clip.y0), min(inner.y1, clip.y1)
            inside = pts[(pts[:, 0] >= x0) & (pts[:, 0] <= x1) & (pts[:, 1] >= y0)
                         & (pts[:, 1] <= y1)] if len(pts) else pts
            bars = [b for b in _bar_boxes(ax, renderer) if _overlap(b, inner, tolerance_px)]
            if len(inside) or bars:
                out.append(f"{what} covers data of axes {i}: {len(inside)} points"
                           + (f", {len(bars)} bars" if bars else ""))
    return out


def tick_problems(fig: Figure, *, minimum: int = MIN_TICK_LABELS) -> list[str]:
    """One line per numeric axis of ``fig`` that shows labels on fewer than ``minimum`` ticks
    (an axis whose ticks were fixed by the figure, or that shows no tick label at all, is the
    figure's choice and is not judged)."""
    _renderer(fig)
    return _tick_problems(fig, minimum)


def _tick_problems(fig: Figure, minimum: int) -> list[str]:
    from matplotlib.ticker import FixedLocator

    out = []
    for i, ax in enumerate(fig.axes):
        if not ax.get_visible() or not ax.axison or hasattr(ax, "_colorbar"):
            continue
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            if not axis.get_visible() or isinstance(axis.get_major_locator(), FixedLocator):
                continue
            lo, hi = sorted(axis.get_view_interval())
            lo, hi = lo - 1e-9 * max(1.0, abs(lo)), hi + 1e-9 * max(1.0, abs(hi))
            labels = [t.label1.get_text() for t in [*axis.get_major_ticks(),
                                                    *axis.get_minor_ticks()]
                      if lo <= t.get_loc() <= hi and t.label1.get_visible()
                      and t.label1.get_text().strip()]
            if 0 < len(labels) < minimum:
                out.append(f"axes {i}: its {name} axis shows {len(labels)} labelled tick "
                           f"({', '.join(labels)}): no scale to read")
    return out


def width_problems(fig: Figure, *, max_px: float = JUPYTERLAB_WIDTH_PX) -> list[str]:
    """One line when ``fig``'s image (tight bounding box and the padding around it, at the
    figure's dpi, as :func:`distlab.viz.figure.figure_png` renders it) is wider than
    ``max_px``."""
    return _width_problems(fig, _renderer(fig), max_px)


def _width_problems(fig: Figure, renderer: Any, max_px: float) -> list[str]:
    import matplotlib

    pad = matplotlib.rcParams["savefig.pad_inches"]
    width = (fig.get_tightbbox(renderer).width + 2 * pad) * fig.dpi
    if width > max_px + 0.5:
        return [f"the image is {width:.0f} px wide, JupyterLab shows {max_px:.0f} px: its text "
                f"shrinks to {max_px / width:.0%} (make the figure at most "
                f"{max_px / fig.dpi:.2f} in wide)"]
    return []


def _visible_colours(artist: Any) -> set[str]:
    """The colours a reader sees of a legend handle or a labelled artist (hex, alpha dropped)."""
    from matplotlib.patches import Patch

    out: set[Any] = set()
    if isinstance(artist, Line2D):
        if artist.get_linestyle() not in ("None", "", " ", "none") and artist.get_linewidth() > 0:
            out.add(artist.get_color())
        if artist.get_marker() not in (None, "", "None", " ", "none"):
            face = artist.get_markerfacecolor()
            out.add(artist.get_markeredgecolor() if mcolors.same_color(face, "none") else face)
    elif isinstance(artist, Patch):
        face = artist.get_facecolor()
        out.add(artist.get_edgecolor() if face[3] == 0 else face)
    elif isinstance(artist, Collection):
        faces = [tuple(c) for c in artist.get_facecolors() if c[3] > 0]
        out |= set(faces) or {tuple(c) for c in artist.get_edgecolors()}
    return {_hex(c) for c in out}


def named_colours(fig: Figure) -> dict[str, set[str]]:
    """For each palette name (:func:`distlab.viz.palette.name_of_label`) that a legend entry or
    a labelled line, collection or bar of ``fig`` names: the colours it is drawn in."""
    from distlab.viz.palette import name_of_label

    found: dict[str, set[str]] = {}

    def add(label: Any, artist: Any) -> None:
        name = name_of_label(str(label)) if label is not None else None
        if name is not None:
            found.setdefault(name, set()).update(_visible_colours(artist))

    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    for leg in legends:
        for handle, text in zip(leg.legend_handles, leg.get_texts(), strict=False):
            if handle is not None:
                add(text.get_text(), handle)
    for ax in fig.axes:
        for artist in [*ax.lines, *ax.collections]:
            if not str(artist.get_label()).startswith("_"):
                add(artist.get_label(), artist)
        for cont in ax.containers:
            if not str(cont.get_label()).startswith("_"):
                for patch in cont:
                    add(cont.get_label(), patch)
    return {n: c for n, c in found.items() if c}


def colour_problems(fig: Figure) -> list[str]:
    """One line per palette name drawn in ``fig`` in a colour other than its palette colour or
    in two colours, and per colour two names of ``fig`` share."""
    from distlab.viz.palette import COLOURS

    named = named_colours(fig)
    out = []
    for name, cs in sorted(named.items()):
        want = mcolors.to_hex(COLOURS[name])
        if len(cs) > 1:
            out.append(f"{name!r} is drawn in {len(cs)} colours ({', '.join(sorted(cs))})")
        elif cs != {want}:
            out.append(f"{name!r} is drawn in {min(cs)}, not its palette colour {want}")
    by_colour: dict[str, list[str]] = {}
    for name, cs in sorted(named.items()):
        for c in cs:
            by_colour.setdefault(c, []).append(name)
    out += [f"{' and '.join(map(repr, names))} share the colour {c}"
            for c, names in sorted(by_colour.items()) if len(names) > 1]
    return out


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


LEGEND_PLACES = ("upper left", "upper right", "lower right", "lower left", "center right",
                 "center left", "upper center", "lower center", "center")
"""Where :func:`legend_clear_of_data` tries a legend inside its axes, in this order, after the
place it was asked for."""


def legend_clear_of_data(ax: Axes, *, loc: str = "best", **kwargs: Any) -> Legend:
    """``ax.legend(loc=loc, **kwargs)``, moved where the audit finds it covering no data and
    overlapping no text (:func:`legend_problems`, :func:`collision_problems`): ``loc`` first,
    then each of :data:`LEGEND_PLACES`; where every place inside covers something (measured
    points can fall anywhere), below the axes, under its x label, without a frame. Call it once
    the figure is complete (its data, limits and labels set): it draws the figure at each place
    it tries, and what is added later is not judged."""
    fig = ax.figure
    index = list(fig.axes).index(ax)

    def clear(leg: Legend) -> bool:
        renderer = _renderer(fig)
        mine = _legend_item(leg, index, renderer).describe()   # how the problems name it
        return not any(mine in p for p in (*_legend_problems(fig, renderer, TOLERANCE_PX),
                                           *_collision_problems(fig, renderer, TOLERANCE_PX)))

    for place in dict.fromkeys((loc, *LEGEND_PLACES)):
        leg = ax.legend(loc=place, **kwargs)
        if clear(leg):
            return leg
    entries = len(ax.get_legend_handles_labels()[1])
    outside = {k: v for k, v in kwargs.items() if k not in ("ncols", "ncol", "frameon")}
    return ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False,
                     ncols=min(3, max(1, entries)), **outside)
