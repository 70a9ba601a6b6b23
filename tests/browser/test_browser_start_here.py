"""Real browser: 00_start_here runs top to bottom in JupyterLab and shows the allreduce result."""

from __future__ import annotations

from browser.lab import output_text, run_notebook_and_check, save_screenshot


def test_start_here_runs_in_jupyterlab(lab, page):
    run_notebook_and_check(page, lab, "00_start_here.ipynb", timeout_s=240)
    save_screenshot(page, "00_start_here")
    text = output_text(page)
    assert "allreduce result on every rank: [10.0, 100.0]" in text
    assert "gloo" in text and "torch" in text
    sources = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets"
                            ".map(c => c.model.sharedModel.getSource()).join('\\n')")
    for name in ("05_transfers", "06_ddp", "07_profile"):
        assert f"| `{name}` |" in sources, f"the map of notebooks does not list {name}"
