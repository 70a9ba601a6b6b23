"""Real-browser harness: a live JupyterLab, headless Chromium through Playwright, and the actions a
notebook test needs (open, run all, read errors, move a widget, see the figure change).

Fixtures live in ``tests/browser/conftest.py`` (``lab`` and ``page``). A new notebook's browser
test is a few lines:

    from browser.lab import (open_notebook, run_all_cells, error_outputs,
                             figure_fingerprints, set_slider, wait_for_figures_to_change,
                             save_screenshot)

    def test_samplers_widget(lab, page):
        open_notebook(page, lab, "01_samplers.ipynb")
        run_all_cells(page)
        assert error_outputs(page) == []
        before = figure_fingerprints(page)
        set_slider(page, "world size", 5)
        wait_for_figures_to_change(page, before)
        save_screenshot(page, "01_samplers_after_slider")

JupyterLab runs with ``expose_app_in_browser`` so the harness drives it through
``window.jupyterapp`` (commands and the notebook model) instead of guessing at menus; widgets are
moved through the DOM the way a person would (keyboard on the slider, the readout, the select).
"""

from __future__ import annotations

import hashlib
import re
import secrets
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.stored_outputs import differences_from_stored

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "browser"


@dataclass(frozen=True)
class Lab:
    """A running JupyterLab: ``base_url`` like http://127.0.0.1:PORT, ``token`` for auth,
    serving ``root_dir``."""

    base_url: str
    token: str
    root_dir: Path
    config: Any = None
    """The pytest config of the run (``pytestconfig``), for nbval's comparison of outputs."""

    def url(self, path: str) -> str:
        sep = "&" if "?" in path else "?"
        return f"{self.base_url}/{path.lstrip('/')}{sep}token={self.token}"


def open_notebook(page: Any, lab: Lab, name: str, *, timeout_s: float = 90.0) -> None:
    """Open ``name`` (relative to the lab's root, i.e. notebooks/) and wait for an idle kernel.

    Each call uses a fresh, uniquely named workspace, so JupyterLab restores no tab of an
    earlier test and the notebook opened here is the current widget that commands act on.
    """
    workspace = f"t{secrets.token_hex(6)}"
    page.goto(lab.url(f"lab/workspaces/{workspace}/tree/{name}"), timeout=timeout_s * 1000)
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=timeout_s * 1000)
    page.wait_for_function(
        """(name) => {
            const w = window.jupyterapp.shell.currentWidget;
            return !!(w && w.context && w.context.path === name && w.content
                      && w.content.widgets && w.content.widgets.length > 0);
        }""",
        arg=name, timeout=timeout_s * 1000,
    )
    _wait_kernel_idle(page, timeout_s)


def _wait_kernel_idle(page: Any, timeout_s: float) -> None:
    page.wait_for_function(
        """() => {
            const w = window.jupyterapp.shell.currentWidget;
            const s = w && w.sessionContext && w.sessionContext.session;
            return !!(w.sessionContext.isReady && s && s.kernel && s.kernel.status === 'idle');
        }""",
        timeout=timeout_s * 1000,
    )


def run_all_cells(page: Any, *, timeout_s: float = 300.0) -> None:
    """Run every cell of the current notebook and wait until all code cells have executed.

    If the kernel has not started on the first cell within 30 s (a command issued while the
    panel was still settling), the command is issued once more.
    """
    run_all = "() => window.jupyterapp.commands.execute('notebook:run-all-cells')"
    page.evaluate(run_all)
    start = time.monotonic()
    deadline = start + timeout_s
    retried = False
    while True:
        state = page.evaluate(
            """() => {
                const nb = window.jupyterapp.shell.currentWidget.content;
                let pending = 0, total = 0, started = 0;
                for (const cell of nb.widgets) {
                    if (cell.model.type !== 'code' || !cell.model.sharedModel.getSource().trim())
                        continue;
                    total += 1;
                    const busy = cell.promptNode.textContent.includes('*');
                    if (busy || cell.model.executionCount !== null) started += 1;
                    if (cell.model.executionCount === null || busy) pending += 1;
                }
                const s = window.jupyterapp.shell.currentWidget.sessionContext.session;
                return {pending, total, started, status: s && s.kernel ? s.kernel.status : 'none'};
            }"""
        )
        if state["pending"] == 0 and state["status"] == "idle":
            return
        if error_outputs(page):  # a failing cell stops run-all: report it instead of waiting
            return
        if not retried and state["started"] == 0 and time.monotonic() - start > 30:
            page.evaluate(run_all)
            retried = True
        if time.monotonic() > deadline:
            raise TimeoutError(f"cells still running after {timeout_s:g} s: {state}")
        time.sleep(0.2)


