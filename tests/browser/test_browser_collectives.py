"""Real browser: 08_collectives runs in JupyterLab and its plan picture follows its widgets."""

from __future__ import annotations

from typing import Any

import pytest

from browser.lab import (
    figure_fingerprints,
    run_notebook_and_check,
    save_screenshot,
    select_option,
    set_slider,
    wait_for_figures_to_change,
)
from browser.wrapping import wrapped_output_lines


def _wait_summary(page: Any, text: str) -> None:
    page.wait_for_function(
        "t => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".some(e => e.textContent.includes(t))", arg=text, timeout=60_000)


def _image_src(page: Any) -> str:
    return page.evaluate("() => { const i = document.querySelector("
                         "'.jp-NotebookPanel .widget-image'); return i ? i.src : ''; }")


def _scroll_to(page: Any, index: int) -> None:
    page.evaluate("async (i) => { const nb = window.jupyterapp.shell.currentWidget.content;"
                  " if (nb.scrollToItem) await nb.scrollToItem(i, 'center');"
                  " nb.widgets[i].node.scrollIntoView({block: 'center'}); }", index)
    page.wait_for_timeout(500)


@pytest.mark.notebook("08_collectives.ipynb")
def test_collectives_notebook_and_explorer(lab, page):
    checks = run_notebook_and_check(page, lab, "08_collectives.ipynb", timeout_s=400)
    for call in ("collective_figure(", "cost_figure(C.get_preset(\"nvlink4_h100\")",
                 "measured_vs_model_figure(reports[\"all_gather\"]", "scale_figure("):
        (cell,) = [c for c in checks if call in c.source]
        assert cell.figure and cell.images == 1, f"{call}: shown {cell.images} times, not once"
    # the printed tables read line by line in the 1400-px window: no line wraps
    assert wrapped_output_lines(page) == []
    (table,) = [c for c in checks if "print_report(reports[op])" in c.source]
    _scroll_to(page, table.index)
    save_screenshot(page, "08_collectives_benchmark_table")
    (measured,) = [c for c in checks if "measured_vs_model_figure(reports[\"all_gather\"]"
                   in c.source]
    _scroll_to(page, measured.index)
    save_screenshot(page, "08_collectives_measured_vs_model")

    page.locator(".jp-NotebookPanel .widget-image").first.scroll_into_view_if_needed()
    page.wait_for_function(
        "() => { const i = document.querySelector('.jp-NotebookPanel .widget-image');"
        " return i && i.complete && i.naturalWidth > 0; }")
    _wait_summary(page, "all_gather/bruck on 5 ranks: 3 steps")
    first = _image_src(page)
    save_screenshot(page, "08_collectives_before")

    before = figure_fingerprints(page)
    select_option(page, "collective", "reduce_scatter")
    wait_for_figures_to_change(page, before)
    _wait_summary(page, "reduce_scatter/ring on 5 ranks: 4 steps")
    assert _image_src(page) != first, "changing the collective did not redraw the plan"

    before = figure_fingerprints(page)
    select_option(page, "algorithm", "recursive_halving")
    wait_for_figures_to_change(page, before)
    _wait_summary(page, "reduce_scatter/recursive_halving on 5 ranks: 4 steps")

    before = figure_fingerprints(page)
    set_slider(page, "world size", 8)
    wait_for_figures_to_change(page, before)
    _wait_summary(page, "reduce_scatter/recursive_halving on 8 ranks: 3 steps")

    before = figure_fingerprints(page)
    set_slider(page, "step", 2)
    wait_for_figures_to_change(page, before)
    _wait_summary(page, "showing the state after step 2/3")
    save_screenshot(page, "08_collectives_after")
