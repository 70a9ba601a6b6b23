"""Real browser: 04_allreduce runs in JupyterLab, its figures show once each, the checks of
its measured section print, no printed table wraps in a 1400-px window, and the plan picture
changes with its widgets."""

from __future__ import annotations

from typing import Any

import pytest

from browser.lab import (
    figure_fingerprints,
    output_text,
    run_notebook_and_check,
    save_screenshot,
    select_option,
    set_slider,
    wait_for_figures_to_change,
)
from browser.wrapping import wrapped_output_lines


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


@pytest.mark.notebook("04_allreduce.ipynb")
def test_allreduce_notebook_and_plan_widgets(lab, page):
    checks = run_notebook_and_check(page, lab, "04_allreduce.ipynb", timeout_s=400)
    for call in ("plan_figure(", "cost_vs_world_size_figure(", "measured_vs_model_figure(",
                 "gantt(tl)"):
        (cell,) = [c for c in checks if call in c.source]
        assert cell.figure and cell.images == 1, f"{call}: shown {cell.images} times, not once"
    assert not any("refit" in c.source or "window" in c.source for c in checks), \
        "the judging of the model belongs to notebook 11"
    text = output_text(page)
    assert "every measured allreduce returned the exact answer" in text
    assert "4 ranks, 64-256 KiB: rabenseifner and hierarchical at" in text
    assert "size(B)          algorithm  time(us) predicted(us)  error%" in text
    assert wrapped_output_lines(page) == [], "printed tables must not wrap"

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

    # the step slider and the picture's caption count the same steps
    before_step = figure_fingerprints(page)
    set_slider(page, "step", 2)
    wait_for_figures_to_change(page, before_step)
    _wait_summary(page, "showing the state after step 2/4")
    save_screenshot(page, "04_allreduce_after")
