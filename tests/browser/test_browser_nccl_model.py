"""Real browser: 14_nccl_model runs in JupyterLab, each of its figures shows once as an image,
the numbers its prose states are the ones its cells print, and no printed table wraps in a
1400-px window."""

from __future__ import annotations

import pytest

from browser.lab import output_text, run_notebook_and_check, save_screenshot
from browser.wrapping import wrapped_output_lines


@pytest.mark.notebook("14_nccl_model.ipynb")
def test_nccl_model_notebook_runs_and_shows_its_figures(lab, page):
    checks = run_notebook_and_check(page, lab, "14_nccl_model.ipynb", timeout_s=300)
    for call, times in (("nccl_choice_figure(", 1), ("nccl_tables_figure(", 1),
                        ("nccl_nodes_figure(", 1), ("rccl_tables_figure(", 2)):
        cells = [c for c in checks if call in c.source and "import" not in c.source]
        assert len(cells) == times, f"{call}: in {len(cells)} cells, not {times}"
        for cell in cells:
            assert cell.figure and cell.images == 1, f"{call}: shown {cell.images} times"
    assert sum(c.figure for c in checks) == 5, "notebook 14 draws five figures"
    text = output_text(page)
    assert "# 8x H100 SXM (NVLink 4 + NVSwitch), 8 GPUs, NCCL 2.28.9, torch" in text
    assert "median |error|: model " in text and "NCCL's estimate" in text
    assert "2-4 nodes of 8: 89 points, median |error|" in text
    assert "# what the model cannot price" in text
    assert "# RCCL 2.26.6 allreduce on 1 x 8 MI300X/MI325X (gfx942), 8 GPUs" in text
    assert "4-64 MiB: the 2.26.6 cluster takes up to 1.51x the 2.27.7 one's time" in text
    assert wrapped_output_lines(page) == [], "printed tables must not wrap"
    save_screenshot(page, "14_nccl_model")
