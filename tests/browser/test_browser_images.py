"""Real browser: notebook 12 runs top to bottom in JupyterLab, shows every figure as an image, no
printed line wraps, and its explorer says what the model says when the workers slider and the
image size change."""

from __future__ import annotations

import re
from typing import Any

import pytest

from browser.lab import (
    EXPLORER_IMAGES,
    explorer_pictures,
    output_text,
    run_notebook_and_check,
    save_screenshot,
    select_option,
    set_slider,
    wait_for_figures_to_change,
    widget_text,
)
from browser.wrapping import wrapped_output_lines

SUMMARY = (r"(\d+x\d+), (\d+) workers \((\d+) busy on (\d+) cores\): (\d+) images/s, "
           r"bottleneck (\w+)")


def _summary(page: Any, before: str, timeout_s: float = 60.0) -> re.Match[str]:
    """The explorer's summary once it differs from ``before``, parsed."""
    page.wait_for_function(
        "t => [...document.querySelectorAll('.jp-NotebookPanel .widget-html')]"
        ".map(e => e.textContent).join(' | ') !== t", arg=before, timeout=timeout_s * 1000)
    m = re.search(SUMMARY, widget_text(page))
    assert m, widget_text(page)
    return m


@pytest.mark.notebook("12_images.ipynb")
def test_images_notebook_shows_its_figures_and_explorer(lab, page):
    checks = run_notebook_and_check(page, lab, "12_images.ipynb", timeout_s=300)
    figures = [c for c in checks if c.figure]
    assert len(figures) >= 4, f"expected the crops, workers, Gantt and PCIe figures: {figures}"
    assert all(c.images >= 1 for c in figures)
    text = output_text(page)
    assert "decode model (Pillow)" in text and "bottleneck" in text and "skipped" in text
    assert "the worker stages at once: processes: 2 at once" in text
    assert wrapped_output_lines(page) == []
    before, pictures = widget_text(page), explorer_pictures(page)
    assert len(pictures) == 1, f"the explorer shows one picture, not {len(pictures)}"
    m0 = re.search(SUMMARY, before)
    assert m0 and m0.group(1) == "500x375" and m0.group(2) == "2", before
    set_slider(page, "workers", 1)
    one = _summary(page, before)
    pictures = wait_for_figures_to_change(page, pictures, selector=EXPLORER_IMAGES)
    # one worker process, one busy core; the bottleneck named is one of the plan's stations
    assert one.group(2) == "1" and one.group(3) == "1", one.group(0)
    assert one.group(6) in ("worker", "step", "cores"), one.group(0)
    text = widget_text(page)
    select_option(page, "image size", "1600x1200")
    large = _summary(page, text)
    wait_for_figures_to_change(page, pictures, selector=EXPLORER_IMAGES)
    # ten times the pixels: fewer images per second
    assert large.group(1) == "1600x1200" and int(large.group(5)) < int(one.group(5))
    save_screenshot(page, "12_images")
