"""Real browser: 04_allreduce runs in JupyterLab and the plan picture changes with its widgets."""

from __future__ import annotations

from typing import Any

from browser.lab import (
    error_outputs,
    figure_fingerprints,
    open_notebook,
    run_all_cells,
    save_screenshot,
    select_option,
    set_slider,
    wait_for_figures_to_change,
)


def _plan_state(page: Any) -> dict[str, str]:
    """The plan explorer's picture (first widget image) and its summary line."""
    return page.evaluate(
        """() => {
            const img = document.querySelector('.jp-NotebookPanel .widget-image');
            const html = [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]
                .map(e => e.textContent).join(' | ');
            return {src: img ? img.src : '', summary: html};
        }""")


def _wait_summary(page: Any, text: str) -> None:
    page.wait_for_function(
        "t => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".some(e => e.textContent.includes(t))", arg=text, timeout=60_000)


def test_allreduce_notebook_and_plan_widgets(lab, page):
    open_notebook(page, lab, "04_allreduce.ipynb")
    run_all_cells(page, timeout_s=400)
    errors = error_outputs(page)
    assert errors == [], f"cells raised in the browser: {errors}"

    page.locator(".jp-NotebookPanel .widget-image").first.scroll_into_view_if_needed()
    page.wait_for_function(
        "() => { const i = document.querySelector('.jp-NotebookPanel .widget-image');"
        " return i && i.complete && i.naturalWidth > 0; }")
    _wait_summary(page, "ring on 4 ranks: 6 steps")
    before = figure_fingerprints(page)
    state = _plan_state(page)
    assert before and state["src"], "the plan picture was not rendered"
    save_screenshot(page, "04_allreduce_before")

    select_option(page, "algorithm", "recursive_doubling")
    wait_for_figures_to_change(page, before)
    _wait_summary(page, "recursive_doubling on 4 ranks: 2 steps")
    after_algo = _plan_state(page)
    assert after_algo["src"] != state["src"], "changing the algorithm did not redraw the plan"

    middle = figure_fingerprints(page)
    set_slider(page, "world size", 6)
    wait_for_figures_to_change(page, middle)
    _wait_summary(page, "recursive_doubling on 6 ranks: 4 steps")
    after_ws = _plan_state(page)
    assert after_ws["src"] not in (state["src"], after_algo["src"])
    save_screenshot(page, "04_allreduce_after")
