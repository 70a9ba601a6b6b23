"""tools/nbtool.py: the clean form is what JupyterLab writes back (kernelspec and language_info as
the kernel reports them), ``check`` flags anything else, and ``clean`` executes nothing."""

from __future__ import annotations

import json
import platform
from pathlib import Path

import nbformat
import pytest

from helpers.tools import load_tool

ROOT = Path(__file__).resolve().parents[1]


nbtool = load_tool("nbtool")

#: What JupyterLab writes for ipykernel's python3 kernel under some Python (as kernel_info says).
KERNEL = {
    "kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)",
                   "language": "python"},
    "language_info": {"name": "python", "version": "3.11.7", "mimetype": "text/x-python",
                      "codemirror_mode": {"name": "ipython", "version": 3},
                      "pygments_lexer": "ipython3", "nbconvert_exporter": "python",
                      "file_extension": ".py"},
}


def _notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python",
                                  "name": "python3"},
                   "language_info": {"name": "python"},
                   "widgets": {"application/vnd.jupyter.widget-state+json": {"state": {}}}}
    first = nbformat.v4.new_code_cell('import os\nSMOKE = os.environ.get("SMOKE") == "1"',
                                      execution_count=1)
    first.metadata = {"execution": {"iopub.status.busy": "2026-01-01"}, "tags": []}
    figure = nbformat.v4.new_code_cell("plot()", execution_count=2,
                                       outputs=[nbformat.v4.new_output("stream", text="x\n")])
    figure.metadata = {"tags": [nbtool.IGNORE_TAG], "scrolled": True}
    printed = nbformat.v4.new_code_cell("print(1)", execution_count=3,
                                        outputs=[nbformat.v4.new_output("stream", text="1\n")])
    nb.cells = [nbformat.v4.new_markdown_cell("# Title"), first, figure, printed]
    return nb


def _write(path: Path, nb: nbformat.NotebookNode) -> Path:
    nbformat.write(nb, path)
    return path


def test_the_old_metadata_form_is_flagged_as_what_jupyterlab_rewrites(tmp_path):
    nb = _notebook()
    nb.metadata.pop("widgets")
    found = nbtool.problems(_write(tmp_path / "old.ipynb", nb), KERNEL)
    assert any("kernelspec" in f and "Python 3 (ipykernel)" in f for f in found), found
    assert any("language_info" in f for f in found), found


def test_clean_stores_exactly_what_jupyterlab_writes(tmp_path):
    nb = nbtool._clean(_notebook(), KERNEL)
    assert nb.metadata == KERNEL
    assert [c.id for c in nb.cells] == ["cell-00", "cell-01", "cell-02", "cell-03"]
    assert [dict(c.metadata) for c in nb.cells] == [{}, {"tags": []}, {"tags": [nbtool.IGNORE_TAG]},
                                                   {}]
    assert nb.cells[2].outputs == [] and nb.cells[2].execution_count is None
    assert nb.cells[3].outputs[0].text == "1\n" and nb.cells[3].execution_count == 3
    assert nbtool.problems(_write(tmp_path / "clean.ipynb", nb), KERNEL) == []


def test_only_the_python_version_may_differ_from_this_machine(tmp_path):
    other = json.loads(json.dumps(KERNEL))
    other["language_info"]["version"] = "3.12.1"
    path = _write(tmp_path / "elsewhere.ipynb", nbtool._clean(_notebook(), other))
    assert nbtool.problems(path, KERNEL) == []
    other["language_info"]["pygments_lexer"] = "python3"
    path = _write(tmp_path / "changed.ipynb", nbtool._clean(_notebook(), other))
    assert any("language_info" in f for f in nbtool.problems(path, KERNEL))


def test_the_committed_set_carries_one_python_version(tmp_path):
    a = _write(tmp_path / "a.ipynb", nbtool._clean(_notebook(), KERNEL))
    other = json.loads(json.dumps(KERNEL))
    other["language_info"]["version"] = "3.12.1"
    b = _write(tmp_path / "b.ipynb", nbtool._clean(_notebook(), other))
    assert nbtool.version_problems([a]) == []
    found = nbtool.version_problems([a, b])
    assert len(found) == 1 and "3.11.7" in found[0] and "3.12.1" in found[0]


def test_a_file_jupyterlab_would_reformat_on_save_is_flagged(tmp_path):
    nb = nbtool._clean(_notebook(), KERNEL)
    path = tmp_path / "indent2.ipynb"
    path.write_text(json.dumps(nb, indent=2, sort_keys=True) + "\n")
    assert any("not what nbformat writes" in f for f in nbtool.problems(path, KERNEL))
    nb.nbformat_minor = 4
    assert any("nbformat 4.4" in f
               for f in nbtool.problems(_write(tmp_path / "minor4.ipynb", nb), KERNEL))


def test_kernel_metadata_is_what_this_machines_kernel_reports():
    meta = nbtool.kernel_metadata()
    assert meta["kernelspec"]["name"] == "python3"
    assert meta["language_info"]["name"] == "python"
    assert meta["language_info"]["version"] == platform.python_version()


@pytest.mark.timeout(120)
def test_clean_command_executes_nothing(tmp_path):
    nb = _notebook()
    nb.cells[3].source = "raise SystemExit('executed')"
    path = _write(tmp_path / "n.ipynb", nb)
    assert nbtool.main(["clean", str(path)]) == 0
    cleaned = nbformat.read(path, as_version=4)
    assert cleaned.cells[3].outputs[0].text == "1\n"  # the stored output, untouched
    assert cleaned.metadata == nbtool.kernel_metadata()
    assert nbtool.main(["check", str(path)]) == 0
