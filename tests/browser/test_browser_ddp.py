"""Real browser: 06_ddp runs in JupyterLab and its explorer redraws when the bucket cap moves."""

from __future__ import annotations

import pytest

from browser.lab import (
    EXPLORER_IMAGES,
    explorer_pictures,
    run_notebook_and_check,
    save_screenshot,
    set_slider,
    wait_for_figures_to_change,
    widget_text,
)


@pytest.mark.notebook("06_ddp.ipynb")
def test_ddp_notebook_bucket_cap_widget(lab, page):
    checks = run_notebook_and_check(page, lab, "06_ddp.ipynb", timeout_s=600)
    assert any(c.figure for c in checks), "the notebook rendered no figure"
    before, text_before = explorer_pictures(page), widget_text(page)
    assert len(before) == 1, f"the explorer shows one picture, not {len(before)}"
    assert "buckets" in text_before
    set_slider(page, "bucket cap MB", 0.1)
    wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    page.wait_for_function(
        "t => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".map(e => e.textContent).join(' | ') !== t", arg=text_before, timeout=60_000)
    assert widget_text(page) != text_before
    save_screenshot(page, "06_ddp_after_bucket_cap")
