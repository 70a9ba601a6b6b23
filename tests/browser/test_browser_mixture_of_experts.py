"""Real browser: 18_mixture_of_experts runs in JupyterLab (its expert-parallel run on gloo ranks
included), each of its figures shows once as an image, its tables do not wrap, and the
explorer redraws the load when the expert-parallel ranks and the top-k move."""

from __future__ import annotations

import pytest

from browser.lab import (
    EXPLORER_IMAGES,
    explorer_pictures,
    explorer_widths,
    nudge_slider,
    output_text,
    run_notebook_and_check,
    save_screenshot,
    wait_for_figures_to_change,
    wait_for_widget_text,
    widget_text,
)
from browser.wrapping import wrapped_output_lines
from distlab.evidence.plan.judged_moe import judge_moe
from distlab.moe import expert_load, random_routing
from distlab.viz.moe import load_summary

FIGURES = ("load_figure(load)", "alltoall_figure(", "step_figure(result.ranked)",
           "layer_step_figure(")


def _summary(ep: int, top_k: int) -> str:
    """The explorer's line at ``ep`` ranks and ``top_k`` (computed here, the same everywhere)."""
    load = expert_load(random_routing(64, top_k, 4096, seed=0), ep, dim=64, hidden=128)
    return f"ep={ep}, top-{top_k}: {load_summary(load)}"


@pytest.mark.notebook("18_mixture_of_experts.ipynb")
def test_mixture_of_experts_notebook_figures_and_explorer(lab, page):
    checks = run_notebook_and_check(page, lab, "18_mixture_of_experts.ipynb", timeout_s=300)
    for call in FIGURES:
        (cell,) = [c for c in checks if call in c.source and "import" not in c.source]
        assert cell.figure and cell.images == 1, f"{call}: shown {cell.images} times, not once"
    assert sum(c.figure for c in checks) == len(FIGURES), "notebook 18 draws four figures"
    text = output_text(page)
    assert "vs one process: output within" in text
    assert "1 dp256 ep16 fsdp mb2 full-ac" in text
    held = judge_moe().summary("held_out")
    assert f"held out: {held.n} runs, tokens/s per GPU |error| median {held.median:.1f}%" in text
    assert "set aside, mb2602_h100_qwen3_30b_a3b:" in text
    assert wrapped_output_lines(page) == [], "printed tables must not wrap"

    before = explorer_pictures(page)
    assert len(before) == 1, f"the explorer shows one picture, not {before}"
    assert _summary(8, 2) in widget_text(page)
    nudge_slider(page, "ep ranks", 1)
    after = wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    wait_for_widget_text(page, _summary(16, 2))
    nudge_slider(page, "top-k", -1)
    wait_for_figures_to_change(page, after, selector=EXPLORER_IMAGES)
    wait_for_widget_text(page, _summary(16, 1))
    ((natural, shown),) = explorer_widths(page)
    assert abs(natural - shown) <= 1, f"the {natural}-px picture is shown {shown:.0f} px wide"
    save_screenshot(page, "18_mixture_of_experts_explorer")
