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
"""

from __future__ import annotations

import io
from typing import Any

from matplotlib.figure import Figure

__all__ = ["DisplayFigure", "new_figure", "figure_png"]


def figure_png(fig: Figure, *, dpi: float | None = None) -> bytes:
    """``fig`` rendered as PNG bytes (tight bounding box, like the inline backend)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi or fig.dpi, bbox_inches="tight")
    return buf.getvalue()


class DisplayFigure(Figure):
    """A pyplot-free ``Figure`` that IPython displays as one PNG image."""

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
    return DisplayFigure(figsize=figsize, layout=layout, **kwargs)
