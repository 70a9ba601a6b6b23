"""The map of the notebooks: the README's table and notebook 00's list every notebook under
notebooks/ once, in order, with the same words."""

from __future__ import annotations

import nbformat

from helpers.paths import ROOT

NOTEBOOKS = ROOT / "notebooks"


def _table_rows(text: str) -> list[tuple[str, str]]:
    """``(name, description)`` of every row ``| `name` | description |`` of a markdown table."""
    rows = []
    for line in text.splitlines():
        if line.startswith("| `"):
            name, _, rest = line[3:].partition("` |")
            rows.append((name, rest.strip().removesuffix("|").strip()))
    return rows


def _readme_rows() -> list[tuple[str, str]]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## The notebooks", 1)[1].split("\n## ", 1)[0]
    return _table_rows(section)


def _start_here_rows() -> list[tuple[str, str]]:
    nb = nbformat.read(NOTEBOOKS / "00_start_here.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "markdown"
               and c.source.startswith("## The notebooks")]
    return _table_rows(cell.source)


def test_the_readme_lists_every_notebook_once_in_order() -> None:
    names = [name for name, _ in _readme_rows()]
    assert names == sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    assert all(description for _, description in _readme_rows())


def test_notebook_00_lists_the_same_notebooks_in_the_same_words() -> None:
    assert _start_here_rows() == _readme_rows()


def test_table_rows_are_read_from_markdown() -> None:
    text = "| notebook | what |\n|---|---|\n| `01_a` | one, two |\n| `02_b` | `x` and y |\nafter"
    assert _table_rows(text) == [("01_a", "one, two"), ("02_b", "`x` and y")]
