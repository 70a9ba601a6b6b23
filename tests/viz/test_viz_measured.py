"""viz.measured: benchmark rows drawn as measured dots and model lines, one colour per algorithm
(read from the drawn artists), a legend that says what dots and lines are, no colliding texts."""

from __future__ import annotations

import matplotlib.colors as mcolors
import pytest

from distlab.viz.layout_check import colours_by_label, layout_problems
from distlab.viz.measured import measured_vs_model_figure, same_model_lines

SIZES = (1 << 16, 1 << 18, 1 << 20)
ALGOS = ("ring", "recursive_doubling", "bruck", "builtin")


def _rows(coincide: bool = False) -> list[dict]:
    """Rows as ``bench collective`` makes them: every algorithm at every size, builtin with no
    prediction; with ``coincide`` every plan has the same prediction (2 ranks)."""
    rows = []
    for n in SIZES:
        for i, a in enumerate(ALGOS):
            model = 100 + n / 1000 * (1 if coincide else 1 + 0.5 * i)
            rows.append({"algorithm": a, "nbytes": n, "time_us": model * (1.2 + 0.1 * i),
                         "predicted_us": None if a == "builtin" else model})
    return rows


def _same(c1: object, c2: object) -> bool:
    return mcolors.same_color(c1, c2)


@pytest.mark.parametrize("coincide", [False, True])
def test_each_algorithm_has_one_colour_across_its_dots_and_its_model_line(coincide) -> None:
    rows = _rows(coincide)
    fig = measured_vs_model_figure(rows, title="all_gather on 2 gloo ranks")
    ax = fig.axes[0]
    colours = colours_by_label(ax, ALGOS)
    assert all(len(c) == 1 for c in colours.values()), colours
    assert len({next(iter(c)) for c in colours.values()}) == len(ALGOS)  # and all differ
    # read by data, whatever the labels say: the line through an algorithm's predictions has
    # the colour of the dots at its measured times
    for a in ALGOS:
        mine = [r for r in rows if r["algorithm"] == a]
        dots = [ln for ln in ax.lines if ln.get_marker() == "o"
                and list(ln.get_ydata()) == [r["time_us"] for r in mine]]
        assert len(dots) == 1, a
        if a == "builtin":
            continue
        model = [ln for ln in ax.lines if ln.get_marker() in ("None", "", None)
                 and list(ln.get_ydata()) == [r["predicted_us"] for r in mine]]
        sharing = [b for b in ALGOS if b != "builtin" and [r["predicted_us"] for r in rows
                                                           if r["algorithm"] == b] ==
                   [r["predicted_us"] for r in mine]]  # lines drawn on top of each other
        assert len(model) == len(sharing), a
        assert sum(_same(m.get_color(), dots[0].get_color()) for m in model) == 1, a
        assert all(m.get_linestyle() == "-" for m in model)
    assert layout_problems(fig) == []


def test_the_legend_names_each_algorithm_once_and_says_what_dots_and_lines_are() -> None:
    fig = measured_vs_model_figure(_rows(), title="all_gather on 2 gloo ranks")
    legend = fig.axes[0].get_legend()
    assert legend is not None
    texts = [t.get_text() for t in legend.get_texts()]
    for a in ALGOS:
        assert sum(t.split()[0] == a for t in texts if t) == 1, (a, texts)
    handles = dict(zip(texts, legend.legend_handles, strict=True))
    line_key = [t for t in texts if "line" in t and "model" in t]
    dots_key = [t for t in texts if "dots" in t and "measured" in t]
    assert len(line_key) == 1 and len(dots_key) == 1, texts
    assert handles[line_key[0]].get_linestyle() == "-"
    assert handles[line_key[0]].get_marker() in ("None", "", None)
    assert handles[dots_key[0]].get_marker() == "o"
    # each algorithm's entry is drawn in its colour
    colours = colours_by_label(fig.axes[0], ALGOS)
    for t, h in handles.items():
        if t.split() and t.split()[0] in ALGOS:
            assert _same(h.get_color(), next(iter(colours[t.split()[0]])))


def test_model_lines_that_lie_on_each_other_are_said_to() -> None:
    assert same_model_lines(_rows()) == []
    assert same_model_lines(_rows(coincide=True)) == [["ring", "recursive_doubling", "bruck"]]
    fig = measured_vs_model_figure(_rows(coincide=True))
    texts = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert any("coincide" in t and "ring" in t and "bruck" in t for t in texts), texts
    assert layout_problems(fig) == []


def test_sizes_are_labelled_in_binary_units_and_empty_rows_are_refused() -> None:
    fig = measured_vs_model_figure(_rows())
    fig.draw_without_rendering()
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["64 KiB", "256 KiB",
                                                                    "1 MiB"]
    with pytest.raises(ValueError, match="rows"):
        measured_vs_model_figure([])


def test_rows_of_two_executors_draw_the_python_ones_as_open_dots() -> None:
    rows = [dict(r, executor="builtin" if r["algorithm"] == "builtin" else "compiled")
            for r in _rows()]
    python = [dict(r, executor="python", time_us=r["time_us"] * 1.5) for r in rows
              if r["algorithm"] != "builtin"]
    fig = measured_vs_model_figure(rows + python, title="allreduce on 2 gloo ranks")
    ax = fig.axes[0]
    for a in ALGOS[:-1]:
        slow = [r["time_us"] for r in python if r["algorithm"] == a]
        fast = [r["time_us"] for r in rows if r["algorithm"] == a]
        open_dots = [ln for ln in ax.lines if list(ln.get_ydata()) == slow]
        filled = [ln for ln in ax.lines if list(ln.get_ydata()) == fast]
        assert len(open_dots) == 1 and open_dots[0].get_markerfacecolor() == "none", a
        assert len(filled) == 1 and filled[0].get_markerfacecolor() != "none", a
        assert _same(open_dots[0].get_color(), filled[0].get_color())
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "open dots: the python executor" in texts
    assert any(t.startswith("dots: measured") and t.endswith("compiled executor") for t in texts)
    assert layout_problems(fig) == []
