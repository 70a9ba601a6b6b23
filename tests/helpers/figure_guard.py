"""pytest plugin: a notebook cell may never show a figure only as its text repr.

nbval runs each notebook cell as a pytest item (``nbval.plugin.IPyNbCell``) and keeps the outputs
the kernel produced for it in ``item.test_outputs`` (a list of nbformat output dicts), whether or
not it compares them with the stored ones (``nbval-ignore-output`` cells and ``--nbval-lax`` runs
collect them too). After a cell ran without error, this plugin fails it if any of its outputs
carries a bare ``<Figure size WxH with N Axes>`` text (a matplotlib figure that had no display hook)
while no output of the same cell carries an ``image/png``, and if the cell made a distlab figure
it never showed (the ``distlab figure audit:`` stderr line of :mod:`distlab.viz.figure`, printed
when the kernel runs with ``DISTLAB_FIGURE_AUDIT=1``, which the root ``conftest.py`` sets).

A cell also fails when a figure it rendered has texts that collide (the same audit line, from
:func:`distlab.viz.layout_check.layout_problems`), and when any line of text it printed is wider
than :data:`MAX_COLUMNS` characters: JupyterLab wraps such lines in a 1400-px window, and a table
whose rows wrap must be reassembled by eye.

Loaded for every run by the root ``conftest.py``; ``-p helpers.figure_guard`` loads it elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

__all__ = ["BARE_FIGURE", "MAX_COLUMNS", "bare_figure_texts", "pytest_runtest_call",
           "unshown_figure_lines", "wide_lines"]

#: The start of the stderr line distlab.viz.figure prints for a figure made and never shown.
AUDIT_MARK = "distlab figure audit:"

#: The widest printed line a notebook may show (characters): JupyterLab's 13-px monospace font
#: in a 1400-px window with the file browser open leaves room for about 120 before wrapping.
MAX_COLUMNS = 110

#: Output forms JupyterLab shows instead of an output's ``text/plain``.
RICH_MIMETYPES = ("application/vnd.jupyter.widget-view+json", "text/html", "image/png")

#: The text repr matplotlib gives a Figure, e.g. ``<Figure size 1000x600 with 2 Axes>``.
BARE_FIGURE = re.compile(r"<Figure size \d+(?:\.\d+)?x\d+(?:\.\d+)? with \d+ Axes>")


def _texts(output: Mapping[str, Any]) -> Iterable[str]:
    """Every text an nbformat output dict shows (stream text and text/plain data)."""
    if output.get("output_type") == "stream":
        text = output.get("text", "")
        yield "".join(text) if isinstance(text, list) else str(text)
    data = output.get("data") or {}
    plain = data.get("text/plain")
    if plain is not None:
        yield "".join(plain) if isinstance(plain, list) else str(plain)


def bare_figure_texts(outputs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The ``<Figure size ...>`` texts in ``outputs`` when none of them is an ``image/png``.

    Returns an empty list when the outputs show no figure repr, or when an image is shown too.
    """
    outputs = list(outputs)
    if any("image/png" in (o.get("data") or {}) for o in outputs):
        return []
    return [m.group(0) for o in outputs for t in _texts(o) for m in BARE_FIGURE.finditer(t)]


def wide_lines(outputs: Iterable[Mapping[str, Any]], limit: int = MAX_COLUMNS) -> list[str]:
    """The printed lines in ``outputs`` wider than ``limit`` characters. An output that a richer
    form replaces in JupyterLab (a widget view, HTML) is not read as text: its ``text/plain`` is
    only the fallback a notebook file carries for other readers."""
    shown_as_text = [o for o in outputs
                     if not set(o.get("data") or {}) & set(RICH_MIMETYPES)]
    return [line for o in shown_as_text for t in _texts(o) for line in t.splitlines()
            if len(line) > limit]


def unshown_figure_lines(outputs: Iterable[Mapping[str, Any]]) -> list[str]:
    """The figure-audit lines in ``outputs`` (figures the cell made and never showed)."""
    return [line for o in outputs if o.get("output_type") == "stream"
            for t in _texts(o) for line in t.splitlines() if line.startswith(AUDIT_MARK)]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):  # noqa: ANN201 (pytest hook)
    """Fail a notebook cell whose executed outputs show a figure only as text."""
    result = yield  # re-raises when the cell itself failed: that error is reported as is
    outputs = getattr(item, "test_outputs", None)
    if outputs is not None and getattr(item, "cell", None) is not None:
        bare = bare_figure_texts(outputs)
        if bare:
            pytest.fail(
                f"{item.name}: the cell shows {bare[0]!r} as text and no image/png: the figure "
                "has no display hook (build it with distlab.viz.figure.new_figure)\n"
                f"cell source:\n{item.cell.source}",
                pytrace=False,
            )
        unshown = unshown_figure_lines(outputs)
        if unshown:
            pytest.fail(f"{item.name}: {unshown[0]}\ncell source:\n{item.cell.source}",
                        pytrace=False)
        wide = wide_lines(outputs)
        if wide:
            pytest.fail(f"{item.name}: {len(wide)} printed line(s) wider than {MAX_COLUMNS} "
                        f"characters wrap in JupyterLab; the first ({len(wide[0])}):\n{wide[0]}\n"
                        f"cell source:\n{item.cell.source}", pytrace=False)
    return result
