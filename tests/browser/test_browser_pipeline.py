"""Real browser: notebooks 02 and 03 run top to bottom in JupyterLab, every figure shows as an
image, and their explorers show what the model says for a new slider value."""

from __future__ import annotations

import re
from typing import Any

import pytest

from browser.lab import (
    EXPLORER_IMAGES,
    explorer_pictures,
    run_notebook_and_check,
    save_screenshot,
    set_slider,
    slider_value,
    wait_for_figures_to_change,
    widget_text,
)
from browser.wrapping import wrapped_output_lines


def _wait_text_change(page: Any, before: str, timeout_s: float = 60.0) -> str:
    page.wait_for_function(
        "t => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".map(e => e.textContent).join(' | ') !== t", arg=before, timeout=timeout_s * 1000)
    return widget_text(page)


def _number(pattern: str, text: str) -> float:
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in {text!r}"
    return float(m.group(1))


@pytest.mark.notebook("02_pipeline_overlap.ipynb")
def test_pipeline_overlap_explorer_follows_read_cost(lab, page):
    checks = run_notebook_and_check(page, lab, "02_pipeline_overlap.ipynb", timeout_s=300)
    assert any(c.figure for c in checks), "the notebook rendered no figure"
    # the plan table, the stage costs and the skipped stages' reasons once wrapped the window
    assert wrapped_output_lines(page) == []
    items, read_ms = int(slider_value(page, "items")), float(slider_value(page, "read ms"))
    before_text, before = widget_text(page), explorer_pictures(page)
    assert len(before) == 1, f"the explorer shows one picture, not {len(before)}"
    # after Run All the explorer shows the run it measured at construction, though a later
    # cell moved decode away and back
    assert re.search(r"measured [\d.]+ ms steady", before_text), before_text
    save_screenshot(page, "02_pipeline_overlap_after_run_all")
    no_overlap = _number(r"no-overlap ([\d.]+) ms", before_text)
    set_slider(page, "read ms", 9)
    text = _wait_text_change(page, before_text)
    wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    # the no-overlap time is items x (sum of stage costs): raising read by d ms adds items x d
    after = _number(r"no-overlap ([\d.]+) ms", text)
    assert abs((after - no_overlap) - items * (9 - read_ms)) <= 0.2, (before_text, text)
    # no pipeline beats its slowest stage: the bound is at least items x 9 ms
    assert _number(r"bound ([\d.]+) ms", text) >= items * 9 - 0.1, text
    assert "measured" not in text, "a measurement of the old settings is still shown"
    save_screenshot(page, "02_pipeline_overlap_after_slider")


@pytest.mark.notebook("03_async_parts.ipynb")
def test_async_parts_explorer_follows_load_time(lab, page):
    checks = run_notebook_and_check(page, lab, "03_async_parts.ipynb", timeout_s=300)
    assert any(c.figure for c in checks), "the notebook rendered no figure"
    assert wrapped_output_lines(page) == []
    pattern = (r"trainer idle: sync (\d+)%, async \(queue (\d+)\) (\d+)%; "
               r"wall (\d+) ms -> (\d+) ms")
    before_text, before = widget_text(page), explorer_pictures(page)
    assert len(before) == 1, f"the explorer shows one picture, not {len(before)}"
    m0 = re.search(pattern, before_text)
    assert m0, before_text
    assert float(slider_value(page, "load ms")) < 80
    set_slider(page, "load ms", 80)
    text = _wait_text_change(page, before_text)
    wait_for_figures_to_change(page, before, selector=EXPLORER_IMAGES)
    m = re.search(pattern, text)
    assert m, text
    sync_idle, queue, async_idle, sync_wall, async_wall = (int(g) for g in m.groups())
    assert queue == int(slider_value(page, "queue size"))
    # slower loads: the sync trainer idles more and both runs take longer; overlap never loses
    assert sync_idle > int(m0.group(1)) and sync_wall > int(m0.group(4))
    assert async_wall <= sync_wall and async_idle <= sync_idle
    save_screenshot(page, "03_async_parts_after_slider")
