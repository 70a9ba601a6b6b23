"""What the notebooks' prose claims is what their cells assert and their figures draw.

A cell asserts a claim of the text with the claim quoted in a comment (``assert x < 2  # "within
about 2%"``): the quoted words must stand in the notebook's text before that cell, so prose and
assertion cannot drift apart (notebook 14 once said "about 7.5%" above a cell that printed 5.2%).
A colour the text names for a figure's part is the colour the figure draws it in."""

from __future__ import annotations

import colorsys
import re

import matplotlib.colors as mcolors
import nbformat
import pytest

from helpers.paths import RESULTS, ROOT

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
_QUOTED = re.compile(r'^\s*assert .*#\s*"([^"]+)"\s*$')


def _words(text: str) -> str:
    return " ".join(text.split())


def quoted_claims_missing_from_text(nb: nbformat.NotebookNode) -> list[str]:
    """Each quoted claim of an assert comment that no markdown cell before it holds."""
    seen, missing = "", []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            seen += " " + _words(cell.source)
            continue
        for line in cell.source.splitlines():
            m = _QUOTED.match(line)
            if m and _words(m.group(1)) not in seen:
                missing.append(f"cell {index}: {m.group(1)!r}")
    return missing


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_quoted_claim_stands_in_the_text_above(path) -> None:
    assert quoted_claims_missing_from_text(nbformat.read(path, as_version=4)) == []


def test_a_claim_the_text_does_not_make_is_found() -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("The median |error| is about\n7.5%."),
                nbformat.v4.new_code_cell('assert m < 6  # "median |error| is about 5%"'),
                nbformat.v4.new_code_cell('assert m < 9  # "median |error| is about 7.5%"')]
    assert quoted_claims_missing_from_text(nb) == ["cell 1: 'median |error| is about 5%'"]


def _hue_word(color: str) -> str:
    r, g, b = mcolors.to_rgb(color)
    h, s, _ = colorsys.rgb_to_hsv(r, g, b)
    if s < 0.15:
        return "grey"
    return "red" if h < 0.05 or h > 0.95 else "not red"


def test_notebook_13_names_the_gantt_colours_it_draws() -> None:
    from distlab.judge.trace_judgement import judge_trace
    from distlab.viz.trace import rank_gantt

    nb = nbformat.read(ROOT / "notebooks" / "13_your_training_run.ipynb", as_version=4)
    text = next(_words(c.source) for c in nb.cells
                if c.cell_type == "markdown" and "wait for the last rank (" in c.source)
    said = {"waiting for the last rank": re.search(r"wait for the last rank \((\w+)\)", text),
            "transfer": re.search(r"transfer after it \((\w+)\)", text)}
    fig = rank_gantt(judge_trace(RESULTS / "traces" / "gloo_ddp_2ranks"))
    legend = fig.axes[0].get_legend()
    drawn = {t.get_text(): _hue_word(h.get_facecolor())
             for t, h in zip(legend.get_texts(), legend.legend_handles, strict=True)}
    for label, match in said.items():
        assert match is not None, f"the text names no colour for {label}"
        assert drawn[label] == match.group(1), (label, drawn[label], match.group(1))


def test_every_breakdown_row_notebook_13_prints_stands_under_its_header() -> None:
    nb = nbformat.read(ROOT / "notebooks" / "13_your_training_run.ipynb", as_version=4)
    row = re.compile(r"^\s+\d+ (gpu|host)\s+\d")
    for index, cell in enumerate(nb.cells):
        text = "".join(o.get("text", "") for o in cell.get("outputs", []))
        lines = text.splitlines()
        for k, line in enumerate(lines):
            if row.match(line):
                assert any(h.startswith("rank basis span(ms)") for h in lines[:k]), \
                    f"cell {index}: {line!r} has no header above it"
