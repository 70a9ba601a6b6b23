"""Real browser: 06_ddp runs in JupyterLab and its explorer redraws when the bucket cap moves."""

from __future__ import annotations

from typing import Any

from browser.lab import (error_outputs, figure_fingerprints, open_notebook, run_all_cells,
                         save_screenshot, set_slider, wait_for_figures_to_change)


def _summary(page: Any) -> str:
    return str(page.evaluate(
        "() => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".map(e => e.textContent).join(' | ')"))


def test_ddp_notebook_bucket_cap_widget(lab, page):
    open_notebook(page, lab, "06_ddp.ipynb")
    run_all_cells(page, timeout_s=600)
    errors = error_outputs(page)
    assert errors == [], f"cells raised in the browser: {errors}"
    before, text_before = figure_fingerprints(page), _summary(page)
    assert before, "the notebook rendered no figure"
    assert "buckets" in text_before
    set_slider(page, "bucket cap MB", 0.1)
    wait_for_figures_to_change(page, before)
    page.wait_for_function(
        "t => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".map(e => e.textContent).join(' | ') !== t", arg=text_before, timeout=60_000)
    assert _summary(page) != text_before
    save_screenshot(page, "06_ddp_after_bucket_cap")
