"""layout_check finds what a reader would see collide, and colours that disagree with a legend."""

from __future__ import annotations

import io

import numpy as np
import pytest
from matplotlib.colors import to_hex
from PIL import Image

from distlab.viz.figure import figure_png, new_figure
from distlab.viz.layout_check import (
    JUPYTERLAB_WIDTH_PX,
    colour_problems,
    colours_by_label,
    drawn_items,
    layout_problems,
    legend_clear_of_data,
    legend_problems,
    named_colours,
    tick_problems,
    width_problems,
)
from distlab.viz.palette import colour


def test_a_clean_figure_has_no_problem() -> None:
    fig = new_figure(figsize=(6, 3))
    ax = fig.add_subplot()
    ax.plot([1, 2, 3], [1, 4, 9], label="ring")
    ax.set(title="busbw", xlabel="size", ylabel="GB/s")
    ax.legend(loc="lower right")
    assert layout_problems(fig) == []
    kinds = {item.kind for item in drawn_items(fig)}
    assert {"title", "xlabel", "ylabel", "xtick", "ytick", "legend"} <= kinds


def test_crowded_tick_labels_collide() -> None:
    fig = new_figure(figsize=(3, 2))
    ax = fig.add_subplot()
    names = ["no-overlap", "overlap", "naive", "torch", "bucketed"]
    ax.bar(names, [1, 2, 3, 4, 5])
    problems = layout_problems(fig)
    assert any(p.startswith("xtick") and "overlaps xtick" in p for p in problems), problems


def test_texts_on_top_of_each_other_collide() -> None:
    fig = new_figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.text(0.5, 0.5, "overlap 0.31", transform=ax.transAxes)
    ax.text(0.52, 0.5, "overlap 0.30", transform=ax.transAxes)
    assert any("overlap 0.31" in p and "overlap 0.30" in p for p in layout_problems(fig))


def test_a_legend_over_the_suptitle_collides() -> None:
    fig = new_figure(figsize=(5, 3), layout=None)
    ax = fig.add_subplot()
    for name in ("ready", "handle", "map"):
        ax.plot([0, 1], [0, 1], label=name)
    fig.suptitle("where a hop's time goes", y=0.98)
    fig.legend(loc="upper center", ncols=3, bbox_to_anchor=(0.5, 1.0))
    problems = layout_problems(fig)
    assert any("suptitle" in p and "legend" in p for p in problems), problems


def test_one_colour_per_name_across_dots_and_lines() -> None:
    fig = new_figure()
    ax = fig.add_subplot()
    ax.scatter([1, 2], [1, 2], color="C0", label="bruck")
    ax.plot([1, 2], [1, 2], color="C1", label="bruck (model)")
    ax.scatter([1, 2], [2, 3], color="C2", label="pairwise")
    ax.plot([1, 2], [2, 3], color="C2", label="pairwise (model)")
    ax.plot([1, 2], [3, 3], color="C3", label="segmented_ring")
    found = colours_by_label(ax, ["bruck", "pairwise", "ring"])
    assert len(found["bruck"]) == 2
    assert len(found["pairwise"]) == 1
    assert found["ring"] == set()   # segmented_ring is another algorithm, not ring


def _legend_over_a_line() -> tuple:
    fig = new_figure(figsize=(6, 3))
    ax = fig.add_subplot()
    ax.plot(range(10), [5.0] * 10, color=colour("ring"), label="ring")
    ax.set_ylim(0, 10)
    return fig, ax


def test_a_legend_over_a_line_covers_data() -> None:
    fig, ax = _legend_over_a_line()
    ax.legend(loc="center")
    (problem,) = legend_problems(fig)
    assert problem.startswith("legend 'ring' (axes 0) covers data of axes 0:"), problem
    ax.legend(loc="upper right")   # above the line: clear
    assert legend_problems(fig) == []


def test_a_legend_over_bars_covers_data() -> None:
    fig = new_figure(figsize=(6, 3))
    ax = fig.add_subplot()
    ax.bar([0, 1, 2, 3], [4, 4, 4, 4], color=colour("copy"), label="copy")
    ax.legend(loc="lower left")
    assert any("bars" in p for p in legend_problems(fig)), legend_problems(fig)
    ax.set_ylim(0, 8)
    ax.legend(loc="upper left")
    assert legend_problems(fig) == []


def test_a_line_across_the_axes_is_not_data_a_legend_covers() -> None:
    fig = new_figure(figsize=(6, 3))
    ax = fig.add_subplot()
    ax.plot([0, 1], [0, 0.1], label="ring")
    ax.axhline(0.5, color="k", label="link peak")
    ax.legend(loc="center")
    assert legend_problems(fig) == []


