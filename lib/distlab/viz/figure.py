"""The one way distlab makes a matplotlib figure: it displays exactly once, as an image.

A ``matplotlib.figure.Figure`` made without pyplot has no IPython display hook until the inline
backend has been activated (``import matplotlib.pyplot`` or ``%matplotlib inline`` in the kernel),
so in a fresh kernel it shows as the text ``<Figure size 1000x600 with 2 Axes>``. A figure made
*with* pyplot is shown twice when a cell also returns it (once as the cell's value, once by the
inline backend's flush at the end of the cell). :func:`new_figure` avoids both: the figure is not
attached to pyplot (nothing flushes it, nothing leaks in pyplot's figure manager) and it carries
its own ``_repr_png_``, so IPython renders it as a PNG whatever the user imported first. When the
inline backend *is* active, IPython uses that backend's PNG formatter for the same figure: still
one image.

Every library function that returns a figure builds it with :func:`new_figure`.

A figure that is made and never shown is the other way a picture goes missing (a cell that ends
with ``fig = gantt(...)`` shows nothing). With the environment variable
``DISTLAB_FIGURE_AUDIT=1`` (the test command sets it for every notebook kernel), each IPython
cell that made a :class:`DisplayFigure` which was never rendered (displayed, saved, or drawn
into an image widget) prints one line starting with :data:`AUDIT_MARK` to stderr at its end,
which the notebook tests turn into a failure.
"""

from __future__ import annotations

import io
import os
import sys
import weakref
from typing import Any

from matplotlib.figure import Figure

__all__ = ["AUDIT_ENV", "AUDIT_MARK", "DisplayFigure", "figure_png", "message_figure",
           "new_figure", "png_size"]

#: Set to "1" to report figures a notebook cell made but never showed (see the module doc).
AUDIT_ENV = "DISTLAB_FIGURE_AUDIT"
#: The start of the line the audit prints to stderr for each figure never shown.
AUDIT_MARK = "distlab figure audit:"

_pending: list[weakref.ref[DisplayFigure]] = []
_audit_hooked = False


def figure_png(fig: Figure, *, dpi: float | None = None) -> bytes:
    """``fig`` rendered as PNG bytes (tight bounding box, like the inline backend)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or fig.dpi, bbox_inches="tight")
    return buf.getvalue()


def png_size(png: bytes) -> tuple[int, int]:
    """Width and height in pixels of the PNG image ``png`` (read from its header).

    Raises:
        ValueError: ``png`` is not a PNG image.
    """
    if len(png) < 24 or png[:8] != b"\x89PNG\r\n\x1a\n" or png[12:16] != b"IHDR":
        raise ValueError(f"png must be PNG bytes, got {bytes(png[:16])!r}")
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


class DisplayFigure(Figure):
    """A pyplot-free ``Figure`` that IPython displays as one PNG image."""

    #: True once the figure was drawn by a renderer (displayed, saved or rendered to bytes).
    rendered: bool = False

    def draw(self, renderer: Any) -> None:
        self.rendered = True
        super().draw(renderer)

    def _repr_png_(self) -> bytes:
        return figure_png(self)

    def _repr_html_(self) -> None:  # never let a rich frontend fall back to the text repr only
        return None


def new_figure(*, figsize: tuple[float, float] = (8.0, 4.0), layout: str | None = "constrained",
               **kwargs: Any) -> DisplayFigure:
    """A new :class:`DisplayFigure` (not registered with pyplot; close nothing afterwards).

    Args:
        figsize: width and height in inches.
        layout: matplotlib layout engine name (default ``"constrained"``), or None.
        **kwargs: passed to ``matplotlib.figure.Figure``.
    """
    fig = DisplayFigure(figsize=figsize, layout=layout, **kwargs)
    if os.environ.get(AUDIT_ENV) == "1":
        _audit_later(fig)
    return fig



def message_figure(text: str, *, width_in: float = 9.2) -> DisplayFigure:
    """A figure ``width_in`` inches wide and 1.2 high that shows only ``text``, centred and
    wrapped: what an explorer draws in place of its figure when its settings cannot be drawn
    (the error) or are still being computed."""
    fig = new_figure(figsize=(width_in, 1.2))
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True, fontsize="medium")
    return fig

def _audit_later(fig: DisplayFigure) -> None:
    """Remember ``fig`` for the end of the current IPython cell (no-op outside IPython)."""
    global _audit_hooked
    try:
        from IPython import get_ipython
    except ImportError:  # pragma: no cover - IPython is a dependency of jupyterlab
        return
    shell = get_ipython()
    if shell is None:
        return
    if not _audit_hooked:
        shell.events.register("post_run_cell", _report_unshown)
        _audit_hooked = True
    _pending.append(weakref.ref(fig))


def _report_unshown(*_: Any) -> None:
    """IPython ``post_run_cell`` hook: one stderr line per figure of this cell never rendered,
    and one per collision of texts in a figure it did render
    (:func:`distlab.viz.layout_check.layout_problems`)."""
    from distlab.viz.layout_check import layout_problems

    figures = [f for f in (ref() for ref in _pending) if f is not None]
    unshown = [f for f in figures if not f.rendered]
    _pending.clear()
    for fig in figures:
        if fig.rendered:
            for problem in layout_problems(fig):
                print(f"{AUDIT_MARK} {_describe(fig)}: {problem}", file=sys.stderr)
    for fig in unshown:
        print(f"{AUDIT_MARK} {_describe(fig)} was never shown: "
              "end the cell with it or pass it to display()", file=sys.stderr)


def _describe(fig: Figure) -> str:
    """``a figure made in this cell (8x4 in, 2 axes, 'its first title')``."""
    w, h = fig.get_size_inches()
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    titles = [t for t in [title, *(ax.get_title(loc) for ax in fig.axes
                                   for loc in ("center", "left", "right"))] if t]
    return (f"a figure made in this cell ({w:g}x{h:g} in, "
            f"{len(fig.axes)} axes{', ' + repr(titles[0]) if titles else ''})")
