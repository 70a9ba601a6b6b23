"""Real browser: notebook 07 runs in JupyterLab, every figure shows as an image, and its profile
picker is the one choice the notebook reads: it starts at ``choose_profile``'s pick, every later
cell that reads a profile reports that one, and after another pick and a re-run of the cells
below every one of them reports the new pick (a folder that is not a profile changes nothing)."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from browser.lab import (
    _widget_box,
    error_outputs,
    output_widget_text,
    run_notebook_and_check,
    save_screenshot,
    select_option,
    wait_for_output_widget_text,
)
from distlab.profile.load import choose_profile, list_profiles, load_profile, machine_key_here
from helpers.paths import PROFILES, ROOT

LOGS = ROOT / "results" / "nccl-tests-logs"

_CELLS = """() => {
    const nb = window.jupyterapp.shell.currentWidget.content;
    const join = t => Array.isArray(t) ? t.join('') : String(t);
    const cells = [];
    nb.widgets.forEach((cell, index) => {
        if (cell.model.type !== 'code') return;
        let text = '';
        for (const out of cell.model.outputs.toJSON()) {
            if (out.text !== undefined) text += join(out.text);
        }
        cells.push({index, source: cell.model.sharedModel.getSource(), text});
    });
    return cells;
}"""


def _cells(page: Any) -> list[dict[str, Any]]:
    return list(page.evaluate(_CELLS))


def _readers(cells: list[dict[str, Any]], picker: int) -> list[dict[str, Any]]:
    """The code cells after the picker's that read a profile (use the name ``prof``)."""
    return [c for c in cells if c["index"] > picker and re.search(r"\bprof\b", c["source"])]


def _stale(cells: list[dict[str, Any]], picker: int, name: str) -> list[str]:
    return [f"cell {c['index']}: {c['text'][:80]!r}" for c in _readers(cells, picker)
            if f"profile: {name}\n" not in c["text"]]


@pytest.mark.notebook("07_profile.ipynb")
def test_profile_notebook_every_cell_follows_the_picker(lab, page):
    checks = run_notebook_and_check(page, lab, "07_profile.ipynb", timeout_s=300)
    assert sum(c.figure for c in checks) >= 4, "notebook 07 should draw at least four figures"
    expected = choose_profile([load_profile(p) for p in list_profiles(PROFILES)],
                              machine_key_here())[0].name
    cells = _cells(page)
    picker = next(c["index"] for c in cells if c["source"].strip() == "choice.widget")
    readers = _readers(cells, picker)
    assert len(readers) >= 8, [c["source"][:60] for c in readers]
    assert all("prof = choice.use()" in c["source"] for c in readers), \
        "a cell below the picker reads a profile without asking the picker"

    # the picker starts at the notebook's own choice, and every later cell reports it
    _widget_box(page, "profile").scroll_into_view_if_needed()
    wait_for_output_widget_text(page, f"reading {expected}")
    shown = _widget_box(page, "profile").locator("select").first
    assert shown.evaluate("s => s.options[s.selectedIndex].text") == expected
    assert _stale(cells, picker, expected) == []

    # another pick, then run the picker's cell and all below (what the picker says to do)
    options = _widget_box(page, "profile").locator("option").all_text_contents()
    other = "h100-2026-11-23" if expected != "h100-2026-11-23" else "vm-2026-11-23"
    assert other in options, options
    select_option(page, "profile", other)
    wait_for_output_widget_text(page, f"reading {other} (")
    assert "Run Selected Cell and All Below" in output_widget_text(page)
    save_screenshot(page, "07_profile_after_pick")
    page.evaluate("""(i) => {
        const panel = window.jupyterapp.shell.currentWidget;
        panel.content.activeCellIndex = i;
        return window.jupyterapp.commands.execute('notebook:run-all-below');
    }""", picker)
    deadline = time.monotonic() + 300
    while True:
        assert error_outputs(page) == [], error_outputs(page)
        stale = _stale(_cells(page), picker, other)
        if not stale:
            break
        assert time.monotonic() < deadline, f"cells still not on {other}: {stale}"
        time.sleep(1.0)
    assert shown.evaluate("s => s.options[s.selectedIndex].text") == other  # re-shown, kept
    ddp_cell = next(c["index"] for c in cells if "vp.ddp_figure(prof)" in c["source"])
    page.evaluate("""async (i) => {
        const nb = window.jupyterapp.shell.currentWidget.content;
        if (nb.scrollToItem) await nb.scrollToItem(i, 'center');
        nb.widgets[i].node.scrollIntoView({block: 'center'});
    }""", ddp_cell)
    time.sleep(1.0)
    save_screenshot(page, "07_profile_after_rerun")

    # a folder that is not a profile: one line, the choice stays
    box = _widget_box(page, "path").locator("input").first
    box.fill("/no/such/profile")
    box.press("Enter")
    wait_for_output_widget_text(page, "is not a profile folder")
    assert f"still reading {other}" in output_widget_text(page)
    save_screenshot(page, "07_profile_picker_bad_path")
    _paste_a_log(page)


def _paste_a_log(page: Any) -> None:
    """The paste box as a box owner uses it: the 3-node log pasted, judging it without the
    NICs says what is missing in one line; with them, the report names the fabric and draws
    its figure."""
    area = page.locator("textarea[placeholder^='paste all_reduce_perf']").first
    area.scroll_into_view_if_needed()
    area.fill((LOGS / "h100_3nodes_roce_two_racks.log").read_text())
    judge = page.get_by_role("button", name="judge").first
    judge.click()
    wait_for_output_widget_text(page, "cannot judge it: ", timeout_s=60)
    assert "give --nics N --nic-gbps RATE" in output_widget_text(page)
    for label, value in (("NICs/node", "16"), ("Gb/s each", "200")):
        field = _widget_box(page, label).locator("input").first
        field.fill(value)
        field.press("Enter")
    select_option(page, "fabric", "roce")
    time.sleep(0.5)
    judge.click()
    wait_for_output_widget_text(page, "cause 1: the fabric or its routing between nodes",
                                timeout_s=60)
    assert "verdict: low: 11 of 11 sizes" in output_widget_text(page)
    box = page.locator(".widget-output").filter(has_text="cause 1: the fabric").first
    box.locator("img").first.wait_for(timeout=30_000)
    box.scroll_into_view_if_needed()
    save_screenshot(page, "07_profile_your_log")
