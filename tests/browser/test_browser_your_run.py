"""Real browser: 13_your_training_run runs in JupyterLab, its figures show once each as an image,
the numbers its prose states are the ones its cells print, no printed report wraps in a 1400-px
window, and its explorer redraws when another trace is picked."""

from __future__ import annotations

import pytest

from browser.lab import (
    EXPLORER_IMAGES,
    explorer_pictures,
    output_text,
    run_notebook_and_check,
    save_screenshot,
    select_option,
    wait_for_figures_to_change,
    widget_text,
)
from browser.wrapping import wrapped_output_lines


@pytest.mark.notebook("13_your_training_run.ipynb")
def test_your_run_notebook_runs_and_its_explorer_moves(lab, page):
    checks = run_notebook_and_check(page, lab, "13_your_training_run.ipynb", timeout_s=300)
    for call in ("rank_gantt(j3)", "breakdown_figure(j3)", "straggler_figure(j3)",
                 "model_figure(ja)", "rank_gantt(js)"):
        (cell,) = [c for c in checks if c.source.strip() == call]
        assert cell.figure and cell.images == 1, f"{call}: shown {cell.images} times, not once"
    text = output_text(page)
    assert "waiting for the last rank: 193.10 ms in all" in text
    assert "rank 1 last in 8/10 calls, caused 381.33 ms" in text
    assert "21 priced: {'all_reduce': 15, 'broadcast': 6}; not priced: 0" in text
    assert wrapped_output_lines(page) == [], "printed reports must not wrap"
    before, text_before = explorer_pictures(page), widget_text(page)
    assert len(before) == 1, f"the explorer shows one picture, not {len(before)}"
    assert "stragglers: 1" in text_before
    select_option(page, "trace", "gloo_ddp_4ranks")
    wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    page.wait_for_function(
        "t => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".map(e => e.textContent).join(' | ') !== t", arg=text_before, timeout=60_000)
    assert "rank 3 (host)" in widget_text(page) and "stragglers: 3" in widget_text(page)
    save_screenshot(page, "13_your_training_run_after_trace")
