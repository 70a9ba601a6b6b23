"""Real browser: 16_tensor_parallel runs in JupyterLab, each of its figures shows once as an
image, its tables do not wrap, and the explorer redraws when sequence parallelism is turned on
and when the ranks move to two nodes over TCP."""

from __future__ import annotations

import pytest

from browser.lab import (
    EXPLORER_IMAGES,
    explorer_pictures,
    output_text,
    run_notebook_and_check,
    save_screenshot,
    select_option,
    wait_for_figures_to_change,
    wait_for_widget_text,
    widget_text,
)
from browser.wrapping import wrapped_output_lines


@pytest.mark.notebook("16_tensor_parallel.ipynb")
def test_tensor_parallel_notebook_figures_and_widget(lab, page):
    checks = run_notebook_and_check(page, lab, "16_tensor_parallel.ipynb", timeout_s=300)
    for call in ("block_figure(run)", "trace_figure(run)", "price_figure(HIDDENS"):
        (cell,) = [c for c in checks if call in c.source and "import" not in c.source]
        assert cell.figure and cell.images == 1, f"{call}: shown {cell.images} times, not once"
    assert sum(c.figure for c in checks) == 3, "notebook 16 draws three figures"
    text = output_text(page)
    assert "tp+sp backward all_reduce                      2" in text
    assert "tensor + sequence + selective         8            4.25          102" in text
    assert "vs one process: output within" in text
    assert wrapped_output_lines(page) == [], "printed tables must not wrap"

    before = explorer_pictures(page)
    assert len(before) == 1, f"the explorer shows one picture, not {before}"
    assert "collectives 1.08 ms per layer" in widget_text(page)
    page.get_by_role("checkbox", name="sequence parallel").first.check()
    after = wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    assert "(without SP 552 MiB)" in wait_for_widget_text(page, "without SP 552 MiB")
    select_option(page, "ranks", "tcp100")
    wait_for_figures_to_change(page, after, selector=EXPLORER_IMAGES)
    assert "collectives 20.7 ms per layer" in wait_for_widget_text(page, "20.7 ms")
    save_screenshot(page, "16_tensor_parallel_explorer")