def error_outputs(page: Any) -> list[str]:
    """``ename: evalue`` of every error output in the current notebook (empty when none)."""
    return list(page.evaluate(
        """() => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            const found = [];
            for (const cell of nb.widgets) {
                if (cell.model.type !== 'code') continue;
                for (const out of cell.model.outputs.toJSON()) {
                    if (out.output_type === 'error') found.push(out.ename + ': ' + out.evalue);
                }
            }
            return found;
        }"""
    ))


def page_text(page: Any) -> str:
    """All text rendered in the notebook's outputs."""
    return str(page.inner_text(".jp-NotebookPanel .jp-Notebook"))


#: Every rendered image: matplotlib PNGs in cell outputs and explorer pictures.
ALL_IMAGES = ".jp-NotebookPanel img"
#: The explorers' pictures only (distlab.viz.explorer renders into an ipywidgets Image).
EXPLORER_IMAGES = ".jp-NotebookPanel img.widget-image"


def figure_fingerprints(page: Any, selector: str = ALL_IMAGES) -> list[str]:
    """A short hash of every rendered image matching ``selector`` (default: all of them)."""
    sources = page.eval_on_selector_all(selector, "els => els.map(e => e.src)")
    return [hashlib.sha1(src.encode()).hexdigest()[:12] for src in sources]


def wait_for_figures_to_change(page: Any, before: list[str], *, timeout_s: float = 60.0,
                               selector: str = ALL_IMAGES) -> list[str]:
    """Wait until the images matching ``selector`` differ from ``before``; return the new
    fingerprints."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        now = figure_fingerprints(page, selector)
        if now and now != before:
            return now
        time.sleep(0.25)
    raise AssertionError(f"no figure changed within {timeout_s:g} s (still {before})")


def explorer_pictures(page: Any, *, timeout_s: float = 60.0) -> list[str]:
    """Scroll to the first explorer picture, wait until it has loaded, and return the
    fingerprints of every explorer picture (``EXPLORER_IMAGES``)."""
    page.locator(EXPLORER_IMAGES).first.scroll_into_view_if_needed(timeout=timeout_s * 1000)
    page.wait_for_function(
        "sel => { const i = document.querySelector(sel);"
        " return i && i.complete && i.naturalWidth > 0; }", arg=EXPLORER_IMAGES,
        timeout=timeout_s * 1000)
    return figure_fingerprints(page, EXPLORER_IMAGES)


def explorer_widths(page: Any) -> list[tuple[int, float]]:
    """(PNG pixel width, width shown in CSS pixels) of every loaded explorer picture: equal when
    the picture is shown at the width it was rendered (not stretched to the output area)."""
    return [tuple(x) for x in page.eval_on_selector_all(
        EXPLORER_IMAGES, "imgs => imgs.filter(i => i.complete && i.naturalWidth > 0)"
        ".map(i => [i.naturalWidth, i.getBoundingClientRect().width])")]


def set_checkbox(page: Any, label: str, checked: bool) -> None:
    """Tick (or clear) the checkbox labelled ``label``."""
    box = page.locator(".jp-NotebookPanel .widget-checkbox").filter(has_text=label).first
    box.scroll_into_view_if_needed()
    box.locator("input[type=checkbox]").set_checked(checked)


def _widget_box(page: Any, label: str) -> Any:
    """The ipywidgets container whose description label reads ``label`` (case-insensitive)."""
    pattern = re.compile(rf"^\s*{re.escape(label)}\s*:?\s*$", re.IGNORECASE)
    box = page.locator(".widget-inline-hbox").filter(
        has=page.locator("label.widget-label", has_text=pattern))
    if box.count() == 0:
        labels = page.eval_on_selector_all("label.widget-label",
                                           "els => els.map(e => e.textContent)")
        raise LookupError(f"no widget labelled {label!r}; labels on the page: {labels}")
    return box.first


def nudge_slider(page: Any, label: str, steps: int) -> None:
    """Move the slider labelled ``label`` by ``steps`` ticks with the keyboard (negative: left)."""
    handle = _widget_box(page, label).locator(".noUi-handle").first
    handle.scroll_into_view_if_needed()
    handle.focus()
    key = "ArrowRight" if steps > 0 else "ArrowLeft"
    for _ in range(abs(steps)):
        handle.press(key)


def set_slider(page: Any, label: str, value: float) -> None:
    """Type ``value`` into the readout of the slider labelled ``label`` (as a person would)."""
    readout = _widget_box(page, label).locator(".widget-readout").first
    readout.scroll_into_view_if_needed()
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(value))
    page.keyboard.press("Enter")


def select_option(page: Any, label: str, option: str) -> None:
    """Choose ``option`` in the dropdown labelled ``label``."""
    select = _widget_box(page, label).locator("select").first
    select.scroll_into_view_if_needed()
    select.select_option(label=option)


def click_toggle(page: Any, label: str, option: str) -> None:
    """Click the button ``option`` of the ToggleButtons labelled ``label``."""
    _widget_box(page, label).get_by_role("button", name=option).first.click()


def save_screenshot(page: Any, name: str) -> Path:
    """Save a full-page PNG under test-artifacts/browser/ for a human to look at."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


