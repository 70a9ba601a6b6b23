"""Real browser: 11_judging_the_model runs in JupyterLab, each of its figures shows once as an
image, the numbers its prose states are the ones its cells print, and no printed table wraps
in a 1400-px window."""

from __future__ import annotations

import pytest

from browser.lab import output_text, run_notebook_and_check, save_screenshot
from browser.wrapping import wrapped_output_lines


@pytest.mark.notebook("11_judging_the_model.ipynb")
def test_judging_notebook_runs_and_shows_its_figures(lab, page):
    checks = run_notebook_and_check(page, lab, "11_judging_the_model.ipynb", timeout_s=300)
    for call in ("refit_figure(", "noise_figure(", "windows_figure("):
        (cell,) = [c for c in checks if call in c.source and "import" not in c.source]
        assert cell.figure and cell.images == 1, f"{call}: shown {cell.images} times, not once"
    assert sum(c.figure for c in checks) == 3, "notebook 11 draws three figures"
    text = output_text(page)
    assert "four ranks, judged by means: met on 9 of 9 runs" in text
    assert "windows that meet the target (2 ranks): ['1/16', '1/8', '3/4', '2/2', '1/1']" in text
    assert "the host by the VM's calibrations" in text
    assert "profile  ws          by   n median%" in text, "the judged summary's short header"
    assert "NCCL" not in text, "NCCL's model is notebook 14's"
    assert wrapped_output_lines(page) == [], "printed tables must not wrap"
    save_screenshot(page, "11_judging_the_model")
