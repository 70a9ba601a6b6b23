"""layout_check finds what a reader would see collide, and colours that disagree with a legend."""

from __future__ import annotations

from distlab.viz.figure import new_figure
from distlab.viz.layout_check import colours_by_label, drawn_items, layout_problems


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