_CELL_OUTPUTS = """() => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    const join = t => Array.isArray(t) ? t.join('') : String(t);
    const cells = [];
    nb.widgets.forEach((cell, index) => {
        if (cell.model.type !== 'code') return;
        const info = {index, png: false, bare: [], errors: [], n_outputs: 0,
                      source: cell.model.sharedModel.getSource()};
        for (const out of cell.model.outputs.toJSON()) {
            info.n_outputs += 1;
            if (out.output_type === 'error') info.errors.push(out.ename + ': ' + out.evalue);
            const data = out.data || {};
            if (data['image/png']) info.png = true;
            const shown = [];
            if (out.text !== undefined) shown.push(join(out.text));
            // a bundle's text/plain is what shows only when it has no richer representation
            if (data['text/plain'] !== undefined && Object.keys(data).length === 1)
                shown.push(join(data['text/plain']));
            for (const t of shown) for (const m of t.matchAll(/<Figure size [^>]*>/g))
        info.bare.push(m[0]); } cells.push(info);
    });
    return cells;
}"""

_RENDERED_OUTPUT = """async (index) => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    const cell = nb.widgets[index];
    if (nb.scrollToItem) await nb.scrollToItem(index, 'center');
    cell.node.scrollIntoView({block: 'center'});
    const area = cell.node.querySelector('.jp-OutputArea');
    if (!area) return {ready: false};
    const imgs = [...area.querySelectorAll('.jp-OutputArea-output img')];
    return {ready: true, imgs: imgs.length,
            loaded: imgs.filter(i => i.complete && i.naturalWidth > 0).length,
            text: area.innerText};
}"""


#: Every code cell's source and outputs (nbformat dicts), as the notebook model holds them.
_CODE_CELLS = """() => window.jupyterapp.shell.currentWidget.content.widgets
    .filter(cell => cell.model.type === 'code')
    .map(cell => ({source: cell.model.sharedModel.getSource(),
                   outputs: cell.model.outputs.toJSON()}))"""


@dataclass(frozen=True)
class CellCheck:
    """What one code cell showed in JupyterLab: its index among all cells, whether its outputs
    hold an image/png (a figure), how many ``<img>`` its rendered output area shows."""

    index: int
    source: str
    figure: bool
    images: int


