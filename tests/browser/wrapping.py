"""What a reader sees wrap in JupyterLab: printed lines that the output area breaks into several
rows, read from the rendered page (the browser tests' window is 1400 px wide).

:func:`wrapped_output_lines` scrolls each code cell into view (JupyterLab renders only cells near
the viewport), then, for every text output (``pre``) of the cell, counts the rows its text is laid
out in (the distinct tops of the line boxes that hold text) against its lines that hold text: more
rows than lines is a line the window wrapped. :func:`html_tables` reads the scrolling HTML tables
(:class:`distlab.report.html.HtmlTable`) a cell shows: their box and the table inside it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["html_tables", "wrapped_output_lines"]

_WRAPPED = """async (index) => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    if (nb.scrollToItem) await nb.scrollToItem(index, 'center');
    const cell = nb.widgets[index];
    cell.node.scrollIntoView({block: 'center'});
    const area = cell.node.querySelector('.jp-OutputArea');
    if (!area) return {ready: false, wrapped: []};
    const wrapped = [];
    for (const pre of area.querySelectorAll('.jp-OutputArea-output pre')) {
        const text = pre.textContent.replace(/\\n+$/, '');
        if (!text) continue;
        const range = document.createRange();
        range.selectNodeContents(pre);
        // an empty line lays out as a box of width 0: count only lines with text and the
        // rows that hold some
        const tops = new Set([...range.getClientRects()].filter(r => r.width > 0)
                             .map(r => Math.round(r.top)));
        const lines = text.split('\\n').filter(line => line.length > 0).length;
        if (tops.size > lines) {
            const widest = text.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '');
            wrapped.push({lines, rows: tops.size, widest});
        }
    }
    return {ready: true, wrapped};
}"""

_TABLES = """async (index) => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    if (nb.scrollToItem) await nb.scrollToItem(index, 'center');
    const cell = nb.widgets[index];
    cell.node.scrollIntoView({block: 'center'});
    return [...cell.node.querySelectorAll('.distlab-table')].map(box => {
        const table = box.querySelector('table');
        return {box_height: box.clientHeight, box_width: box.clientWidth,
                table_height: table.scrollHeight, rows: table.querySelectorAll('tbody tr').length,
                area_width: box.closest('.jp-OutputArea-output').clientWidth,
                header: [...table.querySelectorAll('th')].map(th => th.textContent)};
    });
}"""

_CODE_CELLS = """() => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    return nb.widgets.map((c, i) => [i, c.model.type]).filter(x => x[1] === 'code').map(x => x[0]);
}"""


def wrapped_output_lines(page: Any) -> list[str]:
    """``cell N: <widest line> (L lines laid out in R rows)`` for every text output of the open
    notebook that the window wraps; empty when every printed line fits."""
    out = []
    for index in page.evaluate(_CODE_CELLS):
        shown = page.evaluate(_WRAPPED, index)
        out += [f"cell {index}: {w['widest']!r} ({w['lines']} lines laid out in {w['rows']} rows)"
                for w in shown["wrapped"]]
    return out


def html_tables(page: Any, index: int) -> list[dict[str, Any]]:
    """The HTML tables code cell ``index`` shows: ``box_height``/``box_width`` (px, the scrolling
    box), ``table_height`` (px, all rows), ``rows``, ``area_width`` (px, the output area) and the
    ``header`` texts."""
    return list(page.evaluate(_TABLES, index))
