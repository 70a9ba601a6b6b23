"""The NCCL measured-model figures: one panel per published table with its four series in the
right units, one panel per box with NCCL's picks coloured and host-bound sizes shaded, and one
panel per table across nodes with the published points beside the model's picks."""

from __future__ import annotations

import pytest

from distlab.evidence.nccl import fit_execution as fit
from distlab.nccl.execution import nccl_execution
from distlab.nccl.tuning import busbw_gbps
from distlab.viz.figure import DisplayFigure, figure_png
from distlab.viz.nccl_measured import nccl_choice_figure, nccl_nodes_figure, nccl_tables_figure


@pytest.fixture(scope="module")
def judged():
    pts = fit.calibration_points()
    return pts, fit.judge(pts, fit.shipped_constants()), fit.leave_one_source_out(pts)


def test_one_panel_per_table_of_five_or_more_sizes(judged) -> None:
    pts, inside, outside = judged
    fig = nccl_tables_figure(inside, outside, points=pts)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    big = [s for s in dict.fromkeys(p["system"] for p in pts)
           if sum(p["system"] == s for p in pts) >= 5]
    assert isinstance(fig, DisplayFigure) and len(shown) == len(big) == 8
    for ax, system in zip(shown, big, strict=True):
        assert system in ax.get_title()
        lines = {ln.get_label(): ln for ln in ax.lines}
        assert set(lines) == {"NCCL's estimate", "model, fitted on every table",
                              "model, this source left out", "published"}
        mine = sorted((j for j in inside if j.system == system), key=lambda j: j.nbytes)
        ys = list(lines["published"].get_ydata())
        want = [busbw_gbps(j.nbytes, j.published_us * 1e-6, 8) for j in mine]
        assert ys == pytest.approx(want, rel=1e-9)
        assert list(lines["model, fitted on every table"].get_ydata()) == pytest.approx(
            [j.execution.busbw_gbps for j in mine], rel=1e-9)
    assert figure_png(fig)[:4] == b"\x89PNG"


def test_tables_figure_refuses_when_no_table_is_big_enough(judged) -> None:
    pts, inside, outside = judged
    with pytest.raises(ValueError, match="no published table has 99"):
        nccl_tables_figure(inside, outside, points=pts, min_points=99)


def test_choice_figure_colours_each_pick_and_shades_the_host_bound_sizes() -> None:
    sizes = [1 << k for k in range(12, 32, 2)]
    fig = nccl_choice_figure(("h100_sxm8", "pcie5_8"), 8, sizes, harness="nccl-tests")
    assert len(fig.axes) == 2
    for ax, box in zip(fig.axes, ("h100_sxm8", "pcie5_8"), strict=True):
        ex = nccl_execution(box, 8, sizes, harness="nccl-tests")
        picks = {f"{e.algorithm}/{e.protocol}" for e in ex}
        labels = {ln.get_label() for ln in ax.lines if not ln.get_label().startswith("_")}
        assert labels == picks | {"NCCL's estimate"}
        assert any(e.bound == "host" for e in ex)
        assert [p.get_label() for p in ax.patches] == ["host-bound (enqueue rate)"]
        assert "NCCL 2.28.9" in ax.get_title()
    with pytest.raises(ValueError, match="at least one preset"):
        nccl_choice_figure(())


def test_nothing_collides(judged) -> None:
    from distlab.viz.layout_check import layout_problems

    pts, inside, outside = judged
    assert layout_problems(nccl_tables_figure(inside, outside, points=pts)) == []
    assert layout_problems(nccl_choice_figure(harness="nccl-tests")) == []


def test_nodes_figure_one_panel_per_table_with_the_picks_coloured() -> None:
    from distlab.viz.layout_check import layout_problems

    judged = fit.judge(fit.multinode_points(), fit.shipped_constants())
    fig = nccl_nodes_figure(judged)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    big = [s for s in dict.fromkeys(j.system for j in judged)
           if sum(j.system == s for j in judged) >= 5]
    assert len(shown) == len(big) and big
    for ax, system in zip(shown, big, strict=True):
        mine = sorted((j for j in judged if j.system == system), key=lambda j: j.nbytes)
        assert system.partition(" (")[0] in ax.get_title()
        lines = {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")}
        picks = {f"{j.execution.algorithm}/{j.execution.protocol}" for j in mine}
        assert set(lines) == picks | {"published"}
        # the published busbw is the model's scaled by model time / published time
        want = [j.execution.busbw_gbps * j.execution.seconds * 1e6 / j.published_us
                for j in mine]
        assert list(lines["published"].get_ydata()) == pytest.approx(want, rel=1e-9)
    assert layout_problems(fig) == []
    with pytest.raises(ValueError, match="no published table has 99"):
        nccl_nodes_figure(judged, min_points=99)
