"""Real browser: notebook 05 runs top to bottom in JupyterLab and the prefetcher explorer
measures again and redraws when the compute slider moves."""

from __future__ import annotations

from browser.lab import (error_outputs, figure_fingerprints, open_notebook, page_text,
                         run_all_cells, save_screenshot, set_slider, wait_for_figures_to_change)


def test_transfers_prefetch_explorer_redraws(lab, page):
    open_notebook(page, lab, "05_transfers.ipynb")
    run_all_cells(page, timeout_s=300)
    errors = error_outputs(page)
    assert errors == [], f"cells raised in the browser: {errors}"
    assert "no GPU number exists" in page_text(page) or "transfers_" in page_text(page)
    before = figure_fingerprints(page)
    assert before, "the notebook rendered no figure"
    set_slider(page, "compute ms", 12)
    after = wait_for_figures_to_change(page, before)
    assert len(after) == len(before)
    save_screenshot(page, "05_transfers_after_slider")
