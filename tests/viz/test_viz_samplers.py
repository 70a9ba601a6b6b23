"""Sampler figures and the explorer's widget callbacks, without a browser."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from distlab.samplers import assign
from distlab.viz.layout_check import width_problems
from distlab.viz.palette import contrast_ratio, delta_e
from distlab.viz.samplers import (
    SamplerExplorer,
    assignment_figure,
    assignment_table,
    figure_png,
    rank_colors,
    summary_text,
)

matplotlib.use("Agg")


@pytest.mark.parametrize("kwargs", [
    {"length": 22, "num_replicas": 4},
    {"length": 0, "num_replicas": 3},
    {"length": 3, "num_replicas": 8, "layout": "libtorch"},
    {"length": 150, "num_replicas": 24, "drop_last": True},
    {"length": 11, "num_replicas": 4, "exact": True},
])
def test_figure_draws_every_case(kwargs: dict) -> None:
    a = assign(**kwargs)
    fig = assignment_figure(a, batch_size=3)
    assert len(fig.axes) == 2
    assert figure_png(fig).startswith(b"\x89PNG")
    assert "padded" in fig._suptitle.get_text()
    assert width_problems(fig) == [], "a long title widened the image"


def test_padded_cells_are_hatched_and_dropped_marked() -> None:
    a = assign(10, 4, shuffle=False)
    fig = assignment_figure(a)
    ranks_ax = fig.axes[1]
    hatched = [p for p in ranks_ax.patches if p.get_hatch()]
    assert len(hatched) == a.num_padded == 2
    d = assign(10, 4, shuffle=False, drop_last=True)
    dataset_ax = assignment_figure(d).axes[0]
    crosses = [c for c in dataset_ax.collections if len(c.get_offsets()) == d.num_dropped]
    assert crosses


def test_table_and_summary_text() -> None:
    a = assign(10, 4, shuffle=False)
    assert assignment_table(a, 2).splitlines()[2] == "rank 2: [2 6 | 0*]"
    assert "padded 2" in summary_text(a)
    assert "reads past the end: [2]" in summary_text(assign(2, 5, layout="libtorch"))
    assert rank_colors(30).shape == (30, 4)


def test_explorer_redraws_when_a_control_changes() -> None:
    ex = SamplerExplorer(length=22, world_size=4)
    before_png, before_fig = ex.png, ex.figure
    ex.controls["world_size"].value = 5
    assert ex.assignment.num_replicas == 5 and ex.assignment.length == 22
    assert ex.png != before_png and ex.figure is not before_fig
    assert ex.image.value == ex.png
    assert len(ex.figure.axes[1].get_yticklabels()) == 5
    assert "22 indices on 5 ranks" in ex.summary


@pytest.mark.parametrize("name, value, check", [
    ("length", 7, lambda a: a.length == 7),
    ("drop_last", True, lambda a: a.drop_last and a.num_padded == 0),
    ("shuffle", True, lambda a: a.shuffle),
    ("seed", 3, lambda a: a.seed == 3),
    ("epoch", 2, lambda a: a.epoch == 2),
    ("layout", "libtorch", lambda a: a.layout == "libtorch"),
])
def test_each_control_reaches_the_assignment(name: str, value: object, check) -> None:
    ex = SamplerExplorer(length=22, world_size=4, shuffle=name in ("seed", "epoch"))
    before = ex.png
    ex.controls[name].value = value
    assert check(ex.assignment)
    assert ex.png != before


def test_batch_size_moves_the_batch_lines() -> None:
    ex = SamplerExplorer(length=40, world_size=2, batch_size=2)
    lines_2 = len(ex.figure.axes[1].lines)
    ex.controls["batch_size"].value = 5
    assert len(ex.figure.axes[1].lines) < lines_2
    assert "steps per rank 4..4" in ex.summary
    assert np.array_equal(ex.assignment.steps(5), [4, 4])


def _marks() -> dict[str, object]:
    """The colours the dataset panel draws for a dropped index, its cross and a padded dot."""
    dropped = assignment_figure(assign(10, 4, drop_last=True)).axes[0]
    padded = assignment_figure(assign(10, 4)).axes[0]
    (cross,) = dropped.collections
    (dot,) = padded.collections
    return {"dropped cell": dropped.images[0].cmap.colors[1], "empty cell": "white",
            "dropped cross": cross.get_facecolor()[0] if len(cross.get_facecolor())
            else cross.get_edgecolor()[0], "padded dot": dot.get_facecolor()[0]}


def test_a_rank_keeps_its_colour_at_every_world_size_and_never_reads_as_a_mark() -> None:
    """At 16 ranks rank 15 was tab20's light grey, 3 from the dropped grey (index 8 read as
    dropped), and orange was rank 1 at 10 ranks but rank 2 at 16."""
    every = rank_colors(64)
    marks = _marks()
    for n in range(1, 65):
        colours = rank_colors(n)
        assert np.allclose(colours, every[:n]), f"world size {n} recolours its ranks"
    for r, c in enumerate(every):
        for name, mark in marks.items():
            assert delta_e(c, mark) >= 25, f"rank {r} is {delta_e(c, mark):.1f} from {name}"
    first = every[:8]
    assert min(delta_e(a, b) for i, a in enumerate(first) for b in first[i + 1:]) >= 25
    assert min(delta_e(a, b) for i, a in enumerate(every) for b in every[i + 1:]) >= 10


def test_rank_labels_read_against_what_is_behind_them() -> None:
    fig = assignment_figure(assign(22, 16, drop_last=True))
    fig.canvas.draw()
    labels = [t for t in fig.axes[1].get_yticklabels() if t.get_text()]
    assert [t.get_text() for t in labels] == [f"rank {r}" for r in range(16)]
    for t in labels:
        box = t.get_bbox_patch()
        behind = box.get_facecolor() if box is not None else "white"
        assert contrast_ratio(t.get_color(), behind) >= 4.5, t.get_text()


@pytest.mark.parametrize("length, world, drop_last", [(22, 16, True), (3, 5, False),
                                                      (1, 1, False), (200, 16, False)])
def test_ranks_and_positions_are_ticked_on_whole_numbers(length, world, drop_last) -> None:
    fig = assignment_figure(assign(length, world, drop_last=drop_last), batch_size=2)
    fig.canvas.draw()
    ranks = fig.axes[1]
    for axis in (ranks.xaxis, ranks.yaxis):
        ticks = axis.get_majorticklocs()
        assert len(ticks) and all(float(t).is_integer() for t in ticks), ticks


@pytest.mark.parametrize("length, world, drop_last, words", [
    (0, 3, False, "no samples: dataset length 0"),
    (3, 5, True, "no samples on any rank: drop_last drops all 3 indices (fewer than 5 ranks)"),
])
def test_an_empty_panel_is_drawn_empty_and_says_why(length, world, drop_last, words) -> None:
    fig = assignment_figure(assign(length, world, drop_last=drop_last))
    ranks = fig.axes[1]
    assert not ranks.images, "the ranks panel drew a block as if it held data"
    assert [t.get_text() for t in ranks.texts] == [words]
    if length == 0:
        assert not fig.axes[0].images and fig.axes[0].texts[0].get_text() == words


def test_the_summary_is_said_once_and_says_what_padding_shares() -> None:
    """Padded duplicates make the ranks' index sets overlap: the line never says disjoint
    then."""
    padded = summary_text(assign(10, 4))
    assert "disjoint" not in padded
    assert "ranks share only the 2 padded duplicates" in padded
    assert "disjoint: no index on two ranks" in summary_text(assign(8, 4))
    assert "on 1 rank;" in summary_text(assign(8, 1))
    ex = SamplerExplorer(length=10, world_size=4)
    assert ex.figure._suptitle is None and ex.summary == summary_text(ex.assignment, 2)
