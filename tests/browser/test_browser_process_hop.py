"""Real browser: notebook 10 runs top to bottom in JupyterLab and shows every figure as an image:
the hop in the path picture, the curves per path, the parts, Hogwild's curves."""

from __future__ import annotations

import pytest

from browser.lab import output_text, run_notebook_and_check, save_screenshot


@pytest.mark.notebook("10_process_hop.ipynb")
def test_process_hop_notebook_shows_its_figures(lab, page):
    checks = run_notebook_and_check(page, lab, "10_process_hop.ipynb", timeout_s=400)
    figures = [c for c in checks if c.figure]
    assert len(figures) >= 4, f"expected the path, curves, parts and Hogwild figures: {figures}"
    assert all(c.images >= 1 for c in figures)
    text = output_text(page)
    assert "worker start-up" in text and "hop per item" in text and "no lock" in text
    save_screenshot(page, "10_process_hop")
