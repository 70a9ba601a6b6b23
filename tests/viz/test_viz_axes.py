"""Byte axes read in binary units, bandwidth axes in plain numbers, a narrow log range is widened,
and notebook 14's figures use them (sizes as the tables write them; LL and LL128 told apart by
shape, not only by two shades of one colour)."""

from __future__ import annotations

import re

import pytest

from distlab.evidence.nccl import fit_execution as nccl_fit
from distlab.viz.axes import (
    bytes_axis,
    integer_ticks,
    plain_log_axis,
    whole_ticks,
    widen_log_range,
)
from distlab.viz.figure import new_figure
from distlab.viz.nccl_measured import nccl_choice_figure, nccl_nodes_figure


def _labels(axis) -> list[str]:
    axis.axes.figure.canvas.draw()
    return [t.get_text() for t in axis.get_ticklabels() if t.get_text()]


def test_a_byte_axis_reads_kib_mib_gib() -> None:
    ax = new_figure().add_subplot()
    ax.plot([512, 8 << 30], [1, 2])
    bytes_axis(ax)
    labels = _labels(ax.xaxis)
    assert labels and all(re.fullmatch(r"\d+ (B|KiB|MiB|GiB)", t) for t in labels), labels
    assert len(labels) <= 9 and ax.get_xlabel() == "message size"
    with pytest.raises(ValueError, match="which must be"):
        bytes_axis(ax, "z")


def test_plain_numbers_and_a_range_wide_enough_for_a_small_error() -> None:
    ax = new_figure().add_subplot()
    ax.plot([1, 2], [445, 465])
    plain_log_axis(ax)
    widen_log_range(ax, 4.0)
    lo, hi = ax.get_ylim()
    assert hi / lo == pytest.approx(4.0)
    assert all("10^" not in t and "times" not in t for t in _labels(ax.yaxis))
    with pytest.raises(ValueError, match="factor must be > 1"):
        widen_log_range(ax, 1.0)


def test_notebook_14s_figures_read_sizes_and_tell_protocols_apart() -> None:
    fig = nccl_choice_figure(("h100_sxm8", "pcie5_8"), 8)
    for ax in fig.axes:
        assert all("^" not in t and "$" not in t for t in _labels(ax.xaxis))
        marks = {ln.get_label(): ln.get_marker() for ln in ax.lines}
        if "ring/LL" in marks and "ring/LL128" in marks:
            assert marks["ring/LL"] != marks["ring/LL128"]
    nodes = nccl_nodes_figure(nccl_fit.judge(nccl_fit.multinode_points(),
                                             nccl_fit.shipped_constants()))
    for ax in [a for a in nodes.axes if a.get_visible()]:
        assert ax.get_yscale() == "log"
        lo, hi = ax.get_ylim()
        assert hi / lo >= 4.0 - 1e-9


@pytest.mark.parametrize("start, count, max_ticks, ticks", [
    (0, 0, 10, []), (0, 1, 10, [0]), (0, 10, 10, list(range(10))),
    (0, 16, 10, list(range(0, 16, 2))), (0, 64, 12, list(range(0, 64, 10))),
    (1, 32, 10, [5, 10, 15, 20, 25, 30]), (3, 1, 10, [3]),
])
def test_whole_ticks_fit_and_fall_on_multiples(start, count, max_ticks, ticks) -> None:
    assert whole_ticks(start, count, max_ticks) == ticks


def test_integer_ticks_on_a_view_of_one_thing_is_one_whole_tick() -> None:
    """A number locator puts -0.4, -0.2 ... 0.4 on a view from -0.5 to 0.5: one rank, one
    position."""
    ax = new_figure().add_subplot()
    ax.imshow([[1.0]], aspect="auto")
    assert integer_ticks(ax, "y", 1, fmt="rank {}") == [0]
    integer_ticks(ax, "x", 1)
    assert list(ax.get_xticks()) == [0] and _labels(ax.xaxis) == ["0"]
    assert _labels(ax.yaxis) == ["rank 0"]
    with pytest.raises(ValueError, match="which must be"):
        integer_ticks(ax, "z", 1)
    with pytest.raises(ValueError, match="count must be >= 0"):
        whole_ticks(0, -1)
