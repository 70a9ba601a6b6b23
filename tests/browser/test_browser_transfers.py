"""Real browser: notebook 05 runs top to bottom in JupyterLab, every figure shows as an image, no
printed line wraps, the sweep's table is a scrolling box that holds every row, and the prefetcher
explorer measures again and redraws when the compute slider moves."""

from __future__ import annotations

import re

import pytest

from browser.lab import (
    EXPLORER_IMAGES,
    explorer_pictures,
    output_text,
    run_notebook_and_check,
    save_screenshot,
    set_slider,
    wait_for_figures_to_change,
)
from browser.wrapping import html_tables, wrapped_output_lines
from distlab.transfers.paths import ROW_KINDS


@pytest.mark.notebook("05_transfers.ipynb")
def test_transfers_prefetch_explorer_redraws(lab, page):
    checks = run_notebook_and_check(page, lab, "05_transfers.ipynb", timeout_s=300)
    assert any(c.figure for c in checks), "the notebook rendered no figure"
    text = output_text(page)
    assert "no GPU number exists" in text or "transfers_" in text
    assert wrapped_output_lines(page) == []
    (sweep,) = [c for c in checks if "transfer_html(" in c.source]
    (table,) = html_tables(page, sweep.index)
    assert table["header"][:3] == ["size(B)", "path", "memory"]
    titled = re.search(r"(\d+) rows: every path at every size", text)
    assert titled and table["rows"] == int(titled.group(1)), (titled, table)
    assert table["rows"] % len(ROW_KINDS) == 0     # every path at every size, skipped ones too
    assert table["box_height"] <= 400 < table["table_height"], table     # it scrolls
    assert table["box_width"] <= table["area_width"], table
    save_screenshot(page, "05_transfers_sweep_table")
    before = explorer_pictures(page)
    assert len(before) == 1, f"the explorer shows one picture, not {len(before)}"
    set_slider(page, "compute ms", 12)
    after = wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    assert len(after) == len(before)
    save_screenshot(page, "05_transfers_after_slider")
