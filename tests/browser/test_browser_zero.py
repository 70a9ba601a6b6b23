"""Real browser: 09_zero runs in JupyterLab and its explorer redraws when the stage moves: the
picture changes (the chosen stage's line is drawn thick, with a dot at the chosen world size), not
only the line of text."""

from __future__ import annotations

import time

import pytest

from browser.lab import (
    EXPLORER_IMAGES,
    explorer_pictures,
    nudge_slider,
    run_notebook_and_check,
    save_screenshot,
    set_slider,
    slider_value,
    wait_for_figures_to_change,
    widget_text,
)


@pytest.mark.notebook("09_zero.ipynb")
def test_zero_notebook_stage_widget(lab, page):
    checks = run_notebook_and_check(page, lab, "09_zero.ipynb", timeout_s=600)
    assert any(c.figure for c in checks), "the notebook rendered no figure"
    before, text_before = explorer_pictures(page), widget_text(page)
    assert len(before) == 1, f"the explorer shows one picture, not {len(before)}"
    assert "ZeRO-2" in text_before and "largest model" in text_before
    set_slider(page, "stage", 3)
    after_stage = wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    page.wait_for_function(
        "t => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".map(e => e.textContent).join(' | ') !== t", arg=text_before, timeout=60_000)
    assert "ZeRO-3, N=64" in widget_text(page)
    save_screenshot(page, "09_zero_after_stage")
    # world sizes step evenly on the log axis: one key press each, 64 -> 48, 32, 24, 16, 12, 8
    for shown in ("48", "32", "24", "16", "12", "8"):
        nudge_slider(page, "world size", -1)
        deadline = time.monotonic() + 60
        while slider_value(page, "world size") != shown and time.monotonic() < deadline:
            time.sleep(0.2)
        assert slider_value(page, "world size") == shown
    wait_for_figures_to_change(page, after_stage, selector=EXPLORER_IMAGES)
    page.wait_for_function(
        "t => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".map(e => e.textContent).join(' | ').includes(t)", arg="ZeRO-3, N=8:", timeout=60_000)
    assert "ZeRO-3, N=8:" in widget_text(page)
    save_screenshot(page, "09_zero_after_world_size")
