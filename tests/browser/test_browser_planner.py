"""Real browser: 17_planner runs in JupyterLab, each of its figures shows once as an image, its
tables do not wrap, and the explorer plans again (figure, summary and table) when the GPU
count moves."""

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
from distlab.judge.plan_published import judge_published
from distlab.plan import hardware, model_spec
from distlab.plan.planner import plan

FIGURES = ("memory_figure(prices)", "step_figure(prices)", "scaling_figure(SERIES)",
           "judged_figure(judged)", "kernels_figure(KERNELS)", "pipeline_figure(small)")


def _fit_line(gpus: int) -> str:
    """What the explorer's summary starts with for Llama 3 8B on ``gpus`` H100s, 64 sequences
    of 8192 tokens (computed here, the same on every machine)."""
    p = plan(model_spec("llama3-8b", seq_len=8192), hardware("h100", gpus), 64, top=5)
    return f"{len(p.ranked)} of {len(p.ranked) + len(p.rejected)} layouts fit; fastest " \
           f"{p.best.layout.label}:"


@pytest.mark.notebook("17_planner.ipynb")
def test_planner_notebook_figures_and_widget(lab, page):
    checks = run_notebook_and_check(page, lab, "17_planner.ipynb", timeout_s=300)
    for call in FIGURES:
        (cell,) = [c for c in checks if call in c.source and "import" not in c.source]
        assert cell.figure and cell.images == 1, f"{call}: shown {cell.images} times, not once"
    assert sum(c.figure for c in checks) == len(FIGURES), "notebook 17 draws six figures"
    text = output_text(page)
    assert "331 of 1194 layouts fit; the 8 fastest:" in text
    held = judge_published().step_summary("held_out")
    assert f"held_out: step |error| median {held.median:.1f}%" in text
    assert wrapped_output_lines(page) == [], "printed tables must not wrap"

    before = explorer_pictures(page)
    assert len(before) == 1, f"the explorer shows one picture, not {before}"
    assert _fit_line(16) in widget_text(page)
    assert "tok/s/GPU" in widget_text(page), "the table under the explorer's figure"
    select_option(page, "GPUs", "32")
    wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    assert "planned in" in wait_for_widget_text(page, _fit_line(32))
    save_screenshot(page, "17_planner_explorer")
