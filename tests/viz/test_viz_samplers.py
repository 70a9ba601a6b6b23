"""Sampler figures and the explorer's widget callbacks, without a browser."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest

from distlab.samplers import assign
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
    assert "padded 2" in summary_text(a) and "disjoint" in summary_text(a)
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
