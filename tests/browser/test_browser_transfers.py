"""Real browser: notebook 05 runs top to bottom in JupyterLab, every figure shows as an image,
and the prefetcher explorer measures again and redraws when the compute slider moves."""

from __future__ import annotations

from browser.lab import (
    EXPLORER_IMAGES,
    explorer_pictures,
    output_text,
    run_notebook_and_check,
    save_screenshot,
    set_slider,
    wait_for_figures_to_change,
)


def test_transfers_prefetch_explorer_redraws(lab, page):
    checks = run_notebook_and_check(page, lab, "05_transfers.ipynb", timeout_s=300)
    assert any(c.figure for c in checks), "the notebook rendered no figure"
    text = output_text(page)
    assert "no GPU number exists" in text or "transfers_" in text
    before = explorer_pictures(page)
    assert len(before) == 1, f"the explorer shows one picture, not {len(before)}"
    set_slider(page, "compute ms", 12)
    after = wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    assert len(after) == len(before)
    save_screenshot(page, "05_transfers_after_slider")
