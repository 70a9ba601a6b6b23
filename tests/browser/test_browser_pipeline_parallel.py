"""Real browser: 15_pipeline_parallel runs in JupyterLab, each of its figures shows once as an
image (the real run's measured Gantt beside its simulation among them), its tables do not
wrap, and both widgets redraw when moved: the stepper's time step and
the explorer's imbalance (one stage twice as slow)."""

from __future__ import annotations

import pytest

from browser.lab import (
    EXPLORER_IMAGES,
    explorer_pictures,
    output_text,
    run_notebook_and_check,
    save_screenshot,
    set_slider,
    wait_for_figures_to_change,
    wait_for_widget_text,
    widget_text,
)
from browser.wrapping import wrapped_output_lines


@pytest.mark.notebook("15_pipeline_parallel.ipynb")
def test_pipeline_parallel_notebook_figures_and_widgets(lab, page):
    checks = run_notebook_and_check(page, lab, "15_pipeline_parallel.ipynb", timeout_s=300)
    for call in ("plans_gantt([gpipe", "plans_gantt([build_plan", "plans_gantt(zb)",
                 "bubble_curve_figure(", "simulations_gantt(", "compare_gantt(run"):
        (cell,) = [c for c in checks if call in c.source and "import" not in c.source]
        assert cell.figure and cell.images == 1, f"{call}: shown {cell.images} times, not once"
    assert sum(c.figure for c in checks) == 6, "notebook 15 draws six figures"
    text = output_text(page)
    assert "InterleavedZeroBubble 4 2 8        5.9%            5.88%           - 8 8 8 8" in text
    assert "fewest microbatches for a bubble under 10%: {'1F1B': 28, 'ZBVZeroBubble': 6}" in text
    assert "1F1B: 2 ranks x 1 stage(s), 4 microbatches" in text   # the real run (SMOKE sizes)
    assert "vs one process: loss within" in text
    assert wrapped_output_lines(page) == [], "printed tables must not wrap"

    before = explorer_pictures(page)
    assert len(before) == 2, f"the stepper and the explorer show one picture each, not {before}"
    shown = widget_text(page)
    assert "time step 6 of 0..21: r0 idle (4)" in shown
    assert "step 33 ms, bubble 27.3% (closed form for equal stages 27.3%)" in shown
    set_slider(page, "time step", 12)
    after_step = wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    assert after_step[1] == before[1], "moving the stepper redrew the explorer"
    assert "time step 12 of 0..21: r0 0F6 (4)" in wait_for_widget_text(page, "time step 12 of")
    save_screenshot(page, "15_pipeline_parallel_stepper")
    # stage 0 twice as slow: its 8 x 6 ms of work and one wait of 3 ms make the 51 ms step
    set_slider(page, "imbalance", 2)
    after = wait_for_figures_to_change(page, after_step, selector=EXPLORER_IMAGES)
    assert after[0] == after_step[0], "moving the explorer redrew the stepper"
    assert "step 51 ms, bubble 41.2%" in wait_for_widget_text(page, "bubble 41.2%")
    save_screenshot(page, "15_pipeline_parallel_explorer")
