"""Real browser: 00_start_here runs top to bottom in JupyterLab and shows the allreduce result."""

from __future__ import annotations

from browser.lab import error_outputs, open_notebook, page_text, run_all_cells, save_screenshot


def test_start_here_runs_in_jupyterlab(lab, page):
    open_notebook(page, lab, "00_start_here.ipynb")
    run_all_cells(page, timeout_s=240)
    errors = error_outputs(page)
    save_screenshot(page, "00_start_here")
    assert errors == [], f"cells raised in the browser: {errors}"
    text = page_text(page)
    assert "allreduce result on every rank: [10.0, 100.0]" in text
    assert "gloo" in text and "torch" in text
