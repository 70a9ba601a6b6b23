"""Real browser: notebook 07 runs in JupyterLab, every figure shows as an image, and the profile
picker shows the chosen profile's env (and one line for a folder that is not a profile)."""

from __future__ import annotations

from browser.lab import (
    _widget_box,
    output_widget_text,
    run_notebook_and_check,
    save_screenshot,
    select_option,
    wait_for_output_widget_text,
)


def test_profile_notebook_and_picker(lab, page):
    checks = run_notebook_and_check(page, lab, "07_profile.ipynb", timeout_s=300)
    assert sum(c.figure for c in checks) >= 4, "notebook 07 should draw at least four figures"
    _widget_box(page, "profile").scroll_into_view_if_needed()
    wait_for_output_widget_text(page, "cpu")
    first = output_widget_text(page)
    options = _widget_box(page, "profile").locator("option").all_text_contents()
    assert len(options) >= 2, options
    other = next(o for o in options if o not in first)
    select_option(page, "profile", other)
    wait_for_output_widget_text(page, other + " (")
    box = _widget_box(page, "path").locator("input").first
    box.fill("/no/such/profile")
    box.press("Enter")
    wait_for_output_widget_text(page, "is not a profile folder")
    save_screenshot(page, "07_profile_picker_bad_path")
