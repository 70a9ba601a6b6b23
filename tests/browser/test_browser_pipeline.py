"""Real browser: notebooks 02 and 03 run top to bottom in JupyterLab, and their explorers redraw
when a slider moves."""

from __future__ import annotations

from browser.lab import (error_outputs, figure_fingerprints, open_notebook, run_all_cells,
                         save_screenshot, set_slider, wait_for_figures_to_change)


def test_pipeline_overlap_explorer_redraws(lab, page):
    open_notebook(page, lab, "02_pipeline_overlap.ipynb")
    run_all_cells(page, timeout_s=300)
    errors = error_outputs(page)
    assert errors == [], f"cells raised in the browser: {errors}"
    before = figure_fingerprints(page)
    assert before, "the notebook rendered no figure"
    set_slider(page, "read ms", 9)
    after = wait_for_figures_to_change(page, before)
    assert len(after) == len(before)
    save_screenshot(page, "02_pipeline_overlap_after_slider")


def test_async_parts_explorer_redraws(lab, page):
    open_notebook(page, lab, "03_async_parts.ipynb")
    run_all_cells(page, timeout_s=300)
    errors = error_outputs(page)
    assert errors == [], f"cells raised in the browser: {errors}"
    before = figure_fingerprints(page)
    assert before, "the notebook rendered no figure"
    set_slider(page, "load ms", 80)
    wait_for_figures_to_change(page, before)
    save_screenshot(page, "03_async_parts_after_slider")