def test_an_axis_with_one_labelled_tick_has_no_scale() -> None:
    fig = new_figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.plot([1, 2], [0.8, 1.2])
    ax.set_yscale("log", base=2)   # 0.8 .. 1.2 holds one power of two: "2^0"
    (problem,) = tick_problems(fig)
    assert problem.startswith("axes 0: its y axis shows 1 labelled tick"), problem
    ax.set_yscale("linear")
    assert tick_problems(fig) == []


def test_fixed_ticks_are_the_figures_choice() -> None:
    fig = new_figure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.barh([0], [1.0])
    ax.set_yticks([0], ["rank0"])
    assert tick_problems(fig) == []


def test_a_figure_wider_than_jupyterlab_shows_is_reported() -> None:
    assert JUPYTERLAB_WIDTH_PX == 968
    wide = new_figure(figsize=(13.0, 3.0))
    wide.add_subplot().plot([1, 2], [1, 2])
    (problem,) = width_problems(wide)
    assert problem.startswith("the image is 13") and "JupyterLab shows 968 px" in problem
    narrow = new_figure(figsize=(9.4, 3.0))
    narrow.add_subplot().plot([1, 2], [1, 2])
    assert width_problems(narrow) == []
    assert Image.open(io.BytesIO(figure_png(narrow))).size[0] <= JUPYTERLAB_WIDTH_PX


def test_a_name_in_another_colour_than_its_palette_colour() -> None:
    fig = new_figure(figsize=(6, 3))
    ax = fig.add_subplot()
    ax.plot([1, 2], [1, 2], color="C1", label="ours: ring")
    assert colour_problems(fig) == [
        f"'ring' is drawn in {to_hex('C1')}, not its palette colour {colour('ring')}"]


def test_one_name_in_two_colours_and_two_names_in_one() -> None:
    fig = new_figure(figsize=(6, 3))
    ax = fig.add_subplot()
    ax.plot([1, 2], [1, 2], color=colour("ring"), label="ring")
    ax.plot([1, 2], [2, 3], "o", color=colour("tree"), label="ring measured")
    ax.plot([1, 2], [3, 4], color=colour("tree"), label="tree (model)")
    problems = colour_problems(fig)
    assert f"'ring' is drawn in 2 colours ({colour('ring')}, {colour('tree')})" in problems
    assert f"'ring' and 'tree' share the colour {colour('tree')}" in problems


def test_gantt_legend_patches_are_read_too() -> None:
    from distlab.timeline import Timeline
    from distlab.viz.gantt import gantt

    tl = Timeline()
    tl.record("b", "backward", "rank0/backward", 0.0, 10.0)
    tl.record("s", "shadow", "rank1/backward", 0.0, 10.0)
    tl.record("a", "allreduce", "rank0/allreduce", 10.0, 5.0)
    # DDP's "allreduce" spans are the collective all_reduce: the palette reads the spelling
    assert named_colours(gantt(tl)) == {n: {colour(n)} for n in ("backward", "shadow",
                                                                 "all_reduce")}
    assert colour_problems(gantt(tl, colors={"shadow": colour("allreduce")})) == [
        f"'shadow' is drawn in {colour('allreduce')}, not its palette colour {colour('shadow')}",
        f"'all_reduce' and 'shadow' share the colour {colour('allreduce')}"]


@pytest.mark.parametrize("corner", [(0.05, 0.05), (0.95, 0.95), (0.95, 0.05), (0.05, 0.95)])
def test_a_legend_clear_of_data_moves_off_the_measured_points(corner: tuple[float, float]
                                                               ) -> None:
    """Points in a corner (where a fixed legend would sit): the legend goes elsewhere, and the
    audit finds nothing."""
    fig = new_figure(figsize=(5, 3.5))
    ax = fig.subplots()
    ax.plot([0, 1], [0.5, 0.5], label="model")
    ax.plot([corner[0]] * 5, [corner[1]] * 5, "o", label="measured, a long label here")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    leg = legend_clear_of_data(ax, loc="upper right" if corner[0] < 0.5 else "upper left")
    assert ax.get_legend() is leg
    assert layout_problems(fig) == []


def test_a_legend_with_data_everywhere_goes_below_the_axes() -> None:
    fig = new_figure(figsize=(5, 3.5))
    ax = fig.subplots()
    grid = np.linspace(0.02, 0.98, 25)
    xs, ys = np.meshgrid(grid, grid)
    ax.plot(xs.ravel(), ys.ravel(), ".", label="measured everywhere")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("x")
    leg = legend_clear_of_data(ax, fontsize="small")
    assert layout_problems(fig) == []   # (it draws the figure)
    assert not leg.get_frame_on() and leg.get_window_extent().y1 <= ax.get_window_extent().y0
