"""viz/collectives.py: the plan picture of every collective, its explorer, cost and scale figures
(pure: no process group)."""

from __future__ import annotations

import numpy as np
import pytest

from distlab.collectives import get_preset
from distlab.collectives.algorithms.registry import DEFAULT_ALGORITHM, PLANS, build_plan
from distlab.collectives.model.compare import collective_times
from distlab.collectives.plan.schedule import format_schedule
from distlab.viz import collectives as VC
from distlab.viz.figure import figure_png
from distlab.viz.layout_check import layout_problems


@pytest.mark.parametrize("collective", sorted(PLANS))
def test_every_collective_draws_from_start_to_end(collective: str) -> None:
    for algo in PLANS[collective]:
        s = VC.example_plan(collective, algo, 5, root=3)
        start = VC.collective_figure(s, 0)
        assert "start: what each rank holds before" in start.axes[0].get_title()
        end = VC.collective_figure(s)
        assert f"step {len(s.steps)}/{len(s.steps)}" in end.axes[0].get_title()
        assert figure_png(end).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="step"):
        VC.collective_figure(VC.example_plan(collective, DEFAULT_ALGORITHM[collective], 3), 99)


def test_move_only_collectives_colour_each_element_by_whose_data_it_is() -> None:
    fig = VC.collective_figure(VC.example_plan("all_gather", "ring", 3))
    image = fig.axes[0].images[0].get_array()
    # after the all-gather every rank holds block b (2 elements) of rank b: values b + 1
    assert np.array_equal(np.asarray(image), np.tile(np.repeat([1, 2, 3], 2), (3, 1)))
    red = VC.collective_figure(VC.example_plan("reduce_scatter", "ring", 3))
    counts = np.asarray(red.axes[0].images[0].get_array())
    assert counts[1, 2:4].tolist() == [3, 3]  # rank 1's block holds all three ranks' data


def test_explorer_follows_collective_algorithm_size_and_step() -> None:
    e = VC.CollectiveExplorer("all_gather", "bruck", world_size=5)
    assert "all_gather/bruck on 5 ranks: 3 steps" in e.summary and e.png
    e.collective.value = "all_to_all"
    assert e.algorithm.value == "pairwise" and list(e.algorithm.options) == ["bruck", "pairwise"]
    assert "all_to_all/pairwise on 5 ranks: 4 steps" in e.summary
    e.world_size.value = 2
    e.step.value = 1
    assert "showing the state after step 1/1" in e.summary
    e.collective.value = "barrier"
    assert "barrier/dissemination on 2 ranks: 1 steps" in e.summary


def test_cost_and_scale_figures_draw_the_model() -> None:
    preset = get_preset("nvlink4_h100")
    fig = VC.cost_figure(preset, "broadcast", world_size=8)
    assert "fastest at 1024 B: binomial" in fig._suptitle.get_text()
    assert [ln.get_label() for ln in fig.axes[0].lines[:2]] == ["binomial", "scatter_allgather"]
    sizes = [1 << k for k in range(10, 31)]
    times = collective_times(preset, "broadcast", 8, sizes)
    assert list(fig.axes[0].lines[0].get_ydata()) == pytest.approx(
        [t * 1e6 for t in times["binomial"]])
    assert len(VC.scale_figure(get_preset("pcie4_x16"), world_sizes=[2, 4]).axes) == 2


def test_listings_wrap_between_items_and_spans_read_as_ranges() -> None:
    schedule = build_plan("all_reduce", "double_binary_tree", 6, 12)
    text = format_schedule(schedule)
    assert max(map(len, text.splitlines())) > 110  # the listing as format_schedule gives it
    wrapped = VC.wrap_listing(text, width=100, indent=8)
    lines = wrapped.splitlines()
    assert max(map(len, lines)) <= 100 and len(lines) > len(text.splitlines())
    # nothing lost or split: joining the continuation lines back gives the listing
    assert wrapped.replace(",\n" + " " * 8, ", ") == text
    assert all(ln.startswith(" " * 8) and ln[8] != " " for ln in lines
               if not ln.startswith(("double", "  step")))
    assert VC.wrap_listing("a, b", width=3, indent=1) == "a,\n b"
    assert VC.wrap_listing("short", width=100) == "short"
    assert VC.format_spans([(0, 2), (6, 8)]) == "[0:2) [6:8)" and VC.format_spans([]) == ""


def test_no_figure_of_the_notebook_has_colliding_texts() -> None:
    figures = [VC.collective_figure(VC.example_plan("reduce", "rabenseifner", 6, root=2), 3),
               VC.collective_figure(VC.example_plan("all_to_all", "bruck", 12), 1),
               VC.cost_figure(get_preset("nvlink4_h100"), "broadcast", world_size=8),
               VC.cost_figure(get_preset("ethernet_100g"), "all_to_all", world_size=16),
               VC.CollectiveExplorer("all_gather", "bruck", world_size=5).figure]
    scale = VC.scale_figure(get_preset("nvlink4_h100"), world_sizes=[2, 4, 8, 64, 256])
    assert [ax.get_title() for ax in scale.axes] == ["64 KiB allreduce", "64 MiB allreduce"]
    scale.draw_without_rendering()
    labels = [t.get_text() for t in scale.axes[0].get_xticklabels() if t.get_text()]
    assert {"2", "4", "8", "64", "256"} <= set(labels)  # ranks as numbers, not powers of two
    for fig in [*figures, scale]:
        assert layout_problems(fig) == [], fig.axes[0].get_title()