def run_notebook_and_check(page: Any, lab: Lab, notebook: str, *,
                           timeout_s: float = 300.0) -> list[CellCheck]:
    """Open ``notebook``, run every cell, and check what each cell shows; return the checks.

    Fails (AssertionError) when any cell shows an error, when any output shows a figure only as
    its ``<Figure size ...>`` text (in the outputs or in the rendered page), or when a cell whose
    outputs hold a figure (image/png) shows no loaded ``<img>`` in its output area; when the
    notebook does not open unmodified (:func:`browser.clean_open.check_opens_unmodified`, checked
    before Run All); and, with
    the run's config on ``lab``, wherever nbval would fail the notebook: outputs that differ
    from the stored ones, a figure-audit finding (:func:`helpers.stored_outputs.
    differences_from_stored`). A test calling this should carry ``@pytest.mark.notebook(name)``,
    so that nbval leaves the notebook to it instead of running it a second time.
    """
    from browser.clean_open import check_opens_unmodified  # it imports this module

    open_notebook(page, lab, notebook)
    why_not_dirty_flag = check_opens_unmodified(page, lab.root_dir, notebook)
    if why_not_dirty_flag:
        warnings.warn(why_not_dirty_flag, stacklevel=2)
    run_all_cells(page, timeout_s=timeout_s)
    cells = page.evaluate(_CELL_OUTPUTS)
    errors = [f"cell {c['index']}: {e}" for c in cells for e in c["errors"]]
    assert errors == [], f"{notebook}: cells raised in the browser: {errors}"
    if lab.config is not None:  # nbval's check, on these outputs (helpers.notebook_owner)
        differences = differences_from_stored(lab.config, lab.root_dir / notebook,
                                              page.evaluate(_CODE_CELLS))
        assert differences == [], "\n\n".join(differences)
    bare = [f"cell {c['index']}: {b}" for c in cells for b in c["bare"]]
    assert bare == [], f"{notebook}: figures shown only as text, without an image: {bare}"
    checks = []
    for c in cells:
        if not c["n_outputs"]:
            checks.append(CellCheck(c["index"], c["source"], False, 0))
            continue
        deadline = time.monotonic() + 30.0
        while True:  # JupyterLab renders cells near the viewport: scroll, then wait for images
            shown = page.evaluate(_RENDERED_OUTPUT, c["index"])
            done = shown["ready"] and (not c["png"] or 0 < shown["imgs"] == shown["loaded"])
            if done or time.monotonic() > deadline:
                break
            time.sleep(0.25)
        assert shown["ready"], f"{notebook}: cell {c['index']}'s output area never rendered"
        assert "<Figure size" not in shown["text"], \
            f"{notebook}: cell {c['index']} shows a figure as text: {shown['text'][:300]!r}"
        if c["png"]:
            assert shown["imgs"] > 0 and shown["imgs"] == shown["loaded"], (
                f"{notebook}: cell {c['index']} returns a figure but its output area shows "
                f"{shown['loaded']} loaded <img> of {shown['imgs']}:\n{c['source']}")
        checks.append(CellCheck(c["index"], c["source"], c["png"], shown["imgs"]))
    return checks


def output_text(page: Any) -> str:
    """Every stream and text/plain output of the current notebook, from the model (JupyterLab
    renders only cells near the viewport, so the page's text can miss some)."""
    return str(page.evaluate(
        """() => {
            const nb = window.jupyterapp.shell.currentWidget.content;
            const texts = [];
            for (const cell of nb.widgets) {
                if (cell.model.type !== 'code') continue;
                for (const out of cell.model.outputs.toJSON()) {
                    const t = out.text !== undefined ? out.text : (out.data || {})['text/plain'];
                    if (t !== undefined) texts.push(Array.isArray(t) ? t.join('') : t);
                }
            }
            return texts.join('\\n');
        }"""))


def widget_text(page: Any) -> str:
    """The text of every ipywidgets HTML/Label in the notebook (status and summary lines)."""
    return str(page.evaluate(
        "() => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".map(e => e.textContent).join(' | ')"))


def wait_for_widget_text(page: Any, needle: str, timeout_s: float = 60.0) -> str:
    """Wait until some ipywidgets HTML/Label shows ``needle``; then :func:`widget_text`."""
    page.wait_for_function(
        "t => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".map(e => e.textContent).join(' | ').includes(t)", arg=needle, timeout=timeout_s * 1000)
    return widget_text(page)


def output_widget_text(page: Any) -> str:
    """The text of every ipywidgets Output in the notebook (e.g. a picker's printed lines)."""
    return str(page.evaluate(_OUTPUT_WIDGET_TEXT))


def wait_for_output_widget_text(page: Any, needle: str, *, timeout_s: float = 30.0) -> None:
    """Wait until some ipywidgets Output in the notebook shows ``needle``."""
    page.wait_for_function(f"needle => ({_OUTPUT_WIDGET_TEXT})().includes(needle)", arg=needle,
                           timeout=timeout_s * 1000)


_OUTPUT_WIDGET_TEXT = ("() => [...document.querySelectorAll('.jp-NotebookPanel .widget-output')]"
                       ".map(e => e.innerText).join(' | ')")


def slider_value(page: Any, label: str) -> str:
    """The readout of the slider labelled ``label``, as shown."""
    readout = _widget_box(page, label).locator(".widget-readout").first
    return str(readout.evaluate("e => e.value !== undefined ? e.value : e.textContent")).strip()
