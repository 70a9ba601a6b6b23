"""Real browser: 01_samplers runs in JupyterLab and the explorer redraws when the world size
moves."""

from __future__ import annotations

from typing import Any

import pytest

from browser.lab import (
    ARTIFACTS,
    explorer_widths,
    figure_fingerprints,
    run_notebook_and_check,
    save_screenshot,
    set_checkbox,
    set_slider,
    wait_for_figures_to_change,
)
from browser.wrapping import wrapped_output_lines

# JupyterLab renders only the cells near the viewport, so text is read from the notebook model
_OUTPUT_TEXT = """() => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    const texts = [];
    for (const cell of nb.widgets) {
        if (cell.model.type !== 'code') continue;
        for (const out of cell.model.outputs.toJSON()) {
            if (out.text) texts.push(Array.isArray(out.text) ? out.text.join('') : out.text);
        }
    }
    return texts.join('\\n');
}"""


def _explorer_state(page: Any) -> dict[str, str]:
    return page.evaluate(
        """() => {
            const img = document.querySelector('.jp-NotebookPanel .widget-image');
            const html = [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]
                .map(e => e.textContent).join(' ');
            return {src: img ? img.src : '', summary: html};
        }""")


@pytest.mark.notebook("01_samplers.ipynb")
def test_samplers_notebook_and_world_size_slider(lab, page):
    checks = run_notebook_and_check(page, lab, "01_samplers.ipynb", timeout_s=300)
    (picture,) = [c for c in checks if "assignment_figure(" in c.source and c.figure]
    assert picture.images == 1, "the assignment figure must show exactly once, as an image"
    assert "identical to torch.utils.data.DistributedSampler" in page.evaluate(_OUTPUT_TEXT)
    assert wrapped_output_lines(page) == []   # the benchmark's ratio line was 139 characters

    page.locator(".jp-NotebookPanel .widget-image").first.scroll_into_view_if_needed()
    page.wait_for_function(
        "() => { const i = document.querySelector('.jp-NotebookPanel .widget-image');"
        " return i && i.complete && i.naturalWidth > 0; }")
    before = figure_fingerprints(page)
    state = _explorer_state(page)
    assert before and state["src"], "the explorer's picture was not rendered"
    assert "on 4 ranks" in state["summary"]
    save_screenshot(page, "01_samplers_before_slider")

    set_slider(page, "world size", 7)
    wait_for_figures_to_change(page, before)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".some(e => e.textContent.includes('on 7 ranks'))")
    after = _explorer_state(page)
    assert after["src"] and after["src"] != state["src"], "the explorer's picture did not change"
    save_screenshot(page, "01_samplers_after_slider")

    # 16 ranks, length 22, drop_last: rank 15 once had the dropped indices' grey
    before = figure_fingerprints(page)
    set_slider(page, "world size", 16)
    before = wait_for_figures_to_change(page, before)
    set_checkbox(page, "drop_last", True)
    wait_for_figures_to_change(page, before)
    page.wait_for_function(
        "() => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".some(e => e.textContent.includes('on 16 ranks') && e.textContent.includes('dropped 6'))")
    ((natural, shown),) = explorer_widths(page)
    assert abs(natural - shown) <= 1, f"the {natural}-px picture is shown {shown:.0f} px wide"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.locator(".jp-NotebookPanel .widget-image").first.screenshot(
        path=str(ARTIFACTS / "01_samplers_16_ranks_drop_last.png"))
