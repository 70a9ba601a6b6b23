"""Real browser: 00_start_here runs top to bottom in JupyterLab, shows the allreduce result, and
no printed line wraps in the 1400-px window (checked on the rendered page, and the check itself
checked on a planted wide line)."""

from __future__ import annotations

import pytest

from browser.lab import output_text, run_notebook_and_check, save_screenshot
from browser.wrapping import wrapped_output_lines

# A printed line of 150 characters appended to the last code cell's first text output.
_PLANT = """() => {
    const pres = [...document.querySelectorAll('.jp-NotebookPanel .jp-OutputArea-output pre')];
    const pre = pres[pres.length - 1];
    pre.textContent += '\\n' + 'wide '.repeat(30);
}"""


@pytest.mark.notebook("00_start_here.ipynb")
def test_start_here_runs_in_jupyterlab(lab, page):
    run_notebook_and_check(page, lab, "00_start_here.ipynb", timeout_s=240)
    save_screenshot(page, "00_start_here")
    assert wrapped_output_lines(page) == []
    text = output_text(page)
    assert "allreduce result on every rank: [10.0, 100.0]" in text
    assert "gloo" in text and "torch" in text
    sources = page.evaluate("() => window.jupyterapp.shell.currentWidget.content.widgets"
                            ".map(c => c.model.sharedModel.getSource()).join('\\n')")
    for name in ("05_transfers", "06_ddp", "07_profile"):
        assert f"| `{name}` |" in sources, f"the map of notebooks does not list {name}"
    # the wrap check itself sees a wrapped line: plant one
    page.evaluate(_PLANT)
    wrapped = wrapped_output_lines(page)
    assert len(wrapped) == 1 and "wide wide" in wrapped[0], wrapped
